"""Real runs that several test modules read (never write): made once per session, so `report`'s
tests judge the very records `compare`'s tests were checked against instead of running the
stand-in vLLM and lm-eval again (about 40 s)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def gsm8k_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GSM8K runs of 0.1.6 (an A/A pair), 0.1.7, 0.1.10 and 0.1.12 (cut short): store/v<version>."""
    from .test_compare_runs import RUN_VERSIONS, build_run_store

    return build_run_store(tmp_path_factory.mktemp("runs"), RUN_VERSIONS)


@pytest.fixture(scope="session")
def lm_eval_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lm-eval runs of 0.1.6 and 0.1.10 (store/v<version>) and one short GSM8K run (gsm8k/)."""
    from .test_compare_lm_eval import build_lm_eval_runs

    return build_lm_eval_runs(tmp_path_factory.mktemp("lm-eval-runs"))
