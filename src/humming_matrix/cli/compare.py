"""`humming-matrix compare BASELINE CANDIDATE`: the paired judgement of two runs."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

from humming_matrix.compare import Settings, compare_locations, record_kinds
from humming_matrix.errors import ExitCode, UsageError
from humming_matrix.report import write_text
from humming_matrix.report_markdown import comparison_markdown
from humming_matrix.report_text import comparison_text
from humming_matrix.results import RecordKind, record_paths


def register(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="paired comparison of a baseline and a candidate run",
        description="Pair the records of BASELINE and CANDIDATE (record files or result "
        "directories) by config name and judge each pair question by question: accuracies with "
        "95%% Wilson intervals, the paired difference (Newcombe), b and c, the one-sided exact "
        "McNemar mid-p, the verdict, the minimum detectable effect and the flipped questions. "
        "Kernel records go to the kernel judge. Exit 0 no regression, 1 regression (or the "
        "candidate below its config's absolute threshold), 2 usage error.",
    )
    p.add_argument("baseline", type=Path, metavar="BASELINE")
    p.add_argument("candidate", type=Path, metavar="CANDIDATE")
    p.add_argument(
        "--alpha", type=float, default=0.05, help="one-sided significance level (default 0.05)"
    )
    p.add_argument(
        "--min-effect",
        type=float,
        default=0.01,
        metavar="FRACTION",
        help="smallest accuracy drop that counts, as a fraction (default 0.01: one point)",
    )
    p.add_argument(
        "--calibration",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="records or a directory holding an A/A pair (two runs of one "
        "environment) to measure the noise floor against; repeatable. Pairs in "
        "BASELINE and CANDIDATE are found without it",
    )
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write Markdown here")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write everything as JSON here")
    p.add_argument(
        "--fail-on-slowdown",
        action="store_true",
        help="kernel records only: a significant slowdown fails too",
    )
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    settings = Settings(alpha=args.alpha, min_effect=args.min_effect)
    base_kinds, cand_kinds = record_kinds(args.baseline), record_kinds(args.candidate)
    if RecordKind.GSM8K in base_kinds and RecordKind.GSM8K in cand_kinds:
        return _gsm8k(args, settings)
    if RecordKind.KERNELS in base_kinds and RecordKind.KERNELS in cand_kinds:
        return _kernels(args)
    raise UsageError(
        f"nothing to pair: {args.baseline} holds {_kinds(base_kinds)} records and "
        f"{args.candidate} holds {_kinds(cand_kinds)} records"
    )


def _kinds(kinds: set[RecordKind]) -> str:
    return " and ".join(sorted(k.value for k in kinds)) or "no"


def _gsm8k(args: argparse.Namespace, settings: Settings) -> int:
    comparison = compare_locations(args.baseline, args.candidate, settings, args.calibration)
    print(comparison_text(comparison), end="", flush=True)
    if args.markdown:
        write_text(args.markdown, comparison_markdown(comparison))
    if args.json:
        write_text(args.json, json.dumps(comparison.to_json(), indent=1) + "\n")
    return int(ExitCode.FAILED if comparison.gate_failed else ExitCode.OK)


def _kernels(args: argparse.Namespace) -> int:
    # Imported here: the kernel judge is its own tier and must not slow down GSM8K comparisons.
    try:
        judge = importlib.import_module("humming_matrix.kernels.judge")
    except ModuleNotFoundError:
        raise UsageError(
            "kernel records: this installation lacks the kernel judge "
            "(humming_matrix.kernels.judge), so it can compare GSM8K records only"
        ) from None
    comparison = judge.compare_kernel_records(
        record_paths(args.baseline, RecordKind.KERNELS),
        record_paths(args.candidate, RecordKind.KERNELS),
        fail_on_slowdown=args.fail_on_slowdown,
    )
    markdown = comparison.to_markdown()
    print(markdown, end="" if markdown.endswith("\n") else "\n", flush=True)
    if args.markdown:
        write_text(args.markdown, markdown)
    if args.json:
        write_text(args.json, json.dumps(comparison.to_json(), indent=1) + "\n")
    return int(comparison.exit_code)
