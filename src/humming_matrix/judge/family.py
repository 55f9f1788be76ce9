"""Family-wise error control: Holm's step-down adjustment.

A gate that tests several configs (or a report that tests many cells against one baseline)
raises a false alarm whenever *any* of its tests does; each test at alpha gives the family far
more than alpha.
Holm's procedure keeps the family-wise error rate at most alpha under any dependence between the
tests (they share a baseline run), and is uniformly more powerful than Bonferroni.
"""

from __future__ import annotations

from collections.abc import Sequence


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values in the order given: at family level alpha, reject test i iff
    ``result[i] <= alpha``.

    The i-th smallest p-value is multiplied by (m - i + 1), capped at 1, and made non-decreasing
    along the sorted order (Holm 1979; the same values as R's ``p.adjust(method = "holm")``).
    """
    m = len(p_values)
    for p in p_values:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"a p-value must lie in [0, 1], got {p!r}")
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
