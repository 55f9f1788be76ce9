"""The `lm-eval` result record: lm-eval's reported metrics, vLLM's pass rule, per-sample outcomes.

vLLM's lm-eval suite passes a metric when `measured >= value * (1 - rtol)` (rtol default 0.08).
The record keeps that verdict for every metric the config names, the value lm-eval reported, and
the mean of lm-eval's own logged per-sample values (the same number for mean-aggregated metrics
such as exact_match; corpus-level metrics differ), plus one outcome per (task, document, filter)
so two runs can be paired question by question, as GSM8K records are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from humming_matrix.errors import RecordError
from humming_matrix.lmeval.config import LmEvalConfig
from humming_matrix.store.results import (
    SCHEMA_VERSION,
    ConfigInfo,
    RecordKind,
    read_json,
    record_filename,
    record_paths,
    write_json_atomic,
)


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
            "config": {
                "name": self.config.name,
                "path": self.config.path,
                "sha256": self.config.sha256,
                "fields": dict(self.config.fields),
            },
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
        where = "schema_version"
        try:
            if data["schema_version"] != SCHEMA_VERSION:
                raise RecordError(path, where, f"expected {SCHEMA_VERSION}")
            where = "kind"
            if data["kind"] != RecordKind.LM_EVAL.value:
                raise RecordError(path, where, f"expected 'lm-eval', got {data['kind']!r}")
            where = "config"
            config = data["config"]
            info = ConfigInfo(
                str(config["name"]),
                str(config["path"]),
                str(config["sha256"]),
                dict(config["fields"]),
            )
            checks = []
            for i, c in enumerate(data["metrics"]["checks"]):
                where = f"metrics.checks[{i}]"
                checks.append(
                    MetricCheck(
                        task=str(c["task"]),
                        name=str(c["name"]),
                        key=str(c["key"]),
                        expected=float(c["expected"]),
                        rtol=float(c["rtol"]),
                        measured=None if c["measured"] is None else float(c["measured"]),
                        per_sample=None if c["per_sample"] is None else float(c["per_sample"]),
                        num_samples=int(c["num_samples"]),
                    )
                )
            samples = []
            for i, s in enumerate(data["samples"]):
                where = f"samples[{i}]"
                samples.append(
                    SampleOutcome(
                        task=str(s["task"]),
                        doc_id=int(s["doc_id"]),
                        filter=str(s["filter"]),
                        values={str(k): float(v) for k, v in s["values"].items()},
                        prediction=str(s["prediction"]),
                        target=str(s["target"]),
                        output=str(s.get("output", "")),
                    )
                )
            where = "run_id"
            return cls(
                run_id=str(data["run_id"]),
                created=str(data["created"]),
                complete=bool(data["complete"]),
                config=info,
                environment=dict(data["environment"]),
                server=dict(data.get("server", {})),
                lm_eval=dict(data["lm_eval"]),
                checks=tuple(checks),
                samples=tuple(samples),
                duration=float(data["metrics"]["duration"]),
            )
        except KeyError as exc:
            raise RecordError(path, where, f"missing {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise RecordError(path, where, f"malformed ({exc})") from None


def _number(value: Any) -> float | None:
    """lm-eval writes 'N/A' where a value cannot be computed; that is no measurement."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) else float(value)


def samples_from_output(output: Mapping[str, Any], path: Path) -> tuple[SampleOutcome, ...]:
    samples: list[SampleOutcome] = []
    try:
        for task, rows in output["samples"].items():
            for row in rows:
                samples.append(
                    SampleOutcome(
                        task=str(task),
                        doc_id=int(row["doc_id"]),
                        filter=str(row["filter"]),
                        values={
                            str(k): float(v)
                            for k, v in row["values"].items()
                            if _number(v) is not None
                        },
                        prediction=str(row["prediction"]),
                        target=str(row["target"]),
                        output=str(row.get("output", "")),
                    )
                )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RecordError(path, "samples", f"lm-eval output is malformed ({exc!r})") from None
    samples.sort(key=lambda s: (s.task, s.filter, s.doc_id))
    return tuple(samples)


def checks_from_output(
    config: LmEvalConfig, output: Mapping[str, Any], samples: Sequence[SampleOutcome], path: Path
) -> tuple[MetricCheck, ...]:
    results = output.get("results")
    if not isinstance(results, dict):
        raise RecordError(path, "results", "lm-eval output has no results")
    checks = []
    for task in config.tasks:
        reported = results.get(task.name, {})
        for metric in task.metrics:
            values = [
                s.values[metric.metric]
                for s in samples
                if s.task == task.name and s.filter == metric.filter and metric.metric in s.values
            ]
            per_sample = sum(values) / len(values) if values else None
            measured = _number(reported.get(metric.key))
            checks.append(
                MetricCheck(
                    task.name,
                    metric.name,
                    metric.key,
                    metric.value,
                    config.rtol,
                    measured,
                    per_sample,
                    len(values),
                )
            )
    return tuple(checks)


def write_lm_eval_record(store: Path, record: LmEvalRecord) -> Path:
    name = record_filename(record.kind, record.config.name, record.humming_version, record.run_id)
    return write_json_atomic(store / name, record.to_json())


def load_lm_eval_record(path: Path) -> LmEvalRecord:
    return LmEvalRecord.from_json(read_json(path), path)


def iter_lm_eval_records(location: Path) -> list[tuple[Path, LmEvalRecord]]:
    return [(p, load_lm_eval_record(p)) for p in record_paths(location, RecordKind.LM_EVAL)]


def paired_outcomes(
    baseline: LmEvalRecord, candidate: LmEvalRecord, task: str, key: str
) -> list[tuple[int, bool, bool]]:
    """(doc_id, baseline right, candidate right) for one metric of two runs of one config, in
    doc order; refuses what paired judging must refuse."""
    for record in (baseline, candidate):
        if not record.complete:
            raise RecordError(
                Path(record.config.path),
                None,
                f"run {record.run_id} is incomplete; it cannot be judged",
            )
    if baseline.config.sha256 != candidate.config.sha256:
        raise RecordError(
            Path(candidate.config.path),
            None,
            f"config {candidate.config.name!r} differs between the runs (sha256)",
        )
    base, cand = baseline.outcomes(task, key), candidate.outcomes(task, key)
    if not base or set(base) != set(cand):
        raise RecordError(
            Path(candidate.config.path),
            f"{task}.{key}",
            "the runs did not score the same documents",
        )
    return [(doc, base[doc], cand[doc]) for doc in sorted(base)]
