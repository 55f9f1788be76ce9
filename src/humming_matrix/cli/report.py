"""`humming-matrix report DIR`: what the store holds (GSM8K, kernel and lm-eval records, each kind
in its own section), as Markdown, JUnit XML and HTML."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from humming_matrix.errors import ExitCode
from humming_matrix.judge.compare import Settings
from humming_matrix.report.build import build_report, write_text
from humming_matrix.report.html import store_html
from humming_matrix.report.junit import store_junit
from humming_matrix.report.markdown import store_markdown


def register(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="render what a result store holds (Markdown, JUnit XML, HTML)",
        description="Judge every result in the store against the baseline environment and "
        "render it, one section per kind of record: GSM8K (environment, config), kernels "
        "(environment, case: the kernel judge) and lm-eval (environment, config, task, metric). "
        "Without --markdown, --junit or --html the Markdown goes to stdout. Exit 0 (the report "
        "informs; `compare` gates); 2 if the store holds no record of any kind.",
    )
    p.add_argument("store", type=Path, metavar="DIR")
    p.add_argument(
        "--markdown",
        type=Path,
        metavar="FILE",
        help="Markdown under 1 MiB (a Buildkite annotation or GitHub job summary)",
    )
    p.add_argument(
        "--junit",
        type=Path,
        metavar="FILE",
        help="JUnit XML, one testcase per result (config, kernel case, lm-eval metric)",
    )
    p.add_argument("--html", type=Path, metavar="FILE", help="a self-contained HTML page")
    p.add_argument(
        "--baseline",
        metavar="VERSION",
        help="humming-kernels version to compare against, in every section (default: the "
        "oldest there, per kind)",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="as for compare (default 0.05)")
    p.add_argument(
        "--min-effect",
        type=float,
        default=0.01,
        metavar="FRACTION",
        help="as for compare (default 0.01)",
    )
    p.add_argument(
        "--tier",
        choices=["accuracy", "divergence"],
        default="accuracy",
        help="divergence: render the store's divergence records instead, every environment "
        "against the baseline's and its A/A floor (docs/divergence.md)",
    )
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    if args.tier == "divergence":
        # Imported here: the divergence tier renders its own sections.
        return int(importlib.import_module("humming_matrix.cli.divergence").report_main(args))
    settings = Settings(alpha=args.alpha, min_effect=args.min_effect)
    report = build_report(args.store, settings, args.baseline)
    if args.markdown:
        write_text(args.markdown, store_markdown(report))
    if args.junit:
        write_text(args.junit, store_junit(report))
    if args.html:
        write_text(args.html, store_html(report))
    if not (args.markdown or args.junit or args.html):
        sys.stdout.write(store_markdown(report))
    return int(ExitCode.OK)
