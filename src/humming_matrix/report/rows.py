"""What every section of the store report shares: the row status scale (worst first), the order
of environments (humming-kernels version order) and the choice of the baseline environment.

Kept apart from `report`, which assembles the sections, because the Markdown helpers that
`compare_lm_eval` imports need the status scale and must not pull the sections in with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Protocol

from packaging.version import InvalidVersion, Version

from humming_matrix.errors import UsageError
from humming_matrix.judge.compare import RunEnvironment, points
from humming_matrix.judge.stats import Interval, PairedTable

# The paired-comparison columns every table shows, in the order `paired_cells` fills them.
PAIRED_COLUMNS = ("Δ vs baseline (95% CI)", "b / c", "mid-p", "MDE")
# Where each run's time went (the report's run-times table; `Row.timing_cells` fills it).
TIMING_COLUMNS = (
    "config",
    "humming-kernels",
    "session",
    "install s",
    "start-up s",
    "asking s",
    "server",
)
LM_EVAL_COLUMNS = (
    "config",
    "task",
    "metric,filter",
    "humming-kernels",
    "session",
    "accuracy % (95% CI)",
    *PAIRED_COLUMNS,
    "backstop",
    "verdict",
)


class Paired(Protocol):
    """What a GSM8K config comparison and an lm-eval metric comparison both offer."""

    @property
    def difference(self) -> float: ...
    @property
    def difference_interval(self) -> Interval: ...
    @property
    def table(self) -> PairedTable: ...
    @property
    def p_regression(self) -> float: ...
    @property
    def p_improvement(self) -> float: ...
    @property
    def mde(self) -> float | None: ...


def pct(fraction: float) -> str:
    return f"{100 * fraction:.2f}"


def accuracy_cell(accuracy: float, interval: Interval) -> str:
    return f"{pct(accuracy)} [{pct(interval.low)}, {pct(interval.high)}]"


def paired_cells(c: Paired | None) -> list[str]:
    """The PAIRED_COLUMNS of one comparison as plain text; blanks where there is none. The mid-p
    shown is the one-sided p in the direction the difference went."""
    if c is None:
        return ["", "", "", ""]
    p = c.p_regression if c.difference <= 0 else c.p_improvement
    return [
        f"{points(c.difference)} [{points(c.difference_interval.low)}, "
        f"{points(c.difference_interval.high)}]",
        f"{c.table.right_to_wrong} / {c.table.wrong_to_right}",
        f"{p:.3g}",
        "n/a" if c.mde is None else f"{100 * c.mde:.2f}",
    ]


class RowStatus(Enum):
    """Ordered worst first: the tables list failures before anything else."""

    REGRESSION = "regression"
    BELOW_THRESHOLD = "below threshold"
    START_FAILED = "server never ready"
    INCOMPLETE = "incomplete"
    NOT_COMPARED = "not compared"
    INCONCLUSIVE = "inconclusive"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change detected"
    # lm-eval: a graded metric has no per-document outcome to pair; its pass rule still holds.
    THRESHOLD_ONLY = "threshold only"
    BASELINE = "baseline"

    @property
    def failed(self) -> bool:
        return self in (
            RowStatus.REGRESSION,
            RowStatus.BELOW_THRESHOLD,
            RowStatus.START_FAILED,
            RowStatus.INCOMPLETE,
            RowStatus.NOT_COMPARED,
        )

    @property
    def rank(self) -> int:
        return list(RowStatus).index(self)


def version_key(cell: RunEnvironment) -> tuple[int, Version | str, str]:
    try:
        return (0, Version(cell.humming or ""), cell.label)
    except InvalidVersion:
        return (1, cell.humming or "", cell.label)


def choose_baseline(
    cells: Sequence[RunEnvironment], version: str | None, kind: str = ""
) -> RunEnvironment | None:
    """The cell every other is compared with: the one with humming-kernels `version`, else the
    oldest humming-kernels version in the store. `kind` ("kernel ", "lm-eval ") names the records
    in the error when several kinds are judged."""
    ordered = sorted(cells, key=version_key)
    if version is None:
        return ordered[0] if ordered else None
    for cell in ordered:
        if cell.humming == version:
            return cell
    known = ", ".join(sorted({c.humming or "?" for c in cells}))
    raise UsageError(
        f"--baseline {version}: no {kind}records of that humming-kernels version "
        f"(the store has {known or 'none'})"
    )
