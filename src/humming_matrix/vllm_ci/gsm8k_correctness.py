"""vLLM's `tests/evals/gsm8k/test_gsm8k_correctness.py`, run by this package's runner.

One test per config of `--config-list-file`; each runs the config as `humming-matrix run` does
(launch `vllm serve`, ask, score, write the record) and asserts vLLM's gate,
`accuracy >= accuracy_threshold - tolerance`, with the numbers in the failure message.
"""

from __future__ import annotations

import pytest

from humming_matrix.errors import HummingMatrixError
from humming_matrix.progress import Progress
from humming_matrix.pytest_plugin import SuiteOptions, failure_message
from humming_matrix.suite.config import EvalConfig
from humming_matrix.suite.runner import RunOptions, run_config


def test_gsm8k_correctness_param(gsm8k_config: EvalConfig, suite_options: SuiteOptions) -> None:
    options = RunOptions(
        results=suite_options.results, endpoint=suite_options.endpoint, limit=suite_options.limit
    )
    problem = None
    try:
        record = run_config(gsm8k_config, options, Progress())
    except HummingMatrixError as exc:
        problem = failure_message(exc)
    if problem is not None:  # outside the handler: no chained traceback in the JUnit text
        pytest.fail(problem, pytrace=False)
    m = record.metrics
    gate = m.threshold - m.tolerance
    print(
        f"{gsm8k_config.name}: accuracy={m.accuracy:.4f} | threshold={m.threshold:g} | "
        f"tolerance={m.tolerance:g} | invalid_rate={m.invalid_rate:.4f} | "
        f"questions={m.num_questions}"
    )
    assert m.passed, (
        f"{gsm8k_config.name}: accuracy {m.accuracy:.4f} < {m.threshold:g} - {m.tolerance:g} = "
        f"{gate:.4f} (invalid {m.invalid_rate:.4f}, errors {m.error_count}, "
        f"{m.num_questions} questions, run {record.run_id})"
    )
