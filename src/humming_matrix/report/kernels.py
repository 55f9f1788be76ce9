"""The kernel section of the store report: the versions x cases table of the kernel records
(state and median time at the largest batch size), and every environment judged against the
baseline environment by the kernel judge (`kernels.judge.compare_kernel_records`), one row per
(environment, case): the worst of the case's per-batch-size verdicts.

A row fails when the judge calls the case a regression (`worse`, `newly-broken`: what fails
`compare`), when the case is broken in that run on its own (out of tolerance, NaN/Inf, raised,
hung, crashed: what makes `humming-matrix kernels` exit 1), as a GSM8K row below its threshold
fails whatever the paired verdict, or when it cannot be judged: the run did not reach the case
(`missing`, a partial record) or ran it on other input bytes (`incomparable`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from humming_matrix.judge.compare import RunEnvironment
from humming_matrix.kernels.judge import (
    CaseState,
    CaseVerdict,
    KernelComparison,
    TimeVerdict,
    Verdict,
    compare_kernel_records,
    speed_change,
)
from humming_matrix.kernels.record import case_reason, load_kernel_record
from humming_matrix.report.rows import choose_baseline, version_key
from humming_matrix.store.results import RecordKind, record_paths

# Worst first: the order rows and a case's batch sizes are ranked in.
VERDICT_ORDER = (
    Verdict.NEWLY_BROKEN,
    Verdict.WORSE,
    Verdict.MISSING,
    Verdict.INCOMPARABLE,
    Verdict.STILL_BROKEN,
    Verdict.NEW,
    Verdict.CHANGED,
    Verdict.FIXED,
    Verdict.IMPROVED,
    Verdict.SAME,
)
UNJUDGED = (Verdict.MISSING, Verdict.INCOMPARABLE)
BROKEN = frozenset(
    {CaseState.FAIL, CaseState.NONFINITE, CaseState.ERROR, CaseState.HANG, CaseState.CRASH}
)


@dataclass(frozen=True)
class KernelRun:
    """One kernel record, loaded."""

    path: Path
    record: Mapping[str, Any]

    @property
    def cell(self) -> RunEnvironment:
        env = self.record["environment"]

        def text(key: str) -> str | None:
            value = env.get(key)
            return None if value is None else str(value)

        return RunEnvironment(
            text("humming_kernels"), text("vllm"), text("torch"), text("torch_cuda"), text("gpu")
        )

    @property
    def order(self) -> tuple[str, str]:
        return (str(self.record.get("created", "")), str(self.record["run_id"]))

    @property
    def session(self) -> str:
        """The nox session that ran it, else the name `kernels-<version>` it would have had."""
        session = self.record["environment"].get("session")
        return str(session) if session else f"kernels-{self.cell.humming or 'unknown'}"


@dataclass(frozen=True)
class KernelCell:
    """One case of one run at its largest timed batch size (the versions x cases table)."""

    state: CaseState
    m: int | None
    median_ms: float | None
    reason: str | None

    @property
    def text(self) -> str:
        if self.median_ms is None:
            return self.state.value
        return f"{self.state.value} {self.median_ms:.3g} ms"


@dataclass(frozen=True)
class KernelVersion:
    """One environment: each case's cell from the newest record that ran it, and all its records
    pooled for judging."""

    cell: RunEnvironment
    runs: tuple[KernelRun, ...]  # oldest first
    cells: Mapping[str, KernelCell]  # case -> its cell in the newest record that ran it
    comparison: KernelComparison | None  # vs the baseline; None for the baseline itself

    @property
    def newest(self) -> KernelRun:
        return self.runs[-1]

    @property
    def complete(self) -> bool:
        return bool(self.newest.record.get("complete", False))

    @property
    def label(self) -> str:
        if self.newest.record.get("import_error"):
            return f"{self.cell.humming or '?'} (import failed)"
        return (self.cell.humming or "?") + ("" if self.complete else " (partial)")


@dataclass(frozen=True)
class KernelRow:
    """One (environment, case): the worst of its batch sizes' verdicts against the baseline."""

    case: str
    version: KernelVersion
    verdict: Verdict | None  # None: the baseline environment itself
    verdicts: tuple[CaseVerdict, ...]  # this case's, one per batch size, worst first
    regression: bool  # the judge counts one of `verdicts` as a regression
    baseline: str  # the baseline's humming-kernels version

    @property
    def cell(self) -> KernelCell | None:
        return self.version.cells.get(self.case)

    @property
    def broken(self) -> bool:
        """Out of tolerance, NaN/Inf, raised, hung or crashed in this run, whatever the verdict."""
        return self.cell is not None and self.cell.state in BROKEN

    @property
    def unjudged(self) -> bool:
        return not self.regression and self.verdict in UNJUDGED

    @property
    def failed(self) -> bool:
        return self.regression or self.broken or self.unjudged

    @property
    def verdict_text(self) -> str:
        return "baseline" if self.verdict is None else self.verdict.value

    @property
    def rank(self) -> tuple[int, int, int]:
        order = len(VERDICT_ORDER) if self.verdict is None else VERDICT_ORDER.index(self.verdict)
        return (not self.regression, not self.failed, order)

    @property
    def slower(self) -> tuple[CaseVerdict, ...]:
        return tuple(v for v in self.verdicts if v.time is TimeVerdict.SLOWER)

    def detail(self) -> str:
        """Each batch size's verdict that is not `same`, worst first; batch sizes with the same
        verdict and reason share one entry (`m=1, 64, 2048 newly-broken (...)`)."""
        sizes: dict[str, list[str]] = {}
        for v in self.verdicts:
            if v.verdict is Verdict.SAME and v.time in (TimeVerdict.SAME, TimeVerdict.UNKNOWN):
                continue
            text = v.verdict.value
            if change := speed_change(v):
                single = "" if v.time_runs_measured else ", one run a side"
                text += f", {change}{single}"
            if v.note:
                text += f" ({_one_line(v.note)})"
            sizes.setdefault(text, []).extend([] if v.m is None else [str(v.m)])
        return "; ".join((f"m={', '.join(ms)} " if ms else "") + text for text, ms in sizes.items())

    def line(self) -> str:
        """The verdict in one line (the JUnit failure message)."""
        here = self.version.cell.humming or "?"
        if self.verdict is None:
            state = self.cell.state.value if self.cell else "not run"
            reason = f" ({_one_line(self.cell.reason)})" if self.cell and self.cell.reason else ""
            return f"{self.case} on humming-kernels {here} (baseline): {state}{reason}"
        text = f"{self.case} on humming-kernels {here} vs {self.baseline}: {self.verdict.value}"
        detail = self.detail()
        if detail:
            text += f": {detail}"
        if self.broken and self.cell is not None and not self.regression:
            text += f"; this run: {self.cell.state.value}"
        return text


@dataclass(frozen=True)
class KernelSection:
    baseline: KernelVersion
    versions: tuple[KernelVersion, ...]  # in version order
    cases: tuple[str, ...]  # in the order the records list them
    rows: tuple[KernelRow, ...]  # regressions first, then other failures, then by verdict

    @property
    def failures(self) -> tuple[KernelRow, ...]:
        return tuple(r for r in self.rows if r.failed)

    @property
    def regressions(self) -> tuple[KernelRow, ...]:
        return tuple(r for r in self.rows if r.regression)


def _one_line(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def load_kernel_runs(store: Path) -> dict[RunEnvironment, list[KernelRun]]:
    """The store's kernel records per environment, environments in version order, each one's
    records oldest first."""
    grouped: dict[RunEnvironment, list[KernelRun]] = defaultdict(list)
    for path in record_paths(store, RecordKind.KERNELS):
        run = KernelRun(path, load_kernel_record(path))
        grouped[run.cell].append(run)
    return {
        cell: sorted(grouped[cell], key=lambda r: r.order)
        for cell in sorted(grouped, key=version_key)
    }


def _cells(records: Sequence[Mapping[str, Any]]) -> dict[str, KernelCell]:
    """Per case, its cell in the newest of `records` (oldest first) that ran it: a release's suite
    may be split over partial runs (a deadline cut one, a later run took the rest), and a case
    only an older run holds must still show, and fail, in the table."""
    cells = {}
    for case in (case for record in records for case in record["cases"]):
        timed = [b for b in case.get("batches", []) if isinstance(b.get("time"), dict)]
        last = max(timed, key=lambda b: int(b["m"])) if timed else None
        errors = [str(b["error"]) for b in case.get("batches", []) if b.get("error")]
        reason = case_reason(case) or (errors[0] if errors else None)
        cells[str(case["name"])] = KernelCell(
            CaseState(case["state"]),
            None if last is None else int(last["m"]),
            None if last is None else float(last["time"]["median_ms"]),
            None if reason is None else str(reason),
        )
    return cells


def _worst(verdicts: Sequence[CaseVerdict]) -> tuple[CaseVerdict, ...]:
    return tuple(sorted(verdicts, key=lambda v: VERDICT_ORDER.index(v.verdict)))


def build_kernel_section(store: Path, baseline_version: str | None) -> KernelSection | None:
    grouped = load_kernel_runs(store)
    if not grouped:
        return None
    base_cell = choose_baseline(list(grouped), baseline_version, "kernel ")
    assert base_cell is not None  # grouped is not empty; narrows the type
    base_records = [r.record for r in grouped[base_cell]]
    versions = []
    for cell, runs in grouped.items():
        comparison = (
            None
            if cell == base_cell
            else compare_kernel_records(base_records, [r.record for r in runs])
        )
        versions.append(
            KernelVersion(cell, tuple(runs), _cells([r.record for r in runs]), comparison)
        )
    baseline = next(v for v in versions if v.cell == base_cell)
    base_name = base_cell.humming or "?"
    cases: list[str] = []
    for version in versions:
        for run in version.runs:
            cases += [str(c["name"]) for c in run.record["cases"] if c["name"] not in cases]
    rows = []
    for version in versions:
        comparison = version.comparison
        if comparison is None:
            rows += [
                KernelRow(case, version, None, (), False, base_name)
                for case in cases
                if case in version.cells
            ]
            continue
        by_case: dict[str, list[CaseVerdict]] = defaultdict(list)
        for v in comparison.verdicts:
            by_case[v.case].append(v)
        for case in cases:
            verdicts = _worst(by_case.get(case, []))
            if not verdicts:
                continue
            # The judge's own call of what a regression is (`KernelComparison.regressions`).
            regression = any(v in comparison.regressions for v in verdicts)
            rows.append(
                KernelRow(case, version, verdicts[0].verdict, verdicts, regression, base_name)
            )
    order = {v.cell: i for i, v in enumerate(versions)}
    rows.sort(key=lambda r: (*r.rank, cases.index(r.case), order[r.version.cell]))
    return KernelSection(baseline, tuple(versions), tuple(cases), tuple(rows))
