"""The divergence record's model, as its file holds it (`divergence.record` reads and writes it).

Per question: the forced answer's token ids, their logprobs and the top-k at each position, each
array base64 of little-endian int32 (ids) or float32 (logprobs); a question whose request failed
carries its `error` and no arrays. `divergence.record` decodes the arrays and checks their
lengths against `top_k`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from humming_matrix.store.records import RecordType
from humming_matrix.store.results import ConfigInfo, Timings

KIND = "divergence"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ForcedAnswerFile:
    """One question. The arrays and `span_start` are there exactly when `error` is null."""

    index: int
    error: str | None
    span_start: int | None = None
    tokens: str | None = None
    logprobs: str | None = None
    top_ids: str | None = None
    top_logprobs: str | None = None


@dataclass(frozen=True)
class DivergenceFile:
    top_k: int  # first: every array is read by it, so a file without it is refused for that
    run_id: str
    created: str
    complete: bool
    config: ConfigInfo
    environment: Mapping[str, Any]
    questions: tuple[ForcedAnswerFile, ...]
    server: Mapping[str, Any] = field(default_factory=dict)
    startup: Mapping[str, Any] | None = None
    timings: Timings | None = None
    schema_version: int = SCHEMA_VERSION
    kind: str = KIND


DIVERGENCE_RECORD = RecordType(
    "divergence", DivergenceFile, KIND, SCHEMA_VERSION, "humming-matrix divergence record"
)
