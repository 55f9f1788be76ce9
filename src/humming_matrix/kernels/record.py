"""The kernel record: one JSON file per `kernels` run, in the same store as GSM8K records.

Top level (shared with GSM8K records): `schema_version`, `kind` ("kernels"), `run_id`,
`created`, `complete`, `environment` (humming-kernels, torch and its CUDA, python, GPU name and
driver, the installed packages, plus what the worker saw: `environment.worker`). Kernel-specific:
`settings` (batch sizes, repeats, draws, seed, timeout), `ceilings` (the GPU's measured bf16
TFLOP/s and copy GB/s), `import_error`, `summary` and `cases`: one entry per case with its `state`
(see `assess.CaseState`), `reason`, and per batch size the numbers of `probe.run_batch` plus the
batch's own `state`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from humming_matrix.kernels.assess import CaseState, assess_case
from humming_matrix.kernels.watchdog import CUT_SHORT, SuiteRun, crash_cause
from humming_matrix.store.kernels import KERNEL_RECORD, Settings
from humming_matrix.store.records import read_json
from humming_matrix.store.results import (
    SCHEMA_VERSION,
    RecordKind,
    record_filename,
    write_json_atomic,
)

RECORD_NAME = "suite"


def _finite(value: Any) -> Any:
    """JSON has no NaN or Infinity: such floats become strings (the judge reads them back)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def build_record(
    run: SuiteRun,
    settings: Settings,
    environment: Mapping[str, Any],
    run_id: str,
    created: str,
    complete: bool = True,
) -> dict[str, Any]:
    cases = []
    for result in run.results:
        state, batches = assess_case(result)
        entry = {k: v for k, v in result.items() if k != "case"}
        spec = result.get("case", {})
        entry.update(name=spec.get("name"), spec=spec, state=state.value, batches=batches)
        cases.append(entry)
    counts = Counter(c["state"] for c in cases)
    env = dict(environment)
    env["worker"] = dict(run.env)
    if run.env.get("humming_kernels") and not env.get("humming_kernels"):
        env["humming_kernels"] = run.env["humming_kernels"]
    record = {
        "schema_version": SCHEMA_VERSION,
        "kind": RecordKind.KERNELS.value,
        "run_id": run_id,
        "created": created,
        "complete": complete,
        "environment": env,
        "settings": settings.to_json(),
        "ceilings": run.ceilings,
        "import_error": run.import_error,
        "worker_launches": run.launches,
        "summary": {"counts": dict(sorted(counts.items()))},
        "cases": cases,
    }
    return dict(_finite(record))


def write_record(store: Path, record: Mapping[str, Any]) -> Path:
    version = record["environment"].get("humming_kernels")
    name = record_filename(RecordKind.KERNELS, RECORD_NAME, version, str(record["run_id"]))
    return write_json_atomic(store / name, record)


def overall_state(record: Mapping[str, Any]) -> CaseState:
    """The worst case state of a run (for the exit code)."""
    states = [CaseState(c["state"]) for c in record["cases"]]
    return max(states, key=lambda s: s.severity, default=CaseState.OK)


def load_kernel_record(path: Path) -> dict[str, Any]:
    """Read a kernel record and check it against its model (`store.kernels`); the judge and
    the report read it as the JSON it is."""
    data = read_json(path)
    KERNEL_RECORD.parse(data, path)
    return data


def check_kernel_record(data: Mapping[str, Any], path: Path | str) -> None:
    """A record built in memory (or handed to the judge) against the model, as if loaded."""
    KERNEL_RECORD.check(data, Path(path))


def humming_version(record: Mapping[str, Any]) -> str | None:
    env = record.get("environment", {})
    value = env.get("humming_kernels") if isinstance(env, dict) else None
    return str(value) if value is not None else None


def case_reason(case: Mapping[str, Any]) -> str | None:
    """Why a case gave no numbers, as its record says, with a crash's cause read from its log
    tail where the reason lacks it (records written before the watchdog put it there)."""
    reason = case.get("reason")
    if reason is None:
        return None
    cause = crash_cause(str(case.get("log_tail") or ""))
    if cause is None or cause in str(reason):
        return str(reason)
    return f"{reason}: {cause}"


def hung_only_beside_others(case: Mapping[str, Any]) -> bool:
    """The case hung beside other workers (`first_attempt`) and did not hang when the watchdog
    reran it alone: its fields are the rerun's."""
    return bool(case.get("first_attempt")) and case.get("state") != CaseState.HANG.value


def hang_not_rerun(case: Mapping[str, Any]) -> bool:
    """The case hung beside other workers and the watchdog's rerun alone never came (an
    interrupt or a deadline first): one attempt, not a verdict, so a resumed sweep runs it again,
    alone (gen7 call 10's 0.1.10 AWQ q/k/v). A case run alone from the start (`"alone"`) is
    decided by that run."""
    return (
        case.get("state") == CaseState.HANG.value
        and not case.get("first_attempt")
        and not case.get("alone")
    )


def cut_short(case: Mapping[str, Any]) -> bool:
    """A hang beside other workers at the watchdog's shorter limit there (`TURN_FACTOR` times
    the case's longest turn), whose rerun alone never came: a turn cut short on purpose, since
    the rerun was to decide it, so weaker evidence than any run that decided the case."""
    return hang_not_rerun(case) and CUT_SHORT in str(case.get("reason", ""))


def gpu_name(record: Mapping[str, Any]) -> str | None:
    """The GPU model the record was made on (`torch.cuda` device name), None where unrecorded."""
    env = record.get("environment", {})
    value = env.get("gpu") if isinstance(env, Mapping) else None
    return str(value) if value is not None else None


def versions_table(records: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: one row per humming version, one column per case: state and median time at the
    largest batch size (the README table)."""
    if not records:
        return ""
    names: list[str] = []
    for record in records:
        for case in record["cases"]:
            if case["name"] not in names:
                names.append(case["name"])
    lines = [
        "| humming | " + " | ".join(names) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for record in records:
        cells = []
        by_name = {c["name"]: c for c in record["cases"]}
        for name in names:
            case = by_name.get(name)
            cells.append(_cell(case) if case else "-")
        lines.append(f"| {humming_version(record)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(case: Mapping[str, Any]) -> str:
    state = str(case["state"])
    timed = [b for b in case.get("batches", []) if isinstance(b.get("time"), dict)]
    if not timed:
        return state
    last = max(timed, key=lambda b: int(b["m"]))
    errs = [float(e) for e in last.get("rel_err", []) if isinstance(e, int | float | str)]
    err = f" {max(errs):.1e}" if errs else ""
    return f"{state}{err} {float(last['time']['median_ms']):.3g} ms"
