"""What a result store holds, judged: one row per (cell, config), each compared with the baseline
cell's run of that config. The Markdown, JUnit and HTML renderers (report_markdown, report_junit,
report_html) draw from this model and compute nothing of their own.
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from humming_matrix.compare import (
    Calibration,
    Cell,
    ConfigComparison,
    LoadedRecord,
    Settings,
    Verdict,
    compare_records,
    find_calibration,
    load_records,
)
from humming_matrix.errors import RecordError, UsageError
from humming_matrix.stats import Interval, wilson_interval


class RowStatus(Enum):
    """Ordered worst first: the tables list failures before anything else."""

    REGRESSION = "regression"
    BELOW_THRESHOLD = "below threshold"
    INCOMPLETE = "incomplete"
    NOT_COMPARED = "not compared"
    INCONCLUSIVE = "inconclusive"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change"
    BASELINE = "baseline"

    @property
    def failed(self) -> bool:
        return self in (
            RowStatus.REGRESSION,
            RowStatus.BELOW_THRESHOLD,
            RowStatus.INCOMPLETE,
            RowStatus.NOT_COMPARED,
        )

    @property
    def rank(self) -> int:
        return list(RowStatus).index(self)


_FROM_VERDICT = {
    Verdict.REGRESSION: RowStatus.REGRESSION,
    Verdict.INCONCLUSIVE: RowStatus.INCONCLUSIVE,
    Verdict.IMPROVEMENT: RowStatus.IMPROVEMENT,
    Verdict.NO_CHANGE: RowStatus.NO_CHANGE,
}


@dataclass(frozen=True)
class Row:
    config: str
    cell: Cell
    session: str
    record: LoadedRecord  # the newest record of this (cell, config)
    runs: int  # how many records of this (cell, config) the store holds
    correct: int
    n: int
    interval: Interval
    status: RowStatus
    comparison: ConfigComparison | None  # vs the baseline cell; None for the baseline itself
    calibration: Calibration | None
    note: str = ""  # why the row was not compared, when it was not

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0


@dataclass(frozen=True)
class StoreReport:
    store: Path
    settings: Settings
    baseline: Cell | None
    rows: tuple[Row, ...]  # worst first, then config, then version order
    cells: tuple[Cell, ...]  # in version order
    configs: tuple[str, ...]
    environments: Mapping[Cell, Mapping[str, Any]]  # the newest record's environment per cell

    @property
    def failures(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.status.failed)

    def baseline_row(self, config: str) -> Row | None:
        for row in self.rows:
            if row.config == config and row.status is RowStatus.BASELINE:
                return row
        return None


def _version_key(cell: Cell) -> tuple[int, Version | str, str]:
    try:
        return (0, Version(cell.humming or ""), cell.label)
    except InvalidVersion:
        return (1, cell.humming or "", cell.label)


def session_name(record: LoadedRecord) -> str:
    """The nox session that produced a record: recorded by the session itself, else the name
    `humming-<version>` that session would have had."""
    session = record.record.environment.get("session")
    if session:
        return str(session)
    return f"humming-{record.cell.humming or 'unknown'}"


def choose_baseline(cells: Sequence[Cell], version: str | None) -> Cell | None:
    """The cell every other is compared with: the one with humming-kernels `version`, else the
    oldest humming-kernels version in the store."""
    ordered = sorted(cells, key=_version_key)
    if version is None:
        return ordered[0] if ordered else None
    for cell in ordered:
        if cell.humming == version:
            return cell
    known = ", ".join(sorted({c.humming or "?" for c in cells}))
    raise UsageError(
        f"--baseline {version}: no records of that humming-kernels version "
        f"(the store has {known or 'none'})"
    )


def build_report(
    store: Path, settings: Settings, baseline_version: str | None = None
) -> StoreReport:
    if not store.is_dir():
        raise RecordError(store, None, "not a directory")
    records = load_records(store)
    if not records:
        # Most likely a wrong path or a CI step that produced nothing: say so, do not show an
        # empty, green report.
        raise RecordError(store, None, "holds no GSM8K record")
    groups: dict[tuple[Cell, str], list[LoadedRecord]] = defaultdict(list)
    for loaded in records:
        groups[(loaded.cell, loaded.record.config.name)].append(loaded)
    cells = tuple(sorted({cell for cell, _ in groups}, key=_version_key))
    configs = tuple(sorted({name for _, name in groups}))
    baseline = choose_baseline(cells, baseline_version)

    newest = {key: max(group, key=lambda x: x.order) for key, group in groups.items()}
    rows = []
    for (cell, name), loaded in newest.items():
        base = newest.get((baseline, name)) if baseline is not None else None
        rows.append(
            _row(
                cell,
                name,
                loaded,
                len(groups[(cell, name)]),
                base,
                baseline,
                records,
                settings,
            )
        )
    rows.sort(key=lambda r: (r.status.rank, r.config, _version_key(r.cell)))
    environments = {
        cell: max((r for r in records if r.cell == cell), key=lambda x: x.order).record.environment
        for cell in cells
    }
    return StoreReport(store, settings, baseline, tuple(rows), cells, configs, environments)


def _row(
    cell: Cell,
    name: str,
    loaded: LoadedRecord,
    runs: int,
    base: LoadedRecord | None,
    baseline: Cell | None,
    pool: Sequence[LoadedRecord],
    settings: Settings,
) -> Row:
    questions = loaded.record.questions
    correct = sum(q.correct for q in questions)
    n = len(questions)
    interval = wilson_interval(correct, n, settings.confidence) if n else Interval(0.0, 1.0)
    sha = loaded.record.config.sha256
    is_baseline = cell == baseline
    # The baseline cell's A/A pair measures the noise a comparison with it carries; a pair in
    # this row's own cell is the next best thing.
    prefer = [cell] if is_baseline or baseline is None else [baseline, cell]
    calibration = find_calibration([pool], name, sha, prefer, settings)

    def row(status: RowStatus, comparison: ConfigComparison | None = None, note: str = "") -> Row:
        return Row(
            name,
            cell,
            session_name(loaded),
            loaded,
            runs,
            correct,
            n,
            interval,
            status,
            comparison,
            calibration,
            note,
        )

    if not loaded.record.complete:
        return row(
            RowStatus.INCOMPLETE,
            note=f"run {loaded.record.run_id} stopped early "
            f"({sum(q.answered for q in questions)} of {n} answered)",
        )
    if is_baseline:
        status = RowStatus.BASELINE if loaded.record.metrics.passed else RowStatus.BELOW_THRESHOLD
        return row(status)
    if base is None:
        return row(RowStatus.NOT_COMPARED, note="the baseline cell has no run of this config")
    try:
        comparison = compare_records(base, loaded, settings, calibration)
    except RecordError as exc:
        return row(RowStatus.NOT_COMPARED, note=exc.detail)
    status = _FROM_VERDICT[comparison.verdict]
    if status is not RowStatus.REGRESSION and not comparison.candidate.passed_threshold:
        status = RowStatus.BELOW_THRESHOLD
    return row(status, comparison)


def write_text(path: Path, text: str) -> Path:
    """Replace `path` with `text` in one step, so a CI step that uploads the file never sees half a
    report (reports, unlike records, are meant to be overwritten)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
