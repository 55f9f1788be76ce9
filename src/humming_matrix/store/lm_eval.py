"""The `lm-eval` result record: lm-eval's reported metrics, vLLM's pass rule, per-sample outcomes.

vLLM's lm-eval suite passes a metric when `measured >= value * (1 - rtol)` (rtol default 0.08).
The record keeps that verdict for every metric the config names, the value lm-eval reported, and
the mean of lm-eval's own logged per-sample values (the same number for mean-aggregated metrics
such as exact_match; corpus-level metrics differ), plus one outcome per (task, document, filter)
so two runs can be paired question by question, as GSM8K records are. `lmeval.record` builds it
from lm-eval's output and writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from humming_matrix.store.records import RecordType
from humming_matrix.store.results import SCHEMA_VERSION, ConfigInfo, RecordKind


class CheckState(str, Enum):
    """The state of one metric against vLLM's pass rule (not a comparison's verdict, which is
    `compare.Verdict`)."""

    PASSED = "passed"
    FAILED = "failed"
    MISSING = "missing"  # lm-eval reported no such metric: the config cannot pass


def passes(measured: float, expected: float, rtol: float) -> bool:
    """vLLM's lm-eval gate, as its test writes it."""
    return measured >= expected * (1 - rtol)


@dataclass(frozen=True)
class SampleOutcome:
    """One document of one task under one filter: lm-eval's per-sample metric values."""

    task: str
    doc_id: int
    filter: str
    values: Mapping[str, float]
    prediction: str
    target: str
    output: str = ""

    def correct(self, metric: str) -> bool:
        """For 0/1 metrics such as exact_match: full credit."""
        return self.values.get(metric, 0.0) >= 1.0


@dataclass(frozen=True)
class MetricCheck:
    task: str
    name: str  # as the config writes it
    key: str  # `metric,filter`, as lm-eval reports it
    expected: float
    rtol: float
    measured: float | None  # lm-eval's reported value
    per_sample: float | None  # the mean of the logged per-sample values
    num_samples: int

    @property
    def threshold(self) -> float:
        return self.expected * (1 - self.rtol)

    @property
    def verdict(self) -> CheckState:
        if self.measured is None:
            return CheckState.MISSING
        return (
            CheckState.PASSED
            if passes(self.measured, self.expected, self.rtol)
            else CheckState.FAILED
        )

    def line(self) -> str:
        """vLLM's printout, plus the verdict and the threshold it was judged against."""
        measured = "missing" if self.measured is None else f"{self.measured:.4f}"
        return (
            f"{self.task} | {self.name}: ground_truth={self.expected:.4f} | "
            f"measured={measured} | rtol={self.rtol:g} | threshold={self.threshold:.4f} | "
            f"n={self.num_samples} -> {self.verdict.value.upper()}"
        )


@dataclass(frozen=True)
class LmEvalRecord:
    run_id: str
    created: str
    complete: bool
    config: ConfigInfo
    environment: Mapping[str, Any]
    lm_eval: Mapping[str, Any]
    checks: tuple[MetricCheck, ...]
    samples: tuple[SampleOutcome, ...]
    duration: float
    server: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    kind: RecordKind = RecordKind.LM_EVAL

    @property
    def passed(self) -> bool:
        return self.complete and all(c.verdict is CheckState.PASSED for c in self.checks)

    @property
    def humming_version(self) -> str | None:
        value = self.environment.get("humming_kernels")
        return str(value) if value is not None else None

    def outcomes(self, task: str, key: str) -> dict[int, bool]:
        """doc_id -> full credit, for one task and one `metric,filter`: what paired judging
        pairs across two runs."""
        metric, filter_name = key.split(",", 1)
        return {
            s.doc_id: s.correct(metric)
            for s in self.samples
            if s.task == task and s.filter == filter_name and metric in s.values
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": self.kind.value,
            "run_id": self.run_id,
            "created": self.created,
            "complete": self.complete,
            "config": self.config.to_json(),
            "environment": dict(self.environment),
            "server": dict(self.server),
            "lm_eval": dict(self.lm_eval),
            "metrics": {
                "passed": self.passed,
                "duration": self.duration,
                "checks": [
                    {
                        "task": c.task,
                        "name": c.name,
                        "key": c.key,
                        "expected": c.expected,
                        "rtol": c.rtol,
                        "threshold": c.threshold,
                        "measured": c.measured,
                        "per_sample": c.per_sample,
                        "num_samples": c.num_samples,
                        "verdict": c.verdict.value,
                    }
                    for c in self.checks
                ],
            },
            "samples": [
                {
                    "task": s.task,
                    "doc_id": s.doc_id,
                    "filter": s.filter,
                    "values": dict(s.values),
                    "prediction": s.prediction,
                    "target": s.target,
                    "output": s.output,
                }
                for s in self.samples
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: Path) -> LmEvalRecord:
        return LM_EVAL_RECORD.parse(data, path).record()


@dataclass(frozen=True)
class LmEvalMetrics:
    """A file's `metrics`: what `LmEvalRecord.to_json` writes there."""

    duration: float
    checks: tuple[MetricCheck, ...]
    passed: bool  # derived from the checks when written; read back from them, not from this


@dataclass(frozen=True)
class LmEvalFile:
    """An lm-eval record as its file holds it (checks and duration under `metrics`)."""

    run_id: str
    created: str
    complete: bool
    config: ConfigInfo
    environment: Mapping[str, Any]
    lm_eval: Mapping[str, Any]
    metrics: LmEvalMetrics
    samples: tuple[SampleOutcome, ...]
    server: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    kind: RecordKind = RecordKind.LM_EVAL

    def record(self) -> LmEvalRecord:
        return LmEvalRecord(
            run_id=self.run_id,
            created=self.created,
            complete=self.complete,
            config=self.config,
            environment=self.environment,
            lm_eval=self.lm_eval,
            checks=self.metrics.checks,
            samples=self.samples,
            duration=self.metrics.duration,
            server=self.server,
        )


LM_EVAL_RECORD = RecordType(
    "lm-eval", LmEvalFile, RecordKind.LM_EVAL.value, SCHEMA_VERSION, "humming-matrix lm-eval record"
)
