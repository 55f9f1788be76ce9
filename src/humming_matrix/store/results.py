"""Result records: the GSM8K record's model, the secrets policy, record names, atomic
never-overwriting writes, and the record files in a store (loaded through `store.records`).

A store is a directory of JSON files, one per (config, run). It is the only interface between the
sessions that produce results and the commands that judge them, so records from many machines must
merge by copying files into one folder: every file name is unique (time, host, random suffix) and
no file is ever written twice.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shlex
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import IO, Any

from humming_matrix.errors import RecordError
from humming_matrix.store.atomic_files import create_file, replace_file
from humming_matrix.store.records import RecordType, load_record

SCHEMA_VERSION = 1
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET")
REDACTED = "***"


class RecordKind(str, Enum):
    GSM8K = "gsm8k"
    KERNELS = "kernels"
    LM_EVAL = "lm-eval"


# A config's `env` values are stored only for these, which judging and the preflight read (the
# humming quantization knobs); every other value is replaced by REDACTED in what is stored.
SAFE_CONFIG_ENV = frozenset(
    {
        "VLLM_HUMMING_INPUT_QUANT_CONFIG",
        "VLLM_HUMMING_ONLINE_QUANT_CONFIG",
        "VLLM_HUMMING_MOE_GEMM_TYPE",
    }
)
# Server flags whose value is a credential, always.
SECRET_FLAGS = ("--api-key",)
# Values scrubbed from text (server logs, printed log tails). A value listed as secret, or given
# to a secret flag, is scrubbed from this length on; any other redacted config env value from
# SCRUB_MIN_UNLISTED on, so that "1" or "true" does not blank a log.
SCRUB_MIN_LISTED = 4
SCRUB_MIN_UNLISTED = 8


def redact(env: Mapping[str, str]) -> dict[str, str]:
    """Values of variables whose names look like credentials never reach a record."""
    return {
        name: (REDACTED if any(m in name.upper() for m in SECRET_MARKERS) else value)
        for name, value in env.items()
    }


def redact_config_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """A config's `env` as stored: every value redacted unless known to be safe to keep."""
    return {name: (value if name in SAFE_CONFIG_ENV else REDACTED) for name, value in env.items()}


@dataclass(frozen=True)
class Secrets:
    """What must be stored nowhere: the values of secret flags (`--api-key`, and flags listed as
    secret), of a config's env (but the safe ones), and of variables listed as secret."""

    flags: frozenset[str] = frozenset(SECRET_FLAGS)
    names: frozenset[str] = frozenset()  # env variables whose values are secret
    values: frozenset[str] = frozenset()  # the secret values themselves, scrubbed from text

    @classmethod
    def gather(
        cls,
        args: Sequence[str],
        env: Mapping[str, str],
        listed: Iterable[str] = (),
        extra_values: Iterable[str] = (),
    ) -> Secrets:
        """`listed`: names a user declared secret, flags (`--token`) and variables alike."""
        listed = tuple(listed)
        flags = frozenset(SECRET_FLAGS) | {n for n in listed if n.startswith("-")}
        names = {n for n in listed if not n.startswith("-")}
        values = {v for v in extra_values if len(v) >= SCRUB_MIN_LISTED}
        for i, arg in enumerate(args):
            flag, eq, value = arg.partition("=")
            if flag in flags and eq:
                values.add(value)
            elif arg in flags and i + 1 < len(args):
                values.add(args[i + 1])
        for name, value in env.items():
            if name in names or (name not in SAFE_CONFIG_ENV and len(value) >= SCRUB_MIN_UNLISTED):
                values.add(value)
        values = {v for v in values if len(v) >= SCRUB_MIN_LISTED}
        names |= {n for n in env if n not in SAFE_CONFIG_ENV}
        return cls(frozenset(flags), frozenset(names), frozenset(values))

    def argv(self, argv: Sequence[str]) -> list[str]:
        """`argv` with the value of every secret flag replaced."""
        out: list[str] = []
        hide_next = False
        for arg in argv:
            flag, eq, _ = arg.partition("=")
            if hide_next:
                out.append(REDACTED)
                hide_next = False
            elif flag in self.flags and eq:
                out.append(f"{flag}={REDACTED}")
            else:
                out.append(self.text(arg))
                hide_next = arg in self.flags
        return out

    def args_text(self, text: str) -> str:
        """A shell-like argument string (a config's `server_args`) redacted as `argv` is."""
        try:
            return shlex.join(self.argv(shlex.split(text)))
        except ValueError:
            return REDACTED

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """An effective environment as stored: credentials by name, the secret variables, and
        any variable holding a secret value, redacted."""
        return {
            name: (REDACTED if name in self.names or value in self.values else value)
            for name, value in redact(env).items()
        }

    def text(self, text: str) -> str:
        for value in sorted(self.values, key=len, reverse=True):
            text = text.replace(value, REDACTED)
        return text

    def scrub_file(self, path: Path) -> None:
        """Rewrite a text file (a server log) with every secret value replaced, in one step."""
        try:
            original = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        scrubbed = self.text(original)
        if scrubbed != original:
            replace_file(path, lambda fh: fh.write(scrubbed))


def stored_config_fields(fields: Mapping[str, Any], secrets: Secrets) -> dict[str, Any]:
    """A config's fields as a record keeps them: env values and secret flags redacted (the
    config's sha256, kept beside them, still pairs runs of the same file)."""
    stored = dict(fields)
    for key in ("env", "env_vars"):  # GSM8K configs say `env`, lm-eval configs `env_vars`
        if isinstance(stored.get(key), Mapping):
            stored[key] = redact_config_env(stored[key])
    if isinstance(stored.get("server_args"), str):
        stored["server_args"] = secrets.args_text(stored["server_args"])
    return stored


# What makes two runs of one config the same measurement: a record is resumed (and lm-eval's
# answer cache reused) only by a run whose environment agrees on all of these.
IDENTITY_KEYS = (
    "humming_kernels",
    "vllm",
    "vllm_distribution",
    "torch",
    "torch_cuda",
    "python",
    "gpu",
    "session",
    "packages",
)


def environment_identity(env: Mapping[str, Any]) -> dict[str, Any]:
    return {key: env.get(key) for key in IDENTITY_KEYS}


def identity_digest(env: Mapping[str, Any]) -> str:
    text = json.dumps(environment_identity(env), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def new_run_id(now: datetime | None = None) -> str:
    """Sortable by time, unique across machines: `20261202T140501Z-host-1a2b3c`."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:24] or "host"
    return f"{stamp}-{host}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class QuestionOutcome:
    """One GSM8K question. `prediction` is None when the answer held no digits (invalid) or the
    request failed; `error` is set only in the latter case."""

    index: int
    correct: bool
    prediction: int | None
    label: int
    error: str | None = None
    output: str = ""

    @property
    def answered(self) -> bool:
        return self.error is None


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
    """Where a run's time went, in seconds. `install`: the nox session's install step (None
    outside a session); `startup`: launch to ready, or to the failure (None for `--endpoint`);
    `asking`: the questions (what `metrics.duration` has always held)."""

    install: float | None
    startup: float | None
    asking: float

    def to_json(self) -> dict[str, float | None]:
        return {
            "install": _seconds(self.install),
            "startup": _seconds(self.startup),
            "asking": _seconds(self.asking),
        }


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(frozen=True)
class ConfigInfo:
    name: str
    path: str
    sha256: str
    fields: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "sha256": self.sha256,
            "fields": dict(self.fields),
        }


@dataclass(frozen=True)
class Gsm8kRecord:
    """One config evaluated once in one environment."""

    run_id: str
    created: str
    complete: bool
    config: ConfigInfo
    environment: Mapping[str, Any]
    metrics: Metrics
    questions: tuple[QuestionOutcome, ...]
    server: Mapping[str, Any] = field(default_factory=dict)
    resumed_from: str | None = None
    # Absent from records written before they existed (None then).
    timings: Timings | None = None
    # How the server's start-up went (`StartupReport.to_json`); None for `--endpoint` runs and
    # older records. A start-up that failed leaves a record with no answers and this set.
    startup: Mapping[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION
    kind: RecordKind = RecordKind.GSM8K

    @property
    def humming_version(self) -> str | None:
        value = self.environment.get("humming_kernels")
        return str(value) if value is not None else None

    @property
    def start_failed(self) -> bool:
        """The server never became ready: nothing was asked."""
        return self.startup is not None and self.startup.get("status") == "failed"

    @property
    def startup_phase(self) -> str | None:
        """The last start-up phase the server's log showed (`server_log.StartupPhase` values)."""
        return None if self.startup is None else str(self.startup.get("phase"))

    def startup_summary(self) -> str:
        """One line on a start-up that failed: how far it got, how long it tried, what the GPU
        was doing, and why."""
        startup = self.startup or {}
        phase = str(startup.get("phase", "?")).replace("_", " ")
        seconds = startup.get("seconds")
        took = f" after {seconds:.0f} s" if isinstance(seconds, (int, float)) else ""
        busy = ", ".join(
            f"GPU {g.get('index')} {g.get('utilization_percent')} % busy, "
            f"{g.get('memory_used_mib')} MiB used"
            for g in startup.get("gpu") or []
        )
        reason = str(startup.get("reason", ""))
        return (
            f"run {self.run_id}: last phase {phase}{took}"
            + (f" ({busy})" if busy else "")
            + (f"; {reason}" if reason else "")
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": self.kind.value,
            "run_id": self.run_id,
            "created": self.created,
            "complete": self.complete,
            "resumed_from": self.resumed_from,
            "config": self.config.to_json(),
            "environment": dict(self.environment),
            "server": dict(self.server),
            "startup": None if self.startup is None else dict(self.startup),
            "timings": None if self.timings is None else self.timings.to_json(),
            "metrics": {
                "accuracy": self.metrics.accuracy,
                "invalid_rate": self.metrics.invalid_rate,
                "error_count": self.metrics.error_count,
                "num_questions": self.metrics.num_questions,
                "threshold": self.metrics.threshold,
                "tolerance": self.metrics.tolerance,
                "passed": self.metrics.passed,
                "duration": self.metrics.duration,
            },
            "questions": [
                {
                    "index": q.index,
                    "correct": q.correct,
                    "prediction": q.prediction,
                    "label": q.label,
                    "error": q.error,
                    "output": q.output,
                }
                for q in self.questions
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: Path) -> Gsm8kRecord:
        return GSM8K_RECORD.parse(data, path)


GSM8K_RECORD = RecordType(
    "gsm8k", Gsm8kRecord, RecordKind.GSM8K.value, SCHEMA_VERSION, "humming-matrix GSM8K record"
)


def record_filename(kind: RecordKind, name: str, version: str | None, run_id: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in name)
    return f"{kind.value}__{safe}__{version or 'unknown'}__{run_id}.json"


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> Path:
    """Write `data` to `path` in one step, refusing to replace an existing file: a reader never
    sees half a record, and a name once taken stays taken."""

    def dump(fh: IO[str]) -> None:
        json.dump(data, fh, indent=1, sort_keys=False)
        fh.write("\n")

    try:
        return create_file(path, dump)
    except FileExistsError:
        raise RecordError(
            path, None, "a record of that name exists; records are never overwritten"
        ) from None


def write_record(store: Path, record: Gsm8kRecord) -> Path:
    name = record_filename(record.kind, record.config.name, record.humming_version, record.run_id)
    return write_json_atomic(store / name, record.to_json())


def load_gsm8k_record(path: Path) -> Gsm8kRecord:
    return load_record(path, GSM8K_RECORD)


def record_paths(location: Path, kind: RecordKind | None = None) -> list[Path]:
    """A record file itself, or every record file under a store directory (recursively, so a
    folder of downloaded CI artifacts works), in name order."""
    if location.is_file():
        return [location]
    if not location.is_dir():
        raise RecordError(location, None, "no such file or directory")
    prefix = f"{kind.value}__" if kind else ""
    return sorted(p for p in location.rglob(f"{prefix}*.json") if not p.name.startswith(".tmp-"))


def iter_gsm8k_records(location: Path) -> Iterator[tuple[Path, Gsm8kRecord]]:
    for path in record_paths(location, RecordKind.GSM8K):
        yield path, load_gsm8k_record(path)


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
