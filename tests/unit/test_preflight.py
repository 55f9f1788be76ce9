"""The preflight's outside half with real probe processes: in an interpreter without humming or
vLLM, with a probe that crashes, and with one that hangs (its whole process group must die)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from humming_matrix.config import load_config
from humming_matrix.preflight import CheckStatus, run_preflight

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "gsm8k" / "humming" / "Qwen3-30B-A3B-MXFP4A16-humming-act-fp8.yaml"


def _interpreter_double(tmp_path: Path, body: str) -> str:
    """A stand-in `python` for the probe command line (a test double: a shell script)."""
    path = tmp_path / "python-double"
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_environment_without_humming_or_vllm_is_untestable() -> None:
    # This interpreter (the test runner's) has neither humming-kernels nor vLLM installed.
    report = run_preflight([load_config(CONFIG)], expect_vllm=True, python=sys.executable)
    got = [(c.name, c.subject, c.status, c.detail) for c in report.checks]
    assert got == [
        (
            "humming_import",
            "humming",
            CheckStatus.FAILED,
            "humming-kernels is not installed in this environment",
        ),
        (
            "vllm_integration",
            "vllm",
            CheckStatus.FAILED,
            "vLLM is not installed (the cell's recipe installs vLLM)",
        ),
        (
            "server_args",
            "Qwen3-30B-A3B-MXFP4A16-humming-act-fp8",
            CheckStatus.FAILED,
            "vLLM is not installed",
        ),
        (
            "humming_env",
            "Qwen3-30B-A3B-MXFP4A16-humming-act-fp8",
            CheckStatus.SKIPPED,
            "humming does not import",
        ),
    ]
    assert not report.passed
    assert report.reason() == (
        "humming_import [humming]: humming-kernels is not installed in this environment; "
        "vllm_integration [vllm]: vLLM is not installed (the cell's recipe installs vLLM); "
        "server_args [Qwen3-30B-A3B-MXFP4A16-humming-act-fp8]: vLLM is not installed"
    )


def test_without_vllm_expected_its_checks_are_skipped_not_failed() -> None:
    report = run_preflight([load_config(CONFIG)], expect_vllm=False, python=sys.executable)
    statuses = {c.name: c.status for c in report.checks}
    assert statuses == {
        "humming_import": CheckStatus.FAILED,
        "vllm_integration": CheckStatus.SKIPPED,
        "server_args": CheckStatus.SKIPPED,
        "humming_env": CheckStatus.SKIPPED,
    }
    assert [c.name for c in report.failures] == ["humming_import"]


def test_a_probe_that_dies_is_a_failed_check_with_its_stderr(tmp_path: Path) -> None:
    python = _interpreter_double(
        tmp_path, "echo 'Fatal Python error: Segmentation fault' >&2\nexit 139"
    )
    report = run_preflight([], expect_vllm=True, python=python)
    [check] = report.checks
    assert (check.name, check.status, check.detail) == (
        "probe",
        CheckStatus.FAILED,
        "the preflight process exited 139 without a report: Fatal Python error: Segmentation fault",
    )


def test_a_hung_probe_is_killed_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    python = _interpreter_double(tmp_path, f"sleep 300 &\necho $! > {pids}\nsleep 300")
    start = time.monotonic()
    # Long enough for a loaded machine to start the shell and its child before the kill.
    report = run_preflight([], expect_vllm=True, python=python, timeout=3.0)
    assert time.monotonic() - start < 15  # not the 300 s the double would sleep
    [check] = report.checks
    assert (check.status, check.detail) == (
        CheckStatus.FAILED,
        "the preflight did not finish within 3 s (killed)",
    )
    child = int(pids.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        # A killed child of a killed parent is reaped by init; until then it is a zombie.
        status = Path(f"/proc/{child}/stat")
        if status.exists() and status.read_text().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the probe's child {child} outlived the preflight")


def test_the_preflight_command_prints_each_check_and_exits_125(tmp_path: Path) -> None:
    """`humming-matrix preflight` in this interpreter (no humming, and told to expect no vLLM)."""
    config = REPO / "configs" / "gsm8k" / "humming" / "gpt-oss-20b-humming.yaml"
    out = tmp_path / "preflight.json"
    done = subprocess.run(
        [sys.executable, "-m", "humming_matrix", "preflight", "--config", str(config),
         "--without-vllm", "--json", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert (done.returncode, done.stderr) == (125, "")
    assert done.stdout.splitlines() == [
        "FAILED  humming_import [humming]: humming-kernels is not installed in this environment",
        "SKIPPED vllm_integration [vllm]: vLLM is not installed (this recipe installs none)",
        "SKIPPED server_args [gpt-oss-20b-humming]: vLLM is not installed",
        "SKIPPED humming_env [gpt-oss-20b-humming]: no humming JSON in env",
        "preflight FAILED, untestable (humming-kernels none): humming_import [humming]: "
        "humming-kernels is not installed in this environment",
    ]
    report = json.loads(out.read_text())
    assert report["passed"] is False
    assert [(c["name"], c["subject"], c["status"]) for c in report["checks"]] == [
        ("humming_import", "humming", "failed"),
        ("vllm_integration", "vllm", "skipped"),
        ("server_args", "gpt-oss-20b-humming", "skipped"),
        ("humming_env", "gpt-oss-20b-humming", "skipped"),
    ]

    usage = subprocess.run([sys.executable, "-m", "humming_matrix", "preflight"],
                           capture_output=True, text=True, timeout=120, check=False)
    assert (usage.returncode, usage.stdout, usage.stderr) == (
        2, "", "humming-matrix: error: preflight needs --config FILE or --config-list FILE\n")
