"""`humming-matrix premerge`: gate a change to the guarded pins in requirements/cuda.txt."""

from __future__ import annotations

import argparse
from pathlib import Path, PurePosixPath
from typing import Any

from humming_matrix.bisect import premerge
from humming_matrix.bisect.paired_judge import PairedJudge
from humming_matrix.bisect.search import Verdict
from humming_matrix.bisect.version_runner import ProbeStatus
from humming_matrix.cli.bisect import add_suite_arguments, prober_from, suite_from
from humming_matrix.errors import ExitCode, InfrastructureError, UsageError
from humming_matrix.interrupts import terminate_unwinds
from humming_matrix.judge.compare import Settings
from humming_matrix.matrix.cells import load_matrix

DEFAULT_REQUIREMENTS = PurePosixPath("requirements/cuda.txt")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "premerge",
        help="compare the old and new humming-kernels pins of requirements/cuda.txt",
        description="Diff the guarded pins (humming-kernels, torch, vllm) of the requirements "
        "file between the merge base with --base and HEAD; if they changed, run the config "
        "suite in the old and the new cell (reusing stored runs) and compare paired. Exit 0 "
        "pass or nothing to check, 1 regression, 2 usage, 3 infrastructure failure.",
    )
    p.add_argument(
        "--base",
        default="origin/main",
        metavar="REF",
        help="the branch the change merges into (default: origin/main)",
    )
    p.add_argument("--head", default="HEAD", metavar="REF", help="the change (default: HEAD)")
    p.add_argument(
        "--repo",
        type=Path,
        default=Path("."),
        metavar="PATH",
        help="the git checkout holding the requirements file (e.g. a vLLM clone)",
    )
    p.add_argument(
        "--requirements",
        default=str(DEFAULT_REQUIREMENTS),
        metavar="PATH",
        help=f"the file, relative to --repo (default: {DEFAULT_REQUIREMENTS})",
    )
    add_suite_arguments(p)
    p.set_defaults(handler=main)


def _relative(repo: Path, text: str) -> PurePosixPath:
    path = Path(text)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(repo.resolve())
        except ValueError:
            raise UsageError(f"--requirements {text} is outside --repo {repo}") from None
    return PurePosixPath(path.as_posix())


def _finish(args: argparse.Namespace, result: premerge.GateResult) -> int:
    print(f"premerge: {result.status.value}: {result.reason}")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(premerge.markdown(result), encoding="utf-8")
    return int(
        {
            premerge.GateStatus.NOTHING_TO_CHECK: ExitCode.OK,
            premerge.GateStatus.PASS: ExitCode.OK,
            premerge.GateStatus.REGRESSION: ExitCode.FAILED,
            premerge.GateStatus.INFRASTRUCTURE: ExitCode.INFRASTRUCTURE,
        }[result.status]
    )


def main(args: argparse.Namespace) -> int:
    settings = Settings(alpha=args.alpha, min_effect=args.min_effect)
    file = _relative(args.repo, args.requirements)
    git = premerge.git_runner(args.repo)
    revisions = premerge.resolve_revisions(git, args.base, args.head)
    old = premerge.pins_at(git, revisions.base, file)
    new = premerge.pins_at(git, revisions.head, file)
    changes = premerge.diff_pins(old, new)
    for change in changes:
        print(f"premerge: {change.name}: {change.describe()}")
    if not changes:
        guarded = ", ".join(premerge.GUARDED)
        return _finish(
            args,
            premerge.GateResult(
                premerge.GateStatus.NOTHING_TO_CHECK,
                str(file),
                revisions,
                (),
                f"no guarded pin ({guarded}) changed in {file} since the merge base "
                f"{revisions.base[:12]}",
            ),
        )
    matrix = load_matrix(args.matrix)
    suite = suite_from(args)
    try:
        cells = premerge.cells_for(matrix, old, new, args.variant, str(file))
        print(f"premerge: old cell {cells.old.session}, new cell {cells.new.session}", flush=True)
        prober = prober_from(args, suite, 2, matrix)
        with terminate_unwinds():
            old_probe, new_probe, judgement = premerge.run_gate(
                cells, prober, PairedJudge(settings)
            )
    except InfrastructureError as exc:
        return _finish(
            args,
            premerge.GateResult(
                premerge.GateStatus.INFRASTRUCTURE,
                str(file),
                revisions,
                changes,
                str(exc),
            ),
        )
    for probe in (old_probe, new_probe):
        how = "reused stored records" if probe.status is ProbeStatus.REUSED else "ran"
        print(f"premerge: {probe.session}: {how}")
    status = (
        premerge.GateStatus.REGRESSION
        if judgement.verdict is Verdict.BAD
        else premerge.GateStatus.PASS
    )
    return _finish(
        args,
        premerge.GateResult(
            status,
            str(file),
            revisions,
            changes,
            f"{cells.old.session} -> {cells.new.session}: {judgement.summary}",
            cells,
            old_probe,
            new_probe,
            judgement,
        ),
    )
