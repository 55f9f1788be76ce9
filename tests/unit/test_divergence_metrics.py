"""Per-question divergence: KL over the top-k support, top-1 agreement, answer NLL change."""

from __future__ import annotations

import math
import random
from array import array

import pytest
from scipy.stats import entropy

from humming_matrix.divergence.metrics import position_kl, question_divergence
from humming_matrix.divergence.record import AnswerLogprobs


def answer(
    dists: list[list[float]], tokens: list[int], k: int, span_start: int = 5, index: int = 0
) -> AnswerLogprobs:
    """An answer whose position t has the distribution dists[t] (probabilities over a small
    vocabulary) and forced token tokens[t], keeping the top k as vLLM lists them."""
    out = AnswerLogprobs(index, None, span_start, array("i"), array("f"), array("i"), array("f"))
    for dist, token in zip(dists, tokens, strict=True):
        order = sorted(range(len(dist)), key=lambda v: (-dist[v], v))[:k]
        out.tokens.append(token)
        out.logprobs.append(math.log(dist[token]))
        out.top_ids.extend(order)
        out.top_logprobs.extend(math.log(dist[v]) for v in order)
    return out


def as_float32(dist: list[float]) -> list[float]:
    """The probabilities a record holds: exp of float32 logprobs."""
    return [math.exp(array("f", [math.log(p)])[0]) for p in dist]


def random_dist(rng: random.Random, n: int) -> list[float]:
    w = [rng.random() ** 3 + 1e-3 for _ in range(n)]
    s = sum(w)
    return [x / s for x in w]


def test_full_support_kl_equals_scipys_entropy() -> None:
    """With k = the vocabulary, every bin is a token and the tail is empty: the KL is the exact
    KL(P||Q), which scipy computes independently."""
    rng = random.Random(3)
    p, q = random_dist(rng, 6), random_dist(rng, 6)
    base, cand = answer([p], [2], k=6), answer([q], [2], k=6)
    expected = entropy(as_float32(p), as_float32(q))
    assert position_kl(base, cand, 0, 6, 6) == pytest.approx(expected, rel=1e-6, abs=1e-9)


def test_top_k_kl_is_the_kl_of_the_binned_distributions_and_at_most_the_full_kl() -> None:
    """k = 2 of 6, every bin known on both sides (the candidate lists the baseline's top 2):
    the KL of the coarse-grained distributions (the baseline's top 2, the forced token, the
    tail), computed here by hand through scipy, and no more than the full KL."""
    p = [0.4, 0.3, 0.1, 0.1, 0.06, 0.04]
    q = [0.35, 0.33, 0.12, 0.08, 0.07, 0.05]
    base, cand = answer([p], [4], k=2), answer([q], [4], k=2)
    p32, q32 = as_float32(p), as_float32(q)
    binned_p = [p32[0], p32[1], p32[4], 1 - p32[0] - p32[1] - p32[4]]
    binned_q = [q32[0], q32[1], q32[4], 1 - q32[0] - q32[1] - q32[4]]
    kl = position_kl(base, cand, 0, 2, 2)
    assert kl == pytest.approx(entropy(binned_p, binned_q), rel=1e-6)
    assert kl <= entropy(p, q)


def test_a_baseline_top_token_the_candidate_does_not_list_gets_the_candidates_bound() -> None:
    """The baseline's 2nd token (id 1) is 4th for the candidate, so unlisted at k = 2: its
    candidate probability is set to the smaller of the candidate's smallest listed one (0.3)
    and an even share of the mass it left unlisted: (1 - 0.3 - 0.3 - 0.05) / 2 = 0.175."""
    p = [0.5, 0.3, 0.1, 0.05, 0.05]
    q = [0.3, 0.1, 0.25, 0.3, 0.05]  # top 2: ids 0 and 3 (0.3 each, id order), forced id 4
    base, cand = answer([p], [4], k=2), answer([q], [4], k=2)
    p32, q32 = as_float32(p), as_float32(q)
    unlisted = 1 - (q32[0] + q32[3] + q32[4])
    share = min(min(q32[0], q32[3]), unlisted / 2)
    assert share == pytest.approx(0.175, rel=1e-6)
    binned_p = [p32[0], p32[1], p32[4], 1 - p32[0] - p32[1] - p32[4]]
    binned_q = [q32[0], share, q32[4], 1 - q32[0] - share - q32[4]]
    assert position_kl(base, cand, 0, 2, 2) == pytest.approx(entropy(binned_p, binned_q), rel=1e-6)


def test_identical_passes_diverge_by_exactly_zero() -> None:
    rng = random.Random(5)
    dists = [random_dist(rng, 50) for _ in range(8)]
    tokens = [rng.randrange(50) for _ in range(8)]
    a, b = answer(dists, tokens, 5), answer(dists, tokens, 5)
    d = question_divergence(a, b, 5, 5)
    assert (d.index, d.tokens, d.kl, d.top1_disagreement, d.nll_change) == (0, 8, 0.0, 0.0, 0.0)


def test_top1_disagreement_and_nll_change_per_question() -> None:
    p1, p2 = [0.6, 0.3, 0.1], [0.2, 0.5, 0.3]
    q1, q2 = [0.3, 0.6, 0.1], [0.2, 0.5, 0.3]  # top-1 flips at position 0 only
    base = answer([p1, p2], [1, 2], k=2)
    cand = answer([q1, q2], [1, 2], k=2)
    d = question_divergence(base, cand, 2, 2)
    assert d.top1_disagreement == 0.5
    expected_nll = -(math.log(as_float32(q1)[1]) + math.log(as_float32(q2)[2])) + (
        math.log(as_float32(p1)[1]) + math.log(as_float32(p2)[2])
    )
    assert d.nll_change == pytest.approx(expected_nll, rel=1e-6)
    assert d.kl == pytest.approx(
        (position_kl(base, cand, 0, 2, 2) + position_kl(base, cand, 1, 2, 2)) / 2
    )


def test_passes_of_different_tokens_are_refused() -> None:
    p = [0.5, 0.5]
    with pytest.raises(ValueError, match="question 0: the passes tokenized it differently"):
        question_divergence(answer([p], [0], 1), answer([p], [1], 1), 1, 1)
    with pytest.raises(ValueError, match="tokenized it differently"):
        question_divergence(answer([p], [0], 1, span_start=3), answer([p], [0], 1), 1, 1)
