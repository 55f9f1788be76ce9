"""lm-eval configs end to end: the real launcher starts the stand-in `vllm` (in its lm-eval mode),
the real lm-eval (`local-completions`, offline local GSM8K task) asks it, and the record's
per-sample outcomes must agree with lm-eval's own reported metrics."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest

from humming_matrix.judge.compare import Settings, decide
from humming_matrix.judge.compare import Verdict as CompareVerdict
from humming_matrix.judge.compare_lm_eval import lm_eval_paired_table as paired_table
from humming_matrix.judge.stats import regression_midp
from humming_matrix.lmeval.record import iter_lm_eval_records
from humming_matrix.store.lm_eval import CheckState, LmEvalRecord
from humming_matrix.suite.server import free_port

from .runner_harness import alive, cli

if importlib.util.find_spec("lm_eval") is None:
    if os.environ.get("CI"):
        pytest.fail("lm-eval is missing; CI installs it with the `test` extra", pytrace=False)
    pytest.skip("lm-eval is not installed (pip install -e '.[test]')", allow_module_level=True)

pytestmark = pytest.mark.usefixtures("vllm_double")

CONFIG = """\
# The shape of vLLM's .buildkite/lm-eval-harness/configs/*.yaml
model_name: "org/Model-FP8"
tasks:
- name: "gsm8k"
  metrics:
  - name: "exact_match,strict-match"
    value: {strict}
  - name: "exact_match,flexible-extract"
    value: {flexible}
limit: 20
num_fewshot: 5
startup_max_wait_seconds: 60
"""
STRICT, FLEXIBLE = "exact_match,strict-match", "exact_match,flexible-extract"


def write_config(
    directory: Path,
    name: str = "Model-FP8",
    *,
    strict: float = 0.8,
    flexible: float = 0.8,
    extra: str = "",
) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(CONFIG.format(strict=strict, flexible=flexible) + extra, encoding="utf-8")
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def only_record(store: Path) -> LmEvalRecord:
    [(_, record)] = iter_lm_eval_records(store)
    return record


def policy(**keys: object) -> dict[str, str]:
    return {"HUMMING_DOUBLE_POLICY": json.dumps({"lm_eval": True, **keys})}


def test_lm_eval_runs_against_the_server_and_the_record_agrees_with_it(tmp_path: Path) -> None:
    asked, state = tmp_path / "asked.jsonl", tmp_path / "double.json"
    config = write_config(tmp_path, strict=0.9, flexible=0.99)
    done = cli(
        "lm-eval",
        "--config",
        config,
        "--results",
        tmp_path / "store",
        env=policy(
            wrong=[1], no_marker=[2], invalid=[3], lm_eval_log=str(asked), record=str(state)
        ),
    )

    # strict: 17/20 = 0.85 >= 0.9 * 0.92; flexible: 18/20 = 0.90 < 0.99 * 0.92 = 0.9108.
    assert done.returncode == 1, done.stderr
    assert (
        f"gsm8k | {STRICT}: ground_truth=0.9000 | measured=0.8500 | rtol=0.08 | "
        "threshold=0.8280 | n=20 -> PASSED"
    ) in done.stdout
    assert (
        f"gsm8k | {FLEXIBLE}: ground_truth=0.9900 | measured=0.9000 | rtol=0.08 | "
        "threshold=0.9108 | n=20 -> FAILED"
    ) in done.stdout
    record = only_record(tmp_path / "store")
    assert record.complete
    assert not record.passed
    strict, flexible = record.checks
    assert (strict.verdict, flexible.verdict) == (CheckState.PASSED, CheckState.FAILED)

    # Every document's outcome under each filter, as the double was told to answer...
    strict_outcomes = record.outcomes("gsm8k", STRICT)
    flexible_outcomes = record.outcomes("gsm8k", FLEXIBLE)
    assert strict_outcomes == {i: i not in {1, 2, 3} for i in range(20)}
    assert flexible_outcomes == {i: i not in {1, 3} for i in range(20)}
    # ...and lm-eval's own reported metric is the mean of those outcomes.
    assert strict.measured == sum(strict_outcomes.values()) / 20 == strict.per_sample == 0.85
    assert flexible.measured == sum(flexible_outcomes.values()) / 20 == flexible.per_sample
    by_key = {(s.filter, s.doc_id): s for s in record.samples}
    assert by_key["strict-match", 0].prediction == "18"  # GSM8K test question 0: 18
    assert by_key["strict-match", 1].prediction == "4"  # label 3, answered 3 + 1
    assert by_key["strict-match", 2].prediction == "[invalid]"  # no `####`
    assert by_key["flexible-extract", 2].prediction == "$70,000."
    assert by_key["strict-match", 0].output == " Step by step, 2 + 2 = 4.\n#### 18"

    # What lm-eval asked: its gsm8k task's generation settings and 5 sampled shots.
    requests = [json.loads(line) for line in asked.read_text().splitlines()]
    assert sorted(r["index"] for r in requests) == list(range(20))
    assert {
        (r["model"], r["max_tokens"], r["temperature"], tuple(r["stop"]), r["seed"], r["shots"])
        for r in requests
    } == {("org/Model-FP8", 256, 0.0, ("Question:", "</s>", "<|im_end|>"), 1234, 5)}
    assert record.lm_eval["local_tasks"] == ["gsm8k"]
    assert str(record.lm_eval["version"]).startswith("0.4.")

    seen = json.loads(state.read_text())
    port = seen["argv"][seen["argv"].index("--port") + 1]
    # The launch's identity: lm-eval got it too (the stand-in answers nothing without it).
    key = seen["argv"][seen["argv"].index("--api-key") + 1]
    assert seen["argv"] == [
        "serve",
        "org/Model-FP8",
        "--tensor-parallel-size",
        "1",
        "--max-model-len",
        "4096",
        "--enforce-eager",
        "--api-key",
        key,
        "--trust-remote-code",
        "--disable-uvicorn-access-log",
        "--port",
        port,
        "--seed",
        "0",
    ]
    assert record.server["command"][record.server["command"].index("--api-key") + 1] == "***"
    assert not alive(seen["pid"])


def test_pytest_entry_and_paired_judging_of_two_lm_eval_runs(tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    write_config(configs, strict=0.99, flexible=0.5)
    (configs / "models-small.txt").write_text("Model-FP8.yaml\n")

    baseline = cli(
        "lm-eval",
        "--config-list",
        configs / "models-small.txt",
        "--results",
        tmp_path / "baseline",
        env=policy(wrong=[1]),
    )
    assert baseline.returncode == 0, baseline.stderr  # 19/20 = 0.95 >= 0.99 * 0.92

    candidate = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "humming_matrix.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "--pyargs",
            "humming_matrix.vllm_ci.lm_eval_correctness",
            "--config-list-file=configs/models-small.txt",
            "--results-dir=candidate",
            "--junitxml=junit.xml",
            "-v",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **policy(wrong=[1, 5, 6, 7, 8, 9, 10])},
    )
    assert candidate.returncode == 1, candidate.stdout + candidate.stderr
    [case] = ET.parse(tmp_path / "junit.xml").getroot().findall(".//testcase")
    assert (case.get("classname"), case.get("name")) == (
        "humming_matrix.vllm_ci.lm_eval_correctness",
        "test_lm_eval_correctness_param[Model-FP8]",
    )
    failure = case.find("failure")
    assert failure is not None
    assert (
        f"gsm8k | {STRICT}: ground_truth=0.9900 | measured=0.6500 | rtol=0.08 | "
        "threshold=0.9108 | n=20 -> FAILED"
    ) in failure.get("message", "")
    assert FLEXIBLE not in failure.get("message", "")  # 0.65 >= 0.5 * 0.92 passed

    base, cand = only_record(tmp_path / "baseline"), only_record(tmp_path / "candidate")
    table = paired_table(base, cand, "gsm8k", STRICT)
    assert (table.both_right, table.right_to_wrong, table.wrong_to_right, table.both_wrong) == (
        13,
        6,
        0,
        1,
    )
    assert regression_midp(table) == 1 / 128
    assert decide(table, Settings()) is CompareVerdict.REGRESSION


# vLLM's NVIDIA-Nemotron-3-Nano-30B-A3B-FP8.yaml with limit 20 and multi-turn shots.
CHAT_CONFIG = """\
model_name: "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8"
tasks:
- name: "gsm8k"
  metrics:
  - name: "exact_match,strict-match"
    value: 0.7142
  - name: "exact_match,flexible-extract"
    value: 0.4579
env_vars:
  VLLM_USE_FLASHINFER_MOE_FP8: "1"
limit: 20
num_fewshot: 5
max_model_len: 262144
kv_cache_dtype: fp8
enforce_eager: false
apply_chat_template: true
fewshot_as_multiturn: true
"""


def test_a_chat_template_config_runs_through_the_chat_endpoint(tmp_path: Path) -> None:
    asked, state = tmp_path / "asked.jsonl", tmp_path / "double.json"
    config = tmp_path / "Nemotron.yaml"
    config.write_text(CHAT_CONFIG, encoding="utf-8")
    done = cli(
        "lm-eval",
        "--config",
        config,
        "--results",
        tmp_path / "store",
        env=policy(
            wrong=[4],
            no_marker=[7],
            lm_eval_log=str(asked),
            record=str(state),
            record_env=["VLLM_USE_FLASHINFER_MOE_FP8"],
        ),
    )

    assert done.returncode == 0, done.stderr
    record = only_record(tmp_path / "store")
    assert record.outcomes("gsm8k", STRICT) == {i: i not in {4, 7} for i in range(20)}
    assert record.outcomes("gsm8k", FLEXIBLE) == {i: i != 4 for i in range(20)}
    assert [c.measured for c in record.checks] == [0.9, 0.95]
    assert record.lm_eval["model"] == "local-chat-completions"
    requests = [json.loads(line) for line in asked.read_text().splitlines()]
    # Five shots as five user/assistant pairs before the question: eleven messages.
    assert {(r["shots"], r["turns"]) for r in requests} == {(5, 11)}
    seen = json.loads(state.read_text())
    assert seen["argv"][2:8] == [
        "--tensor-parallel-size",
        "1",
        "--max-model-len",
        "262144",
        "--kv-cache-dtype",
        "fp8",
    ]
    assert seen["argv"][8:11] == ["--api-key", seen["argv"][9], "--trust-remote-code"]
    assert seen["env"] == {"VLLM_USE_FLASHINFER_MOE_FP8": "1"}


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_a_server_that_dies_mid_run_is_an_infrastructure_failure_leaving_no_process(
    tmp_path: Path,
) -> None:
    state, scratch = tmp_path / "double.json", tmp_path / "tmp"
    scratch.mkdir()
    config = write_config(tmp_path)
    done = cli(
        "lm-eval",
        "--config",
        config,
        "--results",
        tmp_path / "store",
        env={**policy(die_at=5, spawn_child=True, record=str(state)), "TMPDIR": str(scratch)},
    )

    assert done.returncode == 3, done.stderr
    assert "humming-matrix: error: vllm serve exited with code 1 while serving" in done.stderr
    assert iter_lm_eval_records(tmp_path / "store") == []
    logs = sorted(p.name.rsplit(".", 2)[-2] for p in (tmp_path / "store").glob("*.log"))
    assert logs == ["lm-eval", "server"]  # both logs kept, named like the missing record
    assert len(list((tmp_path / "store" / ".lm-eval-cache").iterdir())) == 1  # for --resume
    seen = json.loads(state.read_text())
    assert not alive(seen["pid"])
    assert not alive(seen["child_pid"])
    assert processes_mentioning(str(scratch)) == []  # the lm-eval worker is gone too


def test_sigterm_tears_down_the_server_and_the_worker(tmp_path: Path) -> None:
    state, scratch = tmp_path / "double.json", tmp_path / "tmp"
    scratch.mkdir()
    config = write_config(tmp_path)
    env = {**os.environ, **policy(delay=30, record=str(state)), "TMPDIR": str(scratch)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "lm-eval",
            "--config",
            str(config),
            "--results",
            str(tmp_path / "store"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not processes_mentioning(str(scratch)) and time.monotonic() < deadline:
            time.sleep(0.1)
        [worker] = processes_mentioning(str(scratch))
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "humming-matrix: interrupted" in err
    assert not alive(json.loads(state.read_text())["pid"])
    assert not alive(worker)


def test_a_failed_run_keeps_its_answers_and_resume_asks_only_the_rest(tmp_path: Path) -> None:
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    # One request at a time, so exactly the 7 answered before the server dies are kept.
    config = write_config(tmp_path, extra="num_concurrent: 1\n")
    store = tmp_path / "store"
    failed = cli(
        "lm-eval",
        "--config",
        config,
        "--results",
        store,
        env=policy(die_at=8, lm_eval_log=str(first)),
    )
    assert failed.returncode == 3, failed.stderr
    assert "the answers so far are kept in" in failed.stderr
    assert "finish with --resume" in failed.stderr
    [cache] = (store / ".lm-eval-cache").iterdir()
    # config, humming version, and a digest of the environment's identity
    assert re.fullmatch(
        rf"Model-FP8-{sha256_of(config)[:12]}-unknown-[0-9a-f]{{12}}_rank0\.db", cache.name
    )

    resumed = cli(
        "lm-eval",
        "--config",
        config,
        "--results",
        store,
        "--resume",
        env=policy(lm_eval_log=str(second)),
    )
    assert resumed.returncode == 0, resumed.stderr
    asked_first = [json.loads(line)["index"] for line in first.read_text().splitlines()]
    asked_second = [json.loads(line)["index"] for line in second.read_text().splitlines()]
    assert len(asked_first) == 7  # the 8th request killed the server before it was answered
    assert len(asked_second) == 13
    assert sorted(asked_first + asked_second) == list(range(20))
    record = only_record(store)
    assert record.lm_eval["resumed"] is True
    assert record.outcomes("gsm8k", STRICT) == dict.fromkeys(range(20), True)
    assert list((store / ".lm-eval-cache").iterdir()) == []  # a finished run leaves no cache


def test_an_endpoint_that_is_already_up_and_a_limit_cap(tmp_path: Path, vllm_double: Path) -> None:
    asked, port = tmp_path / "asked.jsonl", free_port()
    server = subprocess.Popen(
        [str(vllm_double / "vllm"), "serve", "org/Model-FP8", "--port", str(port)],
        env={**os.environ, **policy(lm_eval_log=str(asked))},
        stdout=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        done = cli(
            "lm-eval",
            "--config",
            write_config(tmp_path),
            "--results",
            tmp_path / "store",
            "--endpoint",
            url,
            "--limit",
            "5",
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert done.returncode == 0, done.stderr
    record = only_record(tmp_path / "store")
    assert sorted(json.loads(line)["index"] for line in asked.read_text().splitlines()) == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert record.lm_eval["limit"] == 5
    assert [c.num_samples for c in record.checks] == [5, 5]
    assert record.server["launched"] is False
    assert record.server["endpoint"] == url
    assert not list((tmp_path / "store").glob("*.server.log"))
