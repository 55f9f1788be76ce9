"""What a result store holds, judged, one section per kind of record: GSM8K (here: one row per
(cell, config), each compared with the baseline cell's run of that config), kernels
(`report_kernels`) and lm-eval (`report_lm_eval`). Each section picks its baseline the same way
(`report_rows.choose_baseline`). The Markdown, JUnit and HTML renderers (report_markdown,
report_junit, report_html) draw from this model and compute nothing of their own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from humming_matrix.errors import RecordError
from humming_matrix.judge.compare import (
    Calibration,
    ConfigComparison,
    LoadedRecord,
    RunEnvironment,
    Settings,
    Verdict,
    compare_records,
    find_calibration,
    in_family,
    load_records,
    the_record,
)
from humming_matrix.judge.stats import Interval, wilson_interval
from humming_matrix.report.kernels import KernelSection, build_kernel_section
from humming_matrix.report.lm_eval import LmEvalSection, build_lm_eval_section, metric_status
from humming_matrix.report.rows import RowStatus, choose_baseline, version_key
from humming_matrix.store.atomic_files import replace_file

__all__ = [
    "Row",
    "RowStatus",
    "StoreReport",
    "build_report",
    "choose_baseline",
    "seconds_cell",
    "session_name",
    "write_text",
]


_FROM_VERDICT = {
    Verdict.REGRESSION: RowStatus.REGRESSION,
    Verdict.INCONCLUSIVE: RowStatus.INCONCLUSIVE,
    Verdict.IMPROVEMENT: RowStatus.IMPROVEMENT,
    Verdict.NO_CHANGE: RowStatus.NO_CHANGE,
}


@dataclass(frozen=True)
class Row:
    config: str
    cell: RunEnvironment
    session: str
    record: LoadedRecord  # the record of this (cell, config): `compare.the_record`
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

    @property
    def times(self) -> tuple[str, str, str]:
        """Install, start-up and asking seconds of the newest run, as table cells (blank where
        the record does not know: no nox session, a server already up, an older record)."""
        t = self.record.record.timings
        if t is None:
            return ("", "", seconds_cell(self.record.record.metrics.duration))
        return (seconds_cell(t.install), seconds_cell(t.startup), seconds_cell(t.asking))

    @property
    def server_state(self) -> str:
        rec = self.record.record
        if rec.startup is None:
            return "already running" if rec.server.get("launched") is False else ""
        if rec.start_failed:
            return f"never ready (last phase: {str(rec.startup.get('phase')).replace('_', ' ')})"
        return "ready"

    def timing_cells(self) -> list[str]:
        """The TIMING_COLUMNS of this row."""
        return [self.config, self.cell.humming or "?", self.session, *self.times, self.server_state]


@dataclass(frozen=True)
class StoreReport:
    """The GSM8K section (`baseline` .. `environments`: empty when the store holds no GSM8K
    record) and the kernel and lm-eval sections (None when it holds none of that kind)."""

    store: Path
    settings: Settings
    baseline: RunEnvironment | None
    rows: tuple[Row, ...]  # worst first, then config, then version order
    cells: tuple[RunEnvironment, ...]  # in version order
    configs: tuple[str, ...]
    environments: Mapping[
        RunEnvironment, Mapping[str, Any]
    ]  # the newest record's environment per cell
    kernels: KernelSection | None = None
    lm_eval: LmEvalSection | None = None

    @property
    def failures(self) -> tuple[Row, ...]:
        """GSM8K rows that fail (the sections count their own)."""
        return tuple(r for r in self.rows if r.status.failed)

    def noise_floors(self) -> dict[str, Calibration | None]:
        """Per config, the A/A pair of the baseline cell (two complete runs of it): the noise
        floor the config's rows are judged against (their verdict MDE assumes its discordance);
        None where the store holds no repeat of the baseline."""
        floors: dict[str, Calibration | None] = {}
        for config in self.configs:
            row = self.baseline_row(config)
            floors[config] = None if row is None else row.calibration
        return floors

    def noise_floor_text(self) -> str:
        """What every renderer says about the noise floor, including that there is none."""
        parts, missing = [], []
        for config, cal in self.noise_floors().items():
            if cal is None:
                missing.append(config)
            else:
                parts.append(
                    f"{config} {cal.discordant}/{cal.n} questions discordant "
                    f"({100 * cal.rate:.2f}%)"
                )
        text = "Noise floor (A/A repeats of the baseline): " + ("; ".join(parts) or "none")
        if missing:
            text += (
                f". No A/A repeat of the baseline for {', '.join(missing)}: the MDE there assumes "
                "2 min(b, c)/n of each pair; run the baseline cell twice into the store to "
                "measure the floor"
            )
        return text + "."

    def baseline_row(self, config: str) -> Row | None:
        for row in self.rows:
            if row.config == config and row.status is RowStatus.BASELINE:
                return row
        return None


def session_name(record: LoadedRecord) -> str:
    """The nox session that produced a record: recorded by the session itself, else the name
    `humming-<version>` that session would have had."""
    session = record.record.environment.get("session")
    if session:
        return str(session)
    return f"humming-{record.cell.humming or 'unknown'}"


def build_report(
    store: Path, settings: Settings, baseline_version: str | None = None
) -> StoreReport:
    if not store.is_dir():
        raise RecordError(store, None, "not a directory")
    records = load_records(store)
    kernels = build_kernel_section(store, baseline_version)
    lm_eval = build_lm_eval_section(store, settings, baseline_version)
    if not records and kernels is None and lm_eval is None:
        # Most likely a wrong path or a CI step that produced nothing: say so, do not show an
        # empty, green report.
        raise RecordError(store, None, "holds no record (GSM8K, kernels or lm-eval)")
    groups: dict[tuple[RunEnvironment, str], list[LoadedRecord]] = defaultdict(list)
    for loaded in records:
        groups[(loaded.cell, loaded.record.config.name)].append(loaded)
    cells = tuple(sorted({cell for cell, _ in groups}, key=version_key))
    configs = tuple(sorted({name for _, name in groups}))
    baseline = choose_baseline(cells, baseline_version) if records else None

    newest = {key: the_record(group) for key, group in groups.items()}
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
    rows, lm_eval = _judge_family(rows, lm_eval)
    rows.sort(key=lambda r: (r.status.rank, r.config, version_key(r.cell)))
    environments = {
        cell: max((r for r in records if r.cell == cell), key=lambda x: x.order).record.environment
        for cell in cells
    }
    return StoreReport(
        store, settings, baseline, tuple(rows), cells, configs, environments, kernels, lm_eval
    )


def _judge_family(
    rows: list[Row], lm_eval: LmEvalSection | None
) -> tuple[list[Row], LmEvalSection | None]:
    """Each section's compared rows are one family (all GSM8K cells; all lm-eval rows): Holm's
    adjustment keeps the chance of any false regression in a section at most alpha, however
    many versions and configs share the baseline run. (A section is what a reader, or a CI step
    reading the JUnit, takes as one verdict; `compare`, one gate, judges all it holds as one.)"""
    gsm = [(i, r.comparison) for i, r in enumerate(rows) if r.comparison is not None]
    for (i, c), test in zip(gsm, in_family([c.test for _, c in gsm]), strict=True):
        comparison = replace(c, test=test)
        rows[i] = replace(rows[i], comparison=comparison, status=_status(comparison))
    if lm_eval is None:
        return rows, None
    lm_rows = list(lm_eval.rows)
    lm = [(i, r.comparison) for i, r in enumerate(lm_rows) if r.comparison is not None]
    for (i, m), test in zip(lm, in_family([m.test for _, m in lm]), strict=True):
        metric = replace(m, test=test)
        lm_rows[i] = replace(lm_rows[i], comparison=metric, status=metric_status(metric))
    lm_rows.sort(key=lambda r: (r.status.rank, r.config, r.task, r.key, version_key(r.cell)))
    return rows, replace(lm_eval, rows=tuple(lm_rows))


def _status(comparison: ConfigComparison) -> RowStatus:
    status = _FROM_VERDICT[comparison.verdict]
    if status is not RowStatus.REGRESSION and not comparison.candidate.passed_threshold:
        return RowStatus.BELOW_THRESHOLD
    return status


def _row(
    cell: RunEnvironment,
    name: str,
    loaded: LoadedRecord,
    runs: int,
    base: LoadedRecord | None,
    baseline: RunEnvironment | None,
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

    if loaded.record.start_failed:
        return row(RowStatus.START_FAILED, note=loaded.record.startup_summary())
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
    return row(_status(comparison), comparison)


def seconds_cell(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def write_text(path: Path, text: str) -> Path:
    """Replace `path` with `text` in one step, so a CI step that uploads the file never sees half a
    report (reports, unlike records, are meant to be overwritten)."""
    return replace_file(path, lambda fh: fh.write(text))
