"""humming_matrix.stats against independent computations (scipy, numpy simulation), never against
numbers copied from the module under test."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy import stats as sp

from humming_matrix.stats import (
    Interval,
    PairedTable,
    binomial_upper_tail,
    critical_count,
    improvement_midp,
    mcnemar_midp,
    minimum_detectable_effect,
    paired_difference_interval,
    regression_midp,
    regression_power,
    wilson_interval,
    z_value,
)


def scipy_midp(k: int, m: int) -> float:
    if m == 0:
        return 0.5
    exact = sp.binomtest(k, m, 0.5, alternative="greater").pvalue
    return float(exact - 0.5 * sp.binom.pmf(k, m, 0.5))


def scipy_critical(m: int, alpha: float) -> int | None:
    passing = [k for k in range(m + 1) if scipy_midp(k, m) < alpha]
    return min(passing) if passing else None


def random_tables(count: int, seed: int) -> list[PairedTable]:
    rng = random.Random(seed)
    tables = []
    for _ in range(count):
        n = rng.choice([1, 2, 5, 17, 40, 200, 1319])
        cuts = sorted(rng.randint(0, n) for _ in range(3))
        a, b, c, d = cuts[0], cuts[1] - cuts[0], cuts[2] - cuts[1], n - cuts[2]
        tables.append(PairedTable(a, b, c, d))
    return tables


EDGE_TABLES = [
    PairedTable(40, 0, 0, 0),  # b + c = 0, all right
    PairedTable(0, 0, 0, 40),  # b + c = 0, all wrong
    PairedTable(30, 0, 0, 10),  # b + c = 0, mixed
    PairedTable(0, 20, 20, 0),  # all discordant, balanced
    PairedTable(0, 40, 0, 0),  # all discordant, all regressions
    PairedTable(0, 0, 40, 0),  # all discordant, all improvements
    PairedTable(0, 1, 0, 0),  # n = 1
    PairedTable(1, 0, 0, 0),
    PairedTable(1130, 1, 0, 188),  # one flip in a full GSM8K run
]


@pytest.mark.parametrize(
    ("k", "m"),
    [
        (0, 0),
        (0, 1),
        (1, 1),
        (0, 2),
        (2, 2),
        (3, 3),
        (4, 4),
        (5, 5),
        (0, 5),
        (1319, 1319),
        (0, 1319),
        (700, 1319),
        (17, 30),
        (30, 30),
    ],
)
def test_midp_edges_match_scipy(k: int, m: int) -> None:
    assert mcnemar_midp(k, m) == pytest.approx(scipy_midp(k, m), rel=1e-9, abs=1e-300)


def test_midp_matches_scipy_on_random_tables() -> None:
    for table in [*random_tables(300, seed=5), *EDGE_TABLES]:
        m = table.discordant
        assert regression_midp(table) == pytest.approx(
            scipy_midp(table.right_to_wrong, m), rel=1e-9, abs=1e-300
        ), table
        assert improvement_midp(table) == pytest.approx(
            scipy_midp(table.wrong_to_right, m), rel=1e-9, abs=1e-300
        ), table


def test_midp_of_the_two_directions_sums_to_one() -> None:
    # P(X > b) + P(X = b)/2 + P(X > c) + P(X = c)/2 = 1 when b + c = m, by symmetry of Bin(m, 1/2).
    for table in random_tables(50, seed=11):
        assert regression_midp(table) + improvement_midp(table) == pytest.approx(1.0)


def test_midp_rejects_impossible_counts() -> None:
    with pytest.raises(ValueError, match="0 <= k <= m"):
        mcnemar_midp(3, 2)


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.1])
def test_critical_count_matches_scipy(alpha: float) -> None:
    for m in [*range(40), 100, 333]:
        assert critical_count(m, alpha) == scipy_critical(m, alpha), m


def test_critical_count_smallest_m_that_can_reject() -> None:
    # 0.5^5 = 0.03125 < 0.05 <= 0.5^4: four unanimous flips are not enough, five are.
    assert critical_count(3, 0.05) is None
    assert critical_count(4, 0.05) == 4
    assert critical_count(5, 0.05) == 5


def test_wilson_matches_scipy() -> None:
    rng = random.Random(3)
    cases = [(0, 1), (1, 1), (0, 40), (40, 40), (1, 2), (1134, 1319)]
    cases += [(k, n) for n in (5, 40, 1319) for k in rng.sample(range(n + 1), 5)]
    for k, n in cases:
        for confidence in (0.95, 0.9):
            expected = sp.binomtest(k, n).proportion_ci(confidence, method="wilson")
            got = wilson_interval(k, n, confidence)
            assert got.low == pytest.approx(expected.low, abs=1e-12), (k, n)
            assert got.high == pytest.approx(expected.high, abs=1e-12), (k, n)


def test_wilson_edges_are_exact() -> None:
    assert wilson_interval(0, 40).low == 0.0
    assert wilson_interval(40, 40).high == 1.0


def test_z_value() -> None:
    assert z_value(0.95) == pytest.approx(sp.norm.ppf(0.975), rel=1e-12)


def test_paired_interval_contains_estimate_and_stays_in_range() -> None:
    for table in [*random_tables(300, seed=7), *EDGE_TABLES]:
        ci = paired_difference_interval(table)
        assert -1.0 <= ci.low <= table.difference <= ci.high <= 1.0, table


def test_paired_interval_has_width_when_runs_agree_everywhere() -> None:
    # A Wald interval collapses to [0, 0] here; Newcombe's does not.
    ci = paired_difference_interval(PairedTable(30, 0, 0, 10))
    assert ci.low < 0.0 < ci.high
    assert ci.width > 0.01


def test_paired_interval_mirrors_when_runs_swap() -> None:
    for t in random_tables(100, seed=9):
        swapped = PairedTable(t.both_right, t.wrong_to_right, t.right_to_wrong, t.both_wrong)
        ci, ci_swapped = paired_difference_interval(t), paired_difference_interval(swapped)
        assert ci_swapped.low == pytest.approx(-ci.high, abs=1e-12)
        assert ci_swapped.high == pytest.approx(-ci.low, abs=1e-12)


def test_paired_interval_approaches_the_paired_wald_interval_at_large_n() -> None:
    table = PairedTable(800_000, 50_000, 40_000, 110_000)
    n = table.n
    b, c = table.right_to_wrong, table.wrong_to_right
    se = math.sqrt((b + c) / n - ((c - b) / n) ** 2) / math.sqrt(n)
    z = sp.norm.ppf(0.975)
    ci = paired_difference_interval(table)
    assert ci.low == pytest.approx(table.difference - z * se, abs=2e-4)
    assert ci.high == pytest.approx(table.difference + z * se, abs=2e-4)


@pytest.mark.parametrize(
    "probs",
    [(0.80, 0.05, 0.03, 0.12), (0.60, 0.10, 0.10, 0.20), (0.85, 0.02, 0.02, 0.11)],
)
def test_paired_interval_coverage_by_simulation(probs: tuple[float, ...]) -> None:
    """Newcombe's interval should cover the true difference about 95% of the time."""
    rng = np.random.default_rng(2026)
    truth = probs[2] - probs[1]
    draws = rng.multinomial(200, probs, size=3000)
    covered = sum(
        truth in paired_difference_interval(PairedTable(*(int(x) for x in row))) for row in draws
    )
    assert 0.93 <= covered / len(draws) <= 0.975


def test_interval_membership() -> None:
    assert 0.5 in Interval(0.0, 1.0)
    assert 1.5 not in Interval(0.0, 1.0)


def test_binomial_upper_tail_matches_scipy() -> None:
    rng = random.Random(13)
    for _ in range(200):
        n = rng.choice([1, 3, 40, 1319])
        k = rng.randint(0, n + 1)
        p = rng.choice([0.0, 1.0, 1e-4, 0.003, 0.5, 0.9, rng.random()])
        expected = float(sp.binom.sf(k - 1, n, p))
        assert binomial_upper_tail(k, n, p) == pytest.approx(expected, rel=1e-9, abs=1e-15)


def scipy_power(n: int, discordance: float, drop: float, alpha: float) -> float:
    """The same model as regression_power, computed over every m with scipy."""
    p_b, p_c = discordance / 2 + drop, discordance / 2
    q = p_b + p_c
    total = 0.0
    for m in range(n + 1):
        k = scipy_critical(m, alpha)
        if k is not None:
            total += sp.binom.pmf(m, n, q) * sp.binom.sf(k - 1, m, p_b / q)
    return float(total)


@pytest.mark.parametrize(
    ("n", "discordance", "drop"),
    [(40, 0.0, 0.1), (40, 0.1, 0.1), (60, 0.05, 0.02), (60, 0.3, 0.2), (25, 0.5, 0.4)],
)
def test_regression_power_matches_scipy(n: int, discordance: float, drop: float) -> None:
    expected = scipy_power(n, discordance, drop, 0.05)
    assert regression_power(n, discordance, drop, 0.05) == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize(("n", "discordance"), [(60, 0.0), (60, 0.1), (50, 0.3)])
def test_minimum_detectable_effect_is_where_power_reaches_80_percent(
    n: int, discordance: float
) -> None:
    mde = minimum_detectable_effect(n, discordance)
    assert mde is not None
    assert scipy_power(n, discordance, mde, 0.05) >= 0.8
    assert scipy_power(n, discordance, mde - 2e-5, 0.05) < 0.8


def test_minimum_detectable_effect_grows_with_noise_and_shrinks_with_n() -> None:
    values = [minimum_detectable_effect(1319, d) for d in (0.0, 0.02, 0.1)]
    assert all(v is not None for v in values)
    assert values == sorted(values)  # type: ignore[type-var]
    small, large = minimum_detectable_effect(200, 0.05), minimum_detectable_effect(1319, 0.05)
    assert small is not None
    assert large is not None
    assert large < small


def test_minimum_detectable_effect_none_when_nothing_can_be_detected() -> None:
    # Three questions: even three unanimous flips give mid-p 0.0625 > 0.05.
    assert minimum_detectable_effect(3, 0.0) is None
    assert minimum_detectable_effect(40, 1.0) is None


@pytest.mark.parametrize("discordance", [0.005, 0.02, 0.05, 0.1])
def test_mid_p_test_keeps_its_size_under_pure_noise(discordance: float) -> None:
    """With no real drop, the test flags a regression at most alpha of the time (mid-p is not
    guaranteed conservative, so this is checked, exactly, at GSM8K's size)."""
    assert regression_power(1319, discordance, 0.0, 0.05) <= 0.05
