"""vLLM's lm-eval-harness config format (`.buildkite/lm-eval-harness/configs/*.yaml`).

Files copied from vLLM load unchanged. The keys are the ones vLLM's harness
(`test_lm_eval_correctness.py`) reads, with its defaults; a few more are this project's own and
only ever optional. As for GSM8K configs we are strict: an unknown key, a wrong type or a missing
required key is a `ConfigError` naming the file and the key (`tasks[0].metrics[1].value`).

vLLM's harness runs lm-eval's in-process `vllm` model with `model_args` built from the config; we
start `vllm serve` with the same engine settings as flags, and point lm-eval's `local-completions`
model at it. `ServerSpec` below is where that translation lives.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from humming_matrix.errors import ConfigError
from humming_matrix.suite.config import (
    parse_env,
    read_config_list,
    read_yaml_mapping,
    split_server_args,
)
from humming_matrix.suite.server import ServerSpec

# vLLM's harness defaults.
DEFAULT_RTOL = 0.08
DEFAULT_MAX_MODEL_LEN = 4096
DEFAULT_ENFORCE_EAGER = True
DEFAULT_KV_CACHE_DTYPE = "auto"
# This project's defaults for what the server path adds.
DEFAULT_STARTUP_MAX_WAIT_SECONDS = 600.0
DEFAULT_NUM_CONCURRENT = 16
DEFAULT_REQUEST_TIMEOUT_SECONDS = 600
DEFAULT_MAX_RETRIES = 3

_NUMBER = (int, float)


@dataclass(frozen=True)
class _Key:
    types: tuple[type, ...]
    required: bool = False
    nullable: bool = False
    note: str = ""


# Keys vLLM's harness reads (and one a vLLM config carries that the harness ignores).
VLLM_KEYS: Mapping[str, _Key] = {
    "model_name": _Key((str,), required=True),
    "tasks": _Key((list,), required=True),
    "num_fewshot": _Key((int,), required=True),
    "limit": _Key(_NUMBER, required=True, nullable=True),
    "rtol": _Key(_NUMBER),
    "env_vars": _Key((dict,), nullable=True),
    "max_model_len": _Key((int,)),
    "trust_remote_code": _Key((bool,)),
    "batch_size": _Key((int, str)),
    "backend": _Key((str,)),
    "enforce_eager": _Key((bool,)),
    "kv_cache_dtype": _Key((str,)),
    "attention_backend": _Key((str,)),
    "moe_backend": _Key((str,)),
    "tokenizer_mode": _Key((str,)),
    "apply_chat_template": _Key((bool,)),
    "fewshot_as_multiturn": _Key((bool,)),
    "gen_kwargs": _Key((str, dict), nullable=True),
    "required_gpu_arch": _Key((list,), nullable=True),
    "rocm_safetensors_load_strategy": _Key((str,)),
    "jit_monitor_mode": _Key((str,)),
}
# This project's own keys; vLLM's harness never sees them because it reads keys by name.
OWN_KEYS: Mapping[str, _Key] = {
    "server_args": _Key((str,)),
    "startup_max_wait_seconds": _Key(_NUMBER),
    "num_concurrent": _Key((int,)),
    "request_timeout_seconds": _Key((int,)),
    "max_retries": _Key((int,)),
}
SCHEMA: Mapping[str, _Key] = {**VLLM_KEYS, **OWN_KEYS}
TASK_KEYS = ("name", "metrics")
METRIC_KEYS = ("name", "value")


@dataclass(frozen=True)
class MetricSpec:
    """One expected value: `name` as the config writes it, `key` as lm-eval reports it."""

    name: str
    value: float

    @property
    def key(self) -> str:
        """lm-eval reports `metric,filter`; a bare metric name is its `none` filter."""
        return self.name if "," in self.name else f"{self.name},none"

    @property
    def metric(self) -> str:
        return self.key.split(",", 1)[0]

    @property
    def filter(self) -> str:
        return self.key.split(",", 1)[1]


@dataclass(frozen=True)
class TaskSpec:
    name: str
    metrics: tuple[MetricSpec, ...]


@dataclass(frozen=True)
class LmEvalConfig:
    """One validated lm-eval config."""

    path: Path
    sha256: str
    model_name: str
    tasks: tuple[TaskSpec, ...]
    num_fewshot: int
    limit: int | float | None
    rtol: float = DEFAULT_RTOL
    env_vars: Mapping[str, str] = field(default_factory=dict)
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    enforce_eager: bool = DEFAULT_ENFORCE_EAGER
    kv_cache_dtype: str = DEFAULT_KV_CACHE_DTYPE
    attention_backend: str | None = None
    moe_backend: str | None = None
    tokenizer_mode: str | None = None
    apply_chat_template: bool = False
    fewshot_as_multiturn: bool = False
    gen_kwargs: str | Mapping[str, Any] | None = None
    server_args: tuple[str, ...] = ()
    startup_max_wait_seconds: float = DEFAULT_STARTUP_MAX_WAIT_SECONDS
    num_concurrent: int = DEFAULT_NUM_CONCURRENT
    request_timeout_seconds: int = DEFAULT_REQUEST_TIMEOUT_SECONDS
    max_retries: int = DEFAULT_MAX_RETRIES
    fields: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def lm_eval_model(self) -> str:
        """vLLM's harness renders the chat template in-process when `apply_chat_template` is
        set; through a server, the server renders it, so lm-eval sends chat messages."""
        return "local-chat-completions" if self.apply_chat_template else "local-completions"

    @property
    def endpoint_path(self) -> str:
        return "/v1/chat/completions" if self.apply_chat_template else "/v1/completions"

    def serve_args(self, tp_size: int = 1) -> tuple[str, ...]:
        """The engine settings vLLM's harness passes as `model_args`, as `vllm serve` flags.

        `trust_remote_code` needs no flag: the launcher always passes `--trust-remote-code`, as
        vLLM's own server harness does. `add_bos_token` has no server equivalent: the server's
        tokenizer decides (see docs/vllm-ci.md).
        """
        args = [
            "--tensor-parallel-size",
            str(tp_size),
            "--max-model-len",
            str(self.max_model_len),
        ]
        if self.enforce_eager:
            args.append("--enforce-eager")
        if self.kv_cache_dtype != DEFAULT_KV_CACHE_DTYPE:
            args += ["--kv-cache-dtype", self.kv_cache_dtype]
        for flag, value in (
            ("--attention-backend", self.attention_backend),
            ("--moe-backend", self.moe_backend),
            ("--tokenizer-mode", self.tokenizer_mode),
        ):
            if value is not None:
                args += [flag, value]
        return (*args, *self.server_args)

    def server_spec(self, tp_size: int = 1) -> ServerSpec:
        # env_vars were set around vLLM's in-process engine; here they belong to the server.
        return ServerSpec(
            self.model_name, self.serve_args(tp_size), self.env_vars, self.startup_max_wait_seconds
        )


def _type_error(path: Path, where: str, types: tuple[type, ...], value: Any) -> ConfigError:
    names = {
        int: "int",
        float: "number",
        str: "string",
        list: "list",
        dict: "mapping",
        bool: "boolean",
    }
    wanted = " or ".join(dict.fromkeys(names.get(t, t.__name__) for t in types))
    wanted = wanted.replace("int or number", "number")
    return ConfigError(path, where, f"expected {wanted}, got {type(value).__name__} {value!r}")


def _check(path: Path, where: str, spec: _Key, value: Any) -> None:
    if value is None:
        if spec.nullable:
            return
        raise ConfigError(path, where, "must not be null")
    # YAML `true` is a bool, which Python also counts as an int.
    is_bool = isinstance(value, bool)
    if (is_bool and bool not in spec.types) or not isinstance(value, spec.types):
        raise _type_error(path, where, spec.types, value)


def _tasks(path: Path, raw: list[Any]) -> tuple[TaskSpec, ...]:
    if not raw:
        raise ConfigError(path, "tasks", "lists no tasks")
    tasks: list[TaskSpec] = []
    for i, task in enumerate(raw):
        where = f"tasks[{i}]"
        if not isinstance(task, dict):
            raise ConfigError(path, where, "expected a mapping with `name` and `metrics`")
        for key in task:
            if key not in TASK_KEYS:
                raise ConfigError(path, f"{where}.{key}", "unknown key")
        name = task.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(path, f"{where}.name", "expected a task name")
        metrics_raw = task.get("metrics")
        if not isinstance(metrics_raw, list) or not metrics_raw:
            raise ConfigError(path, f"{where}.metrics", "expected a non-empty list")
        metrics: list[MetricSpec] = []
        for j, metric in enumerate(metrics_raw):
            mwhere = f"{where}.metrics[{j}]"
            if not isinstance(metric, dict):
                raise ConfigError(path, mwhere, "expected a mapping with `name` and `value`")
            for key in metric:
                if key not in METRIC_KEYS:
                    raise ConfigError(path, f"{mwhere}.{key}", "unknown key")
            mname = metric.get("name")
            if not isinstance(mname, str) or not mname:
                raise ConfigError(
                    path,
                    f"{mwhere}.name",
                    "expected a metric name such as 'exact_match,strict-match'",
                )
            value = metric.get("value")
            if isinstance(value, bool) or not isinstance(value, _NUMBER):
                raise _type_error(path, f"{mwhere}.value", _NUMBER, value)
            metrics.append(MetricSpec(mname, float(value)))
        keys = [m.key for m in metrics]
        if len(set(keys)) != len(keys):
            raise ConfigError(path, f"{where}.metrics", "names a metric twice")
        tasks.append(TaskSpec(name, tuple(metrics)))
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ConfigError(path, "tasks", "names a task twice")
    return tuple(tasks)


def load_lm_eval_config(path: Path) -> LmEvalConfig:
    data, raw = read_yaml_mapping(path)
    for key in raw:
        if key not in SCHEMA:
            raise ConfigError(path, str(key), "unknown key")
    for key, spec in SCHEMA.items():
        if key in raw:
            _check(path, key, spec, raw[key])
        elif spec.required:
            raise ConfigError(path, key, "missing required key")
    if raw["num_fewshot"] < 0:
        raise ConfigError(path, "num_fewshot", "must not be negative")
    limit = raw["limit"]
    if limit is not None and (limit <= 0 or (isinstance(limit, float) and limit > 1.0)):
        raise ConfigError(path, "limit", "must be a positive count, or a fraction up to 1.0")
    for key in (
        "max_model_len",
        "num_concurrent",
        "request_timeout_seconds",
        "startup_max_wait_seconds",
    ):
        if key in raw and raw[key] <= 0:
            raise ConfigError(path, key, "must be positive")
    if raw.get("max_retries", 0) < 0:
        raise ConfigError(path, "max_retries", "must not be negative")
    rtol = raw.get("rtol", DEFAULT_RTOL)
    if not 0 <= rtol < 1:
        raise ConfigError(path, "rtol", "must be at least 0 and below 1")
    backend = raw.get("backend", "vllm")
    if backend != "vllm":
        raise ConfigError(
            path,
            "backend",
            f"{backend!r} is not supported: this suite asks a "
            "text completions server (lm-eval local-completions), as backend "
            "'vllm' does in-process",
        )
    batch_size = raw.get("batch_size")
    if isinstance(batch_size, str) and batch_size != "auto" and not batch_size.startswith("auto:"):
        raise ConfigError(path, "batch_size", f"expected an int or 'auto', got {batch_size!r}")
    for key in ("required_gpu_arch",):
        value = raw.get(key) or []
        if not all(isinstance(v, str) for v in value):
            raise ConfigError(path, key, "expected a list of strings")
    return LmEvalConfig(
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        model_name=raw["model_name"],
        tasks=_tasks(path, raw["tasks"]),
        num_fewshot=raw["num_fewshot"],
        limit=limit,
        rtol=float(rtol),
        env_vars=parse_env(path, raw.get("env_vars"), "env_vars"),
        max_model_len=raw.get("max_model_len", DEFAULT_MAX_MODEL_LEN),
        enforce_eager=raw.get("enforce_eager", DEFAULT_ENFORCE_EAGER),
        kv_cache_dtype=raw.get("kv_cache_dtype", DEFAULT_KV_CACHE_DTYPE),
        attention_backend=raw.get("attention_backend"),
        moe_backend=raw.get("moe_backend"),
        tokenizer_mode=raw.get("tokenizer_mode"),
        apply_chat_template=raw.get("apply_chat_template", False),
        fewshot_as_multiturn=raw.get("fewshot_as_multiturn", False),
        gen_kwargs=raw.get("gen_kwargs"),
        server_args=split_server_args(path, raw.get("server_args", "")),
        startup_max_wait_seconds=float(
            raw.get("startup_max_wait_seconds", DEFAULT_STARTUP_MAX_WAIT_SECONDS)
        ),
        num_concurrent=raw.get("num_concurrent", DEFAULT_NUM_CONCURRENT),
        request_timeout_seconds=raw.get("request_timeout_seconds", DEFAULT_REQUEST_TIMEOUT_SECONDS),
        max_retries=raw.get("max_retries", DEFAULT_MAX_RETRIES),
        fields=dict(raw),
    )


def load_lm_eval_configs(config_files: list[Path], list_files: list[Path]) -> list[LmEvalConfig]:
    """All configs named directly or through lists (entries relative to the list's folder; a
    missing entry is an error), validated before anything starts; duplicates run once."""
    paths = list(config_files)
    for list_path in list_files:
        paths.extend(read_config_list(list_path))
    configs: dict[Path, LmEvalConfig] = {}
    names: dict[str, Path] = {}
    for path in paths:
        config = load_lm_eval_config(path)
        resolved = path.resolve()
        if config.name in names and names[config.name] != resolved:
            raise ConfigError(
                path, None, f"config name {config.name!r} is also used by {names[config.name]}"
            )
        names[config.name] = resolved
        configs.setdefault(resolved, config)
    return list(configs.values())
