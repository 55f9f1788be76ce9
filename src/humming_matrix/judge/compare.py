"""Paired comparison of two GSM8K runs: pairing records by config, refusals, the verdict, and the
noise floor from an A/A pair.

The rule (DESIGN.md, docs/judging.md), with d = candidate - baseline accuracy on the questions
answered in both runs:

    regression    d <= -min_effect and the one-sided exact conditional McNemar p for "worse",
                  Holm-adjusted over the family, < alpha
    improvement   d >= +min_effect and the Holm-adjusted exact p for "better" < alpha
    inconclusive  |d| >= min_effect but that p >= alpha: a shift big enough to matter that
                  these questions cannot tell from run-to-run noise
    no change detected
                  |d| < min_effect (significant or not: too small to matter); shown with the
                  drop the verdict could have missed (its MDE)

The family is every paired test one command judges (all configs of one `compare`, GSM8K and
lm-eval rows alike; all compared cells of one report): Holm's step-down adjustment keeps the
chance that any of them is a false regression at most alpha (`PairedTest`, `in_family`). The
gate uses the exact conditional p (size at most alpha at every count of discordant questions);
the mid-p, closer to alpha but above it at some counts, is shown beside it.

The gate (exit 1) fails on a regression, or when the candidate misses the config's absolute
threshold (vLLM's own check, kept as a backstop). An inconclusive result does not fail the gate;
it is shown with its minimum detectable effect so nobody mistakes it for "no change".

lm-eval records are judged by `humming_matrix.judge.compare_lm_eval` with the same rule, per task
and metric. What both kinds share lives here, so there is one engine: the paired statistics,
verdict, family and wording (`PairedTest`, `paired_test`, `in_family`, `paired_line`), the settings,
the environment (`RunEnvironment`) and the lookup of a config's record on a side (`the_record`,
`select`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from fractions import Fraction
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from humming_matrix.errors import RecordError, UsageError
from humming_matrix.judge.family import holm_adjust
from humming_matrix.judge.stats import (
    Interval,
    PairedTable,
    binomial_upper_tail,
    improvement_exact,
    improvement_midp,
    minimum_detectable_effect,
    paired_difference_interval,
    regression_exact,
    regression_midp,
    wilson_interval,
)
from humming_matrix.store.records import read_json
from humming_matrix.store.results import (
    Gsm8kRecord,
    RecordKind,
    load_gsm8k_record,
    record_paths,
)

FLIPS_SHOWN = 20  # in one-line and Markdown summaries; JSON and HTML carry all of them


class Verdict(str, Enum):
    """The verdict of one paired comparison, GSM8K config or lm-eval metric alike."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    # Not "no change": a test that found nothing says how large a drop it could have missed.
    NO_CHANGE = "no change detected"
    INCONCLUSIVE = "inconclusive"


class FlipDirection(str, Enum):
    RIGHT_TO_WRONG = "right->wrong"
    WRONG_TO_RIGHT = "wrong->right"


@dataclass(frozen=True)
class Settings:
    alpha: float = 0.05
    min_effect: float = 0.01
    confidence: float = 0.95
    power: float = 0.8

    def __post_init__(self) -> None:
        # Above 0.5 a one-sided test would flag runs that agree everywhere (mid-p is 0.5 there).
        if not 0.0 < self.alpha < 0.5:
            raise UsageError(f"--alpha must be in (0, 0.5), got {self.alpha}")
        if not 0.0 <= self.min_effect < 1.0:
            raise UsageError(f"--min-effect must be in [0, 1), got {self.min_effect}")
        if not 0.0 < self.confidence < 1.0 or not 0.0 < self.power < 1.0:
            raise UsageError("confidence and power must be in (0, 1)")

    @property
    def min_effect_exact(self) -> Fraction:
        # The decimal the user typed (0.01 is 1/100), so 4 flips in 400 is exactly one point.
        return Fraction(repr(self.min_effect))


class HasEnvironment(Protocol):
    """A record of any kind: GSM8K and lm-eval records describe their environment alike."""

    @property
    def environment(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class RunEnvironment:
    """The environment a run happened in, as far as the judgement cares: two runs with the same
    cell are repeats (an A/A pair), whatever session or machine produced them."""

    humming: str | None
    vllm: str | None
    torch: str | None
    torch_cuda: str | None
    gpu: str | None

    @classmethod
    def of(cls, record: HasEnvironment) -> RunEnvironment:
        env = record.environment

        def text(key: str) -> str | None:
            value = env.get(key)
            return None if value is None else str(value)

        return cls(
            text("humming_kernels"), text("vllm"), text("torch"), text("torch_cuda"), text("gpu")
        )

    @property
    def label(self) -> str:
        parts = [f"humming-kernels {self.humming or '?'}"]
        if self.vllm:
            parts.append(f"vllm {self.vllm}")
        if self.torch:
            parts.append(
                f"torch {self.torch}" + (f" (CUDA {self.torch_cuda})" if self.torch_cuda else "")
            )
        if self.gpu:
            parts.append(self.gpu)
        return ", ".join(parts)


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class StoredRecord(HasEnvironment, Protocol):
    """A record of any kind as a store holds it: named config, creation, run, completeness."""

    @property
    def config(self) -> _Named: ...

    @property
    def created(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def complete(self) -> bool: ...


RecordT = TypeVar("RecordT", bound=StoredRecord)


@dataclass(frozen=True)
class Loaded(Generic[RecordT]):
    """A record and the file it came from: what pairing, lookup and reports work on."""

    path: Path
    record: RecordT

    @property
    def config_name(self) -> str:
        return self.record.config.name

    @property
    def cell(self) -> RunEnvironment:
        return RunEnvironment.of(self.record)

    @property
    def order(self) -> tuple[str, str]:
        return (self.record.created, self.record.run_id)

    @property
    def complete(self) -> bool:
        return self.record.complete


LoadedRecord = Loaded[Gsm8kRecord]


class Selectable(Protocol):
    """What `select` needs of a loaded record, whatever its kind."""

    @property
    def config_name(self) -> str: ...

    @property
    def cell(self) -> RunEnvironment: ...

    @property
    def order(self) -> tuple[str, str]: ...

    @property
    def complete(self) -> bool: ...


LoadedT = TypeVar("LoadedT", bound=Selectable)


@dataclass(frozen=True)
class RunSide:
    """One side of a comparison, on the paired questions."""

    path: Path
    run_id: str
    created: str
    cell: RunEnvironment
    session: str | None
    correct: int
    n: int
    interval: Interval
    threshold: float
    tolerance: float
    passed_threshold: bool
    record_accuracy: float  # over all the record's questions, as vLLM's gate sees it

    @property
    def accuracy(self) -> float:
        return self.correct / self.n


@dataclass(frozen=True)
class Flip:
    index: int
    label: int
    baseline_prediction: int | None
    candidate_prediction: int | None
    direction: FlipDirection


@dataclass(frozen=True)
class Calibration:
    """Two runs of one cell on the same questions: the discordance greedy decoding shows there
    without any change to the kernels."""

    config: str
    cell: RunEnvironment
    first_run: str
    second_run: str
    n: int
    discordant: int
    mde: float | None

    @property
    def rate(self) -> float:
        return self.discordant / self.n


@dataclass(frozen=True)
class NoiseFloor:
    """This comparison measured against a calibration's discordance."""

    calibration: Calibration
    expected_right_to_wrong: float  # what noise alone would flip right -> wrong here
    p_beyond_noise: float  # P(at least b right->wrong flips | A/A noise rate)
    discordance_ratio: float | None  # this pair's discordance over the A/A's; None if A/A is 0


@dataclass(frozen=True)
class PairedTest:
    """The statistics and the verdict of one paired table, judged within its family (all configs
    of one `compare`, all compared cells of one report): what GSM8K configs and lm-eval metrics
    share. The verdict uses the Holm-adjusted p-values; the raw ones are shown beside them."""

    table: PairedTable
    difference_interval: Interval
    p_regression: float  # one-sided mid-p, "worse", this table alone (shown)
    p_improvement: float  # one-sided mid-p, "better", this table alone (shown)
    p_regression_exact: float  # one-sided exact p, "worse": size <= alpha at every count
    p_improvement_exact: float
    p_regression_family: float  # the exact p Holm-adjusted over the family: what gates
    p_improvement_family: float
    family_size: int
    noise_rate: float  # the discordance without the effect, which the MDE assumes
    noise_from_calibration: bool  # an A/A pair's rate; else 2 min(b, c) / n of this table
    verdict: Verdict
    settings: Settings

    @property
    def difference(self) -> float:
        return self.table.difference

    @property
    def mde(self) -> float | None:
        """The verdict's MDE as gated (`verdict_mde`); computed when asked (and cached there),
        so judging thousands of tables in a simulation does not pay for it."""
        return verdict_mde(self.table.n, self.noise_rate, self.settings, self.family_size)

    def verdict_text(self) -> str:
        """The verdict as people read it: a test that found nothing says what it could miss."""
        label = str(self.verdict.value)
        if self.verdict not in (Verdict.NO_CHANGE, Verdict.INCONCLUSIVE):
            return label
        if self.mde is None:
            return f"{label} (too few questions to detect any drop)"
        return f"{label} (could miss a drop of {100 * self.mde:.2f} points)"

    def to_json(self) -> dict[str, Any]:
        return {
            "midp_regression": self.p_regression,
            "midp_improvement": self.p_improvement,
            "family_size": self.family_size,
            "family_correction": "Holm",
            "p_regression_exact": self.p_regression_exact,
            "p_improvement_exact": self.p_improvement_exact,
            "p_regression_family": self.p_regression_family,
            "p_improvement_family": self.p_improvement_family,
            "noise_discordance": self.noise_rate,
            "noise_discordance_source": "A/A pair"
            if self.noise_from_calibration
            else "2 min(b, c) / n",
            "minimum_detectable_effect": self.mde,
        }


def noise_estimate(table: PairedTable) -> float:
    """The run-to-run discordance of this pair without the effect: noise flips both ways alike,
    a drop (or gain) adds flips one way only, so twice the smaller direction is the noise."""
    return 2 * min(table.right_to_wrong, table.wrong_to_right) / table.n if table.n else 0.0


def verdict_mde(n: int, noise_rate: float, settings: Settings, family_size: int) -> float | None:
    """The drop the verdict as gated catches with `settings.power`: the exact test at Holm's
    first-step level alpha / family size (a drop in one member alone) and a net of at least
    min-effect flips, under run-to-run discordance `noise_rate`."""
    if n <= 0:
        return None
    min_net = max(1, math.ceil(settings.min_effect_exact * n))
    return minimum_detectable_effect(
        n, noise_rate, settings.alpha / family_size, settings.power, min_net, mid=False
    )


def paired_test(
    table: PairedTable, settings: Settings, calibration_rate: float | None = None
) -> PairedTest:
    """One table judged as a family of one (`in_family` judges it with the others)."""
    exact_reg, exact_imp = regression_exact(table), improvement_exact(table)
    noise = noise_estimate(table) if calibration_rate is None else calibration_rate
    return PairedTest(
        table=table,
        difference_interval=paired_difference_interval(table, settings.confidence),
        p_regression=regression_midp(table),
        p_improvement=improvement_midp(table),
        p_regression_exact=exact_reg,
        p_improvement_exact=exact_imp,
        p_regression_family=exact_reg,
        p_improvement_family=exact_imp,
        family_size=1,
        noise_rate=noise,
        noise_from_calibration=calibration_rate is not None,
        verdict=decide(table, settings),
        settings=settings,
    )


def in_family(tests: Sequence[PairedTest]) -> list[PairedTest]:
    """The tests judged as one family: Holm's adjustment over the "worse" p-values (the gate's
    family-wise error rate stays at most alpha, whatever the dependence between the tests) and,
    apart, over the "better" ones; each verdict decided again on the adjusted p-values."""
    if not tests:
        return []
    worse = holm_adjust([t.p_regression_exact for t in tests])
    better = holm_adjust([t.p_improvement_exact for t in tests])
    size = len(tests)
    return [
        replace(
            t,
            p_regression_family=w,
            p_improvement_family=b,
            family_size=size,
            verdict=decide(t.table, t.settings, w, b),
        )
        for t, w, b in zip(tests, worse, better, strict=True)
    ]


class JudgedByTest:
    """What a judged comparison (a GSM8K config, an lm-eval metric) reads off its paired test:
    one place, so both kinds say the same thing the same way."""

    test: PairedTest

    @property
    def difference(self) -> float:
        return self.test.table.difference

    @property
    def difference_interval(self) -> Interval:
        return self.test.difference_interval

    @property
    def p_regression(self) -> float:
        return self.test.p_regression

    @property
    def p_improvement(self) -> float:
        return self.test.p_improvement

    @property
    def verdict(self) -> Verdict:
        return self.test.verdict

    @property
    def mde(self) -> float | None:
        return self.test.mde

    @property
    def settings(self) -> Settings:
        return self.test.settings

    def paired_json(self) -> dict[str, Any]:
        """The table, the difference and the test, as both kinds' JSON carries them."""
        t = self.test.table
        return {
            "table": {
                "both_right": t.both_right,
                "right_to_wrong": t.right_to_wrong,
                "wrong_to_right": t.wrong_to_right,
                "both_wrong": t.both_wrong,
            },
            "b": t.right_to_wrong,
            "c": t.wrong_to_right,
            "difference": self.difference,
            "difference_interval": [self.difference_interval.low, self.difference_interval.high],
            "difference_method": "Newcombe (1998) hybrid score, paired (method 10)",
            **self.test.to_json(),
        }


@dataclass(frozen=True)
class ConfigComparison(JudgedByTest):
    config: str
    sha256: str
    baseline: RunSide
    candidate: RunSide
    table: PairedTable
    excluded_errors: int  # questions with a request error in either run, left out of the pairing
    test: PairedTest
    flips: tuple[Flip, ...]
    noise: NoiseFloor | None

    @property
    def gate_failed(self) -> bool:
        return self.verdict is Verdict.REGRESSION or not self.candidate.passed_threshold

    def line(self) -> str:
        """The comparison in one line (JUnit failure messages, logs)."""
        text = paired_line(
            self.config, self.test, self.baseline.accuracy, self.candidate.accuracy, "questions"
        )
        if not self.candidate.passed_threshold:
            text += (
                f"; below threshold: {self.candidate.record_accuracy:.4f} < "
                f"{self.candidate.threshold:g} - {self.candidate.tolerance:g}"
            )
        return text

    def to_json(self) -> dict[str, Any]:
        t = self.table
        return {
            "config": self.config,
            "config_sha256": self.sha256,
            "verdict": self.verdict.value,
            "gate_failed": self.gate_failed,
            "baseline": _side_json(self.baseline),
            "candidate": _side_json(self.candidate),
            "paired_questions": t.n,
            "excluded_for_request_errors": self.excluded_errors,
            **self.paired_json(),
            "flips": [
                {
                    "index": f.index,
                    "label": f.label,
                    "baseline_prediction": f.baseline_prediction,
                    "candidate_prediction": f.candidate_prediction,
                    "direction": f.direction.value,
                }
                for f in self.flips
            ],
            "noise_floor": None if self.noise is None else _noise_json(self.noise),
            "line": self.line(),
        }


def points(fraction: float) -> str:
    """A difference in accuracy points with its sign: -0.0125 -> '-1.25'."""
    return f"{100 * fraction:+.2f}"


def paired_line(name: str, test: PairedTest, baseline: float, candidate: float, unit: str) -> str:
    """One paired comparison in one line (GSM8K configs and lm-eval metrics alike)."""
    t = test.table
    s = test.settings
    worse = test.difference <= 0
    p = test.p_regression if worse else test.p_improvement
    p_family = test.p_regression_family if worse else test.p_improvement_family
    family = f"Holm over {test.family_size}" if test.family_size > 1 else "exact"
    noise = "A/A pair" if test.noise_from_calibration else "2 min(b, c)/n"
    return (
        f"{name}: {test.verdict_text()}: {baseline:.4f} -> {candidate:.4f} "
        f"({points(test.difference)} points, {int(100 * s.confidence)}% CI "
        f"[{points(test.difference_interval.low)}, {points(test.difference_interval.high)}]) "
        f"on {t.n} paired {unit}; b={t.right_to_wrong} c={t.wrong_to_right}; "
        f"mid-p({'worse' if worse else 'better'}) {p:.3g}, gated p ({family}) {p_family:.3g} "
        f"vs alpha {s.alpha:g}; "
        f"min effect {100 * s.min_effect:g}, verdict MDE "
        f"{'n/a' if test.mde is None else f'{100 * test.mde:.2f}'} points at "
        f"{100 * test.noise_rate:.2g}% discordance ({noise})"
    )


def _side_json(side: RunSide) -> dict[str, Any]:
    return {
        "path": str(side.path),
        "run_id": side.run_id,
        "created": side.created,
        "session": side.session,
        "environment": {
            "humming_kernels": side.cell.humming,
            "vllm": side.cell.vllm,
            "torch": side.cell.torch,
            "torch_cuda": side.cell.torch_cuda,
            "gpu": side.cell.gpu,
        },
        "correct": side.correct,
        "n": side.n,
        "accuracy": side.accuracy,
        "accuracy_interval": [side.interval.low, side.interval.high],
        "record_accuracy": side.record_accuracy,
        "threshold": side.threshold,
        "tolerance": side.tolerance,
        "passed_threshold": side.passed_threshold,
    }


def _noise_json(noise: NoiseFloor) -> dict[str, Any]:
    cal = noise.calibration
    return {
        "cell": cal.cell.label,
        "runs": [cal.first_run, cal.second_run],
        "n": cal.n,
        "discordant": cal.discordant,
        "rate": cal.rate,
        "minimum_detectable_effect": cal.mde,
        "expected_right_to_wrong": noise.expected_right_to_wrong,
        "p_beyond_noise": noise.p_beyond_noise,
        "discordance_ratio": noise.discordance_ratio,
    }


@dataclass(frozen=True)
class Comparison:
    settings: Settings
    configs: tuple[ConfigComparison, ...]

    @property
    def gate_failed(self) -> bool:
        return any(c.gate_failed for c in self.configs)

    @property
    def tests(self) -> tuple[PairedTest, ...]:
        """The family members this comparison contributes, in order (`with_tests` takes them
        back judged)."""
        return tuple(c.test for c in self.configs)

    def with_tests(self, tests: Sequence[PairedTest]) -> Comparison:
        return replace(
            self,
            configs=tuple(replace(c, test=t) for c, t in zip(self.configs, tests, strict=True)),
        )

    def in_family(self) -> Comparison:
        return self.with_tests(in_family(self.tests))

    def to_json(self) -> dict[str, Any]:
        return {
            "alpha": self.settings.alpha,
            "min_effect": self.settings.min_effect,
            "confidence": self.settings.confidence,
            "power": self.settings.power,
            "gate_failed": self.gate_failed,
            "configs": [c.to_json() for c in self.configs],
        }


def decide(
    table: PairedTable,
    settings: Settings,
    p_regression: float | None = None,
    p_improvement: float | None = None,
) -> Verdict:
    """The verdict for one table (the rule in the module docstring), on the table's own exact
    p-values or, within a family, on the adjusted ones given."""
    if table.n == 0:
        return Verdict.INCONCLUSIVE
    shift = Fraction(table.wrong_to_right - table.right_to_wrong, table.n)
    if shift <= -settings.min_effect_exact and shift != 0:
        p = regression_exact(table) if p_regression is None else p_regression
        return Verdict.REGRESSION if p < settings.alpha else Verdict.INCONCLUSIVE
    if shift >= settings.min_effect_exact and shift != 0:
        p = improvement_exact(table) if p_improvement is None else p_improvement
        return Verdict.IMPROVEMENT if p < settings.alpha else Verdict.INCONCLUSIVE
    return Verdict.NO_CHANGE


def _check_pairable(baseline: LoadedRecord, candidate: LoadedRecord) -> None:
    base, cand = baseline.record, candidate.record
    for side in (baseline, candidate):
        if side.record.start_failed:
            raise RecordError(
                side.path,
                "startup",
                f"the server of config {side.record.config.name} never became ready "
                f"({side.record.startup_summary()}): no answers to compare",
            )
        if not side.record.complete:
            raise RecordError(
                side.path,
                "complete",
                f"record {side.record.run_id} of config {side.record.config.name} is incomplete "
                "(the run stopped early; finish it with `humming-matrix run --resume`); "
                "compare refuses incomplete records",
            )
    if base.config.name != cand.config.name:
        raise RecordError(
            candidate.path,
            "config.name",
            f"{cand.config.name!r} cannot pair with baseline {base.config.name!r}",
        )
    if base.config.sha256 != cand.config.sha256:
        raise RecordError(
            candidate.path,
            "config.sha256",
            f"config {cand.config.name} differs from the baseline's ({cand.config.sha256[:12]} vs "
            f"{base.config.sha256[:12]} in {baseline.path}): different configs cannot be paired",
        )
    base_idx = [q.index for q in base.questions]
    cand_idx = [q.index for q in cand.questions]
    if set(base_idx) != set(cand_idx) or len(base_idx) != len(cand_idx):
        raise RecordError(
            candidate.path,
            "questions",
            f"question set differs from the baseline's in {baseline.path} "
            f"({_describe(cand_idx)} vs {_describe(base_idx)}): run both with the same --limit",
        )
    labels = {q.index: q.label for q in base.questions}
    for i, q in enumerate(cand.questions):
        if labels[q.index] != q.label:
            raise RecordError(
                candidate.path,
                f"questions[{i}].label",
                f"question {q.index} has label {q.label}, the baseline's has {labels[q.index]}: "
                "the runs used different GSM8K data",
            )


def _describe(indices: Sequence[int]) -> str:
    if not indices:
        return "no questions"
    return f"{len(indices)} questions, {min(indices)}..{max(indices)}"


def _side(loaded: LoadedRecord, correct: int, n: int, settings: Settings) -> RunSide:
    record = loaded.record
    m = record.metrics
    session = record.environment.get("session")
    return RunSide(
        path=loaded.path,
        run_id=record.run_id,
        created=record.created,
        cell=loaded.cell,
        session=str(session) if session else None,
        correct=correct,
        n=n,
        interval=wilson_interval(correct, n, settings.confidence),
        threshold=m.threshold,
        tolerance=m.tolerance,
        passed_threshold=m.passed,
        record_accuracy=m.accuracy,
    )


def paired_table(baseline: Gsm8kRecord, candidate: Gsm8kRecord) -> tuple[PairedTable, int]:
    """The 2x2 table over questions answered in both runs, and how many were left out because a
    request failed in either run (an infrastructure event, not an answer)."""
    cand = {q.index: q for q in candidate.questions}
    counts = [0, 0, 0, 0]
    excluded = 0
    for q in baseline.questions:
        other = cand[q.index]
        if not q.answered or not other.answered:
            excluded += 1
            continue
        counts[(0 if q.correct else 2) + (0 if other.correct else 1)] += 1
    # counts: [right/right, right/wrong, wrong/right, wrong/wrong]
    return PairedTable(counts[0], counts[1], counts[2], counts[3]), excluded


def _flips(baseline: Gsm8kRecord, candidate: Gsm8kRecord) -> tuple[Flip, ...]:
    cand = {q.index: q for q in candidate.questions}
    flips = []
    for q in baseline.questions:
        other = cand[q.index]
        if q.answered and other.answered and q.correct != other.correct:
            direction = FlipDirection.RIGHT_TO_WRONG if q.correct else FlipDirection.WRONG_TO_RIGHT
            flips.append(Flip(q.index, q.label, q.prediction, other.prediction, direction))
    return tuple(sorted(flips, key=lambda f: f.index))


def calibrate(first: LoadedRecord, second: LoadedRecord, settings: Settings) -> Calibration:
    """An A/A pair: two complete runs of one cell and config on the same questions."""
    _check_pairable(first, second)
    table, _ = paired_table(first.record, second.record)
    if table.n == 0:
        raise RecordError(second.path, "questions", "no question answered in both A/A runs")
    return Calibration(
        config=first.record.config.name,
        cell=first.cell,
        first_run=first.record.run_id,
        second_run=second.record.run_id,
        n=table.n,
        discordant=table.discordant,
        mde=minimum_detectable_effect(
            table.n, table.discordant / table.n, settings.alpha, settings.power
        ),
    )


def find_calibration(
    sources: Sequence[Sequence[LoadedRecord]],
    config: str,
    sha256: str,
    cells: Sequence[RunEnvironment],
    settings: Settings,
) -> Calibration | None:
    """The A/A pair for `config`: the two newest complete runs of one cell on the same questions,
    both from the same source, from the first of `cells` that has such a pair.

    Both runs of a pair come from one source (the baseline side, the candidate side, a
    --calibration path, a store) because a baseline and a candidate whose environments look
    alike are still what the user asked to compare, not a repeat of one another.
    """
    groups: dict[tuple[int, RunEnvironment, frozenset[int]], dict[str, LoadedRecord]] = defaultdict(
        dict
    )
    for source, records in enumerate(sources):
        for loaded in records:
            r = loaded.record
            if r.complete and r.config.name == config and r.config.sha256 == sha256:
                key = (source, loaded.cell, frozenset(q.index for q in r.questions))
                groups[key][r.run_id] = loaded
    for cell in cells:
        pairs = [
            sorted(g.values(), key=lambda x: x.order)
            for (_, c, _), g in groups.items()
            if c == cell and len(g) >= 2
        ]
        if pairs:
            newest = max(pairs, key=lambda runs: runs[-1].order)
            return calibrate(newest[-2], newest[-1], settings)
    return None


def noise_floor(table: PairedTable, calibration: Calibration) -> NoiseFloor:
    half_rate = calibration.rate / 2.0
    observed = table.discordant / table.n if table.n else 0.0
    return NoiseFloor(
        calibration=calibration,
        expected_right_to_wrong=table.n * half_rate,
        p_beyond_noise=binomial_upper_tail(table.right_to_wrong, table.n, half_rate),
        discordance_ratio=observed / calibration.rate if calibration.rate > 0 else None,
    )


def compare_records(
    baseline: LoadedRecord,
    candidate: LoadedRecord,
    settings: Settings,
    calibration: Calibration | None = None,
) -> ConfigComparison:
    _check_pairable(baseline, candidate)
    table, excluded = paired_table(baseline.record, candidate.record)
    if table.n == 0:
        raise RecordError(
            candidate.path, "questions", "no question was answered in both runs; nothing to compare"
        )
    return ConfigComparison(
        config=baseline.record.config.name,
        sha256=baseline.record.config.sha256,
        baseline=_side(baseline, table.baseline_correct, table.n, settings),
        candidate=_side(candidate, table.candidate_correct, table.n, settings),
        table=table,
        excluded_errors=excluded,
        test=paired_test(table, settings, None if calibration is None else calibration.rate),
        flips=_flips(baseline.record, candidate.record),
        noise=None if calibration is None else noise_floor(table, calibration),
    )


def record_kinds(location: Path) -> set[RecordKind]:
    """Which kinds of record a file or store holds."""
    if location.is_file():
        kind = read_json(location).get("kind")
        try:
            return {RecordKind(kind)}
        except ValueError:
            raise RecordError(location, "kind", f"unknown record kind {kind!r}") from None
    return {k for k in RecordKind if record_paths(location, k)}


def load_records(location: Path) -> list[LoadedRecord]:
    """The GSM8K records in a record file or a store directory."""
    if location.is_file():
        return [LoadedRecord(location, load_gsm8k_record(location))]
    return [LoadedRecord(p, load_gsm8k_record(p)) for p in record_paths(location, RecordKind.GSM8K)]


def the_record(runs: Sequence[LoadedT]) -> LoadedT:
    """The one lookup policy for "the record of this config in this environment": the newest
    COMPLETE run (repeats of one environment are interchangeable measurements; an older complete
    one beats a newer run that stopped early or never started). Only when no run is complete is
    the newest returned, for the caller to refuse (compare) or show as incomplete (report)."""
    if not runs:
        raise ValueError("no runs to choose from")
    complete = [r for r in runs if r.complete]
    return max(complete or runs, key=lambda r: r.order)


def select(location: Path, records: Sequence[LoadedT]) -> dict[str, LoadedT]:
    """One record per config from one side (`the_record`). A side holding one config from two
    environments is ambiguous and refused: which one was meant cannot be guessed."""
    by_config: dict[str, list[LoadedT]] = defaultdict(list)
    for loaded in records:
        by_config[loaded.config_name].append(loaded)
    chosen = {}
    for name, group in sorted(by_config.items()):
        cells = sorted({g.cell.label for g in group})
        if len(cells) > 1:
            raise RecordError(
                location,
                f"config {name}",
                f"records from {len(cells)} environments ({'; '.join(cells)}); "
                "pass one record file or a directory of one environment",
            )
        chosen[name] = the_record(group)
    return chosen


def check_same_configs(
    baseline: Path, candidate: Path, base: Mapping[str, object], cand: Mapping[str, object]
) -> None:
    """Refuse a config that only one side has a record of: it has nothing to pair with."""
    missing = sorted(set(base) ^ set(cand))
    if missing:
        name = missing[0]
        where, other = (candidate, baseline) if name in base else (baseline, candidate)
        raise RecordError(
            where,
            f"config {name}",
            f"no record of this config, but {other} has one: nothing to pair with",
        )


def compare_locations(
    baseline: Path,
    candidate: Path,
    settings: Settings,
    calibration: Sequence[Path] = (),
) -> Comparison:
    """`compare BASELINE CANDIDATE`: every config present on both sides, paired by name."""
    base_records = load_records(baseline)
    cand_records = load_records(candidate)
    extra = [r for location in calibration for r in load_records(location)]
    base = select(baseline, base_records)
    cand = select(candidate, cand_records)
    if not base:
        raise RecordError(baseline, None, "holds no GSM8K record")
    if not cand:
        raise RecordError(candidate, None, "holds no GSM8K record")
    check_same_configs(baseline, candidate, base, cand)
    sources = [base_records, cand_records, extra]
    results = []
    for name in sorted(base):
        b, c = base[name], cand[name]
        cal = find_calibration(sources, name, b.record.config.sha256, [b.cell, c.cell], settings)
        results.append(compare_records(b, c, settings, cal))
    return Comparison(settings, tuple(results)).in_family()
