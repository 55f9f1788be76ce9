"""Divergence records: per question and per answer token, the forced token's logprob and the
server's top-k, stored compactly.

Arrays are little-endian int32 (token ids) and float32 (logprobs: what vLLM computes them in),
base64 in the JSON, so 1319 questions at top-5 stay a few MB. A record is written once, never
overwritten, through the same atomic store writes as GSM8K records; its file name starts
`divergence__`, so `report` and `compare` of accuracy never mistake it for one of theirs.
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from humming_matrix.errors import RecordError
from humming_matrix.store.divergence import (
    DIVERGENCE_RECORD,
    KIND,
    SCHEMA_VERSION,
    ForcedAnswerFile,
)
from humming_matrix.store.records import read_json
from humming_matrix.store.results import ConfigInfo, Timings, write_json_atomic

# Where the server listed fewer than k alternatives (a vocabulary smaller than k).
PAD_ID = -1
PAD_LOGPROB = -9999.0  # vLLM's own stand-in for -inf in JSON


def _encode(values: array[Any]) -> str:
    if sys.byteorder == "big":
        values = array(values.typecode, values)
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def _decode(text: str, typecode: str, path: Path, where: str) -> array[Any]:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise RecordError(path, where, "not base64") from None
    values = array(typecode)
    if len(raw) % values.itemsize:
        raise RecordError(path, where, f"{len(raw)} bytes is not a whole number of items")
    values.frombytes(raw)
    if sys.byteorder == "big":
        values.byteswap()
    return values


@dataclass(frozen=True)
class AnswerLogprobs:
    """One question's forced answer: token ids, each token's logprob, and the top-k at each
    position (row-major, `top_k` per position, best first). `error` set: the request failed
    and the arrays are empty."""

    index: int
    error: str | None = None
    span_start: int = 0  # position of the answer's first token in the whole forced text
    tokens: array[int] = field(default_factory=lambda: array("i"))
    logprobs: array[float] = field(default_factory=lambda: array("f"))
    top_ids: array[int] = field(default_factory=lambda: array("i"))
    top_logprobs: array[float] = field(default_factory=lambda: array("f"))

    @property
    def answered(self) -> bool:
        return self.error is None

    def __len__(self) -> int:
        return len(self.tokens)

    def top(self, position: int, k: int) -> Iterator[tuple[int, float]]:
        """(token id, logprob) of the top k at `position`, best first, without padding."""
        for j in range(position * k, position * k + k):
            if self.top_ids[j] != PAD_ID:
                yield self.top_ids[j], self.top_logprobs[j]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"index": self.index, "error": self.error}
        if self.error is None:
            data.update(
                span_start=self.span_start,
                tokens=_encode(self.tokens),
                logprobs=_encode(self.logprobs),
                top_ids=_encode(self.top_ids),
                top_logprobs=_encode(self.top_logprobs),
            )
        return data


@dataclass(frozen=True)
class DivergenceRecord:
    run_id: str
    created: str
    complete: bool
    config: ConfigInfo
    environment: Mapping[str, Any]
    top_k: int
    questions: tuple[AnswerLogprobs, ...]
    server: Mapping[str, Any] = field(default_factory=dict)
    timings: Timings | None = None
    startup: Mapping[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def humming_version(self) -> str | None:
        value = self.environment.get("humming_kernels")
        return None if value is None else str(value)

    @property
    def error_count(self) -> int:
        return sum(not q.answered for q in self.questions)

    @property
    def token_count(self) -> int:
        return sum(len(q) for q in self.questions)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": KIND,
            "run_id": self.run_id,
            "created": self.created,
            "complete": self.complete,
            "config": self.config.to_json(),
            "environment": dict(self.environment),
            "server": dict(self.server),
            "startup": None if self.startup is None else dict(self.startup),
            "timings": None if self.timings is None else self.timings.to_json(),
            "top_k": self.top_k,
            "questions": [q.to_json() for q in self.questions],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: Path) -> DivergenceRecord:
        stored = DIVERGENCE_RECORD.parse(data, path)
        if stored.top_k < 1:
            raise RecordError(path, "top_k", f"must be at least 1, got {stored.top_k}")
        return cls(
            run_id=stored.run_id,
            created=stored.created,
            complete=stored.complete,
            config=stored.config,
            environment=stored.environment,
            server=stored.server,
            startup=stored.startup,
            timings=stored.timings,
            top_k=stored.top_k,
            questions=tuple(
                _question(q, f"questions[{i}]", stored.top_k, path)
                for i, q in enumerate(stored.questions)
            ),
        )


def _question(q: ForcedAnswerFile, where: str, top_k: int, path: Path) -> AnswerLogprobs:
    if q.error is not None:
        return AnswerLogprobs(q.index, q.error)
    encoded = {
        "tokens": q.tokens,
        "logprobs": q.logprobs,
        "top_ids": q.top_ids,
        "top_logprobs": q.top_logprobs,
    }
    if q.span_start is None:
        raise RecordError(path, f"{where}.span_start", "missing")
    arrays = {}
    for (name, text), code in zip(encoded.items(), ("i", "f", "i", "f"), strict=True):
        if text is None:
            raise RecordError(path, f"{where}.{name}", "missing")
        arrays[name] = _decode(text, code, path, f"{where}.{name}")
    n = len(arrays["tokens"])
    expected = {"tokens": n, "logprobs": n, "top_ids": n * top_k, "top_logprobs": n * top_k}
    for name, length in expected.items():
        if len(arrays[name]) != length:
            raise RecordError(
                path,
                f"{where}.{name}",
                f"{len(arrays[name])} values, expected {length} ({n} tokens, top_k {top_k})",
            )
    return AnswerLogprobs(q.index, None, q.span_start, **arrays)


def record_filename(config_name: str, humming: str | None, run_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in config_name)
    return f"{KIND}__{safe}__{humming or 'unknown'}__{run_id}.json"


def write_divergence_record(store: Path, record: DivergenceRecord) -> Path:
    name = record_filename(record.config.name, record.humming_version, record.run_id)
    return write_json_atomic(store / name, record.to_json())


def load_divergence_record(path: Path) -> DivergenceRecord:
    return DivergenceRecord.from_json(read_json(path), path)


def divergence_paths(location: Path) -> list[Path]:
    """A record file, or every divergence record under a directory (recursively), name order."""
    if location.is_file():
        return [location]
    if not location.is_dir():
        raise RecordError(location, None, "no such file or directory")
    return sorted(p for p in location.rglob(f"{KIND}__*.json") if not p.name.startswith(".tmp-"))


def load_divergence_records(location: Path) -> list[tuple[Path, DivergenceRecord]]:
    return [(p, load_divergence_record(p)) for p in divergence_paths(location)]


def pad_top(entries: Sequence[tuple[int, float]], k: int) -> tuple[list[int], list[float]]:
    """The first k (id, logprob) pairs, padded to k."""
    kept = list(entries[:k])
    kept += [(PAD_ID, PAD_LOGPROB)] * (k - len(kept))
    return [i for i, _ in kept], [lp for _, lp in kept]
