"""`humming-matrix compare BASELINE CANDIDATE`: the paired judgement of two runs."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

from humming_matrix.errors import ExitCode, UsageError
from humming_matrix.judge.compare import (
    Comparison,
    Settings,
    compare_locations,
    in_family,
    record_kinds,
)
from humming_matrix.judge.compare_lm_eval import LmEvalComparison, compare_lm_eval_locations
from humming_matrix.report.build import write_text
from humming_matrix.report.markdown import comparison_markdown, lm_eval_comparison_markdown
from humming_matrix.report.text import comparison_text, lm_eval_comparison_text
from humming_matrix.store.results import RecordKind, record_paths


def register(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="paired comparison of a baseline and a candidate run",
        description="Pair the records of BASELINE and CANDIDATE (record files or result "
        "directories) by config name and judge each pair question by question: accuracies with "
        "95% Wilson intervals, the paired difference (Newcombe), b and c, the one-sided exact "
        "McNemar mid-p, the verdict, the minimum detectable effect and the flipped questions. "
        "lm-eval records are judged the same way per task and metric, document by document, "
        "with lm-eval's pass rule as the backstop. Kernel records go to the kernel judge. "
        "Exit 0 no regression, 1 regression (or the candidate below its config's absolute "
        "threshold, or lm-eval's pass rule), 2 usage error.",
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
        "environment) to measure the noise floor against; repeatable; GSM8K records only. "
        "Pairs in BASELINE and CANDIDATE are found without it",
    )
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write Markdown here")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write everything as JSON here")
    p.add_argument(
        "--tier",
        choices=["accuracy", "divergence"],
        default="accuracy",
        help="divergence: judge divergence records instead (as `humming-matrix divergence "
        "compare`; docs/divergence.md)",
    )
    # Imported here: the divergence tier's own options (--floor, --junit, --html).
    importlib.import_module("humming_matrix.cli.divergence").add_compare_arguments(
        p, positional=False
    )
    p.add_argument(
        "--fail-on-slowdown",
        action="store_true",
        help="kernel records only: a significant slowdown fails too",
    )
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    if args.tier == "divergence":
        return int(importlib.import_module("humming_matrix.cli.divergence").compare_main(args))
    settings = Settings(alpha=args.alpha, min_effect=args.min_effect)
    base_kinds, cand_kinds = record_kinds(args.baseline), record_kinds(args.candidate)
    shared = base_kinds & cand_kinds
    if RecordKind.GSM8K in shared or RecordKind.LM_EVAL in shared:
        _note_unjudged(args, base_kinds, cand_kinds, judged=shared - {RecordKind.KERNELS})
        return _accuracy(args, settings, shared)
    if RecordKind.KERNELS in shared:
        _note_unjudged(args, base_kinds, cand_kinds, judged={RecordKind.KERNELS})
        return _kernels(args)
    raise UsageError(
        f"nothing to pair: {args.baseline} holds {_kinds(base_kinds)} records and "
        f"{args.candidate} holds {_kinds(cand_kinds)} records"
    )


def _note_unjudged(
    args: argparse.Namespace, base: set[RecordKind], cand: set[RecordKind], judged: set[RecordKind]
) -> None:
    """Say what was left out, so a record that was not judged is never taken for a pass."""
    for kind in sorted((base | cand) - judged, key=lambda k: k.value):
        if kind in base and kind in cand:
            why = "compare them on their own (point at files or folders of that kind only)"
        else:
            holder, other = (
                (args.baseline, args.candidate) if kind in base else (args.candidate, args.baseline)
            )
            why = f"only {holder} holds them, {other} has none to pair with"
        print(
            f"humming-matrix: note: {kind.value} records were not compared: {why}",
            file=sys.stderr,
            flush=True,
        )


def _kinds(kinds: set[RecordKind]) -> str:
    return " and ".join(sorted(k.value for k in kinds)) or "no"


def _accuracy(args: argparse.Namespace, settings: Settings, kinds: set[RecordKind]) -> int:
    """GSM8K and lm-eval records, each kind that both sides hold: a store with runs of both
    suites is judged on both, since judging one and passing would hide the other's regression."""
    gsm8k: Comparison | None = None
    lm_eval: LmEvalComparison | None = None
    if RecordKind.GSM8K in kinds:
        gsm8k = compare_locations(args.baseline, args.candidate, settings, args.calibration)
    elif args.calibration:
        raise UsageError("--calibration: the A/A noise floor is measured for GSM8K records only")
    if RecordKind.LM_EVAL in kinds:
        lm_eval = compare_lm_eval_locations(args.baseline, args.candidate, settings)
    if gsm8k is not None and lm_eval is not None:
        # One gate, one family: every config and metric this command judges (Holm over all).
        family = in_family([*gsm8k.tests, *lm_eval.tests])
        gsm8k = gsm8k.with_tests(family[: len(gsm8k.tests)])
        lm_eval = lm_eval.with_tests(family[len(gsm8k.tests) :])
    texts, markdown = [], []
    # The GSM8K JSON keeps its shape; lm-eval's comes alone, or under "lm_eval" beside it.
    document: dict[str, Any] = {}
    if gsm8k is not None:
        texts.append(comparison_text(gsm8k))
        markdown.append(comparison_markdown(gsm8k))
        document = gsm8k.to_json()
    if lm_eval is not None:
        texts.append(lm_eval_comparison_text(lm_eval))
        markdown.append(lm_eval_comparison_markdown(lm_eval))
        if gsm8k is None:
            document = lm_eval.to_json()
        else:
            document["gate_failed"] = gsm8k.gate_failed or lm_eval.gate_failed
            document["lm_eval"] = lm_eval.to_json()
    print("\n".join(texts), end="", flush=True)
    if args.markdown:
        write_text(args.markdown, "\n".join(markdown))
    if args.json:
        write_text(args.json, json.dumps(document, indent=1) + "\n")
    failed = any(c is not None and c.gate_failed for c in (gsm8k, lm_eval))
    return int(ExitCode.FAILED if failed else ExitCode.OK)


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
