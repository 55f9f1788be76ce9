"""Running GSM8K configs in this environment: the orchestration behind `humming-matrix run`
and the pytest entry (server lifecycle, resume, partial records on faults)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from humming_matrix import environment
from humming_matrix.errors import (
    HummingMatrixError,
    ServerCrashError,
    ServerStartError,
    UsageError,
)
from humming_matrix.interrupts import deferred
from humming_matrix.progress import Progress
from humming_matrix.store.results import (
    IDENTITY_KEYS,
    Gsm8kRecord,
    RecordKind,
    Secrets,
    environment_identity,
    iter_gsm8k_records,
    record_filename,
    redact_config_env,
    write_record,
)
from humming_matrix.suite import gsm8k, server
from humming_matrix.suite.config import EvalConfig
from humming_matrix.suite.evaluate import Evaluation, RunSettings, make_client

# The wall-clock limit of a run by default: the server's start-up allowance, then this much,
# plus this much per question (a GPU answers 1319 questions in minutes, a CPU smoke run 30 in
# seconds; a hung server is the case this bounds).
TIME_LIMIT_BASE_SECONDS = 600.0
TIME_LIMIT_PER_QUESTION_SECONDS = 2.0


@dataclass(frozen=True)
class RunOptions:
    results: Path
    endpoint: str | None = None
    limit: int | None = None
    resume: bool = False
    retries: int = 3
    max_errors: int = 0
    time_limit: float | None = None  # seconds for the whole run; None: default_time_limit
    secrets: tuple[str, ...] = ()  # flags and env variables declared secret (--secret)


def default_time_limit(config: EvalConfig, questions: int) -> float:
    return (
        config.startup_max_wait_seconds
        + TIME_LIMIT_BASE_SECONDS
        + TIME_LIMIT_PER_QUESTION_SECONDS * questions
    )


def _differences(recorded: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    out = []
    for key in IDENTITY_KEYS:
        a, b = recorded.get(key), here.get(key)
        if a == b:
            continue
        if key == "packages" and isinstance(a, dict) and isinstance(b, dict):
            changed = sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
            out.append(f"packages ({', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''})")
        else:
            out.append(f"{key} ({a} there, {b} here)")
    return out


def find_resumable(store: Path, config: EvalConfig, env: Mapping[str, Any]) -> Gsm8kRecord | None:
    """The newest unfinished record of this config measured in this environment. A record of
    the same config and cell (session, humming version) whose environment differs is refused
    (UsageError): resuming into it would mix two measurements."""
    if not store.is_dir():
        return None
    records = [r for _, r in iter_gsm8k_records(store) if r.config.name == config.name]
    finished = {r.resumed_from for r in records if r.resumed_from}
    unfinished = [
        r
        for r in records
        # A server that never started left a record with nothing in it to resume.
        if not r.complete
        and r.run_id not in finished
        and any(q.answered for q in r.questions)
        and r.humming_version == env.get("humming_kernels")
        and r.environment.get("session") == env.get("session")
    ]
    here = environment_identity(env)
    same = [
        r
        for r in unfinished
        if r.config.sha256 == config.sha256 and environment_identity(r.environment) == here
    ]
    newest = max(unfinished, key=lambda r: r.run_id, default=None)
    if same:
        return max(same, key=lambda r: r.run_id)
    if newest is None:
        return None
    differs = _differences(newest.environment, env)
    where = [f"in another environment ({'; '.join(differs)})"] if differs else []
    if newest.config.sha256 != config.sha256:
        where.insert(0, f"with another version of {config.path} (sha256)")
    raise UsageError(
        f"cannot resume {newest.run_id} of {config.name}: it was measured "
        f"{' and '.join(where)}; run without --resume for a fresh record"
    )


def summary_line(record: Gsm8kRecord, path: Path) -> str:
    m = record.metrics
    verdict = "PASS" if m.passed else "FAIL"
    return (
        f"{verdict} {record.config.name}: accuracy {m.accuracy:.4f} "
        f"(gate {m.threshold:g} - {m.tolerance:g} = {m.threshold - m.tolerance:.4f}), "
        f"invalid {m.invalid_rate:.4f}, errors {m.error_count}, {m.num_questions} questions, "
        f"{m.duration:.1f} s -> {path}"
    )


def run_config(config: EvalConfig, options: RunOptions, progress: Progress) -> Gsm8kRecord:
    """Run one config: launch the server (or use the endpoint), ask, score, write the record.

    A fault leaves a partial record (resume with `RunOptions.resume`) and raises.
    """
    began = time.monotonic()
    count = min(config.num_questions, options.limit) if options.limit else config.num_questions
    limit = options.time_limit or default_time_limit(config, count)

    def settings() -> RunSettings:
        return RunSettings(
            options.retries, options.max_errors, max(0.0, limit - (time.monotonic() - began))
        )

    prompts = gsm8k.build_prompts(count, config.num_fewshot, config.gen_prefix)
    env = environment.capture()
    previous = find_resumable(options.results, config, env) if options.resume else None
    if previous is not None:
        if len(previous.questions) != len(prompts):
            raise UsageError(
                f"cannot resume {previous.run_id}: it has {len(previous.questions)} questions, "
                f"this run asks {len(prompts)} (use the same --limit)"
            )
        progress.stage(f"{config.name}: resuming {previous.run_id}")
    spec = server.ServerSpec(
        config.model_name,
        config.server_args,
        config.env,
        min(config.startup_max_wait_seconds, limit),
        options.secrets,
    )
    secrets = Secrets.gather(config.server_args, config.env, options.secrets)
    server_info: dict[str, Any] = {
        "model": config.model_name,
        "args": secrets.argv(config.server_args),
        "env": redact_config_env(config.env),
    }
    evaluation = Evaluation(config, prompts, env, server_info, previous=previous, secrets=secrets)
    stem = record_filename(
        RecordKind.GSM8K, config.name, env["humming_kernels"], evaluation.run_id
    ).removesuffix(".json")
    try:
        if not evaluation.pending:
            progress.stage(f"{config.name}: nothing left to ask")
        elif options.endpoint:
            server_info.update(endpoint=options.endpoint, launched=False)
            server.check_endpoint(options.endpoint)
            progress.stage(
                f"{config.name}: {len(evaluation.pending)} questions -> {options.endpoint}"
            )
            evaluation.ask(
                make_client(config, options.endpoint, settings(), None), progress, settings()
            )
        else:
            log_path = options.results / f"{stem}.server.log"
            # What the server really got, not only the config's env: the parent environment
            # decides the sampler, the JIT cache and which packages it imports.
            effective = server.server_environment(spec, os.environ)
            server_info.update(
                launched=True,
                log=log_path.name,
                environment=secrets.environment(server.recorded_environment(effective)),
            )
            progress.stage(
                f"{config.name}: starting vllm serve {config.model_name} (log: {log_path})"
            )
            with server.launch(spec, log_path) as running:
                if running.startup is not None:
                    evaluation.server_ready(running.startup.seconds, running.startup.to_json())
                server_info.update(
                    command=running.secrets.argv(running.command), endpoint=running.url
                )
                progress.stage(
                    f"{config.name}: server ready; asking {len(evaluation.pending)} questions"
                )
                evaluation.ask(
                    make_client(config, running.url, settings(), running.check, running.headers),
                    progress,
                    settings(),
                )
            progress.stage(f"{config.name}: server stopped")
    except ServerStartError as exc:
        evaluation.server_failed(exc.report.seconds, exc.report.to_json())
        path = _save(options.results, evaluation.record(complete=False))
        progress.stage(
            f"{config.name}: the server never became ready "
            f"({exc.report.phase.label}); record saved: {path}"
        )
        raise
    except (HummingMatrixError, KeyboardInterrupt) as exc:
        if isinstance(exc, ServerCrashError):
            server_info["crash"] = {"cuda_error": True, "reason": exc.cause}
        if evaluation.outcomes:
            path = _save(options.results, evaluation.record(complete=False))
            progress.stage(f"{config.name}: partial record saved (resume with --resume): {path}")
        raise
    record = evaluation.record(complete=True)
    path = _save(options.results, record)
    print(summary_line(record, path), flush=True)
    return record


def _save(
    store: Path, record: Gsm8kRecord, write: Callable[[Path, Gsm8kRecord], Path] = write_record
) -> Path:
    # A second Ctrl-C must not cost the record of what was asked: it waits until it is written.
    with deferred():
        return write(store, record)
