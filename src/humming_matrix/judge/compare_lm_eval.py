"""Paired comparison of two lm-eval runs: the same statistics and verdict rule as GSM8K
(`humming_matrix.judge.compare`), one row per (task, `metric,filter`) that both records score per
document, with lm-eval's own pass rule (`measured >= value * (1 - rtol)`) as the backstop.

A row pairs lm-eval's logged per-document outcomes of the two runs: full credit (1.0) is right,
anything else wrong. Only metrics whose every logged value is 0 or 1 (exact_match, acc...) are
paired; a graded metric (a BLEU score, a perplexity) has no right -> wrong flip to count, so it is
judged by its backstop alone. The gate fails on a regression in any row, or on any metric the
candidate's config names that misses lm-eval's pass rule (or that lm-eval did not report).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from humming_matrix.errors import RecordError
from humming_matrix.judge.compare import (
    FlipDirection,
    JudgedByTest,
    Loaded,
    PairedTest,
    RunEnvironment,
    Settings,
    Verdict,
    check_same_configs,
    in_family,
    paired_line,
    paired_test,
    select,
)
from humming_matrix.judge.stats import Interval, PairedTable, wilson_interval
from humming_matrix.lmeval.record import load_lm_eval_record
from humming_matrix.lmeval.record import paired_outcomes as lm_eval_paired_outcomes
from humming_matrix.store.lm_eval import CheckState, LmEvalRecord, MetricCheck
from humming_matrix.store.results import RecordKind, record_paths

LoadedLmEvalRecord = Loaded[LmEvalRecord]


@dataclass(frozen=True)
class Run:
    """One side's record of a config."""

    path: Path
    run_id: str
    created: str
    cell: RunEnvironment
    session: str | None

    @classmethod
    def of(cls, loaded: LoadedLmEvalRecord) -> Run:
        session = loaded.record.environment.get("session")
        return cls(
            loaded.path,
            loaded.record.run_id,
            loaded.record.created,
            loaded.cell,
            str(session) if session else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "run_id": self.run_id,
            "created": self.created,
            "session": self.session,
            "environment": {
                "humming_kernels": self.cell.humming,
                "vllm": self.cell.vllm,
                "torch": self.cell.torch,
                "torch_cuda": self.cell.torch_cuda,
                "gpu": self.cell.gpu,
            },
        }


@dataclass(frozen=True)
class Score:
    """One side's full-credit count on the paired documents."""

    correct: int
    n: int
    interval: Interval

    @property
    def accuracy(self) -> float:
        return self.correct / self.n

    def to_json(self) -> dict[str, Any]:
        return {
            "correct": self.correct,
            "n": self.n,
            "accuracy": self.accuracy,
            "accuracy_interval": [self.interval.low, self.interval.high],
        }


@dataclass(frozen=True)
class DocFlip:
    doc_id: int
    target: str
    baseline_prediction: str
    candidate_prediction: str
    direction: FlipDirection


def backstop_failed(check: MetricCheck) -> bool:
    return check.verdict is not CheckState.PASSED


def backstop_text(check: MetricCheck) -> str:
    """The candidate against lm-eval's pass rule, as the GSM8K threshold line shows it."""
    if check.measured is None:
        return f"MISSING (lm-eval reported no {check.key})"
    verdict = "FAIL" if backstop_failed(check) else "pass"
    return (
        f"{verdict} ({check.measured:.4f} vs {check.expected:g} * (1 - {check.rtol:g}) = "
        f"{check.threshold:.4f})"
    )


def _check_json(check: MetricCheck) -> dict[str, Any]:
    return {
        "name": check.name,
        "key": check.key,
        "expected": check.expected,
        "rtol": check.rtol,
        "threshold": check.threshold,
        "measured": check.measured,
        "num_samples": check.num_samples,
        "verdict": check.verdict.value,
        "failed": backstop_failed(check),
    }


@dataclass(frozen=True)
class MetricComparison(JudgedByTest):
    """One (task, `metric,filter`) of one config, paired document by document."""

    config: str
    task: str
    key: str
    baseline: Score
    candidate: Score
    test: PairedTest
    flips: tuple[DocFlip, ...]
    backstop: MetricCheck | None  # the candidate's check of this key; None if the config names none

    @property
    def table(self) -> PairedTable:
        return self.test.table

    @property
    def gate_failed(self) -> bool:
        return self.verdict is Verdict.REGRESSION or (
            self.backstop is not None and backstop_failed(self.backstop)
        )

    @property
    def name(self) -> str:
        return f"{self.config} {self.task} {self.key}"

    def line(self) -> str:
        """The comparison in one line (logs, Markdown)."""
        text = paired_line(
            self.name, self.test, self.baseline.accuracy, self.candidate.accuracy, "documents"
        )
        if self.backstop is not None and backstop_failed(self.backstop):
            text += f"; backstop {backstop_text(self.backstop)}"
        return text

    def to_json(self) -> dict[str, Any]:
        t = self.table
        return {
            "task": self.task,
            "key": self.key,
            "verdict": self.verdict.value,
            "gate_failed": self.gate_failed,
            "baseline": self.baseline.to_json(),
            "candidate": self.candidate.to_json(),
            "paired_documents": t.n,
            **self.paired_json(),
            "flips": [
                {
                    "doc_id": f.doc_id,
                    "target": f.target,
                    "baseline_prediction": f.baseline_prediction,
                    "candidate_prediction": f.candidate_prediction,
                    "direction": f.direction.value,
                }
                for f in self.flips
            ],
            "backstop": None if self.backstop is None else _check_json(self.backstop),
            "line": self.line(),
        }


@dataclass(frozen=True)
class LmEvalConfigComparison:
    config: str
    sha256: str
    baseline: Run
    candidate: Run
    metrics: tuple[MetricComparison, ...]
    # The candidate's checks with no paired row (a group task, a graded metric): backstop only.
    unpaired_checks: tuple[MetricCheck, ...]

    @property
    def gate_failed(self) -> bool:
        return any(m.gate_failed for m in self.metrics) or any(
            backstop_failed(c) for c in self.unpaired_checks
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "config_sha256": self.sha256,
            "gate_failed": self.gate_failed,
            "baseline": self.baseline.to_json(),
            "candidate": self.candidate.to_json(),
            "metrics": [m.to_json() for m in self.metrics],
            "unpaired_checks": [{"task": c.task, **_check_json(c)} for c in self.unpaired_checks],
        }


@dataclass(frozen=True)
class LmEvalComparison:
    settings: Settings
    configs: tuple[LmEvalConfigComparison, ...]

    @property
    def gate_failed(self) -> bool:
        return any(c.gate_failed for c in self.configs)

    @property
    def metrics(self) -> tuple[MetricComparison, ...]:
        return tuple(m for c in self.configs for m in c.metrics)

    @property
    def judged(self) -> int:
        """Paired rows plus backstop-only checks."""
        return len(self.metrics) + sum(len(c.unpaired_checks) for c in self.configs)

    @property
    def failed(self) -> int:
        return sum(m.gate_failed for m in self.metrics) + sum(
            backstop_failed(u) for c in self.configs for u in c.unpaired_checks
        )

    @property
    def tests(self) -> tuple[PairedTest, ...]:
        """The family members this comparison contributes, in order."""
        return tuple(m.test for m in self.metrics)

    def with_tests(self, tests: Sequence[PairedTest]) -> LmEvalComparison:
        given = iter(tests)
        configs = tuple(
            replace(c, metrics=tuple(replace(m, test=next(given)) for m in c.metrics))
            for c in self.configs
        )
        if next(given, None) is not None:
            raise ValueError("more tests than metrics")
        return replace(self, configs=configs)

    def in_family(self) -> LmEvalComparison:
        return self.with_tests(in_family(self.tests))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": RecordKind.LM_EVAL.value,
            "alpha": self.settings.alpha,
            "min_effect": self.settings.min_effect,
            "confidence": self.settings.confidence,
            "power": self.settings.power,
            "gate_failed": self.gate_failed,
            "configs": [c.to_json() for c in self.configs],
        }


def _keys(record: LmEvalRecord) -> dict[tuple[str, str], bool]:
    """(task, `metric,filter`) -> whether every logged value is 0 or 1 (pairable)."""
    binary: dict[tuple[str, str], bool] = {}
    for s in record.samples:
        for metric, value in s.values.items():
            key = (s.task, f"{metric},{s.filter}")
            binary[key] = binary.get(key, True) and value in (0.0, 1.0)
    return binary


def _describe(docs: Sequence[int]) -> str:
    return f"{len(docs)} documents, {min(docs)}..{max(docs)}" if docs else "no documents"


def _check_pairable(baseline: LoadedLmEvalRecord, candidate: LoadedLmEvalRecord) -> None:
    """Refuse what paired judging must refuse, naming the record file and key (the checks in
    `lmeval.record.paired_outcomes` name only the config file)."""
    base, cand = baseline.record, candidate.record
    for side in (baseline, candidate):
        if not side.record.complete:
            raise RecordError(
                side.path,
                "complete",
                f"record {side.record.run_id} of config {side.record.config.name} is incomplete; "
                "compare refuses incomplete records",
            )
    if base.config.sha256 != cand.config.sha256:
        raise RecordError(
            candidate.path,
            "config.sha256",
            f"config {cand.config.name} differs from the baseline's ({cand.config.sha256[:12]} vs "
            f"{base.config.sha256[:12]} in {baseline.path}): different configs cannot be paired",
        )


def lm_eval_paired_table(
    baseline: LmEvalRecord, candidate: LmEvalRecord, task: str, key: str
) -> PairedTable:
    """The 2x2 table of one metric of two runs, judged exactly as a GSM8K config's table."""
    counts = Counter((b, c) for _, b, c in lm_eval_paired_outcomes(baseline, candidate, task, key))
    return PairedTable(
        counts[True, True], counts[True, False], counts[False, True], counts[False, False]
    )


def _pairable_keys(
    baseline: LoadedLmEvalRecord, candidate: LoadedLmEvalRecord
) -> list[tuple[str, str]]:
    base_keys, cand_keys = _keys(baseline.record), _keys(candidate.record)
    # In the order the config names its metrics (as lm-eval's printout has them), then the rest.
    named = [(c.task, c.key) for c in candidate.record.checks]
    keys = sorted(
        (k for k in set(base_keys) & set(cand_keys) if base_keys[k] and cand_keys[k]),
        key=lambda k: (named.index(k) if k in named else len(named), k),
    )
    for task, key in keys:
        base_docs = sorted(baseline.record.outcomes(task, key))
        cand_docs = sorted(candidate.record.outcomes(task, key))
        if base_docs != cand_docs:
            raise RecordError(
                candidate.path,
                f"samples[{task} {key}]",
                f"documents differ from the baseline's in {baseline.path} ({_describe(cand_docs)} "
                f"vs {_describe(base_docs)}): run both with the same --limit",
            )
    if not keys:
        raise RecordError(
            candidate.path,
            "samples",
            f"no task and metric scored 0/1 per document in both this record and "
            f"{baseline.path}: nothing to pair",
        )
    return keys


def _flips(
    baseline: LmEvalRecord, candidate: LmEvalRecord, task: str, key: str
) -> tuple[DocFlip, ...]:
    filter_name = key.split(",", 1)[1]

    def by_doc(record: LmEvalRecord) -> dict[int, tuple[str, str]]:
        return {
            s.doc_id: (s.prediction, s.target)
            for s in record.samples
            if s.task == task and s.filter == filter_name
        }

    base, cand = by_doc(baseline), by_doc(candidate)
    return tuple(
        DocFlip(
            doc,
            base[doc][1],
            base[doc][0],
            cand[doc][0],
            FlipDirection.RIGHT_TO_WRONG if right else FlipDirection.WRONG_TO_RIGHT,
        )
        for doc, right, other in lm_eval_paired_outcomes(baseline, candidate, task, key)
        if right != other
    )


def compare_metric(
    baseline: LoadedLmEvalRecord,
    candidate: LoadedLmEvalRecord,
    task: str,
    key: str,
    settings: Settings,
) -> MetricComparison:
    table_ = lm_eval_paired_table(baseline.record, candidate.record, task, key)
    backstop = next((c for c in candidate.record.checks if c.task == task and c.key == key), None)
    return MetricComparison(
        config=candidate.record.config.name,
        task=task,
        key=key,
        baseline=Score(
            table_.baseline_correct,
            table_.n,
            wilson_interval(table_.baseline_correct, table_.n, settings.confidence),
        ),
        candidate=Score(
            table_.candidate_correct,
            table_.n,
            wilson_interval(table_.candidate_correct, table_.n, settings.confidence),
        ),
        test=paired_test(table_, settings),
        flips=_flips(baseline.record, candidate.record, task, key),
        backstop=backstop,
    )


def compare_lm_eval_records(
    baseline: LoadedLmEvalRecord, candidate: LoadedLmEvalRecord, settings: Settings
) -> LmEvalConfigComparison:
    _check_pairable(baseline, candidate)
    keys = _pairable_keys(baseline, candidate)
    metrics = tuple(compare_metric(baseline, candidate, task, key, settings) for task, key in keys)
    paired = set(keys)
    return LmEvalConfigComparison(
        config=candidate.record.config.name,
        sha256=candidate.record.config.sha256,
        baseline=Run.of(baseline),
        candidate=Run.of(candidate),
        metrics=metrics,
        unpaired_checks=tuple(c for c in candidate.record.checks if (c.task, c.key) not in paired),
    )


def load_lm_eval_records(location: Path) -> list[LoadedLmEvalRecord]:
    """The lm-eval records in a record file or a store directory."""
    return [
        LoadedLmEvalRecord(p, load_lm_eval_record(p))
        for p in record_paths(location, RecordKind.LM_EVAL)
    ]


def compare_lm_eval_locations(
    baseline: Path, candidate: Path, settings: Settings
) -> LmEvalComparison:
    """`compare BASELINE CANDIDATE` for lm-eval records: every config on both sides, by name."""
    base = select(baseline, load_lm_eval_records(baseline))
    cand = select(candidate, load_lm_eval_records(candidate))
    if not base:
        raise RecordError(baseline, None, "holds no lm-eval record")
    if not cand:
        raise RecordError(candidate, None, "holds no lm-eval record")
    check_same_configs(baseline, candidate, base, cand)
    return LmEvalComparison(
        settings, tuple(compare_lm_eval_records(base[n], cand[n], settings) for n in sorted(base))
    ).in_family()
