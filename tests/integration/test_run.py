"""`humming-matrix run` end to end: the real launcher, health wait, client, scoring and records,
against the stand-in `vllm` (tests/doubles/vllm_double.py) first on PATH."""

from __future__ import annotations

import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from humming_matrix.store.results import iter_gsm8k_records
from humming_matrix.suite.server import free_port

from .runner_harness import alive, cli, policy_env, records, write_config

pytestmark = pytest.mark.usefixtures("vllm_double")


def test_exact_accuracy_and_question_vector(tmp_path: Path) -> None:
    state = tmp_path / "double.json"
    policy = {
        "wrong": [1, 5, 38],
        "invalid": [7],
        "record": str(state),
        "record_env": ["VLLM_WORKER_MULTIPROC_METHOD", "HF_TOKEN", "EXTRA"],
    }
    config = write_config(
        tmp_path,
        threshold=0.95,
        env={**policy_env(policy), "HF_TOKEN": "hf_secret", "EXTRA": "x y"},
    )
    done = cli("run", "--config", config, "--results", tmp_path / "store", "--limit", "40")
    assert done.returncode == 0, done.stderr
    [record] = records(tmp_path / "store")
    assert record.complete
    assert [q.correct for q in record.questions] == [i not in {1, 5, 7, 38} for i in range(40)]
    assert [q.index for q in record.questions] == list(range(40))
    assert record.questions[0].label == 18
    assert record.questions[0].prediction == 18
    assert record.questions[1].prediction == record.questions[1].label + 1
    assert record.questions[7].prediction is None
    assert record.questions[7].error is None
    m = record.metrics
    assert (m.accuracy, m.invalid_rate, m.error_count, m.num_questions) == (36 / 40, 1 / 40, 0, 40)
    assert (m.threshold, m.tolerance, m.passed) == (0.95, 0.08, True)
    assert record.config.name == "double"
    assert record.config.fields["num_fewshot"] == 5
    assert record.server["env"]["HF_TOKEN"] == "***"  # redacted in the record...
    # What the server really got, beyond the config's env: the variables that decide how vLLM
    # and humming run, and the paths.
    effective = record.server["environment"]
    assert effective["HF_TOKEN"] == "***"
    assert effective["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert effective["PATH"] == os.environ["PATH"]
    assert "EXTRA" not in effective
    assert record.startup is not None
    assert (record.startup["status"], record.startup["phase"]) == ("ready", "ready")
    assert record.timings is not None
    assert (record.timings.install, record.timings.asking) == (None, round(m.duration, 3))
    assert record.timings.startup == record.startup["seconds"] > 0
    assert record.environment["python"] == platform.python_version()  # this interpreter ran it
    [(path, _)] = iter_gsm8k_records(tmp_path / "store")
    assert re.fullmatch(
        r"PASS double: accuracy 0\.9000 \(gate 0\.95 - 0\.08 = 0\.8700\), invalid 0\.0250, "
        rf"errors 0, 40 questions, \d+\.\d s -> {re.escape(str(path))}",
        done.stdout.splitlines()[-1],
    ), done.stdout

    seen = json.loads(state.read_text())
    port = seen["argv"][seen["argv"].index("--port") + 1]
    key = seen["argv"][seen["argv"].index("--api-key") + 1]  # the launch's identity
    assert len(key) == 32
    assert seen["argv"] == [
        "serve",
        "double/model",
        "--enforce-eager",
        "--max-model-len",
        "8192",
        "--api-key",
        key,
        "--trust-remote-code",
        "--disable-uvicorn-access-log",
        "--port",
        port,
        "--seed",
        "0",
    ]
    # ...but the server itself got the real value, and vLLM's harness variable.
    assert seen["env"] == {
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
        "HF_TOKEN": "hf_secret",
        "EXTRA": "x y",
    }
    log = tmp_path / "store" / record.server["log"]
    assert "vllm double: ready" in log.read_text()
    assert not alive(seen["pid"])


def test_below_threshold_exits_1(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, threshold=0.99, env=policy_env({"wrong": list(range(0, 20, 2))})
    )
    done = cli("run", "--config", config, "--results", tmp_path, "--limit", "20")
    assert done.returncode == 1, done.stderr
    [record] = records(tmp_path)
    assert record.metrics.accuracy == 0.5
    assert record.metrics.passed is False
    assert re.fullmatch(
        r"FAIL double: accuracy 0\.5000 \(gate 0\.99 - 0\.08 = 0\.9100\), invalid 0\.0000, "
        r"errors 0, 20 questions, \d+\.\d s -> \S+\.json",
        done.stdout.splitlines()[-1],
    ), done.stdout


def test_5xx_is_retried_and_not_counted_as_invalid(tmp_path: Path) -> None:
    asked = tmp_path / "asked.txt"
    config = write_config(
        tmp_path, env=policy_env({"fail": {"2": 2, "4": 1}, "log_requests": str(asked)})
    )
    done = cli("run", "--config", config, "--results", tmp_path, "--limit", "6")
    assert done.returncode == 0, done.stderr
    [record] = records(tmp_path)
    assert [q.correct for q in record.questions] == [True] * 6
    assert (record.metrics.error_count, record.metrics.invalid_rate) == (0, 0.0)
    # Question 2 failed twice and question 4 once before each was answered.
    assert sorted(int(x) for x in asked.read_text().split()) == [0, 1, 2, 2, 2, 3, 4, 4, 5]


def test_exhausted_retries_save_partial_and_resume_asks_only_the_rest(tmp_path: Path) -> None:
    asked = tmp_path / "asked.txt"
    config = write_config(tmp_path, threshold=0.5)
    store = tmp_path / "store"
    failing = policy_env({"fail": {"3": 99, "8": 99}, "wrong": [5], "log_requests": str(asked)})
    done = cli(
        "run",
        "--config",
        config,
        "--results",
        store,
        "--limit",
        "10",
        "--retries",
        "1",
        env=failing,
    )
    assert done.returncode == 3, done.stderr
    # The run stops at the first request beyond the budget: the other was cut short.
    assert "1 requests failed after 1 retries (allowed 0); stopped at once" in done.stderr
    assert "partial record saved" in done.stderr
    [partial] = records(store)
    assert not partial.complete
    assert [q.index for q in partial.questions if q.error] == [3, 8]
    planted = 'HTTP 500: {"error": "double: planted server error"}'
    # Whichever of the two failed first stopped the run; the other failed too, or was cut short.
    errors = {partial.questions[3].error, partial.questions[8].error}
    assert planted in errors
    assert errors <= {planted, "not asked: the run stopped first"}
    assert partial.metrics.error_count == 2
    assert partial.metrics.invalid_rate == 0.0  # request errors are not invalid answers

    asked.write_text("")
    healthy = policy_env({"wrong": [5], "log_requests": str(asked)})
    done = cli(
        "run", "--config", config, "--results", store, "--limit", "10", "--resume", env=healthy
    )
    assert done.returncode == 0, done.stderr
    assert sorted(int(x) for x in asked.read_text().split()) == [3, 8]
    finished = next(r for r in records(store) if r.complete)
    assert finished.resumed_from == partial.run_id
    assert [q.correct for q in finished.questions] == [i != 5 for i in range(10)]
    assert len(records(store)) == 2  # the partial record is kept, never overwritten

    done = cli(
        "run", "--config", config, "--results", store, "--limit", "10", "--resume", env=healthy
    )
    assert done.returncode == 0  # nothing left to resume: a fresh run
    assert len(records(store)) == 3


def test_max_errors_allows_a_complete_record_with_errors(tmp_path: Path) -> None:
    config = write_config(tmp_path, threshold=0.5)
    done = cli(
        "run",
        "--config",
        config,
        "--results",
        tmp_path,
        "--limit",
        "5",
        "--retries",
        "0",
        "--max-errors",
        "1",
        env=policy_env({"fail": {"1": 9}}),
    )
    assert done.returncode == 0, done.stderr
    [record] = records(tmp_path)
    assert record.complete
    assert record.metrics.error_count == 1
    assert record.metrics.accuracy == 0.8  # vLLM scores a failed request as a wrong answer


def test_server_dying_mid_run_exits_3_with_partial_record(tmp_path: Path) -> None:
    state = tmp_path / "double.json"
    config = write_config(tmp_path, extra="max_concurrency: 1\n")
    started = time.monotonic()
    done = cli(
        "run",
        "--config",
        config,
        "--results",
        tmp_path / "store",
        "--limit",
        "30",
        env=policy_env({"die_at": 11, "record": str(state), "spawn_child": True}),
    )
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - started < 30  # no retry loop against a dead server
    assert "vllm serve exited with code 1 while serving" in done.stderr
    [partial] = records(tmp_path / "store")
    assert not partial.complete
    # Ten answers, then nothing sent to the dead server: no question carries a connection error.
    assert [q.error for q in partial.questions] == (
        [None] * 10 + ["not asked: the run stopped first"] * 20
    )
    seen = json.loads(state.read_text())
    assert not alive(seen["pid"])
    assert not alive(seen["child_pid"])


DATA = Path(__file__).resolve().parents[1] / "data"


def error_line(stderr: str) -> str:
    """The one-line error (the server log's tail follows it on stderr)."""
    [line] = [ln for ln in stderr.splitlines() if ln.startswith("humming-matrix: error:")]
    return line


WORKER_FAILED_CAUSE = (
    "ValueError: Available memory on node 0 (20.22/23.54 GiB) on startup is less than desired "
    "CPU memory utilization (0.92, 21.66 GiB). On the CPU backend, the "
    "`--gpu-memory-utilization` flag controls the fraction of CPU memory reserved (despite its "
    "name). To resolve: decrease `--gpu-memory-utilization` (e.g. `--gpu-memory-utilization "
    "0.5`) or reduce CPU memory used by other processes."
)


def test_server_that_exits_at_start_names_the_root_cause_and_leaves_a_record(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, questions=30)
    policy = {"exit_at_start": 1, "replay_log": str(DATA / "vllm-cpu-0.32-worker-failed.log")}
    done = cli("run", "--config", config, "--results", tmp_path / "store", env=policy_env(policy))
    assert done.returncode == 3
    [log] = (tmp_path / "store").glob("*.server.log")
    assert error_line(done.stderr) == (
        "humming-matrix: error: vllm serve exited with code 1 before becoming ready: "
        f"{WORKER_FAILED_CAUSE} (log: {log})"
    )
    assert log.read_text().splitlines()[-1] == (
        "vllm double: planted fatal error: CUDA out of memory"
    )
    [record] = records(tmp_path / "store")
    assert not record.complete
    assert record.start_failed
    assert record.startup is not None
    assert record.startup["status"] == "failed"
    assert record.startup["phase"] == "launched"
    assert record.startup["reason"] == (
        f"vllm serve exited with code 1 before becoming ready: {WORKER_FAILED_CAUSE}"
    )
    assert record.startup["log_tail"][-1] == "vllm double: planted fatal error: CUDA out of memory"
    assert len(record.startup["log_tail"]) == 40
    assert [q.error for q in record.questions] == (
        ["not asked: the server never became ready"] * 30
    )
    m = record.metrics
    assert (m.accuracy, m.error_count, m.num_questions, m.passed) == (0.0, 30, 30, False)
    assert record.timings is not None
    assert record.timings.asking == 0.0
    assert record.timings.startup == record.startup["seconds"]
    assert record.server["log"] == log.name


def test_startup_timeout_exits_3_records_the_phase_and_kills_the_group(tmp_path: Path) -> None:
    state = tmp_path / "double.json"
    loaded = tmp_path / "loaded.log"
    loaded.write_text(
        "(EngineCore_DP0 pid=77) INFO 12-03 08:40:01 [gpu_model_runner.py:4125] Model loading "
        "took 0.12 GiB memory and 0.731200 seconds\n",
        encoding="utf-8",
    )
    config = write_config(tmp_path, wait=2, questions=5)
    started = time.monotonic()
    done = cli(
        "run",
        "--config",
        config,
        "--results",
        tmp_path / "store",
        env=policy_env(
            {
                "never_healthy": True,
                "spawn_child": True,
                "record": str(state),
                "replay_log": str(loaded),
            }
        ),
    )
    assert done.returncode == 3
    assert time.monotonic() - started < 20
    [log] = (tmp_path / "store").glob("*.server.log")
    assert error_line(done.stderr) == (
        "humming-matrix: error: vllm serve not ready after 2 s (startup_max_wait_seconds; "
        f"last phase: weights loaded) (log: {log})"
    )
    seen = json.loads(state.read_text())
    assert not alive(seen["pid"])
    assert not alive(seen["child_pid"])
    [record] = records(tmp_path / "store")
    assert record.startup is not None
    assert (record.startup["status"], record.startup["phase"]) == ("failed", "weights_loaded")
    assert record.startup["seconds"] >= 2.0
    # No nvidia-smi on this machine: the record says the GPU could not be read, not "idle".
    assert record.startup["gpu"] is None


def test_missing_vllm_executable_is_infrastructure(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    done = cli(
        "run",
        "--config",
        config,
        "--results",
        tmp_path,
        env={"PATH": os.path.dirname(sys.executable)},
    )
    assert done.returncode == 3
    assert done.stderr.strip().splitlines()[-1] == (
        "humming-matrix: error: no `vllm` executable on PATH; is vLLM installed in this env?"
    )


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 130)])
def test_interrupt_tears_down_the_server_and_keeps_answers(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    state = tmp_path / "double.json"
    asked = tmp_path / "asked.txt"
    config = write_config(tmp_path, extra="max_concurrency: 2\n")
    env = {
        **os.environ,
        **policy_env(
            {"record": str(state), "spawn_child": True, "delay": 0.05, "log_requests": str(asked)}
        ),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "run",
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
    deadline = time.monotonic() + 60
    while not asked.exists() or len(asked.read_text().split()) < 10:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"the run never got 10 questions in: {proc.communicate()[1]}")
        time.sleep(0.05)
    asked_before = len(asked.read_text().split())
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == code, stderr
    assert stderr.splitlines()[-1] == "humming-matrix: interrupted"
    seen = json.loads(state.read_text())
    assert not alive(seen["pid"])
    assert not alive(seen["child_pid"])
    [partial] = records(tmp_path / "store")
    assert not partial.complete
    answered = {q.index for q in partial.questions if q.error is None}
    assert answered <= {int(x) for x in asked.read_text().split()}
    assert len(answered) >= asked_before - 2  # at most max_concurrency answers were in flight


def test_server_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    state = tmp_path / "double.json"
    config = write_config(tmp_path)
    done = cli(
        "run",
        "--config",
        config,
        "--results",
        tmp_path / "store",
        "--limit",
        "3",
        env=policy_env({"ignore_sigterm": True, "record": str(state)}),
    )
    assert done.returncode == 0, done.stderr
    assert not alive(json.loads(state.read_text())["pid"])


def test_endpoint_uses_a_running_server(tmp_path: Path, vllm_double: Path) -> None:
    port = free_port()
    env = {**os.environ, **policy_env({"wrong": [0]})}
    server = subprocess.Popen(
        [str(vllm_double / "vllm"), "serve", "m", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        config = write_config(tmp_path, threshold=0.1)
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, server)
        done = cli(
            "run", "--config", config, "--results", tmp_path, "--limit", "4", "--endpoint", url
        )
        assert done.returncode == 0, done.stderr
    finally:
        server.terminate()
        server.wait(10)
    [record] = records(tmp_path)
    assert record.complete
    assert record.server["launched"] is False
    assert record.server["endpoint"] == url
    assert [q.correct for q in record.questions] == [False, True, True, True]


def _wait_healthy(url: str, server: subprocess.Popen[bytes]) -> None:
    """Until the server answers /health (it is the test's own, started just before)."""
    deadline = time.monotonic() + 60
    while server.poll() is None and time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    pytest.fail(f"the stand-in server at {url} never became healthy")


def test_bad_config_is_one_line_exit_2(tmp_path: Path) -> None:
    config = write_config(tmp_path, extra="max_token: 5\n")
    done = cli("run", "--config", config, "--results", tmp_path)
    assert done.returncode == 2
    assert done.stderr == f"humming-matrix: error: {config}: max_token: unknown key\n"


def test_config_list_runs_every_config(tmp_path: Path) -> None:
    write_config(tmp_path, "a", threshold=0.5, env=policy_env({"wrong": [0]}))
    write_config(tmp_path, "b", threshold=0.5, env=policy_env({"wrong": [1, 2]}))
    listing = tmp_path / "list.txt"
    listing.write_text("a.yaml\nb.yaml\n")
    done = cli("run", "--config-list", listing, "--results", tmp_path / "s", "--limit", "5")
    assert done.returncode == 0, done.stderr
    by_name = {r.config.name: r for r in records(tmp_path / "s")}
    assert by_name["a"].metrics.accuracy == 0.8
    assert by_name["b"].metrics.accuracy == 0.6


def test_usage_errors(tmp_path: Path) -> None:
    done = cli("run", "--results", tmp_path)
    assert done.returncode == 2
    assert done.stderr == "humming-matrix: error: run needs --config FILE or --config-list FILE\n"
    done = cli("run", "--config", "x.yaml", "--limit", "0")
    assert done.returncode == 2
    assert done.stderr == "humming-matrix: error: --limit must be at least 1\n"
