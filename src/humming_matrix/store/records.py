"""Records as typed models: one loader that validates, one JSON Schema per record kind.

Every record kind is a frozen dataclass (or a tree of them) shaped exactly like its JSON file;
msgspec checks a file against it (strictly: no "3" for an int, no `true` for a number) and builds
it in one pass, and writes the kind's JSON Schema (`docs/schema/<name>.schema.json`). msgspec
rather than pydantic: vLLM already installs both, but a kernels-only environment (torch and
humming-kernels) has neither, and msgspec is one dependency-free wheel that costs a fresh process
a quarter of what pydantic does (benchmarks/README.md, "Record models").

A file that does not fit its model is an `InputError`: one line naming the file and the key path,
`questions[3].index: expected int, got bool` (exit 2).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from humming_matrix.errors import RecordError

T = TypeVar("T")

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


@dataclass(frozen=True)
class RecordType(Generic[T]):
    """One kind of record file: its model, and what its `kind` and `schema_version` must say."""

    name: str  # the schema's name: docs/schema/<name>.schema.json
    model: type[T]
    kind: str | None  # the file's `kind` key; None: the file has none (the install record)
    schema_version: int
    title: str

    def parse(self, data: Any, path: Path) -> T:
        """`data` (parsed JSON) as the model, or a `RecordError` naming the key at fault."""
        if not isinstance(data, dict):
            raise RecordError(path, None, "not a JSON object")
        if "schema_version" not in data:
            raise RecordError(path, "schema_version", "missing")
        if data["schema_version"] != self.schema_version:
            raise RecordError(path, "schema_version", f"expected {self.schema_version}")
        if self.kind is not None and data.get("kind") != self.kind:
            raise RecordError(path, "kind", f"expected {self.kind!r}, got {data.get('kind')!r}")
        return self.check(data, path)

    def check(self, data: Any, path: Path) -> T:
        """`data` against the model alone (no version or kind check: a record built in memory)."""
        try:
            return msgspec.convert(data, self.model, strict=True)
        except msgspec.ValidationError as exc:
            key, problem = _located(str(exc))
            raise RecordError(path, key, problem) from None

    def load(self, path: Path) -> T:
        return self.parse(read_json(path), path)

    def json_schema(self) -> dict[str, Any]:
        """The kind's JSON Schema (draft 2020-12), as published under docs/schema/."""
        schema = msgspec.json.schema(self.model)
        # What `parse` checks before the model: the version, and the kind (the model's own
        # `kind` field is the enum of every kind), required and constant.
        root = schema["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
        fixed: dict[str, object] = {"schema_version": self.schema_version}
        if self.kind is not None:
            fixed["kind"] = self.kind
        for key, value in fixed.items():
            root["properties"][key] = {"const": value}
        root["required"] = sorted({*root.get("required", ()), *fixed})
        return {"$schema": JSON_SCHEMA_DIALECT, "title": self.title, **schema}


def load_record(path: Path, record_type: RecordType[T]) -> T:
    """The one loader: read `path`, check it against its kind's model, return the model."""
    return record_type.load(path)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecordError(path, None, "no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(path, None, f"not a JSON record ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(path, None, "not a JSON object")
    return data


# msgspec says where with a JSON path after the problem: "Expected `int`, got `bool` - at
# `$.questions[0].index`"; its messages are stable API (msgspec's docs quote them).
_AT = re.compile(r"^(?P<problem>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")
_EXPECTED = re.compile(r"^Expected `(?P<wanted>[^`]+)`, got `(?P<got>[^`]+)`(?P<rest>.*)$")


def _located(message: str) -> tuple[str | None, str]:
    """(key path, problem) of a msgspec validation message, in the house's words."""
    match = _AT.match(message)
    problem, where = (match["problem"], match["path"] or "") if match else (message, "")
    key = where.removeprefix(".")
    missing = _MISSING.match(problem)
    if missing:
        return (f"{key}.{missing['field']}" if key else missing["field"]), "missing"
    expected = _EXPECTED.match(problem)
    if expected:
        wanted = expected["wanted"].replace(" | ", " or ")
        problem = f"expected {wanted}, got {expected['got']}{expected['rest']}"
    else:
        problem = problem[:1].lower() + problem[1:]
    return (key or None), problem
