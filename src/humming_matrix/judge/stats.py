"""Statistics for judging two runs on the same questions. Pure functions, standard library only.

Notation for a paired comparison of a baseline and a candidate run on the same n questions:

    a = right in both runs          b = right in baseline, wrong in candidate (right -> wrong)
    d = wrong in both runs          c = wrong in baseline, right in candidate (wrong -> right)

The difference is always candidate minus baseline, (c - b) / n: negative means the candidate lost
accuracy.

Methods (and why):
- Single accuracies: Wilson score interval (Wilson 1927; recommended by Brown, Cai & DasGupta,
  Statistical Science 16:101-133, 2001), which behaves near 0 and 1 where the Wald interval fails.
- Paired difference: Newcombe's hybrid score interval for paired proportions, "method 10" of
  R. G. Newcombe, "Improved confidence intervals for the difference between binomial proportions
  based on paired data", Statistics in Medicine 17:2635-2650 (1998), the "Newcombe
  square-and-add" interval of Fagerland, Lydersen & Laake, Statistical Analysis of Contingency
  Tables (2017), ch. 8. It combines the Wilson limits of both accuracies with a correlation
  estimate between the runs, so it is narrow when the runs agree on most questions (the usual
  case for two kernel versions). The correlation is method 10's, not the plain phi coefficient:
  with A = ad - bc it is (A - n/2) / sqrt(product of the margins) when A > n/2, 0 when
  0 <= A <= n/2, A / sqrt(...) when A < 0, and 0 when a margin is empty. The n/2 shrinkage is
  what keeps the interval from collapsing to zero width when b = c = 0 (the plain phi is then 1).
- Test: the exact McNemar test conditions on the m = b + c discordant questions, under which b is
  Binomial(m, 1/2) when neither run is better. The one-sided mid-p (Lancaster 1961) counts half
  the probability of the observed count: P(X > b) + P(X = b) / 2. The plain exact p-value is
  conservative for the small m this tool sees; mid-p keeps the size close to alpha. Computed in
  exact integer arithmetic, so m in the thousands loses nothing.
- Minimum detectable effect: see `minimum_detectable_effect`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def __contains__(self, value: float) -> bool:
        return self.low <= value <= self.high

    @property
    def width(self) -> float:
        return self.high - self.low


@dataclass(frozen=True)
class PairedTable:
    """The 2x2 table of a paired comparison (see the module docstring for a, b, c, d)."""

    both_right: int
    right_to_wrong: int
    wrong_to_right: int
    both_wrong: int

    def __post_init__(self) -> None:
        if min(self.both_right, self.right_to_wrong, self.wrong_to_right, self.both_wrong) < 0:
            raise ValueError(f"negative count in {self}")

    @property
    def n(self) -> int:
        return self.both_right + self.right_to_wrong + self.wrong_to_right + self.both_wrong

    @property
    def discordant(self) -> int:
        return self.right_to_wrong + self.wrong_to_right

    @property
    def baseline_correct(self) -> int:
        return self.both_right + self.right_to_wrong

    @property
    def candidate_correct(self) -> int:
        return self.both_right + self.wrong_to_right

    @property
    def difference(self) -> float:
        """Candidate accuracy minus baseline accuracy."""
        return (self.wrong_to_right - self.right_to_wrong) / self.n if self.n else 0.0


def z_value(confidence: float) -> float:
    """The two-sided normal quantile for a confidence level (1.959963... for 0.95)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n > 0, got {successes}/{n}")
    z = z_value(confidence)
    p = successes / n
    z2n = z * z / n
    denominator = 1.0 + z2n
    center = (p + z2n / 2.0) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n)) / denominator
    # Exact at the edges: rounding must not put 0/n's lower limit at -1e-17.
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return Interval(low, high)


def paired_difference_interval(table: PairedTable, confidence: float = 0.95) -> Interval:
    """Newcombe (1998) method 10 interval for candidate minus baseline accuracy."""
    n = table.n
    if n <= 0:
        raise ValueError("empty table")
    p1 = table.candidate_correct / n
    p2 = table.baseline_correct / n
    w1 = wilson_interval(table.candidate_correct, n, confidence)
    w2 = wilson_interval(table.baseline_correct, n, confidence)
    theta = p1 - p2
    phi = _phi(table)
    lower_gap = _combine(p1 - w1.low, w2.high - p2, phi)
    upper_gap = _combine(w1.high - p1, p2 - w2.low, phi)
    return Interval(max(-1.0, theta - lower_gap), min(1.0, theta + upper_gap))


def _phi(table: PairedTable) -> float:
    """Method 10's correlation estimate (module docstring): phi with A = ad - bc shrunk by n/2."""
    a, b, c, d = table.both_right, table.right_to_wrong, table.wrong_to_right, table.both_wrong
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    if margins == 0:
        return 0.0
    # Twice A against n keeps the test exact in integers (n/2 is a half for odd n).
    twice = 2 * (a * d - b * c)
    n = table.n
    if twice > n:
        numerator = (twice - n) / 2.0
    elif twice >= 0:
        return 0.0
    else:
        numerator = float(a * d - b * c)
    return max(-1.0, min(1.0, numerator / math.sqrt(margins)))


def _combine(x: float, y: float, phi: float) -> float:
    # x^2 - 2 phi x y + y^2 >= (x - y)^2 >= 0 for |phi| <= 1; max() only absorbs rounding.
    return math.sqrt(max(0.0, x * x - 2.0 * phi * x * y + y * y))


def _upper_tail_twice_midp(k: int, m: int) -> int:
    """2^(m+1) times the one-sided mid-p of k out of m: 2 * sum_{j>k} C(m,j) + C(m,k)."""
    return 2 * sum(math.comb(m, j) for j in range(k + 1, m + 1)) + math.comb(m, k)


def mcnemar_midp(k: int, m: int) -> float:
    """One-sided exact McNemar mid-p: P(X > k) + P(X = k) / 2 with X ~ Binomial(m, 1/2).

    With k = b it tests "the candidate is worse" (regression); with k = c, "better". When the
    runs never disagree (m = 0) the answer is 0.5: no evidence either way.
    """
    if m < 0 or not 0 <= k <= m:
        raise ValueError(f"need 0 <= k <= m, got k={k}, m={m}")
    # Python's int / int is correctly rounded even for numerators of hundreds of digits.
    return _upper_tail_twice_midp(k, m) / (1 << (m + 1))


def mcnemar_exact(k: int, m: int) -> float:
    """One-sided exact conditional McNemar p: P(X >= k) with X ~ Binomial(m, 1/2). Its size is
    at most alpha for every m (mid-p's is not), so it is the test the gate blocks on."""
    if m < 0 or not 0 <= k <= m:
        raise ValueError(f"need 0 <= k <= m, got k={k}, m={m}")
    return sum(math.comb(m, j) for j in range(k, m + 1)) / (1 << m)


def regression_exact(table: PairedTable) -> float:
    return mcnemar_exact(table.right_to_wrong, table.discordant)


def improvement_exact(table: PairedTable) -> float:
    return mcnemar_exact(table.wrong_to_right, table.discordant)


def regression_midp(table: PairedTable) -> float:
    return mcnemar_midp(table.right_to_wrong, table.discordant)


def improvement_midp(table: PairedTable) -> float:
    return mcnemar_midp(table.wrong_to_right, table.discordant)


@lru_cache(maxsize=16384)
def critical_count(m: int, alpha: float, mid: bool = True) -> int | None:
    """The smallest k whose one-sided mid-p (with `mid` False: exact p) out of m discordant
    questions is below alpha, or None when even k = m is not (m too small for this alpha: 4 at
    alpha 0.05 for mid-p)."""
    if not mid:
        bound_exact = Fraction(alpha) * (1 << m)
        tail = 0  # sum_{j>=k} C(m, j)
        term = 1
        found_exact: int | None = None
        for k in range(m, -1, -1):
            tail += term
            if tail >= bound_exact:
                break
            found_exact = k
            term = term * k // (m - k + 1)
        return found_exact
    bound = Fraction(alpha) * (1 << (m + 1))
    upper = 0  # sum_{j>k} C(m, j), built from the top down
    term = 1  # C(m, m)
    found: int | None = None
    for k in range(m, -1, -1):
        if 2 * upper + term >= bound:
            break
        found = k
        upper += term
        term = term * k // (m - k + 1)  # C(m, k - 1), exact
    return found


def _log_binom_pmf(k: int, n: int, p: float) -> float:
    return (
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )


def binomial_upper_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), accurate far into either tail."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    if k > (n + 1) * p:
        return min(1.0, _sum_away_from_mode(k, n, p, upward=True))
    # At or below the mode the complement is the small side, and sums accurately.
    return max(0.0, 1.0 - _sum_away_from_mode(k - 1, n, p, upward=False))


def _sum_away_from_mode(start: int, n: int, p: float, upward: bool) -> float:
    """Sum P(X = j) from `start` away from the mode by the ratio recurrence. The terms only shrink
    in that direction, so stopping once they fall below 1e-17 of the total loses nothing."""
    term = math.exp(_log_binom_pmf(start, n, p))
    odds = p / (1.0 - p)
    total = 0.0
    j = start
    while term > 0.0:
        total += term
        if upward:
            if j == n:
                break
            term *= (n - j) / (j + 1) * odds
            j += 1
        else:
            if j == 0:
                break
            term *= j / (n - j + 1) / odds
            j -= 1
        if term < total * 1e-17:
            break
    return total


def regression_power(
    n: int, discordance: float, drop: float, alpha: float, min_net: int = 0, mid: bool = True
) -> float:
    """Probability that the one-sided mid-p test at `alpha` flags a regression of size `drop`
    with at least `min_net` more right -> wrong than wrong -> right flips (b - c >= min_net: the
    verdict's minimum effect, in questions; 0 for the test alone).

    Model: on each of n questions the runs disagree symmetrically with probability `discordance`
    (half right -> wrong, half wrong -> right: the noise), and the candidate additionally turns a
    right answer wrong with probability `drop`. So (b, c, rest) is multinomial with
    p_b = discordance / 2 + drop and p_c = discordance / 2; given m = b + c,
    b ~ Binomial(m, p_b / (p_b + p_c)), and the verdict is "regression" when
    b >= max(critical_count(m), ceil((m + min_net) / 2)).
    """
    p_b = discordance / 2.0 + drop
    p_c = discordance / 2.0
    q = p_b + p_c
    if q <= 0.0:
        return 0.0
    if q > 1.0 + 1e-12:
        raise ValueError(f"discordance + drop must not exceed 1, got {q}")
    q = min(q, 1.0)
    share = p_b / q
    # M ~ Binomial(n, q); what lies beyond 10 standard deviations is below double precision.
    spread = 10.0 * math.sqrt(n * q * (1.0 - q)) + 10.0
    m_lo = max(0, int(n * q - spread))
    m_hi = min(n, math.ceil(n * q + spread))
    power = 0.0
    for m in range(m_lo, m_hi + 1):
        k = critical_count(m, alpha, mid)
        if k is None:
            continue
        k = max(k, (m + min_net + 1) // 2)
        if k > m:
            continue
        # q == 1: every question is discordant, M == n surely (and log1p(-q) is undefined).
        weight = float(m == n) if q >= 1.0 else math.exp(_log_binom_pmf(m, n, q))
        if weight > 0.0:
            power += weight * binomial_upper_tail(k, m, share)
    return min(1.0, power)


@lru_cache(maxsize=4096)
def minimum_detectable_effect(
    n: int,
    discordance: float,
    alpha: float = 0.05,
    power: float = 0.8,
    min_net: int = 0,
    mid: bool = True,
) -> float | None:
    """The smallest accuracy drop (a fraction: 0.01 is one point) that the one-sided mid-p test at
    `alpha` flags with probability `power` (with `min_net`, the verdict: the test and a net of at
    least `min_net` right -> wrong flips), given the run-to-run discordance without the drop (an
    A/A pair's). None when no drop up to 1 - discordance reaches that power.

    Exact under the model of `regression_power`, to 1e-5 absolute; found by bisection, since the
    power grows with the drop.
    """
    if n <= 0:
        raise ValueError("n must be positive")
    if not 0.0 <= discordance <= 1.0:
        raise ValueError(f"discordance must be in [0, 1], got {discordance}")
    ceiling = 1.0 - discordance
    if ceiling <= 0.0 or regression_power(n, discordance, ceiling, alpha, min_net, mid) < power:
        return None
    # The normal approximation (z_alpha + z_power) * sqrt(discordance / n) brackets the answer
    # closely, which saves most of the bisection steps.
    guess = (z_value(1.0 - 2.0 * alpha) + z_value(2.0 * power - 1.0)) * math.sqrt(
        max(discordance, 1.0 / n) / n
    )
    lo, hi = 0.0, ceiling
    probe = min(ceiling, 2.0 * guess + 8.0 / n)
    if regression_power(n, discordance, probe, alpha, min_net, mid) >= power:
        hi = probe
    else:
        lo = probe
    while hi - lo > 1e-5:
        middle = (lo + hi) / 2.0
        if regression_power(n, discordance, middle, alpha, min_net, mid) >= power:
            hi = middle
        else:
            lo = middle
    return hi
