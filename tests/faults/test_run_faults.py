"""The fault suite for `humming-matrix run`: each test injects one fault through the stand-in
server (tests/doubles/vllm_double.py) or the environment, runs the real CLI as a subprocess and
asserts the exit code, the message, the files left under --results, and that no process of the
server's group survives. docs/reliability.md lists these faults and what the tool guarantees."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from humming_matrix.suite.server import free_port
from tests.integration.runner_harness import alive, cli, policy_env, records, write_config

pytestmark = [pytest.mark.faults, pytest.mark.usefixtures("vllm_double")]


def error_line(stderr: str) -> str:
    [line] = [ln for ln in stderr.splitlines() if ln.startswith("humming-matrix: error:")]
    return line


@contextlib.contextmanager
def reaped(state: Path) -> Iterator[None]:
    """Whatever the outcome, no server the test's run started outlives the test (the unfixed
    code leaked them: SIGKILL here keeps a failing test from leaking too)."""
    try:
        yield
    finally:
        if state.exists():
            seen = json.loads(state.read_text())
            for pid in (seen.get("pid"), seen.get("child_pid")):
                if pid and alive(pid):
                    os.kill(pid, signal.SIGKILL)


def assert_gone(state: Path) -> None:
    seen = json.loads(state.read_text())
    assert not alive(seen["pid"]), "the server outlived the run"
    if seen.get("child_pid"):
        assert not alive(seen["child_pid"]), "the server's child outlived the run"


def start_run(*args: str | Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "humming_matrix", "run", *map(str, args)],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_answers(asked: Path, n: int, proc: subprocess.Popen[Any] | None = None) -> None:
    deadline = time.monotonic() + 60
    while not asked.exists() or len(asked.read_text().split()) < n:
        if time.monotonic() > deadline or (proc is not None and proc.poll() is not None):
            pytest.fail(f"the run never got {n} questions in")
        time.sleep(0.05)


def every_file(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


# --- secrets ---------------------------------------------------------------------------------


def test_secrets_are_stored_nowhere(tmp_path: Path) -> None:
    token, user_key = "hf_planted_token_4b1d", "sk-planted-user-key-77a0"
    json_credential = '{"endpoint": "s3://bucket", "password": "planted-pw-9c2e"}'
    listed = "planted-listed-5d5d"
    state = tmp_path / "double.json"
    config = write_config(
        tmp_path,
        threshold=0.5,
        env={
            **policy_env(
                {
                    "record": str(state),
                    "echo_args": True,
                    "record_env": ["HF_TOKEN", "MODEL_SETTINGS"],
                }
            ),
            "HF_TOKEN": token,
            "MODEL_SETTINGS": json_credential.replace("'", "''"),
            "VLLM_HUMMING_INPUT_QUANT_CONFIG": '{"dtype": "float8e4m3"}',
        },
        extra=f'server_args: "--enforce-eager --api-key {user_key} --hf-token {listed}"\n',
    )
    config.write_text(
        config.read_text().replace('server_args: "--enforce-eager --max-model-len 8192"\n', "")
    )
    store = tmp_path / "store"
    with reaped(state):
        done = cli(
            "run", "--config", config, "--results", store, "--limit", "4", "--secret=--hf-token"
        )
    assert done.returncode == 0, done.stderr
    assert_gone(state)
    # The server itself got every value...
    seen = json.loads(state.read_text())
    assert seen["env"] == {"HF_TOKEN": token, "MODEL_SETTINGS": json_credential}
    assert seen["argv"][seen["argv"].index("--api-key") + 1] == user_key
    # ...and no file under --results, and nothing printed, holds any of them.
    files = every_file(store)
    assert {p.suffix for p in files} == {".json", ".log"}
    for secret in (token, user_key, "planted-pw-9c2e", listed):
        for path, data in files.items():
            assert secret.encode() not in data, f"{secret} in {path}"
        assert secret not in done.stdout + done.stderr
    [record] = records(store)
    assert record.config.sha256 == hashlib.sha256(config.read_bytes()).hexdigest()
    assert record.config.fields["env"]["HF_TOKEN"] == "***"
    assert record.config.fields["env"]["MODEL_SETTINGS"] == "***"
    # The humming knob the judging reads is kept.
    assert record.config.fields["env"]["VLLM_HUMMING_INPUT_QUANT_CONFIG"] == (
        '{"dtype": "float8e4m3"}'
    )
    assert record.config.fields["server_args"] == (
        "--enforce-eager --api-key '***' --hf-token '***'"
    )
    assert record.server["args"] == ["--enforce-eager", "--api-key", "***", "--hf-token", "***"]
    log = (store / record.server["log"]).read_text()
    assert "vllm double: non-default args:" in log
    assert "'--api-key', '***'" in log


# --- processes and signals -------------------------------------------------------------------


def test_a_second_signal_during_teardown_still_kills_the_group(tmp_path: Path) -> None:
    state, asked = tmp_path / "double.json", tmp_path / "asked.txt"
    config = write_config(tmp_path, extra="max_concurrency: 2\n")
    policy = {
        "record": str(state),
        "spawn_child": True,
        "ignore_sigterm": True,
        "delay": 0.05,
        "log_requests": str(asked),
    }
    with reaped(state):
        proc = start_run(
            "--config", config, "--results", tmp_path / "store", env=policy_env(policy)
        )
        wait_for_answers(asked, 5, proc)
        proc.send_signal(signal.SIGINT)  # Ctrl-C: teardown begins, SIGTERM is ignored...
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)  # ...and CI cancels the job during the grace
        started = time.monotonic()
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, stderr
        assert stderr.splitlines()[-1] == "humming-matrix: interrupted"
        assert time.monotonic() - started < 8  # the grace was cut short, not waited out
        assert_gone(state)
    [partial] = records(tmp_path / "store")
    assert not partial.complete
    assert sum(q.error is None for q in partial.questions) >= 3


def test_a_run_started_in_the_background_can_be_interrupted(tmp_path: Path) -> None:
    """A non-interactive shell starts `cmd &` with SIGINT ignored; the run must still stop on
    SIGINT, tear its server down and keep what it asked."""
    state, asked, pid_file = tmp_path / "double.json", tmp_path / "asked.txt", tmp_path / "pid"
    config = write_config(tmp_path, extra="max_concurrency: 2\n")
    policy = {"record": str(state), "spawn_child": True, "delay": 0.05, "log_requests": str(asked)}
    script = (
        f'"{sys.executable}" -m humming_matrix run --config "{config}" '
        f'--results "{tmp_path / "store"}" 2>"{tmp_path / "err"}" & '
        f'echo $! > "{pid_file}"; wait $!'
    )
    with reaped(state):
        shell = subprocess.Popen(["bash", "-c", script], env={**os.environ, **policy_env(policy)})
        wait_for_answers(asked, 5, shell)
        os.kill(int(pid_file.read_text()), signal.SIGINT)
        try:
            shell.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
            shell.wait()
            pytest.fail("SIGINT did not stop a run started in the background")
        assert shell.returncode == 130
        assert (tmp_path / "err").read_text().splitlines()[-1] == "humming-matrix: interrupted"
        assert_gone(state)
    [partial] = records(tmp_path / "store")
    assert not partial.complete


def test_a_stranger_on_the_port_is_not_scored(tmp_path: Path) -> None:
    """A server that answers without the launch's key is not the one launched (here the stand-in
    plays the process that took the port first): the start fails, nothing is asked."""
    state = tmp_path / "double.json"
    config = write_config(tmp_path, questions=5)
    with reaped(state):
        done = cli(
            "run",
            "--config",
            config,
            "--results",
            tmp_path / "store",
            env=policy_env({"impostor": True, "record": str(state)}),
        )
    assert done.returncode == 3, done.stderr
    assert_gone(state)
    seen = json.loads(state.read_text())
    port = seen["argv"][seen["argv"].index("--port") + 1]
    [log] = (tmp_path / "store").glob("*.server.log")
    assert error_line(done.stderr) == (
        f"humming-matrix: error: the server answering on http://127.0.0.1:{port} is not the one "
        "launched: it answered without this launch's API key (HTTP 200 from /v1/models) "
        f"(log: {log})"
    )
    [record] = records(tmp_path / "store")
    assert record.start_failed
    assert [q.error for q in record.questions] == ["not asked: the server never became ready"] * 5


# --- bounded hangs ---------------------------------------------------------------------------


def test_a_hung_server_is_bounded_by_the_time_limit(tmp_path: Path) -> None:
    state = tmp_path / "double.json"
    config = write_config(tmp_path, extra="max_concurrency: 1\n")
    started = time.monotonic()
    with reaped(state):
        done = cli(
            "run",
            "--config",
            config,
            "--results",
            tmp_path / "store",
            "--limit",
            "30",
            "--time-limit",
            "6",
            env=policy_env({"hang_at": 11, "record": str(state), "spawn_child": True}),
            timeout=60,
        )
    took = time.monotonic() - started
    assert done.returncode == 3, done.stderr
    assert 6 <= took < 25
    assert_gone(state)
    line = error_line(done.stderr)
    assert line.startswith(
        "humming-matrix: error: double: not finished within the run's time limit ("
    )
    assert line.endswith(" s left for asking; --time-limit); 20 questions unanswered")
    assert "partial record saved (resume with --resume)" in done.stderr
    [partial] = records(tmp_path / "store")
    assert not partial.complete
    assert [q.error for q in partial.questions] == (
        [None] * 10 + ["not asked: the run stopped first"] * 20
    )


def test_the_error_budget_stops_the_run_at_once(tmp_path: Path) -> None:
    """Each hung request costs request_timeout_seconds once (a timeout is not retried), and the
    first one past --max-errors ends the run; it does not wait out every other question."""
    state = tmp_path / "double.json"
    config = write_config(tmp_path, extra="max_concurrency: 1\nrequest_timeout_seconds: 2\n")
    started = time.monotonic()
    with reaped(state):
        done = cli(
            "run",
            "--config",
            config,
            "--results",
            tmp_path / "store",
            "--limit",
            "20",
            env=policy_env({"hang_at": 3, "record": str(state)}),
            timeout=90,
        )
    took = time.monotonic() - started
    assert done.returncode == 3, done.stderr
    assert took < 15
    assert_gone(state)
    assert error_line(done.stderr) == (
        "humming-matrix: error: double: 1 requests failed after 3 retries (allowed 0); "
        "stopped at once"
    )
    [partial] = records(tmp_path / "store")
    assert [q.error for q in partial.questions] == (
        [None, None, "no answer within 2 s"] + ["not asked: the run stopped first"] * 17
    )


def test_an_endpoint_that_is_down_is_checked_first(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = cli(
        "run",
        "--config",
        config,
        "--results",
        tmp_path / "store",
        "--endpoint",
        url,
        "--limit",
        "5",
    )
    assert done.returncode == 3, done.stderr
    assert time.monotonic() - started < 10
    assert error_line(done.stderr) == (
        f"humming-matrix: error: --endpoint {url} does not answer "
        "(ConnectionRefusedError: [Errno 111] Connection refused)"
    )
    assert not (tmp_path / "store").exists()


# --- what a failure says ---------------------------------------------------------------------


def test_a_prompt_longer_than_the_context_is_bad_input(tmp_path: Path) -> None:
    state = tmp_path / "double.json"
    config = write_config(tmp_path, extra="max_concurrency: 1\n")
    with reaped(state):
        done = cli(
            "run",
            "--config",
            config,
            "--results",
            tmp_path / "store",
            "--limit",
            "6",
            env=policy_env({"bad_request": [2], "record": str(state)}),
        )
    assert done.returncode == 2, done.stderr
    assert_gone(state)
    assert error_line(done.stderr) == (
        f"humming-matrix: error: {config}: server_args: the server refused question 2: the "
        "prompt and max_tokens do not fit --max-model-len; raise --max-model-len (or lower "
        'num_fewshot or max_tokens) (HTTP 400: {"object": "error", "type": '
        '"BadRequestError", "code": 400, "message": "This model\'s maximum context length '
        "is 1024 tokens. However, you requested 1210 tokens (954 in the messages, 256 in the "
        "completi)"
    )
    [partial] = records(tmp_path / "store")
    assert [q.error is None for q in partial.questions] == [True, True, False, False, False, False]


def test_a_cuda_crash_while_serving_is_recorded_as_a_crash(tmp_path: Path) -> None:
    state = tmp_path / "double.json"
    config = write_config(tmp_path, extra="max_concurrency: 1\n")
    with reaped(state):
        done = cli(
            "run",
            "--config",
            config,
            "--results",
            tmp_path / "store",
            "--limit",
            "10",
            env=policy_env({"cuda_crash_at": 4, "record": str(state)}),
        )
    assert done.returncode == 3, done.stderr
    assert_gone(state)
    # The exception's name without its module, as server_log.root_cause reads it.
    cause = "AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert error_line(done.stderr).endswith(
        f"while serving (log: {next((tmp_path / 'store').glob('*.log'))}): {cause}"
    )
    [partial] = records(tmp_path / "store")
    assert partial.server["crash"] == {"cuda_error": True, "reason": cause}
    assert not partial.start_failed
    assert sum(q.error is None for q in partial.questions) == 3


# --- shared state ----------------------------------------------------------------------------


def test_resume_refuses_a_record_of_another_environment(tmp_path: Path) -> None:
    """A store merges records by copying files; a partial record measured with another vLLM
    (same config, same humming) must not be finished here."""
    # One request at a time, so questions 0 - 3 are answered before 4 fails: concurrently, 4's
    # immediate 500 could stop the run before any answer came, which leaves nothing to resume
    # (a clean-clone CI run on 2 cores, 2026-12-06, started afresh and exited 0).
    config = write_config(tmp_path, threshold=0.5, extra="max_concurrency: 1\n")
    store = tmp_path / "store"
    done = cli(
        "run",
        "--config",
        config,
        "--results",
        store,
        "--limit",
        "6",
        "--retries",
        "0",
        env=policy_env({"fail": {"4": 99}}),
    )
    assert done.returncode == 3, done.stderr
    [path] = store.glob("gsm8k__*.json")
    data = json.loads(path.read_text())
    path.unlink()
    data["environment"]["vllm"] = "0.24.0"
    other = store / path.name.replace(data["run_id"], data["run_id"] + "x")
    other.write_text(json.dumps(data))
    done = cli("run", "--config", config, "--results", store, "--limit", "6", "--resume")
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"humming-matrix: error: cannot resume {data['run_id']} of double: it was measured in "
        "another environment (vllm (0.24.0 there, None here)); run without --resume for a "
        "fresh record\n"
    )
    assert list(store.glob("gsm8k__*.json")) == [other]
