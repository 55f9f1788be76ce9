"""`humming-matrix pipeline`: the matrix as CI jobs.

humming-matrix pipeline --format buildkite --tag humming | buildkite-agent pipeline upload
echo "matrix=$(humming-matrix pipeline --format github --variant cu130)" >> "$GITHUB_OUTPUT"
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from humming_matrix.ci import buildkite, github_actions
from humming_matrix.ci.pipeline import (
    DEFAULT_COMMAND,
    DEFAULT_RESULTS,
    Format,
    JobSettings,
    Selection,
    parse_env,
    plan_jobs,
    select_cells,
)
from humming_matrix.errors import ExitCode, UsageError
from humming_matrix.matrix.cells import load_matrix


def register(sub: Any) -> None:
    p = sub.add_parser(
        "pipeline",
        help="emit the matrix as a Buildkite pipeline or a GitHub Actions matrix",
        description="Emit one CI job per selected matrix cell: Buildkite pipeline YAML (for "
        "`buildkite-agent pipeline upload`) or the JSON of a GitHub Actions strategy.matrix. "
        "Configs are validated now, not an hour into a job. Exit 0, or 2 for bad input.",
    )
    p.add_argument("--format", required=True, choices=[f.value for f in Format])
    p.add_argument(
        "--matrix",
        type=Path,
        metavar="FILE",
        help="the matrix file (default: $HUMMING_MATRIX_FILE, else configs/matrix.toml "
        "of the checkout at or above the working directory)",
    )
    sel = p.add_argument_group("selection (repeatable; a cell must match every kind given)")
    sel.add_argument(
        "--version",
        action="append",
        default=[],
        dest="versions",
        metavar="V",
        help="a humming-kernels version; one the matrix covers but does not list "
        "is run under its pairing's stack",
    )
    sel.add_argument(
        "--variant",
        action="append",
        default=[],
        dest="variants",
        metavar="NAME",
        help="a CUDA variant (e.g. cu130)",
    )
    sel.add_argument(
        "--tag",
        action="append",
        default=[],
        dest="tags",
        metavar="TAG",
        help="a nox session tag (humming, humming-<version>, <variant>); any of them",
    )
    p.add_argument(
        "--config",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="a GSM8K config each job runs; repeatable",
    )
    p.add_argument(
        "--config-list",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="a config list each job runs; repeatable (default, when no --config: "
        "configs/gsm8k/humming/config.txt)",
    )
    p.add_argument(
        "--limit", type=int, metavar="N", help="pass --limit N to every run (a smoke pipeline)"
    )
    p.add_argument(
        "--optional",
        action="append",
        default=[],
        metavar="SESSION_OR_TAG",
        help="cells whose failure must not fail the build (soft_fail / "
        "continue-on-error); repeatable",
    )
    p.add_argument(
        "--results",
        default=DEFAULT_RESULTS,
        metavar="DIR",
        help=f"where jobs write records, relative to the checkout (default: "
        f"{DEFAULT_RESULTS}); each job uses DIR/<session>",
    )
    p.add_argument(
        "--command",
        default=DEFAULT_COMMAND,
        metavar="TEMPLATE",
        help="a job's shell command; placeholders {session}, {run_args}, {results} "
        f"(default: {DEFAULT_COMMAND!r})",
    )
    p.add_argument(
        "--retry-limit",
        type=int,
        default=2,
        metavar="N",
        help="automatic retries of a job that exits 3 (infrastructure); default 2",
    )
    bk = p.add_argument_group("buildkite")
    bk.add_argument(
        "--queue",
        default=buildkite.DEFAULT_QUEUE,
        metavar="TEMPLATE",
        help="agent queue of a GPU job; {gpus} is its GPU count (default: "
        f"{buildkite.DEFAULT_QUEUE})",
    )
    bk.add_argument(
        "--cpu-queue",
        default=buildkite.DEFAULT_CPU_QUEUE,
        metavar="NAME",
        help="queue of the report step and of jobs that need no GPU",
    )
    bk.add_argument(
        "--timeout-minutes",
        type=int,
        default=240,
        metavar="N",
        help="a job's timeout (default 240)",
    )
    bk.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of every cell step; repeatable",
    )
    bk.add_argument(
        "--report-command",
        default=buildkite.DEFAULT_REPORT_COMMAND,
        metavar="TEMPLATE",
        help="the report step's command; placeholders "
        "{results}, {markdown} (the file it must write, posted as the annotation), "
        "{junit}, {html}",
    )
    gh = p.add_argument_group("github")
    gh.add_argument(
        "--runner",
        default=github_actions.DEFAULT_RUNNER,
        metavar="TEMPLATE",
        help="runs-on label of a GPU job; {gpus} is its GPU count (default: "
        f"{github_actions.DEFAULT_RUNNER})",
    )
    gh.add_argument(
        "--cpu-runner",
        default=github_actions.DEFAULT_CPU_RUNNER,
        metavar="LABEL",
        help="runs-on label of jobs that need no GPU",
    )
    p.add_argument("--output", type=Path, metavar="FILE", help="write here instead of stdout")
    p.set_defaults(handler=main)


def render(args: argparse.Namespace) -> str:
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    matrix = load_matrix(args.matrix)
    cells = select_cells(
        matrix,
        Selection(
            versions=tuple(args.versions), variants=tuple(args.variants), tags=tuple(args.tags)
        ),
    )
    settings = JobSettings(
        configs=tuple(args.config),
        config_lists=tuple(args.config_list),
        results=args.results,
        command=args.command,
        optional=tuple(args.optional),
        extra_run_args=("--limit", str(args.limit)) if args.limit is not None else (),
    )
    jobs = plan_jobs(cells, settings)
    if Format(args.format) is Format.BUILDKITE:
        bk_settings = buildkite.BuildkiteSettings(
            queue=args.queue,
            cpu_queue=args.cpu_queue,
            retry_limit=args.retry_limit,
            timeout_minutes=args.timeout_minutes,
            env=parse_env(args.env),
            report_command=args.report_command,
        )
        return buildkite.render(buildkite.pipeline(jobs, args.results, bk_settings))
    gh_settings = github_actions.GithubSettings(
        runner=args.runner, cpu_runner=args.cpu_runner, retry_limit=args.retry_limit
    )
    return github_actions.render(github_actions.matrix(jobs, gh_settings)) + "\n"


def main(args: argparse.Namespace) -> int:
    text = render(args)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
    return int(ExitCode.OK)
