"""`humming-matrix divergence run|compare`: the divergence tier (docs/divergence.md).

`run` scores each config's GSM8K reference answers teacher-forced (prefill only) and writes one
divergence record per pass; `compare` judges a candidate against a baseline and the baseline's A/A
floor. `compare --tier divergence` is the same judgement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from humming_matrix.cli import report_fault
from humming_matrix.cli.run import add_suite_arguments
from humming_matrix.divergence.judge import DivergenceComparison, compare_divergence
from humming_matrix.divergence.passes import DEFAULT_TOP_K, PassOptions, run_passes
from humming_matrix.divergence.render import (
    comparison_html,
    comparison_junit,
    comparison_markdown,
    comparison_text,
)
from humming_matrix.divergence.store_report import build_divergence_report
from humming_matrix.errors import ExitCode, InfrastructureError, UsageError
from humming_matrix.interrupts import terminate_unwinds
from humming_matrix.progress import Progress
from humming_matrix.report.build import write_text
from humming_matrix.suite.config import load_configs

# vLLM's default --max-logprobs; a larger k needs the config's server_args to raise it.
MAX_TOP_K = 20


def register(sub: Any) -> None:
    p = sub.add_parser(
        "divergence",
        help="token-level logprob divergence between two runs (teacher-forced, prefill only)",
        description="The divergence tier: `run` asks the server for the logprobs of each GSM8K "
        "question's reference answer (the prompt plus the answer, teacher-forced) and writes "
        "divergence records; `compare` judges a candidate against a baseline and the "
        "baseline's A/A floor. docs/divergence.md.",
    )
    tier = p.add_subparsers(dest="divergence_command", required=True)
    r = tier.add_parser(
        "run",
        help="divergence passes of GSM8K configs in this environment",
        description="One pass per config (or --repeat N passes against one server): "
        "the forced answer's tokens, their logprobs and the top-k at each. Exit 0 done, 2 usage "
        "or config error, 3 infrastructure failure (a partial record is saved).",
    )
    add_suite_arguments(
        r,
        "a GSM8K eval config (vLLM's YAML schema)",
        "score only the first N questions of each config",
    )
    r.add_argument(
        "--top-k",
        type=int,
        default=DEFAULT_TOP_K,
        metavar="K",
        help=f"alternatives kept per token (default {DEFAULT_TOP_K}, at most "
        f"{MAX_TOP_K} unless server_args raise --max-logprobs)",
    )
    r.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="passes per server launch, one record each (2 gives the A/A floor)",
    )
    r.add_argument(
        "--retries",
        type=int,
        default=3,
        metavar="N",
        help="retries per request for 5xx and broken connections (default 3)",
    )
    r.add_argument(
        "--max-errors",
        type=int,
        default=0,
        metavar="N",
        help="failed questions tolerated per pass (default 0)",
    )
    r.set_defaults(handler=run_main)

    c = tier.add_parser(
        "compare",
        help="judge a candidate's divergence from a baseline against the A/A floor",
        description=COMPARE_DESCRIPTION,
    )
    add_compare_arguments(c, positional=True)
    c.set_defaults(handler=compare_main)
    p.set_defaults(handler=lambda args: int(ExitCode.USAGE))


COMPARE_DESCRIPTION = (
    "Pair the divergence records of BASELINE and CANDIDATE by config; per question, the "
    "candidate's divergence from the baseline (mean token KL over the top-k, top-1 "
    "disagreement, |answer NLL change|) against the floor (the baseline's replicate: another "
    "record of its config and environment, beside it or under --floor). One-sided exact sign "
    "test per metric, Holm over every config and metric. Exit 0 same, 1 diverged, 2 usage "
    "error."
)


def add_compare_arguments(p: argparse.ArgumentParser, positional: bool) -> None:
    if positional:
        p.add_argument("baseline", type=Path, metavar="BASELINE")
        p.add_argument("candidate", type=Path, metavar="CANDIDATE")
        p.add_argument(
            "--alpha",
            type=float,
            default=0.05,
            help="family-wise significance level (default 0.05)",
        )
        p.add_argument("--markdown", type=Path, metavar="FILE", help="also write Markdown here")
        p.add_argument("--json", type=Path, metavar="FILE", help="also write JSON here")
    p.add_argument(
        "--floor",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="divergence records holding the baseline's A/A replicate; repeatable "
        "(default: found beside the baseline)",
    )
    p.add_argument("--junit", type=Path, metavar="FILE", help="divergence: JUnit XML here")
    p.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="divergence: HTML with the per-question KL distributions here",
    )


def run_main(args: argparse.Namespace) -> int:
    if not args.config and not args.config_list:
        raise UsageError("divergence run needs --config FILE or --config-list FILE")
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if args.top_k < 1:
        raise UsageError("--top-k must be at least 1")
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    if args.retries < 0 or args.max_errors < 0:
        raise UsageError("--retries and --max-errors must not be negative")
    configs = load_configs(args.config, args.config_list)
    options = PassOptions(
        results=args.results,
        top_k=args.top_k,
        endpoint=args.endpoint,
        limit=args.limit,
        repeat=args.repeat,
        retries=args.retries,
        max_errors=args.max_errors,
    )
    progress = Progress()
    code = ExitCode.OK
    with terminate_unwinds():
        for config in configs:
            try:
                run_passes(config, options, progress)
            except InfrastructureError as exc:
                report_fault(exc)
                code = ExitCode.INFRASTRUCTURE
    return int(code)


def compare_main(args: argparse.Namespace) -> int:
    comparison = compare_divergence(args.baseline, args.candidate, args.alpha, args.floor)
    print(comparison_text(comparison), end="", flush=True)
    _write(args, comparison)
    return int(ExitCode.FAILED if comparison.diverged else ExitCode.OK)


def report_main(args: argparse.Namespace) -> int:
    """`report --tier divergence STORE`: exit 0 (the report informs; `compare` gates)."""
    comparison = build_divergence_report(args.store, args.alpha, args.baseline)
    if not (args.markdown or args.junit or args.html):
        sys.stdout.write(comparison_markdown(comparison))
    _write(args, comparison)
    return int(ExitCode.OK)


def _write(args: argparse.Namespace, comparison: DivergenceComparison) -> None:
    if args.markdown:
        write_text(args.markdown, comparison_markdown(comparison))
    if getattr(args, "json", None):
        write_text(args.json, json.dumps(comparison.to_json(), indent=1) + "\n")
    if getattr(args, "junit", None):
        write_text(args.junit, comparison_junit(comparison))
    if getattr(args, "html", None):
        write_text(args.html, comparison_html(comparison))
