"""`humming-matrix run`: each GSM8K config in this environment, one result record per config."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from humming_matrix import environment, gsm8k, server
from humming_matrix.config import EvalConfig, load_configs
from humming_matrix.errors import (
    ExitCode,
    InfrastructureError,
    RequestError,
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


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run GSM8K configs in this environment and write result records",
        description="Run each GSM8K config against a `vllm serve` launched here (or --endpoint), "
        "and write one result record per config. Exit 0 all pass, 1 a config below its "
        "threshold, 2 usage or config error, 3 infrastructure failure.",
    )
    p.add_argument("--config", action="append", type=Path, default=[], metavar="FILE",
                   help="a GSM8K eval config (vLLM's YAML schema); repeatable")
    p.add_argument("--config-list", action="append", type=Path, default=[], metavar="FILE",
                   help="a list file of configs, one per line, relative to the list; repeatable")
    p.add_argument("--results", type=Path, default=Path("results/local"), metavar="DIR",
                   help="the result store (default: results/local)")
    p.add_argument("--endpoint", metavar="URL",
                   help="use a server that is already up instead of launching `vllm serve`")
    p.add_argument("--limit", type=int, metavar="N",
                   help="ask only the first N questions of each config")
    p.add_argument("--resume", action="store_true",
                   help="finish the newest incomplete record of each config in the store, "
                   "without re-asking answered questions")
    p.add_argument("--retries", type=int, default=3, metavar="N",
                   help="retries per request for 5xx and broken connections (default 3)")
    p.add_argument("--max-errors", type=int, default=0, metavar="N",
                   help="request errors tolerated per config before the run counts as an "
                   "infrastructure failure (default 0)")
    p.set_defaults(handler=main)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _terminate_unwinds() -> Iterator[None]:
    """SIGTERM/SIGHUP (CI cancelling a job) unwind like Ctrl-C, so the server is torn down."""
    signals = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def find_resumable(store: Path, config: EvalConfig, humming: str | None) -> Gsm8kRecord | None:
    if not store.is_dir():
        return None
    records = [r for _, r in iter_gsm8k_records(store) if r.config.name == config.name]
    finished = {r.resumed_from for r in records if r.resumed_from}
    candidates = [
        r for r in records
        if not r.complete and r.run_id not in finished
        and r.config.sha256 == config.sha256 and r.humming_version == humming
    ]
    return max(candidates, key=lambda r: r.run_id, default=None)


def _summary(record: Gsm8kRecord, path: Path) -> str:
    m = record.metrics
    verdict = "PASS" if m.passed else "FAIL"
    return (
        f"{verdict} {record.config.name}: accuracy {m.accuracy:.4f} "
        f"(gate {m.threshold:g} - {m.tolerance:g} = {m.threshold - m.tolerance:.4f}), "
        f"invalid {m.invalid_rate:.4f}, errors {m.error_count}, {m.num_questions} questions, "
        f"{m.duration:.1f} s -> {path}"
    )


def run_config(config: EvalConfig, args: argparse.Namespace, progress: Progress) -> Gsm8kRecord:
    settings = RunSettings(retries=args.retries, max_errors=args.max_errors)
    count = min(config.num_questions, args.limit) if args.limit else config.num_questions
    prompts = gsm8k.build_prompts(count, config.num_fewshot, config.gen_prefix)
    env = environment.capture()
    previous = find_resumable(args.results, config, env["humming_kernels"]) if args.resume else None
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
        elif args.endpoint:
            server_info.update(endpoint=args.endpoint, launched=False)
            progress.stage(f"{config.name}: {len(evaluation.pending)} questions -> {args.endpoint}")
            evaluation.ask(make_client(config, args.endpoint, settings, None), progress)
        else:
            log_path = args.results / f"{stem}.server.log"
            server_info.update(launched=True, log=log_path.name)
            progress.stage(f"{config.name}: starting vllm serve {config.model_name} "
                           f"(log: {log_path})")
            with server.launch(spec, log_path) as running:
                server_info.update(command=list(running.command), endpoint=running.url)
                progress.stage(f"{config.name}: server ready; asking "
                               f"{len(evaluation.pending)} questions")
                evaluation.ask(make_client(config, running.url, settings, running.check), progress)
            progress.stage(f"{config.name}: server stopped")
    except (InfrastructureError, KeyboardInterrupt):
        if evaluation.outcomes:
            path = write_record(args.results, evaluation.record(complete=False))
            progress.stage(f"{config.name}: partial record saved (resume with --resume): {path}")
        raise
    if evaluation.error_count > settings.max_errors:
        path = write_record(args.results, evaluation.record(complete=False))
        raise RequestError(
            f"{config.name}: {evaluation.error_count} requests failed after {settings.retries} "
            f"retries (allowed {settings.max_errors}); partial record saved: {path}"
        )
    record = evaluation.record(complete=True)
    path = write_record(args.results, record)
    print(_summary(record, path), flush=True)
    return record


def main(args: argparse.Namespace) -> int:
    if not args.config and not args.config_list:
        raise UsageError("run needs --config FILE or --config-list FILE")
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if args.retries < 0 or args.max_errors < 0:
        raise UsageError("--retries and --max-errors must not be negative")
    configs = load_configs(args.config, args.config_list)
    progress = Progress()
    code = ExitCode.OK
    with _terminate_unwinds():
        for config in configs:
            try:
                record = run_config(config, args, progress)
            except InfrastructureError as exc:
                print(f"humming-matrix: error: {exc}", file=sys.stderr)
                tail = getattr(exc, "log_tail", "")
                if tail:
                    print(f"--- server log (tail) ---\n{tail}", file=sys.stderr)
                code = ExitCode.INFRASTRUCTURE
                continue
            if not record.metrics.passed and code == ExitCode.OK:
                code = ExitCode.FAILED
    return int(code)
