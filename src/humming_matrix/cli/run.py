"""`humming-matrix run`: each GSM8K config in this environment, one result record per config."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from humming_matrix.cli import report_fault
from humming_matrix.errors import ExitCode, InfrastructureError, UsageError
from humming_matrix.interrupts import terminate_unwinds
from humming_matrix.progress import Progress
from humming_matrix.suite.config import load_configs
from humming_matrix.suite.runner import RunOptions, run_config


def add_suite_arguments(p: argparse.ArgumentParser, config_help: str, limit_help: str) -> None:
    """The options every suite runner shares: what to run, where records go, which server."""
    p.add_argument(
        "--config",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help=f"{config_help}; repeatable",
    )
    p.add_argument(
        "--config-list",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="a list file of configs, one per line, relative to the list; repeatable",
    )
    p.add_argument(
        "--results",
        type=Path,
        default=Path("results/local"),
        metavar="DIR",
        help="the result store (default: results/local)",
    )
    p.add_argument(
        "--endpoint",
        metavar="URL",
        help="use a server that is already up instead of launching `vllm serve`",
    )
    p.add_argument("--limit", type=int, metavar="N", help=limit_help)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run GSM8K configs in this environment and write result records",
        description="Run each GSM8K config against a `vllm serve` launched here (or --endpoint), "
        "and write one result record per config. Exit 0 all pass, 1 a config below its "
        "threshold, 2 usage or config error, 3 infrastructure failure.",
    )
    add_suite_arguments(
        p,
        "a GSM8K eval config (vLLM's YAML schema)",
        "ask only the first N questions of each config",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="finish the newest incomplete record of each config in the store, "
        "without re-asking answered questions",
    )
    p.add_argument(
        "--retries",
        type=int,
        default=3,
        metavar="N",
        help="retries per request for 5xx and broken connections (default 3)",
    )
    p.add_argument(
        "--max-errors",
        type=int,
        default=0,
        metavar="N",
        help="request errors tolerated per config before the run counts as an "
        "infrastructure failure (default 0)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help="wall-clock limit of each config's run, start-up included; a run that "
        "reaches it saves its partial record and exits 3 (default: the config's "
        "startup_max_wait_seconds + 600 + 2 per question)",
    )
    p.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="NAME",
        help="a server flag (written --secret=--hf-token) or environment variable "
        "whose value is a credential: stored nowhere (besides --api-key and the "
        "config's env, which are always redacted); repeatable",
    )
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    if not args.config and not args.config_list:
        raise UsageError("run needs --config FILE or --config-list FILE")
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if args.retries < 0 or args.max_errors < 0:
        raise UsageError("--retries and --max-errors must not be negative")
    if args.time_limit is not None and args.time_limit <= 0:
        raise UsageError("--time-limit must be positive")
    configs = load_configs(args.config, args.config_list)
    progress = Progress()
    code = ExitCode.OK
    options = RunOptions(
        results=args.results,
        endpoint=args.endpoint,
        limit=args.limit,
        resume=args.resume,
        retries=args.retries,
        max_errors=args.max_errors,
        time_limit=args.time_limit,
        secrets=tuple(args.secret),
    )
    with terminate_unwinds():
        for config in configs:
            try:
                record = run_config(config, options, progress)
            except InfrastructureError as exc:
                report_fault(exc)
                code = ExitCode.INFRASTRUCTURE
                continue
            if not record.metrics.passed and code == ExitCode.OK:
                code = ExitCode.FAILED
    return int(code)
