"""humming_matrix.judge.stats against independent computations (scipy, numpy simulation), never
against numbers copied from the module under test."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sp

from humming_matrix.judge.stats import (
    Interval,
    PairedTable,
    binomial_upper_tail,
    critical_count,
    improvement_exact,
    improvement_midp,
    mcnemar_exact,
    mcnemar_midp,
    minimum_detectable_effect,
    paired_difference_interval,
    regression_exact,
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
    """Newcombe's interval should cover the true difference about 95% of the time; method 10 is
    conservative when few pairs are discordant (97.7% measured here at 4% discordance)."""
    rng = np.random.default_rng(2026)
    truth = probs[2] - probs[1]
    draws = rng.multinomial(200, probs, size=3000)
    covered = sum(
        truth in paired_difference_interval(PairedTable(*(int(x) for x in row))) for row in draws
    )
    assert 0.93 <= covered / len(draws) <= 0.98


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


# --- Newcombe's method 10, against the published worked example and an independent computation --


def wilson_by_root_finding(x: int, n: int, z: float) -> tuple[float, float]:
    """Wilson's limits as the two roots of the score equation (p - pi)^2 = z^2 pi (1 - pi) / n,
    found by bisection on each side of p (not by the closed form stats.wilson_interval uses)."""
    p = x / n

    def excess(pi: float) -> float:
        return (p - pi) ** 2 - z * z * pi * (1.0 - pi) / n

    def root(lo: float, hi: float) -> float:
        # excess(lo) and excess(hi) have opposite signs (or one is a root at an edge)
        f_lo = excess(lo)
        for _ in range(200):
            mid = (lo + hi) / 2.0
            f_mid = excess(mid)
            if (f_mid > 0.0) == (f_lo > 0.0):
                lo, f_lo = mid, f_mid
            else:
                hi = mid
        return (lo + hi) / 2.0

    low = 0.0 if x == 0 else root(0.0, p)
    high = 1.0 if x == n else root(1.0, p)
    return low, high


def method10_reference(
    a: int, b: int, c: int, d: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Newcombe (1998) method 10 for the FIRST minus the SECOND proportion of the table
    [[a, b], [c, d]] (rows: first measurement right/wrong; columns: second), written from the
    paper's description: Wilson limits by root finding and the correlation in exact fractions."""
    n = a + b + c + d
    z = sp.norm.ppf(0.5 + confidence / 2.0)
    first, second = Fraction(a + b, n), Fraction(a + c, n)
    l1, u1 = wilson_by_root_finding(a + b, n, z)
    l2, u2 = wilson_by_root_finding(a + c, n, z)
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    ad_bc = Fraction(a * d - b * c)
    if margins == 0:
        corr = Fraction(0)
    elif ad_bc > Fraction(n, 2):
        corr = ad_bc - Fraction(n, 2)
    elif ad_bc >= 0:
        corr = Fraction(0)
    else:
        corr = ad_bc
    psi = float(corr) / math.sqrt(margins) if margins else 0.0
    p1, p2 = float(first), float(second)
    lower = (p1 - l1) ** 2 - 2 * psi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    upper = (p2 - l2) ** 2 - 2 * psi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2
    return p1 - p2 - math.sqrt(lower), p1 - p2 + math.sqrt(upper)


def as_candidate_minus_baseline(a: int, b: int, c: int, d: int) -> PairedTable:
    """[[a, b], [c, d]] with the FIRST measurement as the candidate: the candidate is right and the
    baseline wrong in b (wrong -> right), the reverse in c (right -> wrong)."""
    return PairedTable(both_right=a, right_to_wrong=c, wrong_to_right=b, both_wrong=d)


def test_method_10_matches_the_published_worked_example() -> None:
    """Fagerland, Lydersen & Laake, Statistical Analysis of Contingency Tables (2017), ch. 8, the
    Cavo et al. (2012) table: Newcombe square-and-add -0.0621 (95% CI -0.1186 to -0.0046), as
    the tests of the R package contingencytables (test-ch8.R) pin it."""
    table = as_candidate_minus_baseline(59, 6, 16, 80)
    ci = paired_difference_interval(table)
    assert round(table.difference, 4) == -0.0621
    assert (round(ci.low, 4), round(ci.high, 4)) == (-0.1186, -0.0046)


def test_method_10_has_width_when_no_pair_is_discordant() -> None:
    # The plain phi coefficient is 1 here and gave [0, 0]; method 10's n/2 shrinkage does not.
    ci = paired_difference_interval(PairedTable(27, 0, 0, 27))
    low, high = method10_reference(27, 0, 0, 27)
    assert ci.low == pytest.approx(low, abs=1e-9)
    assert ci.high == pytest.approx(high, abs=1e-9)
    assert round(ci.low, 4) == -round(ci.high, 4) == -0.0351


REFERENCE_TABLES = [
    (59, 6, 16, 80),
    (27, 0, 0, 27),
    (30, 0, 0, 10),
    (0, 5, 7, 0),
    (0, 12, 0, 0),
    (0, 0, 9, 0),
    (1, 1, 7, 12),
    (1, 0, 0, 0),
    (0, 1, 0, 0),
    (0, 0, 0, 3),
    (2, 1, 0, 1),
    (5, 0, 0, 0),
    (1100, 12, 7, 200),
    (3, 2, 2, 3),
    (10, 10, 0, 0),
    (0, 0, 10, 10),
    (400, 1, 0, 918),
]


@pytest.mark.parametrize("cells", REFERENCE_TABLES)
def test_method_10_matches_an_independent_implementation(cells: tuple[int, int, int, int]) -> None:
    """b = c = 0, all-discordant, one-question and ordinary tables, both orientations."""
    for a, b, c, d in (cells, (cells[0], cells[2], cells[1], cells[3])):
        low, high = method10_reference(a, b, c, d)
        ci = paired_difference_interval(as_candidate_minus_baseline(a, b, c, d))
        assert ci.low == pytest.approx(max(-1.0, low), abs=1e-9), (a, b, c, d)
        assert ci.high == pytest.approx(min(1.0, high), abs=1e-9), (a, b, c, d)


def test_method_10_matches_an_independent_implementation_on_random_tables() -> None:
    for t in [*random_tables(200, seed=17), *EDGE_TABLES]:
        # candidate = first: a = both right, b = candidate right only, c = baseline right only
        low, high = method10_reference(
            t.both_right, t.wrong_to_right, t.right_to_wrong, t.both_wrong
        )
        ci = paired_difference_interval(t)
        assert ci.low == pytest.approx(max(-1.0, low), abs=1e-9), t
        assert ci.high == pytest.approx(min(1.0, high), abs=1e-9), t


# --- the exact conditional test the gate blocks on ----------------------------------------------


def scipy_exact(k: int, m: int) -> float:
    return 1.0 if m == 0 else float(sp.binomtest(k, m, 0.5, alternative="greater").pvalue)


@pytest.mark.parametrize(
    ("k", "m"),
    [
        (0, 0),
        (0, 1),
        (1, 1),
        (5, 5),
        (4, 4),
        (8, 10),
        (12, 14),
        (700, 1319),
        (0, 1319),
        (1319, 1319),
        (40, 66),
    ],
)
def test_exact_p_matches_scipy(k: int, m: int) -> None:
    assert mcnemar_exact(k, m) == pytest.approx(scipy_exact(k, m), rel=1e-9, abs=1e-300)


def test_exact_p_of_tables() -> None:
    table = PairedTable(5, 12, 2, 1)
    assert regression_exact(table) == (91 + 14 + 1) / 2**14
    assert improvement_exact(table) == pytest.approx(scipy_exact(2, 14), rel=1e-12)


@pytest.mark.parametrize("alpha", [0.05, 0.0125, 0.01])
def test_exact_critical_count_matches_scipy_and_keeps_size_at_every_count(alpha: float) -> None:
    """The gate's test: at every number of discordant questions its size is at most alpha
    (computed by scipy's binomial tail, independent of stats)."""
    for m in [*range(60), 250, 1319]:
        passing = [k for k in range(m + 1) if scipy_exact(k, m) < alpha]
        expected = min(passing) if passing else None
        assert critical_count(m, alpha, mid=False) == expected, m
        if expected is not None:
            assert sp.binom.sf(expected - 1, m, 0.5) < alpha


def test_mid_p_size_exceeds_alpha_at_some_counts() -> None:
    """Why the gate does not block on mid-p: conditional on the discordant count its size goes
    above alpha (exactly, by scipy's binomial tail: 7.30% at m = 12 at alpha 0.05)."""
    sizes = {
        m: float(sp.binom.sf(critical_count(m, 0.05) - 1, m, 0.5))  # type: ignore[operator]
        for m in range(5, 200)
    }
    assert max(sizes, key=lambda m: sizes[m]) == 12
    assert round(sizes[12], 4) == 0.0730


def test_verdict_power_counts_the_minimum_effect() -> None:
    """With min_net the verdict needs b - c >= min_net as well as the test: at 1319 questions
    and no noise a one-point drop (13.19 questions) needs 14 net flips."""
    assert regression_power(1319, 0.0, 0.01, 0.05, min_net=14, mid=False) < regression_power(
        1319, 0.0, 0.01, 0.05, min_net=0, mid=False
    )
    assert regression_power(1319, 0.02, 0.0, 0.05, min_net=14, mid=False) <= 0.05
