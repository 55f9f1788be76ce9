"""Opt-in (`-m vllm`): real nox sessions that install vLLM 0.33.0 with humming-kernels 0.1.6 and
0.1.19 forced over its pin, then run the CPU preflight against the shipped GSM8K configs.

Several GB per environment (torch CUDA wheels); the uv cache makes the second run fast. Torch
comes from PyPI here (its Linux wheels are the CUDA build), not through `--torch-backend`, so the
test needs no access to download.pytorch.org.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.vllm

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs" / "gsm8k" / "humming"

MATRIX = """
[recipe.vllm]
requirements = ["vllm=={vllm}", "torch=={torch}", "humming-kernels=={humming}"]
overrides = ["humming-kernels=={humming}"]

[variant.pypi]
description = "torch from PyPI (CUDA build)"

[[pairing]]
humming = ">=0.1.0,<0.2"
versions = ["0.1.6", "0.1.19"]
vllm = "0.33.0"
torch = "2.14.0"
variants = ["pypi"]
"""


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("real-vllm")
    (root / "matrix.toml").write_text(MATRIX, encoding="utf-8")
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
            "humming-0.1.6",
            "humming-0.1.19",
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
        timeout=1800,
        check=False,
    )
    out: dict[str, dict[str, Any]] = {}
    for path in root.glob("*/humming-install.json"):
        record = json.loads(path.read_text())
        out[record["session"]] = record
    assert set(out) == {"humming-0.1.6", "humming-0.1.19"}, done.stdout[-3000:] + done.stderr
    return out


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
    assert {s for s, _ in checks.values()} == {"passed", "skipped"}
    for name in ("gpt-oss-20b-humming-act-fp8", "Qwen3-30B-A3B-MXFP4A16-humming-act-fp8"):
        assert checks[("humming_env", name)] == (
            "passed",
            "VLLM_HUMMING_INPUT_QUANT_CONFIG accepted by humming-kernels 0.1.19",
        )
        assert checks[("server_args", name)] == ("passed", "accepted by vLLM's `serve` parser")
