"""The session pipeline's gates, through the real CLI entry point: a failed preflight is 125, no
GPU stops after the preflight (3, or 0 when a preflight-only run was asked for), and a pass hands
the caller's arguments plus the defaults to `run`. The installed packages, the GPU list and the
preflight verdict are the injected seams; the matrix, configs and records are real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from humming_matrix.ci.slots import SlotPool
from humming_matrix.cli import build_parser
from humming_matrix.cli.session import PREFLIGHT_ONLY_ENV, Seams, execute
from humming_matrix.errors import ConfigError, ExitCode, NoGPUError, UntestableError
from humming_matrix.matrix.preflight import Check, CheckStatus, PreflightReport
from humming_matrix.suite.config import EvalConfig

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "gsm8k" / "humming" / "Qwen3-30B-A3B-MXFP4A16-humming-act-fp8.yaml"
MATRIX = """
[recipe.full]
requirements = ["vllm=={vllm}", "humming-kernels=={humming}"]
[variant.cu130]
[[pairing]]
humming = ">=0.1.0,<0.2"
versions = ["0.1.19"]
vllm = "0.33.0"
variants = ["cu130"]
"""
H200 = {"name": "NVIDIA H200", "driver": "570.1", "memory": "143771 MiB"}


class SeamsDouble:
    """TEST DOUBLE of the session's preflight and command seams: answers with a set report and
    exit code 1, and notes every call."""

    def __init__(self, report: PreflightReport) -> None:
        self.report = report
        self.preflight: list[tuple[list[str], bool]] = []
        self.commands: list[list[str]] = []
        self.visible: list[str | None] = []

    def run_preflight(self, configs: Sequence[EvalConfig], *, expect_vllm: bool) -> PreflightReport:
        self.preflight.append(([c.name for c in configs], expect_vllm))
        return self.report

    def command(self, argv: Sequence[str]) -> int:
        self.commands.append(list(argv))
        self.visible.append(os.environ.get("CUDA_VISIBLE_DEVICES"))
        return 1


def passing() -> PreflightReport:
    return PreflightReport((Check("humming_import", "humming", CheckStatus.PASSED, "ok"),), 0.1)


def failing() -> PreflightReport:
    return PreflightReport(
        (
            Check(
                "vllm_integration",
                "vllm",
                CheckStatus.FAILED,
                "vLLM 0.33.0 cannot use humming-kernels 0.1.6: ModuleNotFoundError: No module "
                "named 'humming.forward' (in vllm.utils.humming.humming_forward)",
            ),
        ),
        0.1,
    )


@pytest.fixture
def matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(MATRIX, encoding="utf-8")
    monkeypatch.setenv("HUMMING_MATRIX_FILE", str(path))
    return path


def session(
    tmp_path: Path,
    calls: SeamsDouble,
    gpus: list[dict[str, str]],
    environ: dict[str, str],
    humming: str = "0.1.19",
    *run_args: str,
) -> tuple[int, dict[str, Any]]:
    record = tmp_path / "env" / "humming-install.json"
    args = build_parser().parse_args(
        [
            "session",
            "--record",
            str(record),
            "--results",
            str(tmp_path / "store"),
            "humming-0.1.19",
            "--",
            "--config",
            str(CONFIG),
            *run_args,
        ]
    )
    seams = Seams(
        packages=lambda: {"humming-kernels": humming, "vllm": "0.33.0"},
        gpus=lambda: gpus,
        preflight=calls.run_preflight,
        command=calls.command,
    )
    code = execute(args, seams, environ)
    return code, json.loads(record.read_text())


def test_failed_preflight_is_untestable(tmp_path: Path, matrix: Path) -> None:
    calls = SeamsDouble(failing())
    with pytest.raises(UntestableError) as info:
        session(tmp_path, calls, [H200], {})
    assert str(info.value) == (
        "humming-0.1.19: preflight failed, untestable: vllm_integration [vllm]: vLLM 0.33.0 cannot "
        "use humming-kernels 0.1.6: ModuleNotFoundError: No module named 'humming.forward' "
        "(in vllm.utils.humming.humming_forward)"
    )
    assert calls.preflight == [(["Qwen3-30B-A3B-MXFP4A16-humming-act-fp8"], True)]
    assert calls.commands == []
    record = json.loads((tmp_path / "env" / "humming-install.json").read_text())
    assert (record["outcome"], record["exit_code"], record["stages"]) == (
        "preflight_failed",
        125,
        ["installed", "verified", "preflight"],
    )


def test_no_gpu_stops_after_preflight_with_3(tmp_path: Path, matrix: Path) -> None:
    calls = SeamsDouble(passing())
    with pytest.raises(NoGPUError) as info:
        session(tmp_path, calls, [], {})
    assert str(info.value) == (
        "humming-0.1.19: needs 1 CUDA GPU(s), 0 visible; only the preflight ran, the GSM8K stage "
        f"did not (set {PREFLIGHT_ONLY_ENV}=1 for a preflight-only run)"
    )
    assert info.value.exit_code == ExitCode.INFRASTRUCTURE
    assert calls.commands == []
    record = json.loads((tmp_path / "env" / "humming-install.json").read_text())
    assert (record["outcome"], record["exit_code"], record["stages"]) == (
        "preflight_only",
        3,
        ["installed", "verified", "preflight"],
    )
    assert record["preflight"]["passed"] is True


@pytest.mark.parametrize("gpus", [[], [H200]])
def test_preflight_only_run_stops_after_preflight_with_0(
    tmp_path: Path, matrix: Path, gpus: list[dict[str, str]]
) -> None:
    calls = SeamsDouble(passing())
    code, record = session(tmp_path, calls, gpus, {PREFLIGHT_ONLY_ENV: "1"})
    assert (code, record["outcome"], record["exit_code"]) == (0, "preflight_only", 0)
    assert record["message"] == (
        f"humming-0.1.19: preflight passed; GSM8K stage not run ({PREFLIGHT_ONLY_ENV}=1)"
    )
    assert calls.commands == []


def test_a_config_error_ends_the_record_with_exit_2(tmp_path: Path, matrix: Path) -> None:
    calls = SeamsDouble(passing())
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError):
        session(tmp_path, calls, [H200], {}, "0.1.19", "--config", str(missing))
    record = json.loads((tmp_path / "env" / "humming-install.json").read_text())
    assert (record["outcome"], record["exit_code"], record["message"]) == (
        "error",
        2,
        f"{missing}: no such file",
    )


def test_with_a_gpu_run_gets_the_arguments_and_its_code_is_the_session_code(
    tmp_path: Path, matrix: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = SeamsDouble(passing())
    # A real slot pool of two GPUs in a private folder; GPU "0" is held by someone else.
    monkeypatch.setenv("HUMMING_MATRIX_GPUS", "0,1")
    monkeypatch.setenv("HUMMING_MATRIX_SLOT_DIR", str(tmp_path / "slots"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with SlotPool.from_environment().acquire(1, owner="someone else"):
        code, record = session(tmp_path, calls, [H200], {}, "0.1.19", "--limit", "5")
    assert calls.commands == [
        ["run", "--config", str(CONFIG), "--limit", "5", "--results", str(tmp_path / "store")]
    ]
    assert calls.visible == ["1"]  # the run saw only the GPU its lease holds...
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # ...and only while it ran
    assert (code, record["outcome"], record["exit_code"]) == (1, "ran", 1)
    assert record["stages"] == ["installed", "verified", "preflight", "run"]


def test_wrong_humming_never_reaches_the_preflight(tmp_path: Path, matrix: Path) -> None:
    calls = SeamsDouble(passing())
    with pytest.raises(
        UntestableError,
        match=r"expects humming-kernels 0\.1\.19, but the environment has 0\.1\.6; refusing to run",
    ):
        session(tmp_path, calls, [H200], {}, "0.1.6")
    assert (calls.preflight, calls.commands) == ([], [])


def test_a_session_option_after_the_name_is_refused_not_passed_to_run(tmp_path: Path) -> None:
    record = tmp_path / "install.json"
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "session",
            "--matrix",
            str(matrix),
            "humming-0.1.19",
            "--record",
            str(record),
            "--",
            "--config",
            str(CONFIG),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "humming-matrix: error: session: '--record' after the session name: session options go "
        "before the name, arguments for `run` after `--` (humming-matrix session [OPTIONS] NAME "
        "-- RUN_ARGS)\n"
    )
    assert not record.exists()
