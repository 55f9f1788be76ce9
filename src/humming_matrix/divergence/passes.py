"""A divergence pass: one config's forced answers scored by one server, into one record.

The server is the product's (`server.launch`: the same `vllm serve` command line, seed, process
group and teardown as `run`), with `--max-logprobs` raised to k when the config's own args do not
set it. `repeat` passes against one launch write one record each: two of them are an A/A pair of
that launch (the floor that batch shapes alone give). A fault leaves a partial record (exit 3),
an interrupt too; nothing answered is lost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from humming_matrix import environment
from humming_matrix.divergence.asking import Asked, LogprobsClient, ask_all, empty_answer
from humming_matrix.divergence.record import (
    AnswerLogprobs,
    DivergenceRecord,
    write_divergence_record,
)
from humming_matrix.divergence.teacher import ForcedText, forced_texts
from humming_matrix.errors import InfrastructureError, RequestError, ServerStartError
from humming_matrix.progress import Progress
from humming_matrix.store.results import (
    ConfigInfo,
    Secrets,
    Timings,
    new_run_id,
    redact_config_env,
    utc_now_iso,
)
from humming_matrix.suite import server
from humming_matrix.suite.client import RetryPolicy
from humming_matrix.suite.config import EvalConfig

DEFAULT_TOP_K = 5
NOT_ASKED = "not asked: the pass stopped first"
NOT_STARTED = "not asked: the server never became ready"
# The divergence stage of a matrix session (cli/session.py): passes per config against one
# launch, so every cell holds its own A/A pair, the floor a comparison with it needs.
STAGE_REPEAT = 2
# The configs that get a divergence stage after their GSM8K stage: a config list file (the
# session's --divergence-list, else this variable).
DIVERGENCE_LIST_ENV = "HUMMING_MATRIX_DIVERGENCE_LIST"
# "1": the divergence stage of every config of the run, and no GSM8K stage (what a
# `bisect --tier divergence` probe sets).
DIVERGENCE_ONLY_ENV = "HUMMING_MATRIX_DIVERGENCE_ONLY"


@dataclass(frozen=True)
class PassOptions:
    results: Path
    top_k: int = DEFAULT_TOP_K
    endpoint: str | None = None
    limit: int | None = None
    repeat: int = 1
    retries: int = 3
    max_errors: int = 0


def server_args(config: EvalConfig, top_k: int) -> tuple[str, ...]:
    """The config's args, plus `--max-logprobs k` unless they set it (vLLM's default is 20)."""
    args = config.server_args
    if any(a == "--max-logprobs" or a.startswith("--max-logprobs=") for a in args):
        return args
    return (*args, "--max-logprobs", str(max(top_k, 20)))


class _Pass:
    """Answers accumulate as they arrive, so a pass cut short still leaves a record."""

    def __init__(
        self,
        config: EvalConfig,
        items: list[ForcedText],
        env: dict[str, Any],
        server_info: dict[str, Any],
        top_k: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config, self.items, self.env, self.server_info = config, items, env, server_info
        self.top_k = top_k
        self.clock = clock
        self.run_id = new_run_id()
        self.answers: dict[int, AnswerLogprobs] = {}
        self.started: float | None = None
        self.finished: float | None = None
        self.startup: dict[str, Any] | None = None
        self.startup_seconds: float | None = None
        self.unasked = NOT_ASKED
        self.saved: Path | None = None  # where its record went, once written

    def save(self, store: Path, record: DivergenceRecord) -> Path:
        self.saved = write_divergence_record(store, record)
        return self.saved

    def ask(self, client: LogprobsClient, progress: Progress) -> None:
        progress.start(self.config.name, len(self.items))
        self.started = self.clock()

        def on_done(asked: Asked) -> None:
            self.answers[asked.answer.index] = asked.answer
            progress.advance()

        try:
            ask_all(client, self.items, on_done)
        finally:
            self.finished = self.clock()
            progress.finish()

    @property
    def error_count(self) -> int:
        return sum(not a.answered for a in self.answers.values())

    def record(self, complete: bool) -> DivergenceRecord:
        asking = 0.0 if self.started is None else (self.finished or self.clock()) - self.started
        install = self.env.get("install")
        seconds = install.get("install_seconds") if isinstance(install, dict) else None
        return DivergenceRecord(
            run_id=self.run_id,
            created=utc_now_iso(),
            complete=complete,
            config=ConfigInfo(
                self.config.name,
                str(self.config.path),
                self.config.sha256,
                dict(self.config.fields),
            ),
            environment=self.env,
            top_k=self.top_k,
            # Not `get() or`: an answer with no tokens (an error) is falsy.
            questions=tuple(
                self.answers[i.index]
                if i.index in self.answers
                else empty_answer(i.index, self.unasked)
                for i in self.items
            ),
            server=dict(self.server_info),
            timings=Timings(
                float(seconds) if isinstance(seconds, (int, float)) else None,
                self.startup_seconds,
                asking,
            ),
            startup=self.startup,
        )


def _client(
    config: EvalConfig,
    url: str,
    options: PassOptions,
    check: Callable[[], None] | None,
    headers: Mapping[str, str] | None = None,
) -> LogprobsClient:
    return LogprobsClient(
        url,
        options.top_k,
        concurrency=config.concurrency,
        timeout=config.request_timeout_seconds,
        retry=RetryPolicy(retries=options.retries),
        check_server=check,
        headers=headers,
    )


def _finish(one: _Pass, options: PassOptions, progress: Progress) -> DivergenceRecord:
    if one.error_count > options.max_errors:
        path = one.save(options.results, one.record(complete=False))
        raise RequestError(
            f"{one.config.name}: {one.error_count} divergence requests failed after "
            f"{options.retries} retries (allowed {options.max_errors}); partial record saved: "
            f"{path}"
        )
    record = one.record(complete=True)
    path = one.save(options.results, record)
    print(summary_line(record, path), flush=True)
    return record


def summary_line(record: DivergenceRecord, path: Path) -> str:
    seconds = record.timings.asking if record.timings else 0.0
    return (
        f"DONE {record.config.name}: {len(record.questions)} questions, "
        f"{record.token_count} answer tokens, top-{record.top_k}, errors "
        f"{record.error_count}, {seconds:.1f} s -> {path}"
    )


def run_passes(
    config: EvalConfig, options: PassOptions, progress: Progress
) -> list[DivergenceRecord]:
    """`options.repeat` passes of one config against one server; one record each."""
    count = min(config.num_questions, options.limit) if options.limit else config.num_questions
    items = forced_texts(count, config.num_fewshot, config.gen_prefix)
    env = environment.capture()
    args = server_args(config, options.top_k)
    spec = server.ServerSpec(config.model_name, args, config.env, config.startup_max_wait_seconds)
    secrets = Secrets.gather(args, config.env, ())
    info: dict[str, Any] = {
        "model": config.model_name,
        "args": secrets.argv(args),
        "env": redact_config_env(config.env),
    }
    records: list[DivergenceRecord] = []
    one = _Pass(config, items, env, info, options.top_k)
    try:
        if options.endpoint:
            info.update(endpoint=options.endpoint, launched=False)
            server.check_endpoint(options.endpoint)
            for _ in range(options.repeat):
                one = _Pass(config, items, env, info, options.top_k)
                progress.stage(
                    f"{config.name}: divergence pass, {len(items)} questions -> {options.endpoint}"
                )
                one.ask(_client(config, options.endpoint, options, None), progress)
                records.append(_finish(one, options, progress))
            return records
        log_path = options.results / f"divergence__{config.name}__{one.run_id}.server.log"
        effective = server.server_environment(spec, os.environ)
        info.update(
            launched=True,
            log=log_path.name,
            environment=secrets.environment(server.recorded_environment(effective)),
        )
        progress.stage(f"{config.name}: starting vllm serve {config.model_name} (log: {log_path})")
        with server.launch(spec, log_path) as running:
            info.update(command=running.secrets.argv(running.command), endpoint=running.url)
            report = running.startup
            for n in range(options.repeat):
                if n:
                    one = _Pass(config, items, env, info, options.top_k)
                if report is not None:
                    one.startup, one.startup_seconds = report.to_json(), report.seconds
                progress.stage(
                    f"{config.name}: server ready; divergence pass {n + 1}/"
                    f"{options.repeat}, {len(items)} questions"
                )
                one.ask(
                    _client(config, running.url, options, running.check, running.headers), progress
                )
                records.append(_finish(one, options, progress))
        progress.stage(f"{config.name}: server stopped")
    except ServerStartError as exc:
        one.startup, one.startup_seconds = exc.report.to_json(), exc.report.seconds
        one.unasked = NOT_STARTED
        path = one.save(options.results, one.record(complete=False))
        progress.stage(
            f"{config.name}: the server never became ready "
            f"({exc.report.phase.label}); record saved: {path}"
        )
        raise
    except (InfrastructureError, KeyboardInterrupt):
        if one.answers and one.saved is None:
            path = one.save(options.results, one.record(complete=False))
            progress.stage(f"{config.name}: partial record saved: {path}")
        raise
    return records
