"""The jobs as a GitHub Actions `strategy.matrix`: `{"include": [...]}`, one entry per cell.

A workflow reads it with `fromJSON` (docs/scale-out.md and .github/workflows/humming-matrix.yml
show one). Each entry carries everything a job needs, so the workflow holds no matrix logic:
the runner label, the shell command, where the records land, a per-job artifact name (GitHub
refuses two uploads of one name in a run), whether a failure may be ignored, and how many times
an infrastructure failure (exit 3) is retried, since Actions has no automatic retry of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from humming_matrix.ci.pipeline import Job
from humming_matrix.errors import UsageError

# GitHub Actions runs at most 256 jobs from one matrix.
MAX_JOBS = 256
ARTIFACT_PREFIX = "humming-records-"
DEFAULT_RUNNER = "gpu-{gpus}"
DEFAULT_CPU_RUNNER = "ubuntu-latest"


@dataclass(frozen=True)
class GithubSettings:
    runner: str = DEFAULT_RUNNER  # a self-hosted runner label; {gpus} is the job's GPU count
    cpu_runner: str = DEFAULT_CPU_RUNNER
    retry_limit: int = 2


def _runner(template: str, gpus: int) -> str:
    try:
        return template.format(gpus=gpus)
    except (KeyError, IndexError, ValueError) as exc:
        raise UsageError(f"--runner {template!r}: bad placeholder {exc} (known: gpus)") from None


def matrix(jobs: Sequence[Job], settings: GithubSettings) -> dict[str, Any]:
    if len(jobs) > MAX_JOBS:
        raise UsageError(
            f"{len(jobs)} cells selected; a GitHub Actions matrix runs at most {MAX_JOBS}"
            " (narrow the selection with --version/--variant/--tag)"
        )
    if settings.retry_limit < 0:
        raise UsageError(f"--retry-limit {settings.retry_limit}: must not be negative")
    return {
        "include": [
            {
                "session": job.session,
                "key": job.key,
                "humming": job.humming,
                "vllm": job.vllm or "",
                "torch": job.torch or "",
                "variant": job.variant,
                "gpus": job.gpus,
                "runs_on": (
                    _runner(settings.runner, job.gpus) if job.gpus else settings.cpu_runner
                ),
                "optional": job.optional,
                "retries": settings.retry_limit,
                "command": job.command,
                "results": job.results,
                "artifact": f"{ARTIFACT_PREFIX}{job.key}",
            }
            for job in jobs
        ]
    }


def render(document: Mapping[str, Any]) -> str:
    """One line, as `$GITHUB_OUTPUT` wants a `name=value` pair."""
    return json.dumps(dict(document), separators=(",", ":"))
