"""How far apart, in float32 ulps, the logprobs of divergence passes lie: every pair of the
records given (files or directories), each logprob of a token listed at the same position in
both (the forced token and the top-k), at the spacing `metrics.ulps_apart` uses. What
`metrics.ROUNDING_ULPS` was set from (docs/divergence.md):

  python tools/divergence_ulps.py STORE_A STORE_B ...
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from humming_matrix.divergence.metrics import ROUNDING_ULPS, ulps_apart
from humming_matrix.divergence.record import (
    AnswerLogprobs,
    DivergenceRecord,
    load_divergence_records,
)


def _listed(answer: AnswerLogprobs, position: int, k: int) -> dict[int, float]:
    known = dict(answer.top(position, k))
    known[answer.tokens[position]] = answer.logprobs[position]
    return known


def distances(a: DivergenceRecord, b: DivergenceRecord) -> tuple[list[float], int]:
    """Every shared logprob's distance, sorted, and how many questions hold one above 0."""
    found: list[float] = []
    questions = 0
    for qa, qb in zip(a.questions, b.questions, strict=True):
        if not (qa.answered and qb.answered) or list(qa.tokens) != list(qb.tokens):
            continue
        before = len(found)
        for t in range(len(qa)):
            la, lb = _listed(qa, t, a.top_k), _listed(qb, t, b.top_k)
            found.extend(ulps_apart(v, lb[token]) for token, v in la.items() if token in lb)
        questions += any(u > 0 for u in found[before:])
    return sorted(found), questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", type=Path)
    args = parser.parse_args()
    loaded = [(path, r) for where in args.records for path, r in load_divergence_records(where)]
    print(f"snapped as the same value: at most {ROUNDING_ULPS} ulps")
    for (pa, a), (pb, b) in itertools.combinations(loaded, 2):
        found, questions = distances(a, b)
        if not found:
            print(f"{pa.name} vs {pb.name}: no shared logprob")
            continue

        def at(q: float, values: list[float] = found) -> float:
            return values[min(len(values) - 1, int(q * len(values)))]

        moved = sum(u > 0 for u in found)
        beyond = sum(u > ROUNDING_ULPS for u in found)
        print(
            f"{a.run_id} vs {b.run_id}: {len(found)} logprobs, {moved} moved, {beyond} beyond "
            f"{ROUNDING_ULPS} ulps; questions moved {questions}/{len(a.questions)}; ulps median "
            f"{at(0.5):.2f}, p99 {at(0.99):.2f}, max {found[-1]:.2f}"
        )


if __name__ == "__main__":
    main()
