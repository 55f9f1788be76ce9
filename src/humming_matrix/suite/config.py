"""GSM8K eval configs in vLLM's own YAML schema (tests/evals/gsm8k/configs), and config lists.

Files copied from vLLM must load unchanged. Unlike vLLM's harness we are strict: an unknown key, a
wrong type, a missing required key, or a list entry naming a missing file is a `ConfigError` that
names the file and the key (or line).
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from humming_matrix.errors import ConfigError

# vLLM's harness defaults (test_gsm8k_correctness.py and gsm8k_eval.py).
DEFAULT_TOLERANCE = 0.08
DEFAULT_STARTUP_MAX_WAIT_SECONDS = 600.0
DEFAULT_MAX_TOKENS = 256
DEFAULT_TEMPERATURE = 0.0
DEFAULT_SEED = 42
DEFAULT_REQUEST_TIMEOUT_SECONDS = 600.0
# aiohttp's default connector limit, which bounds vLLM's harness when max_concurrency is unset.
DEFAULT_MAX_CONCURRENCY = 100

# The launcher owns these flags; vLLM's RemoteOpenAIServer refuses them in server_args too.
RESERVED_SERVER_FLAGS = ("--port", "-p", "--seed", "--uds")

_NUMBER = (int, float)


@dataclass(frozen=True)
class _Key:
    types: tuple[type, ...]
    required: bool = False
    nullable: bool = False


SCHEMA: Mapping[str, _Key] = {
    "model_name": _Key((str,), required=True),
    "accuracy_threshold": _Key(_NUMBER, required=True),
    "num_questions": _Key((int,), required=True),
    "num_fewshot": _Key((int,), required=True),
    "server_args": _Key((str,)),
    "env": _Key((dict,), nullable=True),
    "tolerance": _Key(_NUMBER),
    "startup_max_wait_seconds": _Key(_NUMBER),
    "max_tokens": _Key((int,)),
    "temperature": _Key(_NUMBER, nullable=True),
    "seed": _Key((int,), nullable=True),
    "request_timeout_seconds": _Key(_NUMBER),
    "max_concurrency": _Key((int,), nullable=True),
    "gen_prefix": _Key((str,)),
}


@dataclass(frozen=True)
class EvalConfig:
    """One validated GSM8K eval config."""

    path: Path
    sha256: str
    model_name: str
    accuracy_threshold: float
    num_questions: int
    num_fewshot: int
    server_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    tolerance: float = DEFAULT_TOLERANCE
    startup_max_wait_seconds: float = DEFAULT_STARTUP_MAX_WAIT_SECONDS
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float | None = DEFAULT_TEMPERATURE
    seed: int | None = DEFAULT_SEED
    request_timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT_SECONDS
    max_concurrency: int | None = None
    gen_prefix: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """vLLM names a config's test by the file stem; so do we."""
        return self.path.stem

    @property
    def tensor_parallel_size(self) -> int:
        return _flag_int(self.server_args, "--tensor-parallel-size", "-tp", default=1)

    @property
    def concurrency(self) -> int:
        return self.max_concurrency if self.max_concurrency is not None else DEFAULT_MAX_CONCURRENCY


def _flag_int(args: tuple[str, ...], long: str, short: str, default: int) -> int:
    for i, arg in enumerate(args):
        for flag in (long, short):
            if arg == flag and i + 1 < len(args) and args[i + 1].isdigit():
                return int(args[i + 1])
            if arg.startswith(flag + "=") and arg.split("=", 1)[1].isdigit():
                return int(arg.split("=", 1)[1])
    return default


def _optional_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def _check(path: Path, key: str, value: Any) -> None:
    spec = SCHEMA[key]
    if value is None:
        if spec.nullable:
            return
        raise ConfigError(path, key, "must not be null")
    # YAML `true` is a bool, which Python also counts as an int; no key here takes a bool.
    if isinstance(value, bool) or not isinstance(value, spec.types):
        wanted = " or ".join("number" if t is float else t.__name__ for t in spec.types if t)
        wanted = wanted.replace("int or number", "number").replace("dict", "mapping")
        raise ConfigError(path, key, f"expected {wanted}, got {type(value).__name__} {value!r}")


def parse_env(path: Path, raw: Mapping[Any, Any] | None, key: str = "env") -> dict[str, str]:
    """A config's environment for the server: names to strings (bare numbers allowed)."""
    env: dict[str, str] = {}
    for name, value in (raw or {}).items():
        where = f"{key}.{name}"
        if not isinstance(name, str) or not name:
            raise ConfigError(path, where, "variable names must be non-empty strings")
        # vLLM passes these to the server's environment; numbers are written bare in some configs.
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ConfigError(path, where, f"expected a string, got {type(value).__name__}")
        env[name] = str(value)
    return env


def split_server_args(path: Path, text: str) -> tuple[str, ...]:
    """`server_args` split as vLLM's harness splits it; flags the launcher owns are refused."""
    try:
        args = tuple(shlex.split(text))
    except ValueError as exc:
        raise ConfigError(
            path, "server_args", f"cannot be split like a shell line ({exc})"
        ) from None
    for arg in args:
        if arg.split("=", 1)[0] in RESERVED_SERVER_FLAGS:
            raise ConfigError(
                path, "server_args", f"{arg.split('=', 1)[0]} is set by the launcher; remove it"
            )
    return args


def read_yaml_mapping(path: Path) -> tuple[bytes, dict[Any, Any]]:
    """The file's bytes (for its sha256) and its YAML, which must be a mapping."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(path, None, "no such file") from None
    except OSError as exc:
        raise ConfigError(path, None, f"cannot read ({exc.strerror})") from None
    try:
        raw = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f"line {line + 1}" if line is not None else None
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(path, where, f"not valid YAML ({reason})") from None
    if not isinstance(raw, dict):
        raise ConfigError(path, None, "expected a mapping of keys to values")
    return data, raw


def load_config(path: Path) -> EvalConfig:
    data, raw = read_yaml_mapping(path)
    for key in raw:
        if key not in SCHEMA:
            raise ConfigError(path, str(key), "unknown key")
    for key, spec in SCHEMA.items():
        if key in raw:
            _check(path, key, raw[key])
        elif spec.required:
            raise ConfigError(path, key, "missing required key")
    for key in ("num_questions", "max_tokens"):
        if key in raw and raw[key] < 1:
            raise ConfigError(path, key, "must be at least 1")
    for key in ("num_fewshot",):
        if raw[key] < 0:
            raise ConfigError(path, key, "must not be negative")
    for key in ("startup_max_wait_seconds", "request_timeout_seconds"):
        if key in raw and raw[key] <= 0:
            raise ConfigError(path, key, "must be positive")
    if raw.get("max_concurrency") is not None and raw["max_concurrency"] < 1:
        raise ConfigError(path, "max_concurrency", "must be at least 1")

    def get(key: str, default: Any) -> Any:
        return raw.get(key, default)

    return EvalConfig(
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        model_name=raw["model_name"],
        accuracy_threshold=float(raw["accuracy_threshold"]),
        num_questions=raw["num_questions"],
        num_fewshot=raw["num_fewshot"],
        server_args=split_server_args(path, get("server_args", "")),
        env=parse_env(path, raw.get("env")),
        tolerance=float(get("tolerance", DEFAULT_TOLERANCE)),
        startup_max_wait_seconds=float(
            get("startup_max_wait_seconds", DEFAULT_STARTUP_MAX_WAIT_SECONDS)
        ),
        max_tokens=get("max_tokens", DEFAULT_MAX_TOKENS),
        temperature=_optional_float(get("temperature", DEFAULT_TEMPERATURE)),
        seed=get("seed", DEFAULT_SEED),
        request_timeout_seconds=float(
            get("request_timeout_seconds", DEFAULT_REQUEST_TIMEOUT_SECONDS)
        ),
        max_concurrency=get("max_concurrency", None),
        gen_prefix=get("gen_prefix", ""),
        fields=dict(raw),
    )


def read_config_list(list_path: Path) -> list[Path]:
    """Entries of a list file (one config per line, `#` comments), relative to the list's folder.

    vLLM skips entries whose file is missing; a missing file here is an error naming the line.
    """
    try:
        lines = list_path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(list_path, None, "no such config list") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(list_path, None, f"cannot read ({exc})") from None
    paths: list[Path] = []
    for number, line in enumerate(lines, start=1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        path = list_path.parent / entry
        if not path.is_file():
            raise ConfigError(list_path, f"line {number}", f"{entry}: no such config file")
        paths.append(path)
    if not paths:
        raise ConfigError(list_path, None, "lists no configs")
    return paths


def load_configs(config_files: list[Path], list_files: list[Path]) -> list[EvalConfig]:
    """All configs named directly or through lists, validated before anything starts."""
    paths = list(config_files)
    for list_path in list_files:
        paths.extend(read_config_list(list_path))
    configs = [load_config(p) for p in paths]
    seen: dict[str, Path] = {}
    for cfg in configs:
        if cfg.name in seen and seen[cfg.name].resolve() != cfg.path.resolve():
            raise ConfigError(
                cfg.path, None, f"config name {cfg.name!r} is also used by {seen[cfg.name]}"
            )
        seen[cfg.name] = cfg.path
    unique: dict[Path, EvalConfig] = {}
    for cfg in configs:
        unique.setdefault(cfg.path.resolve(), cfg)
    return list(unique.values())
