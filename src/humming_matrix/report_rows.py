"""What every section of the store report shares: the row status scale (worst first), the order
of environments (humming-kernels version order) and the choice of the baseline environment.

Kept apart from `report`, which assembles the sections, because the Markdown helpers that
`compare_lm_eval` imports need the status scale and must not pull the sections in with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from packaging.version import InvalidVersion, Version

from humming_matrix.compare import Cell
from humming_matrix.errors import UsageError


class RowStatus(Enum):
    """Ordered worst first: the tables list failures before anything else."""

    REGRESSION = "regression"
    BELOW_THRESHOLD = "below threshold"
    INCOMPLETE = "incomplete"
    NOT_COMPARED = "not compared"
    INCONCLUSIVE = "inconclusive"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change"
    # lm-eval: a graded metric has no per-document outcome to pair; its pass rule still holds.
    THRESHOLD_ONLY = "threshold only"
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


def version_key(cell: Cell) -> tuple[int, Version | str, str]:
    try:
        return (0, Version(cell.humming or ""), cell.label)
    except InvalidVersion:
        return (1, cell.humming or "", cell.label)


def choose_baseline(cells: Sequence[Cell], version: str | None, kind: str = "") -> Cell | None:
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
