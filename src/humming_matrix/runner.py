"""Running GSM8K configs in this environment: the orchestration behind `humming-matrix run`
and the pytest entry (server lifecycle, resume, partial records on faults)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from humming_matrix import environment, gsm8k, server
from humming_matrix.config import EvalConfig
from humming_matrix.errors import (
    InfrastructureError,
    RequestError,
    ServerStartError,
    UsageError,
)
from humming_matrix.evaluate import Evaluation, RunSettings, make_client
from humming_matrix.progress import Progress
from humming_matrix.results import (
    Gsm8kRecord,
    RecordKind,
    iter_gsm8k_records,
    record_filename,
    redact,
    write_record,
)


@dataclass(frozen=True)
class RunOptions:
    results: Path
    endpoint: str | None = None
    limit: int | None = None
    resume: bool = False
    retries: int = 3
    max_errors: int = 0


def find_resumable(store: Path, config: EvalConfig, humming: str | None) -> Gsm8kRecord | None:
    if not store.is_dir():
        return None
    records = [r for _, r in iter_gsm8k_records(store) if r.config.name == config.name]
    finished = {r.resumed_from for r in records if r.resumed_from}
    candidates = [
        r for r in records
        # A server that never started left a record with nothing in it to resume.
        if not r.complete and r.run_id not in finished
        and any(q.answered for q in r.questions)
        and r.config.sha256 == config.sha256 and r.humming_version == humming
    ]
    return max(candidates, key=lambda r: r.run_id, default=None)


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
    settings = RunSettings(retries=options.retries, max_errors=options.max_errors)
    count = min(config.num_questions, options.limit) if options.limit else config.num_questions
    prompts = gsm8k.build_prompts(count, config.num_fewshot, config.gen_prefix)
    env = environment.capture()
    previous = (find_resumable(options.results, config, env["humming_kernels"])
                if options.resume else None)
    if previous is not None:
        if len(previous.questions) != len(prompts):
            raise UsageError(
                f"cannot resume {previous.run_id}: it has {len(previous.questions)} questions, "
                f"this run asks {len(prompts)} (use the same --limit)"
            )
        progress.stage(f"{config.name}: resuming {previous.run_id}")
    spec = server.ServerSpec(config.model_name, config.server_args, config.env,
                             config.startup_max_wait_seconds)
    server_info: dict[str, Any] = {
        "model": config.model_name,
        "args": list(config.server_args),
        "env": redact(config.env),
    }
    evaluation = Evaluation(config, prompts, env, server_info, previous=previous)
    stem = record_filename(RecordKind.GSM8K, config.name, env["humming_kernels"],
                           evaluation.run_id).removesuffix(".json")
    try:
        if not evaluation.pending:
            progress.stage(f"{config.name}: nothing left to ask")
        elif options.endpoint:
            server_info.update(endpoint=options.endpoint, launched=False)
            progress.stage(
                f"{config.name}: {len(evaluation.pending)} questions -> {options.endpoint}"
            )
            evaluation.ask(make_client(config, options.endpoint, settings, None), progress)
        else:
            log_path = options.results / f"{stem}.server.log"
            # What the server really got, not only the config's env: the parent environment
            # decides the sampler, the JIT cache and which packages it imports.
            effective = server.server_environment(spec, os.environ)
            server_info.update(launched=True, log=log_path.name,
                               environment=redact(server.recorded_environment(effective)))
            progress.stage(f"{config.name}: starting vllm serve {config.model_name} "
                           f"(log: {log_path})")
            with server.launch(spec, log_path) as running:
                if running.startup is not None:
                    evaluation.server_ready(running.startup.seconds, running.startup.to_json())
                server_info.update(command=list(running.command), endpoint=running.url)
                progress.stage(f"{config.name}: server ready; asking "
                               f"{len(evaluation.pending)} questions")
                evaluation.ask(make_client(config, running.url, settings, running.check), progress)
            progress.stage(f"{config.name}: server stopped")
    except ServerStartError as exc:
        evaluation.server_failed(exc.report.seconds, exc.report.to_json())
        path = write_record(options.results, evaluation.record(complete=False))
        progress.stage(f"{config.name}: the server never became ready "
                       f"({exc.report.phase.label}); record saved: {path}")
        raise
    except (InfrastructureError, KeyboardInterrupt):
        if evaluation.outcomes:
            path = write_record(options.results, evaluation.record(complete=False))
            progress.stage(f"{config.name}: partial record saved (resume with --resume): {path}")
        raise
    if evaluation.error_count > settings.max_errors:
        path = write_record(options.results, evaluation.record(complete=False))
        raise RequestError(
            f"{config.name}: {evaluation.error_count} requests failed after {settings.retries} "
            f"retries (allowed {settings.max_errors}); partial record saved: {path}"
        )
    record = evaluation.record(complete=True)
    path = write_record(options.results, record)
    print(summary_line(record, path), flush=True)
    return record
