"""What a typed record model costs a fresh process: msgspec against pydantic v2, same run.

Every `humming-matrix` command starts a fresh interpreter inside a matrix environment (beside
vLLM and torch) and reads or writes records, so the model library's price is paid at every start:
importing it, defining the record models, validating one record. Each repeat starts one fresh
`python` per leg, in an order that rotates between repeats, and times it to exit:

- `bare`: `python -c pass` (what every leg pays anyway; subtracted from the others),
- `import msgspec`, `import pydantic`: the library alone,
- `msgspec models + load`, `pydantic models + load`: the library, the GSM8K record's models
  (the same fields and types in both, strict: no str -> int coercion, no bool for an int) and
  one validated load of a real record (1319 questions): msgspec converts what `json.load`
  returns into frozen dataclasses (as `store.records` does), pydantic validates the JSON text
  into frozen BaseModels (its fast path; its strict Python mode refuses a list for a tuple).

    python benchmarks/record_models.py --python /path/to/matrix-env/bin/python --repeats 15
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RECORD = next(iter(sorted((ROOT / "results" / "h200-gsm8k").glob("*/gsm8k__*.json"))), None)

MSGSPEC_MODELS = """
import json, sys
from dataclasses import dataclass, field
from typing import Any, Literal
import msgspec

@dataclass(frozen=True)
class Question:
    index: int
    correct: bool
    prediction: int | None
    label: int
    error: str | None
    output: str = ""

@dataclass(frozen=True)
class Metrics:
    accuracy: float
    invalid_rate: float
    error_count: int
    num_questions: int
    threshold: float
    tolerance: float
    passed: bool
    duration: float

@dataclass(frozen=True)
class Timings:
    install: float | None
    startup: float | None
    asking: float

@dataclass(frozen=True)
class Config:
    name: str
    path: str
    sha256: str
    fields: dict[str, Any]

@dataclass(frozen=True)
class Record:
    schema_version: Literal[1]
    kind: Literal["gsm8k"]
    run_id: str
    created: str
    complete: bool
    config: Config
    environment: dict[str, Any]
    metrics: Metrics
    questions: tuple[Question, ...]
    resumed_from: str | None = None
    server: dict[str, Any] = field(default_factory=dict)
    startup: dict[str, Any] | None = None
    timings: Timings | None = None

with open(sys.argv[1], encoding="utf-8") as fh:
    record = msgspec.convert(json.load(fh), Record)
assert len(record.questions) > 0
"""

PYDANTIC_MODELS = """
import json, sys
from typing import Any, Literal
from pydantic import BaseModel, ConfigDict

class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True)

class Question(Frozen):
    index: int
    correct: bool
    prediction: int | None
    label: int
    error: str | None
    output: str = ""

class Metrics(Frozen):
    accuracy: float
    invalid_rate: float
    error_count: int
    num_questions: int
    threshold: float
    tolerance: float
    passed: bool
    duration: float

class Timings(Frozen):
    install: float | None
    startup: float | None
    asking: float

class Config(Frozen):
    name: str
    path: str
    sha256: str
    fields: dict[str, Any]

class Record(Frozen):
    schema_version: Literal[1]
    kind: Literal["gsm8k"]
    run_id: str
    created: str
    complete: bool
    config: Config
    environment: dict[str, Any]
    metrics: Metrics
    questions: tuple[Question, ...]
    resumed_from: str | None = None
    server: dict[str, Any] = {}
    startup: dict[str, Any] | None = None
    timings: Timings | None = None

with open(sys.argv[1], encoding="utf-8") as fh:
    record = Record.model_validate_json(fh.read())
assert len(record.questions) > 0
"""

LEGS = {
    "bare": "pass",
    "import msgspec": "import msgspec",
    "import pydantic": "import pydantic",
    "msgspec models + load": MSGSPEC_MODELS,
    "pydantic models + load": PYDANTIC_MODELS,
}


def time_leg(python: str, code: str, record: Path) -> float:
    start = time.perf_counter()
    subprocess.run([python, "-c", code, str(record)], check=True)
    return time.perf_counter() - start


def versions(python: str) -> str:
    code = (
        "import sys, msgspec, pydantic; "
        "print(sys.version.split()[0], 'msgspec', msgspec.__version__, "
        "'pydantic', pydantic.VERSION)"
    )
    return subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=sys.executable, help="interpreter of a matrix env")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--record", type=Path, default=DEFAULT_RECORD)
    args = parser.parse_args()
    if args.record is None:
        parser.error("no GSM8K record found; pass --record")
    print("python", versions(args.python).strip())
    names = list(LEGS)
    runs: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(2):  # warm the page cache for every leg first
        for name in names:
            time_leg(args.python, LEGS[name], args.record)
    for repeat in range(args.repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            runs[name].append(time_leg(args.python, LEGS[name], args.record))
    bare = statistics.median(runs["bare"])
    print("| leg | median wall (ms) | over bare (ms) | runs (ms) |")
    print("| --- | --- | --- | --- |")
    for name in names:
        median = statistics.median(runs[name])
        shown = " ".join(f"{1000 * t:.0f}" for t in runs[name])
        print(f"| {name} | {1000 * median:.1f} | {1000 * (median - bare):.1f} | {shown} |")
    extra = {
        lib: statistics.median(runs[f"{lib} models + load"]) - bare
        for lib in ("msgspec", "pydantic")
    }
    print(
        f"pydantic / msgspec, models + load over bare: {extra['pydantic'] / extra['msgspec']:.1f}x"
    )


if __name__ == "__main__":
    main()
