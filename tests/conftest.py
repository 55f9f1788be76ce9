"""Shared fixtures: the GSM8K data copy and the `vllm` test double on PATH."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOUBLES = REPO / "tests" / "doubles"


def _gsm8k_dir() -> Path:
    configured = os.environ.get("HUMMING_MATRIX_GSM8K_DIR")
    return Path(configured).resolve() if configured else REPO.parent / "shared" / "gsm8k"


@pytest.fixture(autouse=True)
def gsm8k_dir(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test reads GSM8K from the local copy; none may reach a hub."""
    path = _gsm8k_dir()
    monkeypatch.setenv("HUMMING_MATRIX_GSM8K_DIR", str(path))
    return path


@pytest.fixture
def vllm_double(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put the stand-in `vllm` (tests/doubles/vllm_double.py) first on PATH; yields its bin dir."""
    bin_dir = tmp_path / "double-bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").symlink_to(DOUBLES / "vllm_double.py")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir
