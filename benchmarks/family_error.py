"""The judging gate's error rates, through the judging API (`compare.paired_test`, `in_family`,
`PairedTest.mde`, `stats.regression_power`):

1. the family-wise false-alarm rate of `compare` (configs x A/A pairs) and of a nightly report
   (versions x configs, every version compared with ONE shared baseline run), judged as a family
   (Holm) and, for contrast, one by one as before;
2. the size of the one-sided tests at alpha 0.05: the exact conditional test the gate uses and the
   mid-p it shows, conditional on the number of discordant questions and averaged over it;
3. the power of the verdict as gated (exact test at alpha / family size and the one-point minimum
   effect) for drops of 1, 2, 3 points at discordance 2%, 5%, 10%, and the verdict MDE.

    python benchmarks/family_error.py --sims 20000 --report-sims 2000
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from humming_matrix.judge.compare import Settings, Verdict, in_family, paired_test, verdict_mde
from humming_matrix.judge.stats import PairedTable, critical_count, regression_power

SETTINGS = Settings()
N = 1319


def compare_aa(sims: int, configs: int, discordance: float, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    probs = [0.86 - discordance / 2, discordance / 2, discordance / 2, 0.14 - discordance / 2]
    family = alone = 0
    for _ in range(sims):
        tests = [
            paired_test(PairedTable(*(int(x) for x in row)), SETTINGS)
            for row in rng.multinomial(N, probs, size=configs)
        ]
        alone += any(t.verdict is Verdict.REGRESSION for t in tests)
        family += any(t.verdict is Verdict.REGRESSION for t in in_family(tests))
    return family / sims, alone / sims


def report_aa(
    sims: int, versions: int, configs: int, discordance: float, seed: int
) -> tuple[float, float]:
    # Each run tips each answer with probability f; two runs then disagree on 2 f (1 - f).
    flip = (1 - math.sqrt(1 - 2 * discordance)) / 2
    rng = np.random.default_rng(seed)
    family = alone = 0
    for _ in range(sims):
        tests = []
        for _ in range(configs):
            truth = rng.random(N) < 0.86
            base = truth ^ (rng.random(N) < flip)
            runs = truth ^ (rng.random((versions, N)) < flip)
            b = (base & ~runs).sum(axis=1)
            c = (~base & runs).sum(axis=1)
            a = (base & runs).sum(axis=1)
            tests += [
                paired_test(
                    PairedTable(int(a[i]), int(b[i]), int(c[i]), N - int(a[i] + b[i] + c[i])),
                    SETTINGS,
                )
                for i in range(versions)
            ]
        alone += any(t.verdict is Verdict.REGRESSION for t in tests)
        family += any(t.verdict is Verdict.REGRESSION for t in in_family(tests))
    return family / sims, alone / sims


def conditional_size(m: int, mid: bool, alpha: float = 0.05) -> float:
    k = critical_count(m, alpha, mid)
    if k is None:
        return 0.0
    return float(sum(math.comb(m, j) for j in range(k, m + 1)) / 2**m)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sims", type=int, default=20000)
    parser.add_argument("--report-sims", type=int, default=2000)
    args = parser.parse_args()
    start = time.monotonic()

    print(f"## compare: 4 configs x A/A pairs, n = {N}, {args.sims} simulations")
    print("| discordance | family (Holm) | one by one |")
    for d in (0.02, 0.05, 0.10):
        fam, alone = compare_aa(args.sims, 4, d, seed=1)
        print(f"| {100 * d:g}% | {100 * fam:.2f}% | {100 * alone:.2f}% |")

    print(f"\n## report: 20 versions x 4 configs, one baseline run, {args.report_sims} nights")
    print("| discordance | family (Holm) | one by one |")
    for d in (0.02, 0.05, 0.10):
        fam, alone = report_aa(args.report_sims, 20, 4, d, seed=2)
        print(f"| {100 * d:g}% | {100 * fam:.2f}% | {100 * alone:.2f}% |")

    print("\n## size at alpha 0.05, conditional on m discordant questions (max over m)")
    for lo, hi in ((5, 500), (500, N + 1)):
        for mid in (False, True):
            worst = max(range(lo, hi), key=lambda m: conditional_size(m, mid))
            print(
                f"m in [{lo}, {hi - 1}], {'mid-p' if mid else 'exact'}: max "
                f"{100 * conditional_size(worst, mid):.2f}% at m = {worst}"
            )
    print("unconditional (discordance ψ, n): exact | mid-p")
    for n in (200, 500, N):
        for d in (0.02, 0.05, 0.10):
            exact = regression_power(n, d, 0.0, 0.05, mid=False)
            midp = regression_power(n, d, 0.0, 0.05)
            print(f"  n {n} ψ {100 * d:g}%: {100 * exact:.2f}% | {100 * midp:.2f}%")

    print(f"\n## power of the verdict as gated, n = {N}, alpha 0.05, min effect 1 point")
    min_net = math.ceil(SETTINGS.min_effect_exact * N)
    for family in (1, 4):
        print(f"family of {family} (exact test at alpha {0.05 / family:g}):")
        print("| discordance | drop 1 | drop 2 | drop 3 | verdict MDE (80%) |")
        for d in (0.02, 0.05, 0.10):
            powers = [
                regression_power(N, d, drop / 100, 0.05 / family, min_net, mid=False)
                for drop in (1, 2, 3)
            ]
            mde = verdict_mde(N, d, SETTINGS, family)
            print(
                f"| {100 * d:g}% | "
                + " | ".join(f"{100 * p:.0f}%" for p in powers)
                + f" | {'n/a' if mde is None else f'{100 * mde:.2f}'} |"
            )
    print(f"\n{time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
