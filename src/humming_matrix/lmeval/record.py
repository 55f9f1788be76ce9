"""The `lm-eval` record from lm-eval's output, written to and read from a store, and paired.

The record's model is `store.lm_eval`; this module turns lm-eval's output into one (samples and
vLLM's metric checks), writes it, loads it, and pairs two runs of one config per document.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from humming_matrix.errors import RecordError
from humming_matrix.lmeval.config import LmEvalConfig
from humming_matrix.store.lm_eval import (
    LM_EVAL_RECORD,
    LmEvalRecord,
    MetricCheck,
    SampleOutcome,
)
from humming_matrix.store.records import load_record
from humming_matrix.store.results import (
    RecordKind,
    record_filename,
    record_paths,
    write_json_atomic,
)


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
    return load_record(path, LM_EVAL_RECORD).record()


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
