"""`humming-matrix lm-eval`: vLLM's lm-eval-harness configs, run by lm-eval against `vllm serve`."""

from __future__ import annotations

import argparse
from typing import Any

from humming_matrix.cli import report_fault
from humming_matrix.cli.run import add_suite_arguments
from humming_matrix.errors import ExitCode, InfrastructureError, UsageError
from humming_matrix.interrupts import terminate_unwinds
from humming_matrix.lmeval.config import load_lm_eval_configs
from humming_matrix.lmeval.suite import LmEvalSuite, SuiteSettings
from humming_matrix.lmeval.tasks import lm_eval_package_dir


def register(sub: Any) -> None:
    p = sub.add_parser(
        "lm-eval",
        help="run vLLM lm-eval-harness configs with lm-eval and write result records",
        description="Run each lm-eval config (vLLM's .buildkite/lm-eval-harness format) with "
        "lm-eval's local-completions model against a `vllm serve` launched here (or "
        "--endpoint), and write one `lm-eval` record per config with per-sample outcomes. A "
        "metric passes when measured >= value * (1 - rtol). Needs the extra: "
        "pip install 'humming-matrix[lm-eval]'. Exit 0 all pass, 1 a metric below its "
        "threshold, 2 usage or config error, 3 infrastructure failure.",
    )
    add_suite_arguments(
        p,
        "an lm-eval config (vLLM's YAML format)",
        "at most N documents per task (caps the config's `limit`)",
    )
    p.add_argument(
        "--tp-size",
        type=int,
        default=1,
        metavar="N",
        help="tensor parallel size, as vLLM's harness takes it (default 1)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="finish configs whose earlier run failed, reusing the answers it got "
        "(kept in DIR/.lm-eval-cache); without it every run asks every question",
    )
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    if not args.config and not args.config_list:
        raise UsageError("lm-eval needs --config FILE or --config-list FILE")
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if args.tp_size < 1:
        raise UsageError("--tp-size must be at least 1")
    configs = load_lm_eval_configs(args.config, args.config_list)
    lm_eval_package_dir()  # fail before any server starts when the extra is missing
    suite = LmEvalSuite(
        SuiteSettings(
            results=args.results,
            endpoint=args.endpoint,
            limit=args.limit,
            tp_size=args.tp_size,
            resume=args.resume,
        )
    )
    code = ExitCode.OK
    # SIGTERM (CI cancelling the job) unwinds like Ctrl-C: server and worker are torn down.
    with terminate_unwinds():
        for config in configs:
            try:
                record, _ = suite.run(config)
            except InfrastructureError as exc:
                report_fault(exc)
                code = ExitCode.INFRASTRUCTURE
                continue
            if not record.passed and code == ExitCode.OK:
                code = ExitCode.FAILED
    return int(code)
