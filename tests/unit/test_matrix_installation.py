"""Install records: capture, the version refusal, the single-variable comparison, reading back."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from humming_matrix.errors import ExitCode, RecordError, UntestableError
from humming_matrix.matrix import installation
from humming_matrix.matrix.cells import Cell, load_matrix
from humming_matrix.matrix.installation import Outcome, Stage
from humming_matrix.store.install import InstallRecord

MATRIX = """
[recipe.full]
requirements = ["vllm=={vllm}", "torch=={torch}", "humming-kernels=={humming}"]
[variant.cu130]
torch_backend = "cu130"
[[pairing]]
humming = ">=0.1.7,<0.2"
versions = ["0.1.17", "0.1.19"]
vllm = "0.33.0"
torch = "2.14.0"
variants = ["cu130"]
"""
NOW = datetime(2026, 12, 2, 14, 0, tzinfo=timezone.utc)
BASE = {"vllm": "0.33.0", "torch": "2.14.0", "numpy": "2.2.0", "cuda-bindings": "13.0.0"}
HUMMING_REQS = ("cuda-bindings", "numpy", "torch", "nvidia-cuda-nvrtc")


@pytest.fixture
def cells(tmp_path: Path) -> dict[str, Cell]:
    path = tmp_path / "matrix.toml"
    path.write_text(MATRIX, encoding="utf-8")
    return {c.session: c for c in load_matrix(path).cells()}


def record(cell: Cell, **packages: str) -> InstallRecord:
    installed = {**BASE, "humming-kernels": str(cell.humming), **packages}
    return installation.capture(cell, packages=installed, requirements=HUMMING_REQS, now=NOW)


def test_record_round_trips_and_names_the_cell(tmp_path: Path, cells: dict[str, Cell]) -> None:
    path = tmp_path / "env" / installation.RECORD_NAME
    original = record(cells["humming-0.1.19"])
    installation.write_record(path, original)
    data = json.loads(path.read_text())
    assert data["session"] == "humming-0.1.19"
    assert data["humming_kernels"] == "0.1.19"
    assert data["cell"]["requirements"] == [
        "vllm==0.33.0",
        "torch==2.14.0",
        "humming-kernels==0.1.19",
    ]
    assert (data["stages"], data["outcome"], data["created"]) == (
        ["installed"],
        "in_progress",
        "2026-12-02T14:00:00+00:00",
    )
    assert installation.read_record(path) == original


def test_wrong_humming_is_refused_with_125_and_recorded(
    tmp_path: Path, cells: dict[str, Cell]
) -> None:
    path = tmp_path / installation.RECORD_NAME
    cell = cells["humming-0.1.17"]
    wrong = record(cell, **{"humming-kernels": "0.1.19"})
    with pytest.raises(UntestableError) as info:
        installation.verify_humming(wrong, cell, path)
    assert str(info.value) == (
        "session humming-0.1.17 expects humming-kernels 0.1.17, but the environment has 0.1.19; "
        f"refusing to run (install record: {path})"
    )
    assert info.value.exit_code == ExitCode.UNTESTABLE
    saved = installation.read_record(path)
    assert (saved.outcome, saved.exit_code) == (Outcome.VERSION_MISMATCH, 125)
    right = installation.verify_humming(record(cell), cell, path)
    assert right.stages == (Stage.INSTALLED, Stage.VERIFIED)


def test_only_humming_and_its_requirements_may_differ(cells: dict[str, Cell]) -> None:
    old = record(cells["humming-0.1.17"], **{"nvidia-cuda-nvrtc": "13.0.1"})
    new = record(cells["humming-0.1.19"], **{"nvidia-cuda-nvrtc": "13.0.2"})
    diff = installation.compare(old, new)
    assert diff.humming == ("0.1.17", "0.1.19")
    assert dict(diff.humming_requirements) == {"nvidia-cuda-nvrtc": ("13.0.1", "13.0.2")}
    assert (dict(diff.others), diff.single_variable) == ({}, True)

    drifted = record(cells["humming-0.1.19"], vllm="0.33.1", triton="3.5.0")
    diff = installation.compare(old, drifted)
    assert dict(diff.others) == {"triton": (None, "3.5.0"), "vllm": ("0.33.0", "0.33.1")}
    assert not diff.single_variable


def test_siblings_are_compared_and_the_record_says_what_else_differed(
    tmp_path: Path, cells: dict[str, Cell]
) -> None:
    old_path = tmp_path / "humming-0-1-17" / installation.RECORD_NAME
    installation.write_record(old_path, record(cells["humming-0.1.17"]))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / installation.RECORD_NAME).write_text("{", encoding="utf-8")
    new_path = tmp_path / "humming-0-1-19" / installation.RECORD_NAME
    new = record(cells["humming-0.1.19"], numpy="2.3.0", vllm="0.33.1")
    checks = installation.single_variable_checks(new, installation.sibling_records(new_path))
    assert checks == (
        {
            "against": "humming-0.1.17",
            "record": str(old_path),
            "humming_kernels": ["0.1.17", "0.1.19"],
            "single_variable": False,
            "humming_requirements_differ": {"numpy": ["2.2.0", "2.3.0"]},
            "others_differ": {"vllm": ["0.33.0", "0.33.1"]},
        },
    )
    assert installation.describe(checks) == [
        "not a single-variable pair with humming-0.1.17: besides humming-kernels, "
        "vllm 0.33.0 vs 0.33.1"
    ]


def test_unreadable_record_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_text('{"schema_version": 1}', encoding="utf-8")
    with pytest.raises(RecordError) as info:
        installation.read_record(path)
    assert str(info.value) == f"{path}: session: missing"
    with pytest.raises(RecordError, match=r"missing\.json: no such file$"):
        installation.read_record(tmp_path / "missing.json")


def test_install_record_fields_are_checked_by_key(tmp_path: Path, cells: dict[str, Cell]) -> None:
    path = tmp_path / "record.json"
    installation.write_record(path, record(cells["humming-0.1.19"]))
    data = json.loads(path.read_text(encoding="utf-8"))
    data["stages"] = ["installed", "bogus"]
    data["exit_code"] = "3"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(RecordError) as info:
        installation.read_record(path)
    assert str(info.value) == f"{path}: stages[1]: invalid enum value 'bogus'"
    data["stages"] = ["installed"]
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(RecordError) as info:
        installation.read_record(path)
    assert str(info.value) == f"{path}: exit_code: expected int or null, got str"
