"""vLLM's `.buildkite/lm-eval-harness/test_lm_eval_correctness.py`, run against `vllm serve`.

One test per config of `--config-list-file`; each runs the config as `humming-matrix lm-eval`
does and asserts vLLM's rule for every metric, `measured >= value * (1 - rtol)`, printing every
metric's numbers first (vLLM prints them all before its single assert, so do we).
"""

from __future__ import annotations

import pytest

from humming_matrix.errors import HummingMatrixError
from humming_matrix.lmeval.config import LmEvalConfig
from humming_matrix.lmeval.suite import LmEvalSuite, SuiteSettings
from humming_matrix.progress import Progress
from humming_matrix.pytest_plugin import SuiteOptions, failure_message
from humming_matrix.store.lm_eval import CheckState


def test_lm_eval_correctness_param(
    lm_eval_config: LmEvalConfig, suite_options: SuiteOptions
) -> None:
    suite = LmEvalSuite(
        SuiteSettings(
            results=suite_options.results,
            endpoint=suite_options.endpoint,
            limit=suite_options.limit,
            tp_size=suite_options.tp_size,
        ),
        Progress(),
    )
    problem = None
    try:
        record, path = suite.run(lm_eval_config)
    except HummingMatrixError as exc:
        problem = failure_message(exc)
    if problem is not None:  # outside the handler: no chained traceback in the JUnit text
        pytest.fail(problem, pytrace=False)
    failed = [c for c in record.checks if c.verdict is not CheckState.PASSED]
    assert not failed, f"{lm_eval_config.name} ({path.name}):\n" + "\n".join(
        c.line() for c in failed
    )
