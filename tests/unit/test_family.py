"""Holm's adjustment against a published example and an independent closed-testing construction."""

from __future__ import annotations

import itertools
import random

import pytest

from humming_matrix.judge.family import holm_adjust


def test_the_worked_example_rejects_exactly_the_two_smallest() -> None:
    # Holm-Bonferroni, worked example (four hypotheses, alpha 0.05): p = 0.01, 0.04, 0.03, 0.005
    # rejects H1 and H4 only. R's p.adjust(c(.01,.04,.03,.005), "holm") = 0.03 0.06 0.06 0.02.
    adjusted = holm_adjust([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert [p <= 0.05 for p in adjusted] == [True, False, False, True]


def _closed_bonferroni_rejects(p: list[float], alpha: float) -> list[bool]:
    # Closed testing with a Bonferroni test of every intersection: H_i is rejected iff every
    # subset containing i has min p <= alpha / |subset|. Holm is the shortcut of this procedure.
    m = len(p)
    rejected = []
    for i in range(m):
        ok = True
        for size in range(1, m + 1):
            for subset in itertools.combinations(range(m), size):
                if i in subset and min(p[j] for j in subset) > alpha / size:
                    ok = False
        rejected.append(ok)
    return rejected


def test_it_agrees_with_closed_testing_on_random_families() -> None:
    rng = random.Random(17)
    for _ in range(300):
        m = rng.randint(1, 6)
        p = [rng.random() ** 3 for _ in range(m)]
        for alpha in (0.01, 0.05, 0.1):
            assert [a <= alpha for a in holm_adjust(p)] == _closed_bonferroni_rejects(p, alpha)


def test_an_empty_family_and_bad_values() -> None:
    assert holm_adjust([]) == []
    assert holm_adjust([0.2]) == [0.2]
    with pytest.raises(ValueError, match=r"a p-value must lie in \[0, 1\], got 1.5"):
        holm_adjust([0.1, 1.5])
