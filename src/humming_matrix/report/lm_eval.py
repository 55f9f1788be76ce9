"""The lm-eval section of the store report: one row per (environment, config, task,
`metric,filter`), the newest record of each (environment, config), judged against the baseline
environment's run of that config by `compare_lm_eval` (the GSM8K statistics and verdict rule, with
lm-eval's pass rule `measured >= value * (1 - rtol)` as the backstop). The statuses are the GSM8K
rows' (`report_rows.RowStatus`): a missed pass rule is "below threshold".
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from humming_matrix.errors import RecordError
from humming_matrix.judge.compare import RunEnvironment, Settings, Verdict, the_record
from humming_matrix.judge.compare_lm_eval import (
    LoadedLmEvalRecord,
    MetricComparison,
    Score,
    backstop_failed,
    backstop_text,
    compare_lm_eval_records,
    load_lm_eval_records,
)
from humming_matrix.report.rows import RowStatus, choose_baseline, version_key
from humming_matrix.store.lm_eval import MetricCheck

_FROM_VERDICT = {
    Verdict.REGRESSION: RowStatus.REGRESSION,
    Verdict.INCONCLUSIVE: RowStatus.INCONCLUSIVE,
    Verdict.IMPROVEMENT: RowStatus.IMPROVEMENT,
    Verdict.NO_CHANGE: RowStatus.NO_CHANGE,
}


@dataclass(frozen=True)
class LmEvalRow:
    config: str
    task: str
    key: str  # `metric,filter`
    cell: RunEnvironment
    session: str
    record: LoadedLmEvalRecord  # the newest record of this (cell, config)
    runs: int  # how many records of this (cell, config) the store holds
    status: RowStatus
    score: Score | None  # full credit on the documents scored; None for a graded metric
    comparison: MetricComparison | None  # vs the baseline cell; None for the baseline itself
    check: MetricCheck | None  # this run's own pass rule for the key; None if the config names none
    note: str = ""  # why the row was not compared, when it was not
    baseline_run_id: str | None = None  # the baseline's run it was compared with

    @property
    def name(self) -> str:
        return f"{self.config} {self.task} {self.key}"

    @property
    def backstop(self) -> str:
        return "not gated" if self.check is None else backstop_text(self.check)

    def line(self) -> str:
        """The row in one line (the JUnit failure message)."""
        if self.comparison is not None:
            return self.comparison.line()
        text = f"{self.name}: {self.status.value}"
        if self.note:
            return f"{text}: {self.note}"
        return f"{text}: {self.backstop}"


@dataclass(frozen=True)
class LmEvalSection:
    settings: Settings
    baseline: RunEnvironment
    cells: tuple[RunEnvironment, ...]  # in version order
    configs: tuple[str, ...]
    rows: tuple[LmEvalRow, ...]  # worst first, then config, task, metric, version order

    @property
    def failures(self) -> tuple[LmEvalRow, ...]:
        return tuple(r for r in self.rows if r.status.failed)


def metric_status(m: MetricComparison) -> RowStatus:
    """A compared row's status: its verdict, or "below threshold" when it misses its pass rule."""
    status = _FROM_VERDICT[m.verdict]
    if (
        status is not RowStatus.REGRESSION
        and m.backstop is not None
        and backstop_failed(m.backstop)
    ):
        return RowStatus.BELOW_THRESHOLD
    return status


def _session(loaded: LoadedLmEvalRecord) -> str:
    session = loaded.record.environment.get("session")
    return str(session) if session else f"humming-{loaded.cell.humming or 'unknown'}"


def build_lm_eval_section(
    store: Path, settings: Settings, baseline_version: str | None
) -> LmEvalSection | None:
    records = load_lm_eval_records(store)
    if not records:
        return None
    groups: dict[tuple[RunEnvironment, str], list[LoadedLmEvalRecord]] = defaultdict(list)
    for loaded in records:
        groups[(loaded.cell, loaded.config_name)].append(loaded)
    cells = tuple(sorted({cell for cell, _ in groups}, key=version_key))
    baseline = choose_baseline(cells, baseline_version, "lm-eval ")
    assert baseline is not None  # records is not empty; narrows the type
    newest = {key: the_record(group) for key, group in groups.items()}
    rows: list[LmEvalRow] = []
    for (cell, name), loaded in newest.items():
        rows += _rows(
            loaded,
            len(groups[(cell, name)]),
            newest.get((baseline, name)),
            cell == baseline,
            settings,
        )
    rows.sort(key=lambda r: (r.status.rank, r.config, r.task, r.key, version_key(r.cell)))
    configs = tuple(sorted({name for _, name in groups}))
    return LmEvalSection(settings, baseline, cells, configs, tuple(rows))


def _rows(
    loaded: LoadedLmEvalRecord,
    runs: int,
    base: LoadedLmEvalRecord | None,
    is_baseline: bool,
    settings: Settings,
) -> list[LmEvalRow]:
    record = loaded.record

    def row(
        task: str,
        key: str,
        status: RowStatus,
        score: Score | None = None,
        comparison: MetricComparison | None = None,
        note: str = "",
    ) -> LmEvalRow:
        check = next((c for c in record.checks if c.task == task and c.key == key), None)
        base_run = None if comparison is None or base is None else base.record.run_id
        return LmEvalRow(
            record.config.name,
            task,
            key,
            loaded.cell,
            _session(loaded),
            loaded,
            runs,
            status,
            score,
            comparison,
            check,
            note,
            base_run,
        )

    def unjudged(status: RowStatus, note: str) -> list[LmEvalRow]:
        return [row(c.task, c.key, status, note=note) for c in record.checks]

    if not record.complete:
        return unjudged(RowStatus.INCOMPLETE, f"run {record.run_id} stopped early")
    if is_baseline or base is None:
        # The record against itself: the same pairable rows and scores as against any other
        # run, from the judge itself, with nothing to compare yet.
        status = RowStatus.BASELINE if is_baseline else RowStatus.NOT_COMPARED
        note = "" if is_baseline else "the baseline cell has no run of this config"
        try:
            own = compare_lm_eval_records(loaded, loaded, settings)
        except RecordError as exc:  # no metric scored 0/1 per document: nothing to pair
            return unjudged(RowStatus.NOT_COMPARED, exc.detail)
        out = []
        for m in own.metrics:
            failed = m.backstop is not None and backstop_failed(m.backstop)
            out.append(
                row(
                    m.task,
                    m.key,
                    RowStatus.BELOW_THRESHOLD if failed and is_baseline else status,
                    m.baseline,
                    note=note,
                )
            )
        for c in own.unpaired_checks:
            failed = backstop_failed(c)
            out.append(
                row(
                    c.task,
                    c.key,
                    RowStatus.BELOW_THRESHOLD if failed and is_baseline else status,
                    note=note,
                )
            )
        return out
    try:
        judged = compare_lm_eval_records(base, loaded, settings)
    except RecordError as exc:
        return unjudged(RowStatus.NOT_COMPARED, exc.detail)
    out = []
    for m in judged.metrics:
        out.append(row(m.task, m.key, metric_status(m), m.candidate, m))
    for c in judged.unpaired_checks:
        status = RowStatus.BELOW_THRESHOLD if backstop_failed(c) else RowStatus.THRESHOLD_ONLY
        out.append(row(c.task, c.key, status))
    return out
