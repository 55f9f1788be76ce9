"""Divergence records: the compact encoding round-trips exactly; bad records name file and key."""

from __future__ import annotations

import base64
import json
import struct
from array import array
from pathlib import Path

import pytest

from humming_matrix.divergence.record import (
    AnswerLogprobs,
    DivergenceRecord,
    load_divergence_record,
    write_divergence_record,
)
from humming_matrix.errors import RecordError
from humming_matrix.store.results import ConfigInfo, Timings


def record() -> DivergenceRecord:
    a = AnswerLogprobs(
        0,
        None,
        7,
        array("i", [5, 9]),
        array("f", [-0.5, -2.25]),
        array("i", [5, 1, 9, -1]),
        array("f", [-0.5, -1.0, -2.25, -9999.0]),
    )
    return DivergenceRecord(
        run_id="20261203T100000Z-host-abcdef",
        created="2026-12-03T10:00:00+00:00",
        complete=True,
        config=ConfigInfo("tiny", "tiny.yaml", "ab" * 32, {"num_fewshot": 5}),
        environment={"humming_kernels": "0.1.19"},
        top_k=2,
        questions=(a, AnswerLogprobs(1, "HTTP 500: boom")),
        server={"endpoint": "http://x"},
        timings=Timings(None, 12.5, 3.25),
    )


def test_a_record_round_trips_and_its_arrays_are_little_endian_base64(tmp_path: Path) -> None:
    path = write_divergence_record(tmp_path, record())
    assert path.name == "divergence__tiny__0.1.19__20261203T100000Z-host-abcdef.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    q0 = raw["questions"][0]
    assert base64.b64decode(q0["tokens"]) == struct.pack("<2i", 5, 9)
    assert base64.b64decode(q0["top_logprobs"]) == struct.pack("<4f", -0.5, -1.0, -2.25, -9999.0)
    assert raw["questions"][1] == {"index": 1, "error": "HTTP 500: boom"}
    loaded = load_divergence_record(path)
    assert loaded == record()
    assert list(loaded.questions[0].top(1, 2)) == [(9, -2.25)]  # the pad is not listed
    assert (loaded.error_count, loaded.token_count) == (1, 2)


def test_records_are_never_overwritten(tmp_path: Path) -> None:
    write_divergence_record(tmp_path, record())
    with pytest.raises(RecordError, match="records are never overwritten"):
        write_divergence_record(tmp_path, record())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(kind="gsm8k"), "kind: expected 'divergence', got 'gsm8k'"),
        (lambda d: d.update(top_k=0), "top_k: must be at least 1, got 0"),
        (lambda d: d["questions"][0].update(tokens="%%%"), "questions[0].tokens: not base64"),
        (
            lambda d: d["questions"][0].update(top_ids=base64.b64encode(b"\0" * 12).decode()),
            "questions[0].top_ids: 3 values, expected 4 (2 tokens, top_k 2)",
        ),
        (
            lambda d: d["questions"][0].update(logprobs=base64.b64encode(b"\0" * 5).decode()),
            "questions[0].logprobs: 5 bytes is not a whole number of items",
        ),
        (lambda d: d["questions"][0].pop("span_start"), "questions[0].span_start: missing"),
    ],
)
def test_a_bad_record_is_refused_naming_its_file_and_key(
    tmp_path: Path, edit: object, message: str
) -> None:
    data = record().to_json()
    edit(data)  # type: ignore[operator]
    path = tmp_path / "divergence__bad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(RecordError) as caught:
        load_divergence_record(path)
    assert str(caught.value) == f"{path}: {message}"
