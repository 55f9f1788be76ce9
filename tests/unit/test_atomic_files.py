"""Records, reports and install records get the mode the umask gives any other file (the server
logs beside them are 0644 under umask 022), not mkstemp's private 0600."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from humming_matrix.errors import RecordError
from humming_matrix.matrix import installation
from humming_matrix.matrix.cells import parse_matrix
from humming_matrix.report.build import write_text
from humming_matrix.store.atomic_files import replace_bytes, replace_file
from humming_matrix.store.results import write_json_atomic


@pytest.fixture(params=[0o022, 0o027, 0o077])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield int(request.param)
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_record_report_and_install_record_honour_the_umask(tmp_path: Path, umask: int) -> None:
    expected = 0o666 & ~umask
    record = write_json_atomic(tmp_path / "store" / "gsm8k__c__0.1.6__r.json", {"a": 1})
    report = write_text(tmp_path / "out" / "report.md", "# report\n")
    log = tmp_path / "store" / "x.server.log"
    log.write_text("log\n")  # what the launcher's plain open() gives the log beside them
    matrix = parse_matrix(
        {
            "recipe": {"r": {"requirements": ["humming-kernels=={humming}"], "gpus": 0}},
            "variant": {"v": {}},
            "pairing": [{"humming": ">=0.1", "versions": ["0.1.6"], "variants": ["v"]}],
        },
        tmp_path / "matrix.toml",
    )
    cell = matrix.cell("humming-0.1.6")
    install = tmp_path / ".nox" / "s" / installation.RECORD_NAME
    installation.write_record(install, installation.capture(cell, packages={}, requirements=()))
    assert {p.name: mode(p) for p in (record, report, install, log)} == {
        record.name: expected,
        report.name: expected,
        install.name: expected,
        log.name: expected,
    }
    # Nothing half-written is left behind.
    assert sorted(p.name for p in record.parent.iterdir()) == [record.name, log.name]


def test_a_taken_record_name_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = write_json_atomic(tmp_path / "r.json", {"first": True})
    with pytest.raises(RecordError, match="records are never overwritten"):
        write_json_atomic(tmp_path / "r.json", {"second": True})
    assert path.read_text() == '{\n "first": true\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_replace_that_fails_leaves_no_temporary_file(tmp_path: Path) -> None:
    # A directory where the file should go: os.replace refuses, as it does for another user's
    # file in a sticky directory.
    (tmp_path / "owner.json").mkdir()
    with pytest.raises(IsADirectoryError):
        replace_file(tmp_path / "owner.json", lambda fh: fh.write("{}"))
    with pytest.raises(IsADirectoryError):
        replace_bytes(tmp_path / "owner.json", b"{}")
    assert [p.name for p in tmp_path.iterdir()] == ["owner.json"]
