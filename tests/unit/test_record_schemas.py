"""The published JSON Schemas (docs/schema/): what the models make, and every committed record
valid against its kind's schema, checked by jsonschema (an implementation other than ours)."""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from humming_matrix.divergence.record import AnswerLogprobs, DivergenceRecord
from humming_matrix.errors import RecordError
from humming_matrix.store.divergence import DIVERGENCE_RECORD
from humming_matrix.store.lm_eval import LM_EVAL_RECORD, LmEvalRecord, MetricCheck, SampleOutcome
from humming_matrix.store.records import RecordType
from humming_matrix.store.results import GSM8K_RECORD, ConfigInfo, Timings, load_gsm8k_record
from humming_matrix.store.schemas import RECORD_TYPES, schema_name, schema_text, write_schemas

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "docs" / "schema"
RESULTS = ROOT / "results"
BY_NAME = {t.name: t for t in RECORD_TYPES}


def kind_of(path: Path) -> str | None:
    """Which schema a committed file answers to, by its name as the store writes it."""
    if path.name == "humming-install.json":
        return "install"
    prefix = path.name.split("__", 1)[0]
    return prefix if "__" in path.name and prefix in BY_NAME else None


def validator(record_type: RecordType[Any]) -> jsonschema.protocols.Validator:
    schema = json.loads((SCHEMAS / schema_name(record_type)).read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def committed_records() -> list[tuple[str, Path]]:
    found = [(kind_of(p), p) for p in sorted(RESULTS.rglob("*.json"))]
    return [(kind, p) for kind, p in found if kind is not None]


def test_committed_schemas_are_what_the_models_make(tmp_path: Path) -> None:
    assert sorted(p.name for p in SCHEMAS.glob("*.schema.json")) == sorted(
        schema_name(t) for t in RECORD_TYPES
    )
    for record_type in RECORD_TYPES:
        committed = (SCHEMAS / schema_name(record_type)).read_text(encoding="utf-8")
        assert committed == schema_text(record_type), (
            f"docs/schema/{schema_name(record_type)} is stale: run tools/record_schemas.py"
        )
    written = write_schemas(tmp_path)
    assert [p.read_text(encoding="utf-8") for p in written] == [
        (SCHEMAS / p.name).read_text(encoding="utf-8") for p in written
    ]


def test_the_committed_results_cover_every_kind_they_hold() -> None:
    counts: dict[str, int] = {}
    for kind, _ in committed_records():
        counts[kind] = counts.get(kind, 0) + 1
    # results/h200-gsm8k (GSM8K runs and their sessions' install records), results/h200 (kernels)
    assert counts == {"gsm8k": 6, "install": 7, "kernels": 364}


@pytest.mark.parametrize("kind", ["gsm8k", "install", "kernels"])
def test_every_committed_record_is_valid_against_its_schema(kind: str) -> None:
    check = validator(BY_NAME[kind])
    for found, path in committed_records():
        if found == kind:
            errors = [e.message for e in check.iter_errors(json.loads(path.read_text()))]
            assert errors == [], f"{path}: {errors[:3]}"


def test_the_schema_and_the_loader_refuse_the_same_record(tmp_path: Path) -> None:
    source = next(p for kind, p in committed_records() if kind == "gsm8k")
    data = json.loads(source.read_text(encoding="utf-8"))
    data["questions"][3]["index"] = True
    data["kind"] = "gsm8k"
    errors = list(validator(GSM8K_RECORD).iter_errors(data))
    assert [(list(e.absolute_path), e.message) for e in errors] == [
        (["questions", 3, "index"], "True is not of type 'integer'")
    ]
    path = tmp_path / source.name
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(RecordError) as refused:
        load_gsm8k_record(path)
    assert str(refused.value) == f"{path}: questions[3].index: expected int, got bool"
    data["questions"][3]["index"] = 3
    data["kind"] = "kernels"
    assert [e.message for e in validator(GSM8K_RECORD).iter_errors(data)] == [
        "'gsm8k' was expected"
    ]


CONFIG = ConfigInfo("tiny", "/c/tiny.yaml", "ab" * 32, {"model_name": "m", "env": {"X": "***"}})


def lm_eval_record() -> LmEvalRecord:
    check = MetricCheck(
        "gsm8k", "exact_match,strict-match", "exact_match,strict-match", 0.5, 0.08, 0.5, 0.5, 2
    )
    return LmEvalRecord(
        run_id="20261203T100000Z-host-abcdef",
        created="2026-12-03T10:00:00+00:00",
        complete=True,
        config=CONFIG,
        environment={"humming_kernels": "0.1.19"},
        lm_eval={"version": "0.4.13"},
        checks=(check,),
        samples=(
            SampleOutcome("gsm8k", 0, "strict-match", {"exact_match": 1.0}, "1", "#### 1"),
            SampleOutcome("gsm8k", 1, "strict-match", {"exact_match": 0.0}, "2", "#### 3"),
        ),
        duration=2.5,
    )


def divergence_record() -> DivergenceRecord:
    answered = AnswerLogprobs(
        0,
        None,
        7,
        array("i", [5, 9]),
        array("f", [-0.5, -1.0]),
        array("i", [5, 6, 9, -1]),
        array("f", [-0.5, -1.5, -2.25, -9999.0]),
    )
    return DivergenceRecord(
        run_id="20261203T100000Z-host-abcdef",
        created="2026-12-03T10:00:00+00:00",
        complete=False,
        config=CONFIG,
        environment={"humming_kernels": "0.1.19"},
        top_k=2,
        questions=(answered, AnswerLogprobs(1, "HTTP 500: boom")),
        timings=Timings(None, 12.5, 3.25),
    )


def test_records_as_written_are_valid_against_their_schemas() -> None:
    # No lm-eval or divergence record is committed under results/: check what the writers write.
    lm_eval = lm_eval_record().to_json()
    divergence = divergence_record().to_json()
    assert list(validator(LM_EVAL_RECORD).iter_errors(lm_eval)) == []
    assert list(validator(DIVERGENCE_RECORD).iter_errors(divergence)) == []
    lm_eval["samples"][1]["doc_id"] = "1"
    divergence["questions"][0]["span_start"] = 7.5
    assert [e.message for e in validator(LM_EVAL_RECORD).iter_errors(lm_eval)] == [
        "'1' is not of type 'integer'"
    ]
    assert [e.message for e in validator(DIVERGENCE_RECORD).iter_errors(divergence)] == [
        "7.5 is not valid under any of the given schemas"
    ]


def test_the_lm_eval_and_divergence_loaders_name_the_same_keys(tmp_path: Path) -> None:
    lm_eval = lm_eval_record().to_json()
    lm_eval["samples"][1]["doc_id"] = "1"
    path = tmp_path / "lm-eval__tiny.json"
    path.write_text(json.dumps(lm_eval), encoding="utf-8")
    with pytest.raises(RecordError) as refused:
        LM_EVAL_RECORD.load(path)
    assert str(refused.value) == f"{path}: samples[1].doc_id: expected int, got str"
    divergence = divergence_record().to_json()
    divergence["questions"][0]["span_start"] = 7.5
    path = tmp_path / "divergence__tiny.json"
    path.write_text(json.dumps(divergence), encoding="utf-8")
    with pytest.raises(RecordError) as refused:
        DIVERGENCE_RECORD.load(path)
    assert str(refused.value) == f"{path}: questions[0].span_start: expected int or null, got float"
