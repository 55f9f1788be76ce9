"""Faults around lm-eval's answer cache (the lm-eval suite's only state between runs): answers
are never replayed into another environment, and two runs never share one cache."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.runner_harness import cli

if importlib.util.find_spec("lm_eval") is None:
    if os.environ.get("CI"):
        pytest.fail("lm-eval is missing; CI installs it with the `test` extra", pytrace=False)
    pytest.skip("lm-eval is not installed (pip install -e '.[test]')", allow_module_level=True)

pytestmark = [pytest.mark.faults, pytest.mark.usefixtures("vllm_double")]

CONFIG = """\
model_name: "org/Model-FP8"
tasks:
- name: "gsm8k"
  metrics:
  - name: "exact_match,strict-match"
    value: 0.8
limit: 20
num_fewshot: 5
num_concurrent: 1
startup_max_wait_seconds: 60
"""


def policy(**keys: object) -> dict[str, str]:
    return {"HUMMING_DOUBLE_POLICY": json.dumps({"lm_eval": True, **keys})}


def asked(log: Path) -> list[int]:
    return [json.loads(line)["index"] for line in log.read_text().splitlines()]


def test_answers_of_another_environment_are_not_replayed(tmp_path: Path) -> None:
    """Two cells (sessions) share a store; one fails with answers cached; --resume in the other
    must ask everything itself."""
    config, store = tmp_path / "Model-FP8.yaml", tmp_path / "store"
    config.write_text(CONFIG)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    failed = cli(
        "lm-eval",
        "--config",
        config,
        "--results",
        store,
        env={
            **policy(die_at=8, lm_eval_log=str(first)),
            "HUMMING_MATRIX_SESSION": "humming-0.1.6-cu128",
        },
    )
    assert failed.returncode == 3, failed.stderr
    assert len(asked(first)) == 7
    other = cli(
        "lm-eval",
        "--config",
        config,
        "--results",
        store,
        "--resume",
        env={**policy(lm_eval_log=str(second)), "HUMMING_MATRIX_SESSION": "humming-0.1.6-cu130"},
    )
    assert other.returncode == 0, other.stderr
    assert "Model-FP8: no earlier answers to resume; asking all" in other.stderr
    assert sorted(asked(second)) == list(range(20))
    # The failed cell's answers are still there for its own --resume.
    assert len(list((store / ".lm-eval-cache").glob("*.db"))) == 1


def test_a_second_run_of_the_same_config_does_not_clear_the_first_ones_answers(
    tmp_path: Path,
) -> None:
    config, store, log = tmp_path / "Model-FP8.yaml", tmp_path / "store", tmp_path / "a.jsonl"
    config.write_text(CONFIG)
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "lm-eval",
            "--config",
            str(config),
            "--results",
            str(store),
        ],
        env={**os.environ, **policy(delay=0.3, lm_eval_log=str(log))},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while (not log.exists() or not log.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        second = cli("lm-eval", "--config", config, "--results", store)
        assert second.returncode == 2, second.stderr
        assert second.stderr == (
            "humming-matrix: error: Model-FP8: another run of this config in this environment "
            f"is using {store / '.lm-eval-cache'}; wait for it to finish\n"
        )
        assert first.poll() is None  # the first run was left alone
        _, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert sorted(asked(log)) == list(range(20))


def test_an_endpoint_that_is_down_is_checked_first(tmp_path: Path) -> None:
    from humming_matrix.suite.server import free_port

    config = tmp_path / "Model-FP8.yaml"
    config.write_text(CONFIG)
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = cli("lm-eval", "--config", config, "--results", tmp_path / "store", "--endpoint", url)
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - started < 15
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("humming-matrix: error:")]
    assert line == (
        f"humming-matrix: error: --endpoint {url} does not answer "
        "(ConnectionRefusedError: [Errno 111] Connection refused)"
    )
    assert list((tmp_path / "store").glob("*.json")) == []
