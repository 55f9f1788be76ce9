"""Judging a candidate's divergence from a baseline against the A/A floor.

Three passes per config: the baseline B, its replicate R (the same environment served again: the
floor, since greedy prefill is not bit-stable across batch shapes), and the candidate C. For each
question i and metric m, d_i = m(B, C) and f_i = m(B, R). If C is the baseline's version served
again, C and R are exchangeable given B, so d_i - f_i is as likely positive as negative: the
one-sided sign test (exact binomial, ties dropped) of "C diverges from B more than R does" has
size alpha without any assumption about how the metric is distributed. The metrics are the mean
token KL, the top-1 disagreement and the absolute change of answer NLL (`metrics`); every
(config, metric) test of a comparison is one family, held at alpha by Holm's step-down
(`family.holm_adjust`). A config is `diverged` when any of its tests is rejected. The sign test
takes questions as independent, which float32 rounding common to a whole pass is not; the metrics
count such rounding as no divergence at all (`metrics.snapped`).

The effect sizes reported: each metric's mean over the questions for C and for the floor, their
difference, and the share of untied questions where C diverges more than the floor does.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

from humming_matrix.divergence import metrics
from humming_matrix.divergence.metrics import QuestionDivergence, question_divergence, same_tokens
from humming_matrix.divergence.record import DivergenceRecord, load_divergence_records
from humming_matrix.errors import RecordError, UsageError
from humming_matrix.judge.compare import Loaded as LoadedRecord
from humming_matrix.judge.compare import check_same_configs, select
from humming_matrix.judge.family import holm_adjust
from humming_matrix.judge.stats import binomial_upper_tail

Loaded = LoadedRecord[DivergenceRecord]

# The config keys that shape the forced texts.
PROMPT_KEYS = ("num_fewshot", "gen_prefix")


class Verdict(str, Enum):
    SAME = "same"
    DIVERGED = "diverged"


class Metric(str, Enum):
    KL = "kl"
    TOP1 = "top1_disagreement"
    NLL = "abs_nll_change"

    @property
    def label(self) -> str:
        return {
            "kl": "mean token KL (nats)",
            "top1_disagreement": "top-1 disagreement",
            "abs_nll_change": "|answer NLL change| (nats)",
        }[self.value]

    def of(self, q: QuestionDivergence) -> float:
        if self is Metric.KL:
            return q.kl
        if self is Metric.TOP1:
            return q.top1_disagreement
        return q.abs_nll_change


@dataclass(frozen=True)
class MetricTest:
    metric: Metric
    candidate_mean: float
    floor_mean: float
    above: int  # questions where the candidate diverges more than the floor
    below: int  # ... less
    ties: int
    p_value: float  # one-sided exact sign test
    adjusted_p: float  # Holm, over the whole comparison's family

    @property
    def excess(self) -> float:
        return self.candidate_mean - self.floor_mean

    @property
    def share_above(self) -> float:
        untied = self.above + self.below
        return self.above / untied if untied else 0.5

    def rejected(self, alpha: float) -> bool:
        return self.adjusted_p <= alpha

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric.value,
            "candidate_mean": self.candidate_mean,
            "floor_mean": self.floor_mean,
            "excess": self.excess,
            "above": self.above,
            "below": self.below,
            "ties": self.ties,
            "share_above": self.share_above,
            "p_value": self.p_value,
            "adjusted_p": self.adjusted_p,
        }


@dataclass(frozen=True)
class ConfigDivergence:
    config: str
    baseline: Loaded
    replicate: Loaded
    candidate: Loaded
    questions: int  # answered in all three passes
    tests: tuple[MetricTest, ...]
    candidate_kl: tuple[float, ...]  # per question, for the plot
    floor_kl: tuple[float, ...]
    alpha: float

    @property
    def verdict(self) -> Verdict:
        return Verdict.DIVERGED if any(t.rejected(self.alpha) for t in self.tests) else Verdict.SAME

    def test(self, metric: Metric) -> MetricTest:
        [found] = [t for t in self.tests if t.metric is metric]
        return found

    def to_json(self) -> dict[str, Any]:
        def side(loaded: Loaded) -> dict[str, Any]:
            return {
                "path": str(loaded.path),
                "run_id": loaded.record.run_id,
                "environment": loaded.cell.label,
            }

        return {
            "config": self.config,
            "verdict": self.verdict.value,
            "questions": self.questions,
            "baseline": side(self.baseline),
            "replicate": side(self.replicate),
            "candidate": side(self.candidate),
            "tests": [t.to_json() for t in self.tests],
            "candidate_kl": list(self.candidate_kl),
            "floor_kl": list(self.floor_kl),
        }


@dataclass(frozen=True)
class DivergenceComparison:
    alpha: float
    configs: tuple[ConfigDivergence, ...]

    @property
    def diverged(self) -> bool:
        return any(c.verdict is Verdict.DIVERGED for c in self.configs)

    @property
    def rounding_ulps(self) -> int:
        """Logprobs closer than this to the baseline's count as the baseline's (`metrics`)."""
        return metrics.ROUNDING_ULPS

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": "divergence",
            "alpha": self.alpha,
            "rounding_ulps": self.rounding_ulps,
            "diverged": self.diverged,
            "configs": [c.to_json() for c in self.configs],
        }


def sign_test(differences: Sequence[float]) -> tuple[int, int, int, float]:
    """(above, below, ties, p): the exact one-sided sign test of "positive more often"."""
    above = sum(d > 0 for d in differences)
    below = sum(d < 0 for d in differences)
    ties = len(differences) - above - below
    return above, below, ties, binomial_upper_tail(above, above + below, 0.5)


def _check(loaded: Loaded) -> None:
    record = loaded.record
    if record.startup is not None and record.startup.get("status") == "failed":
        raise RecordError(
            loaded.path,
            "startup",
            f"the server of config {record.config.name} never became ready: nothing to compare",
        )
    if not record.complete:
        raise RecordError(
            loaded.path,
            "complete",
            f"divergence record {record.run_id} of config {record.config.name} is "
            "incomplete (the pass stopped early); compare refuses it",
        )


def _check_pair(baseline: Loaded, other: Loaded) -> None:
    b, o = baseline.record, other.record
    # Unlike accuracy, a different config may pair (another model directory, other server
    # args: a quantized model against its reference); the prompts must be the same, which the
    # token check below makes sure of, question by question.
    for key in PROMPT_KEYS:
        if b.config.fields.get(key) != o.config.fields.get(key):
            raise RecordError(
                other.path,
                f"config.fields.{key}",
                f"{o.config.fields.get(key)!r} differs from the baseline's "
                f"{b.config.fields.get(key)!r} in {baseline.path}: the prompts "
                "differ",
            )
    if [q.index for q in b.questions] != [q.index for q in o.questions]:
        raise RecordError(
            other.path,
            "questions",
            f"question set differs from the baseline's in {baseline.path}: "
            "run both with the same --limit",
        )
    for i, (qb, qo) in enumerate(zip(b.questions, o.questions, strict=True)):
        if qb.answered and qo.answered and not same_tokens(qb, qo):
            raise RecordError(
                other.path,
                f"questions[{i}].tokens",
                f"question {qb.index} was tokenized differently from the "
                f"baseline's in {baseline.path}: different tokenizers cannot be "
                "compared token by token",
            )


def divergences(baseline: Loaded, other: Loaded) -> dict[int, QuestionDivergence]:
    """Per question answered in both, the divergence of `other` from `baseline`."""
    _check_pair(baseline, other)
    kb, ko = baseline.record.top_k, other.record.top_k
    return {
        qb.index: question_divergence(qb, qo, kb, ko)
        for qb, qo in zip(baseline.record.questions, other.record.questions, strict=True)
        if qb.answered and qo.answered
    }


def _load(location: Path) -> list[Loaded]:
    return [Loaded(path, record) for path, record in load_divergence_records(location)]


def find_replicate(baseline: Loaded, pools: Sequence[Sequence[Loaded]]) -> Loaded | None:
    """The newest other complete record of the baseline's config and environment."""
    seen = {baseline.path.resolve()}
    found = []
    for pool in pools:
        for loaded in pool:
            r = loaded.record
            if (
                loaded.path.resolve() not in seen
                and r.complete
                and r.config.name == baseline.record.config.name
                and r.config.sha256 == baseline.record.config.sha256
                and loaded.cell == baseline.cell
                and r.run_id != baseline.record.run_id
            ):
                seen.add(loaded.path.resolve())
                found.append(loaded)
    return max(found, key=lambda g: g.order, default=None)


def compare_config(
    baseline: Loaded, replicate: Loaded, candidate: Loaded, alpha: float
) -> ConfigDivergence:
    """The tests of one config (raw p-values; `compare_divergence` adjusts them as a family)."""
    for loaded in (baseline, replicate, candidate):
        _check(loaded)
    d = divergences(baseline, candidate)
    f = divergences(baseline, replicate)
    common = sorted(set(d) & set(f))
    if not common:
        raise RecordError(
            candidate.path,
            "questions",
            "no question was answered in the baseline, its replicate and the candidate alike",
        )
    tests = []
    for metric in Metric:
        cand = [metric.of(d[i]) for i in common]
        floor = [metric.of(f[i]) for i in common]
        above, below, ties, p = sign_test([c - fl for c, fl in zip(cand, floor, strict=True)])
        tests.append(
            MetricTest(
                metric, statistics.fmean(cand), statistics.fmean(floor), above, below, ties, p, p
            )
        )
    return ConfigDivergence(
        baseline.record.config.name,
        baseline,
        replicate,
        candidate,
        len(common),
        tuple(tests),
        tuple(d[i].kl for i in common),
        tuple(f[i].kl for i in common),
        alpha,
    )


def adjust_family(configs: Sequence[ConfigDivergence]) -> tuple[ConfigDivergence, ...]:
    adjusted = iter(holm_adjust([t.p_value for c in configs for t in c.tests]))
    return tuple(
        replace(c, tests=tuple(replace(t, adjusted_p=next(adjusted)) for t in c.tests))
        for c in configs
    )


def compare_divergence(
    baseline: Path,
    candidate: Path,
    alpha: float = 0.05,
    floor: Sequence[Path] = (),
    load: Callable[[Path], list[Loaded]] = _load,
) -> DivergenceComparison:
    """`compare --tier divergence BASELINE CANDIDATE`: each config on both sides, judged against
    the floor found beside the baseline (or in `floor`)."""
    if not 0.0 < alpha < 0.5:
        raise UsageError(f"--alpha must be in (0, 0.5), got {alpha}")
    base_all, cand_all = load(baseline), load(candidate)
    extra = [loaded for location in floor for loaded in load(location)]
    if not base_all:
        raise RecordError(baseline, None, "holds no divergence record")
    if not cand_all:
        raise RecordError(candidate, None, "holds no divergence record")
    base, cand = select(baseline, base_all), select(candidate, cand_all)
    check_same_configs(baseline, candidate, base, cand)
    results = []
    for name, b in base.items():
        c = cand[name]
        if c.path.resolve() == b.path.resolve():
            raise UsageError(f"{c.path}: the candidate is the baseline record itself")
        r = find_replicate(
            b, [base_all, extra, [x for x in cand_all if x.path.resolve() != c.path.resolve()]]
        )
        if r is None:
            raise UsageError(
                f"config {name}: no A/A floor for baseline {b.path}: the baseline's environment "
                f"({b.cell.label}) needs a second divergence record of the same config "
                "(`humming-matrix divergence run --repeat 2`, or --floor PATH)"
            )
        results.append(compare_config(b, r, c, alpha))
    return DivergenceComparison(alpha, adjust_family(results))
