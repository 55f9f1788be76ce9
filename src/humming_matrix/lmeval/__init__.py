"""vLLM's second accuracy suite: lm-eval-harness configs, run by lm-eval against `vllm serve`.

vLLM keeps these configs in `.buildkite/lm-eval-harness/configs/*.yaml` and runs them with lm-eval's
in-process `vllm` model. Here the same config starts the same `vllm serve` the GSM8K suite starts
(`humming_matrix.suite.server`), and lm-eval's `local-completions` model asks it, with per-sample
logging, so the record holds every question's outcome for every metric and filter.

    config   vLLM's lm-eval config format -> frozen dataclasses (strict, errors name file and key)
    tasks    local task files, so GSM8K runs offline from the verified jsonl copy
    worker   the child process that imports lm-eval (nothing else here does)
    record   the `lm-eval` result record, its pass rule, and its per-sample outcomes
    suite    one config: server, worker, record
"""
