"""One lm-eval config, end to end: `vllm serve` (the GSM8K suite's launcher), lm-eval's
`local-completions` model in a worker process against it, and an `lm-eval` record.

A run that fails (the server dies, lm-eval gives up on its requests) is an infrastructure failure
(exit 3) and writes no record: lm-eval computes its metrics only at the end. What it had been
answered is not lost: lm-eval's request cache (sqlite, one per config and humming version, in
`<store>/.lm-eval-cache/`) keeps every answer as it arrives, and `--resume` runs the config again
asking only the rest. A run without `--resume` starts from an empty cache (a fresh measurement,
never a replay), and a finished run deletes it. The server and worker logs stay beside the records.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from humming_matrix import environment, process_group
from humming_matrix.errors import ConfigError, InfrastructureError, UsageError
from humming_matrix.lmeval.config import LmEvalConfig
from humming_matrix.lmeval.record import (
    checks_from_output,
    samples_from_output,
    write_lm_eval_record,
)
from humming_matrix.lmeval.tasks import write_task_dir
from humming_matrix.lmeval.worker import EXIT_UNKNOWN_TASK
from humming_matrix.progress import Progress
from humming_matrix.store.lm_eval import LmEvalRecord
from humming_matrix.store.results import (
    ConfigInfo,
    RecordKind,
    Secrets,
    identity_digest,
    new_run_id,
    record_filename,
    redact_config_env,
    stored_config_fields,
    utc_now_iso,
)
from humming_matrix.suite import server
from humming_matrix.suite.server import log_tail

WORKER_MODULE = "humming_matrix.lmeval.worker"
CACHE_DIR = ".lm-eval-cache"
LOCK_DIR = ".lm-eval-locks"
POLL_SECONDS = 0.2
TERM_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class SuiteSettings:
    results: Path
    endpoint: str | None = None  # a server that is already up, instead of launching one
    limit: int | None = None  # caps the config's own `limit`
    tp_size: int = 1
    python: str = sys.executable  # the interpreter whose lm-eval runs the worker
    resume: bool = False  # reuse the answers an earlier failed run of the config got


@dataclass(frozen=True)
class AnswerCache:
    """lm-eval's request cache for one config in one environment (lm-eval appends
    `_rank<N>.db` to the path it is given). The name carries the config's sha256, the humming
    version and a digest of the environment's identity (`results.IDENTITY_KEYS`): answers asked
    of another variant (CUDA wheel, vLLM, package set) are never replayed into this one."""

    base: Path

    @classmethod
    def of(cls, store: Path, config: LmEvalConfig, env: Mapping[str, Any]) -> AnswerCache:
        humming = env.get("humming_kernels") or "unknown"
        return cls(
            store
            / CACHE_DIR
            / f"{config.name}-{config.sha256[:12]}-{humming}-{identity_digest(env)[:12]}"
        )

    def files(self) -> list[Path]:
        if not self.base.parent.is_dir():
            return []
        return sorted(self.base.parent.glob(f"{self.base.name}_rank*.db"))

    def clear(self) -> None:
        for path in self.files():
            path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def held(self, config: LmEvalConfig) -> Iterator[None]:
        """One run at a time per cache: a second run of the config in the same environment and
        store would clear (or write into) the answers the first is reading and writing. The lock
        lives apart from the cache (an flock, released by the kernel however the run ends)."""
        locks = self.base.parent.parent / LOCK_DIR
        locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            locks / f"{self.base.name}.lock",
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
        )
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(
                    f"{config.name}: another run of this config in this environment is using "
                    f"{self.base.parent}; wait for it to finish"
                ) from None
            yield
        finally:
            os.close(fd)


class Launcher(Protocol):
    def __call__(
        self, spec: server.ServerSpec, log_path: Path
    ) -> contextlib.AbstractContextManager[server.RunningServer]: ...


def effective_limit(config: LmEvalConfig, cap: int | None) -> int | float | None:
    if cap is None:
        return config.limit
    if config.limit is None or isinstance(config.limit, float):
        return cap
    return min(config.limit, cap)


def model_args(config: LmEvalConfig, url: str) -> dict[str, Any]:
    """lm-eval's `local-completions` (or `local-chat-completions`) against our server: the
    server tokenizes (no tokenizer download), one prompt per request, `num_concurrent` requests
    in flight."""
    return {
        "model": config.model_name,
        "base_url": url.rstrip("/") + config.endpoint_path,
        "tokenizer_backend": None,
        "tokenized_requests": False,
        "num_concurrent": config.num_concurrent,
        "max_retries": config.max_retries,
        "timeout": config.request_timeout_seconds,
        "max_length": config.max_model_len,
    }


def worker_environment(
    base: Mapping[str, str], scratch: Path, offline: bool, api_key: str | None = None
) -> dict[str, str]:
    env = dict(base)
    if api_key is not None:
        # lm-eval's local-completions and local-chat-completions send it as a bearer token.
        env["OPENAI_API_KEY"] = api_key
    # A private datasets cache: the local task files are re-read every run, never a stale copy.
    env["HF_DATASETS_CACHE"] = str(scratch / "hf-datasets")
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
        env["HF_DATASETS_OFFLINE"] = "1"
    return env


def run_worker(
    command: list[str], env: Mapping[str, str], log_path: Path, check: Callable[[], None]
) -> int:
    """Run lm-eval's worker in its own process group, its output appended to `log_path`.

    `check` is polled while it runs (the server's liveness); whatever it raises stops the worker,
    as does Ctrl-C; the whole group is always gone on return.
    """
    with (
        log_path.open("ab") as log,
        process_group.group(
            command,
            grace=TERM_GRACE_SECONDS,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        ) as process,
    ):
        while process.poll() is None:
            check()
            time.sleep(POLL_SECONDS)
        return int(process.returncode)


WorkerRunner = Callable[[list[str], Mapping[str, str], Path, Callable[[], None]], int]


class LmEvalSuite:
    """Runs configs into a store. Every side effect is a constructor argument a test can swap."""

    def __init__(
        self,
        settings: SuiteSettings,
        progress: Progress | None = None,
        *,
        launch: Launcher = server.launch,
        worker: WorkerRunner = run_worker,
        capture_environment: Callable[[], dict[str, Any]] = environment.capture,
        clock: Callable[[], float] = time.monotonic,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.progress = progress or Progress()
        self.launch = launch
        self.worker = worker
        self.capture_environment = capture_environment
        self.clock = clock
        self.base_env = base_env

    def run(self, config: LmEvalConfig) -> tuple[LmEvalRecord, Path]:
        env = self.capture_environment()
        run_id = new_run_id()
        store = self.settings.results
        store.mkdir(parents=True, exist_ok=True)
        stem = record_filename(
            RecordKind.LM_EVAL, config.name, env.get("humming_kernels"), run_id
        ).removesuffix(".json")
        worker_log = store / f"{stem}.lm-eval.log"
        limit = effective_limit(config, self.settings.limit)
        spec = config.server_spec(self.settings.tp_size)
        cache = AnswerCache.of(store, config, env)
        with cache.held(config):
            return self._run_holding(
                config, env, run_id, store, stem, worker_log, limit, spec, cache
            )

    def _run_holding(
        self,
        config: LmEvalConfig,
        env: dict[str, Any],
        run_id: str,
        store: Path,
        stem: str,
        worker_log: Path,
        limit: int | float | None,
        spec: server.ServerSpec,
        cache: AnswerCache,
    ) -> tuple[LmEvalRecord, Path]:
        secrets = Secrets.gather(spec.args, spec.env)
        server_info: dict[str, Any] = {
            "model": spec.model,
            "args": secrets.argv(spec.args),
            "env": redact_config_env(spec.env),
        }
        resumed = self.settings.resume and bool(cache.files())
        if not self.settings.resume:
            cache.clear()
        elif not resumed:
            self.progress.stage(f"{config.name}: no earlier answers to resume; asking all")
        started = self.clock()
        try:
            output, tasks = self._run_lm_eval(
                config, store, stem, limit, spec, server_info, cache, worker_log
            )
        except (InfrastructureError, KeyboardInterrupt):
            if cache.files():
                self.progress.stage(
                    f"{config.name}: the answers so far are kept in "
                    f"{cache.base.parent}; finish with --resume"
                )
            raise
        # A malformed output is reported against the worker's log, which outlives the scratch.
        samples = samples_from_output(output, worker_log)
        checks = checks_from_output(config, output, samples, worker_log)
        record = LmEvalRecord(
            run_id=run_id,
            created=utc_now_iso(),
            complete=True,
            config=ConfigInfo(
                config.name,
                str(config.path),
                config.sha256,
                stored_config_fields(config.fields, secrets),
            ),
            environment=env,
            server=server_info,
            lm_eval={
                "version": output.get("lm_eval_version"),
                "model": config.lm_eval_model,
                "model_args": model_args(config, str(server_info.get("endpoint", ""))),
                "tasks": [t.name for t in config.tasks],
                "local_tasks": list(tasks),
                "num_fewshot": config.num_fewshot,
                "limit": limit,
                "gen_kwargs": config.gen_kwargs,
                "apply_chat_template": config.apply_chat_template,
                "fewshot_as_multiturn": config.fewshot_as_multiturn,
                "n_samples": output.get("n-samples", {}),
                "resumed": resumed,
                "log": worker_log.name,
            },
            checks=checks,
            samples=samples,
            duration=self.clock() - started,
        )
        path = write_lm_eval_record(store, record)
        cache.clear()
        for check in record.checks:
            print(check.line(), flush=True)
        verdict = "PASS" if record.passed else "FAIL"
        print(f"{verdict} {config.name} -> {path}", flush=True)
        return record, path

    def _run_lm_eval(
        self,
        config: LmEvalConfig,
        store: Path,
        stem: str,
        limit: int | float | None,
        spec: server.ServerSpec,
        server_info: dict[str, Any],
        cache: AnswerCache,
        worker_log: Path,
    ) -> tuple[dict[str, Any], tuple[str, ...]]:
        with tempfile.TemporaryDirectory(prefix="humming-lm-eval-") as tmp:
            scratch = Path(tmp)
            tasks = write_task_dir(scratch / "tasks", [t.name for t in config.tasks])
            if self.settings.endpoint:
                server_info.update(endpoint=self.settings.endpoint, launched=False)
                server.check_endpoint(self.settings.endpoint)
                self.progress.stage(f"{config.name}: lm-eval -> {self.settings.endpoint}")
                output = self._evaluate(
                    config,
                    self.settings.endpoint,
                    limit,
                    tasks.offline,
                    scratch,
                    cache,
                    worker_log,
                    lambda: None,
                    None,
                )
            else:
                log_path = store / f"{stem}.server.log"
                server_info.update(launched=True, log=log_path.name)
                self.progress.stage(
                    f"{config.name}: starting vllm serve {config.model_name} (log: {log_path})"
                )
                with self.launch(spec, log_path) as running:
                    server_info.update(
                        command=running.secrets.argv(running.command), endpoint=running.url
                    )
                    self.progress.stage(
                        f"{config.name}: server ready; running lm-eval (log: {worker_log})"
                    )
                    output = self._evaluate(
                        config,
                        running.url,
                        limit,
                        tasks.offline,
                        scratch,
                        cache,
                        worker_log,
                        running.check,
                        running.api_key,
                    )
                self.progress.stage(f"{config.name}: server stopped")
        return output, tasks.local

    def _evaluate(
        self,
        config: LmEvalConfig,
        url: str,
        limit: int | float | None,
        offline: bool,
        scratch: Path,
        cache: AnswerCache,
        log_path: Path,
        check: Callable[[], None],
        api_key: str | None,
    ) -> dict[str, Any]:
        request = {
            "model": config.lm_eval_model,
            "model_args": model_args(config, url),
            "tasks": [t.name for t in config.tasks],
            "num_fewshot": config.num_fewshot,
            "limit": limit,
            "gen_kwargs": config.gen_kwargs,
            "apply_chat_template": config.apply_chat_template,
            "fewshot_as_multiturn": config.fewshot_as_multiturn,
            "include_path": str(scratch / "tasks"),
            # Indexing lm-eval's thousands of built-in tasks costs seconds; skip it when every
            # task is served from a local file.
            "include_defaults": not offline,
            "use_cache": str(cache.base),
        }
        request_path, output_path = scratch / "request.json", scratch / "output.json"
        request_path.write_text(json.dumps(request), encoding="utf-8")
        command = [self.settings.python, "-m", WORKER_MODULE, str(request_path), str(output_path)]
        base = os.environ if self.base_env is None else self.base_env
        env = worker_environment(base, scratch, offline, api_key)
        code = self.worker(command, env, log_path, check)
        if code == EXIT_UNKNOWN_TASK:
            raise ConfigError(config.path, "tasks", log_tail(log_path, 1) or "unknown task")
        if code != 0 or not output_path.is_file():
            raise InfrastructureError(
                f"{config.name}: lm-eval exited with code {code} (log: {log_path}); last lines: "
                + " | ".join(log_tail(log_path, 3).splitlines())
            )
        data = json.loads(output_path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise InfrastructureError(f"{config.name}: lm-eval wrote no results ({output_path})")
        return data
