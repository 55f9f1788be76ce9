"""`humming-matrix bisect`: the first released humming-kernels version that regressed."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from humming_matrix.bisect import report as bisect_report
from humming_matrix.bisect.driver import BisectLog, Driver, Plan
from humming_matrix.bisect.paired_judge import DivergenceJudge, KernelJudge, PairedJudge
from humming_matrix.bisect.search import Bisection, Conclusion
from humming_matrix.bisect.version_runner import (
    DEFAULT_PROBE_TIMEOUT_S,
    NoxRunner,
    Prober,
    Suite,
    Tier,
)
from humming_matrix.ci.slots import SlotPool
from humming_matrix.errors import ExitCode, UsageError
from humming_matrix.interrupts import terminate_unwinds
from humming_matrix.judge.compare import Settings
from humming_matrix.matrix.cells import (
    CHECKOUT_CONFIG_LIST,
    CHECKOUT_NOXFILE,
    MATRIX_ENV,
    Matrix,
    checkout_file,
    load_matrix,
)
from humming_matrix.matrix.package_index import (
    DEFAULT_INDEX_URL,
    PROJECT,
    CachedIndex,
    FindLinksDirectory,
    PackageIndex,
    SimpleIndex,
    default_cache_dir,
    released_versions,
)
from humming_matrix.suite.config import load_configs

INDEX_URL_ENV = "HUMMING_MATRIX_INDEX_URL"


def add_suite_arguments(p: argparse.ArgumentParser) -> None:
    """The options bisect and premerge share: what to run, where to store it, how to judge.
    Defaults that are the project's data (matrix, config list, noxfile) come from the checkout
    at or above the working directory, never from the installed package."""
    p.add_argument(
        "--matrix",
        type=Path,
        metavar="FILE",
        help=f"the matrix file (default: ${MATRIX_ENV}, else configs/matrix.toml of "
        "the checkout at or above the working directory); the probes' sessions "
        "read the same file",
    )
    p.add_argument(
        "--configs",
        action="append",
        type=Path,
        default=[],
        metavar="LIST",
        help=f"config list file(s) (default: the checkout's {CHECKOUT_CONFIG_LIST})",
    )
    p.add_argument(
        "--config",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="a single GSM8K config; repeatable",
    )
    p.add_argument(
        "--results",
        type=Path,
        default=Path("results/local"),
        metavar="DIR",
        help="the result store, read for reuse and written by probes (default: results/local)",
    )
    p.add_argument(
        "--limit", type=int, metavar="N", help="ask only the first N questions of each config"
    )
    p.add_argument(
        "--variant",
        metavar="NAME",
        help="the CUDA variant of every cell (default: each pairing's default)",
    )
    p.add_argument(
        "--noxfile",
        type=Path,
        metavar="FILE",
        help="the noxfile whose humming-<version> sessions run the probes (default: "
        f"the checkout's {CHECKOUT_NOXFILE})",
    )
    p.add_argument(
        "--envdir",
        type=Path,
        metavar="DIR",
        help="where nox keeps the session environments (nox's --envdir)",
    )
    p.add_argument(
        "--probe-timeout",
        type=float,
        default=DEFAULT_PROBE_TIMEOUT_S,
        metavar="S",
        help="kill a probe's session after S seconds (then it is untestable)",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    p.add_argument(
        "--min-effect",
        type=float,
        default=0.01,
        help="smallest drop that counts as a regression (0.01 = one point)",
    )
    p.add_argument(
        "--markdown",
        type=Path,
        metavar="FILE",
        help="write the Markdown verdict here (a CI annotation)",
    )


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bisect",
        help="find the first bad humming-kernels release between a good and a bad one",
        description="Bisect the released humming-kernels versions between --good and --bad: "
        "each probe runs the version's matrix session and is judged against the good "
        "version's records with the paired comparison. Untestable versions are skipped, never "
        "bad. Exit 0 found (or no regression), 2 usage, 3 endpoints could not be verified.",
    )
    p.add_argument("--good", required=True, metavar="V", help="a version known to be good")
    p.add_argument("--bad", required=True, metavar="V", help="a version known to be bad")
    add_suite_arguments(p)
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="probe N versions at once, each on its own GPU slot (N-ary search)",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="assume the endpoints are right instead of testing the bad one first",
    )
    p.add_argument("--prereleases", action="store_true", help="include pre-releases")
    p.add_argument(
        "--index-url",
        metavar="URL",
        help=f"simple index to list releases from (default: ${INDEX_URL_ENV} or "
        f"{DEFAULT_INDEX_URL})",
    )
    p.add_argument(
        "--find-links",
        type=Path,
        metavar="DIR",
        help="list releases from a directory of wheels instead of an index",
    )
    p.add_argument(
        "--index-cache",
        type=Path,
        metavar="DIR",
        help=f"where release listings are cached (default: {default_cache_dir()})",
    )
    p.add_argument("--refresh-index", action="store_true", help="ignore the cached listing")
    p.add_argument(
        "--log",
        type=Path,
        metavar="FILE",
        help="the resumable log (default: RESULTS/bisect/GOOD..BAD.jsonl)",
    )
    p.add_argument("--fresh", action="store_true", help="discard an existing log, start over")
    p.add_argument(
        "--tier",
        choices=[t.value for t in Tier],
        default=Tier.GSM8K.value,
        help="gsm8k: the config suite through vllm serve (default); kernels: the "
        "GEMM probe (`kernels-<version>` sessions, needs a GPU); divergence: "
        "teacher-forced logprobs of each config against the good version's, with "
        "its A/A repeat as the floor (docs/divergence.md; --alpha applies)",
    )
    p.add_argument(
        "--fail-on-slowdown",
        action="store_true",
        help="kernel tier: a slower kernel counts as bad too, beyond the spread of two runs "
        "of the GEMM probe a version (each probe runs its session twice)",
    )
    p.add_argument(
        "--changes-url",
        default=bisect_report.DEFAULT_CHANGES_URL,
        metavar="TEMPLATE",
        help="link to the changes, with {good} and {bad}",
    )
    p.set_defaults(handler=main)


def _version(text: str, flag: str) -> str:
    try:
        return str(Version(text))
    except InvalidVersion:
        raise UsageError(f"{flag}: not a version: {text!r}") from None


def suite_from(args: argparse.Namespace) -> Suite:
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if getattr(args, "tier", Tier.GSM8K.value) == Tier.KERNELS.value:
        if args.configs or args.config or args.limit:
            raise UsageError("--tier kernels runs the GEMM probe: no --configs, --config, --limit")
        # Two runs a version when slowdowns count: the spread a `slower` must exceed.
        runs = 2 if args.fail_on_slowdown else 1
        return Suite((), (), args.results.resolve(), None, Tier.KERNELS, kernel_runs=runs)
    lists = [p.resolve() for p in args.configs] or (
        [] if args.config else [checkout_file(CHECKOUT_CONFIG_LIST, "--configs").resolve()]
    )
    files = [p.resolve() for p in args.config]
    configs = load_configs(files, lists)
    run_args: list[str] = []
    for path in lists:
        run_args += ["--config-list", str(path)]
    for path in files:
        run_args += ["--config", str(path)]
    tier = Tier(getattr(args, "tier", Tier.GSM8K.value))
    return Suite(tuple(configs), tuple(run_args), args.results.resolve(), args.limit, tier)


def prober_from(args: argparse.Namespace, suite: Suite, jobs: int, matrix: Matrix) -> Prober:
    given = args.noxfile or checkout_file(CHECKOUT_NOXFILE, "--noxfile")
    noxfile = given.resolve()
    if not noxfile.is_file():
        raise UsageError(f"--noxfile {given}: no such file")
    slots = SlotPool.from_environment() if jobs > 1 else None
    return Prober(
        suite,
        NoxRunner(
            noxfile,
            timeout=args.probe_timeout,
            envdir=args.envdir.resolve() if args.envdir else None,
        ),
        log_dir=suite.store / "probe-logs",
        hardware=Prober.current_hardware(),
        slots=slots,
        # The sessions must pair versions with the stacks this command judged them by.
        base_env={**os.environ, MATRIX_ENV: str(matrix.path.resolve())},
    )


def _index(args: argparse.Namespace) -> PackageIndex:
    source: PackageIndex
    if args.find_links is not None:
        source = FindLinksDirectory(args.find_links)
    else:
        source = SimpleIndex(args.index_url or os.environ.get(INDEX_URL_ENV) or DEFAULT_INDEX_URL)
    ttl = 0.0 if args.refresh_index else 3600.0
    return CachedIndex(source, args.index_cache or default_cache_dir(), ttl=ttl)


def main(args: argparse.Namespace) -> int:
    good, bad = _version(args.good, "--good"), _version(args.bad, "--bad")
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
    settings = Settings(alpha=args.alpha, min_effect=args.min_effect)
    if args.tier == Tier.DIVERGENCE.value and not 0.0 < args.alpha < 0.5:
        raise UsageError(f"--alpha must be in (0, 0.5), got {args.alpha}")
    matrix = load_matrix(args.matrix)
    suite = suite_from(args)
    released = released_versions(_index(args).releases(PROJECT), prereleases=args.prereleases)
    state = Bisection.between(good, bad, released, verify_endpoints=not args.no_verify)
    for version in state.versions:
        matrix.cell_for(version, args.variant)  # every version needs a cell before any runs
    plan = Plan(
        good=good,
        bad=bad,
        versions=state.versions,
        configs={c.name: c.sha256 for c in suite.configs},
        limit=args.limit,
        variant=args.variant,
        verify_endpoints=not args.no_verify,
        tier=suite.tier,
    )
    prober = prober_from(args, suite, args.jobs, matrix)
    suffix = "" if suite.tier is Tier.GSM8K else f".{suite.tier.value}"
    log_path = args.log or suite.store / "bisect" / f"{good}..{bad}{suffix}.jsonl"
    judge: PairedJudge | KernelJudge | DivergenceJudge = (
        KernelJudge(args.fail_on_slowdown)
        if suite.tier is Tier.KERNELS
        else DivergenceJudge(args.alpha)
        if suite.tier is Tier.DIVERGENCE
        else PairedJudge(settings)
    )
    with terminate_unwinds(), BisectLog(log_path, plan, fresh=args.fresh) as log:
        result = Driver(
            plan,
            matrix,
            prober,
            judge,
            judge.alone,
            log,
            jobs=args.jobs,
            say=lambda line: print(line, flush=True),
        ).run()
    print(f"bisect: {bisect_report.headline(result)}")
    first = result.outcome.first_bad
    if first is not None and first in result.entries:
        for line in bisect_report.evidence_lines(result.entries[first].evidence):
            print(f"bisect: evidence: {line}")
    if first is not None and result.outcome.conclusion in (Conclusion.FOUND, Conclusion.AMBIGUOUS):
        link = bisect_report.changes_link(args.changes_url, result.outcome.last_good, first)
        print(f"bisect: changes: {link}")
    ran = ", ".join(result.sessions_run) or "none"
    print(f"bisect: sessions run: {ran}; log: {log_path}")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(
            bisect_report.markdown(result, plan, args.changes_url), encoding="utf-8"
        )
    if result.outcome.conclusion is Conclusion.UNVERIFIED:
        return int(ExitCode.INFRASTRUCTURE)
    return int(ExitCode.OK)
