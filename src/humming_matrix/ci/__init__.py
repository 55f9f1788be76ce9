"""Fan-out through CI: the pipeline, Buildkite, GitHub Actions, GPU slots, the job wrapper."""
