"""A session's install record: what the environment holds, which stages ran, and the
single-variable check against its sibling cells.

The record is one JSON file per session environment (`HUMMING_MATRIX_INSTALL_RECORD`), rewritten
atomically as stages complete; `humming-matrix run` copies it into every result record
(`environment.install`). Two cells of the same vLLM, torch, variant and recipe that differ in
humming-kernels must differ only in humming-kernels and its own requirements; anything else that
differs would confound the comparison, and the record names it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import IO, Any

from packaging.requirements import InvalidRequirement, Requirement

from humming_matrix.distributions import canonical, installed_packages
from humming_matrix.errors import RecordError, UntestableError
from humming_matrix.matrix.cells import Cell
from humming_matrix.store.atomic_files import replace_file
from humming_matrix.store.install import HUMMING_DIST, INSTALL_RECORD, InstallRecord
from humming_matrix.store.install import Outcome as Outcome  # the session command's words
from humming_matrix.store.install import Stage as Stage
from humming_matrix.store.records import load_record

RECORD_NAME = "humming-install.json"


@dataclass(frozen=True)
class Difference:
    """What differs between two environments, package by package (None: absent)."""

    humming: tuple[str | None, str | None]
    humming_requirements: Mapping[str, tuple[str | None, str | None]]
    others: Mapping[str, tuple[str | None, str | None]]

    @property
    def single_variable(self) -> bool:
        return not self.others


def humming_requirement_names(
    requires: Callable[[str], list[str] | None] = metadata.requires,
) -> tuple[str, ...]:
    """Names humming-kernels requires, extras included (its CUDA toolkit wheels are its own)."""
    try:
        lines = requires(HUMMING_DIST) or []
    except metadata.PackageNotFoundError:
        return ()
    names = set()
    for line in lines:
        try:
            names.add(canonical(Requirement(line).name))
        except InvalidRequirement:
            continue
    return tuple(sorted(names))


def capture(
    cell: Cell,
    *,
    packages: Mapping[str, str] | None = None,
    requirements: tuple[str, ...] | None = None,
    now: datetime | None = None,
) -> InstallRecord:
    return InstallRecord(
        session=cell.session,
        cell=cell.to_dict(),
        python=".".join(map(str, sys.version_info[:3])),
        executable=sys.executable,
        packages=installed_packages() if packages is None else dict(packages),
        humming_requirements=humming_requirement_names() if requirements is None else requirements,
        created=(now or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
        stages=(Stage.INSTALLED,),
    )


def verify_humming(record: InstallRecord, cell: Cell, path: Path) -> InstallRecord:
    """The environment must hold the humming-kernels its session name says; else 125."""
    expected = str(cell.humming)
    if record.humming == expected:
        return record.advance(Stage.VERIFIED)
    found = record.humming or "no humming-kernels"
    message = (
        f"session {cell.session} expects humming-kernels {expected}, but the environment has "
        f"{found}; refusing to run (install record: {path})"
    )
    write_outcome(path, record, Outcome.VERSION_MISMATCH, UntestableError.exit_code, message)
    raise UntestableError(message)


def compare(a: InstallRecord, b: InstallRecord) -> Difference:
    allowed = set(a.humming_requirements) | set(b.humming_requirements)
    names = (set(a.packages) | set(b.packages)) - {HUMMING_DIST}
    requirement_diffs: dict[str, tuple[str | None, str | None]] = {}
    others: dict[str, tuple[str | None, str | None]] = {}
    for name in sorted(names):
        pair = (a.packages.get(name), b.packages.get(name))
        if pair[0] != pair[1]:
            (requirement_diffs if name in allowed else others)[name] = pair
    return Difference((a.humming, b.humming), requirement_diffs, others)


def _same_stack(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    keys = ("vllm", "torch", "variant", "recipe")
    return all(a.get(k) == b.get(k) for k in keys) and a.get("humming") != b.get("humming")


def sibling_records(record_path: Path) -> list[tuple[Path, InstallRecord]]:
    """Install records of the other session environments beside this one (`.nox/*/`)."""
    out = []
    for path in sorted(record_path.parent.parent.glob(f"*/{RECORD_NAME}")):
        if path.resolve() == record_path.resolve():
            continue
        try:
            out.append((path, read_record(path)))
        except RecordError:
            continue  # a half-written or older record says nothing reliable
    return out


def single_variable_checks(
    record: InstallRecord, siblings: Iterable[tuple[Path, InstallRecord]]
) -> tuple[dict[str, Any], ...]:
    checks = []
    for path, other in siblings:
        if other.humming is None or not _same_stack(record.cell, other.cell):
            continue
        diff = compare(other, record)
        checks.append(
            {
                "against": other.session,
                "record": str(path),
                "humming_kernels": list(diff.humming),
                "single_variable": diff.single_variable,
                "humming_requirements_differ": {
                    k: list(v) for k, v in diff.humming_requirements.items()
                },
                "others_differ": {k: list(v) for k, v in diff.others.items()},
            }
        )
    return tuple(checks)


def describe(checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """Warnings for every sibling comparison that found more than humming varying."""
    lines = []
    for check in checks:
        if not check["single_variable"]:
            others = ", ".join(
                f"{name} {a or '-'} vs {b or '-'}"
                for name, (a, b) in check["others_differ"].items()
            )
            lines.append(
                f"not a single-variable pair with {check['against']}: besides humming-kernels, "
                f"{others}"
            )
    return lines


def read_record(path: Path) -> InstallRecord:
    return load_record(path, INSTALL_RECORD)


def write_outcome(
    path: Path, record: InstallRecord, outcome: Outcome, exit_code: int, message: str | None = None
) -> None:
    """End the record with the session's outcome and exit code (CI reads the code there)."""
    fields: dict[str, Any] = {"outcome": outcome, "exit_code": int(exit_code)}
    if message is not None:
        fields["message"] = message
    write_record(path, replace(record, **fields))


def write_record(path: Path, record: InstallRecord) -> None:
    """Atomic replace: `run` may read the record while a later stage rewrites it."""

    def dump(fh: IO[str]) -> None:
        json.dump(record.to_dict(), fh, indent=2, sort_keys=False)
        fh.write("\n")

    replace_file(path, dump)
