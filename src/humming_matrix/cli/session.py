"""`humming-matrix session NAME -- RUN_ARGS`: what one nox matrix session does, in order.

0. (--install-failed) the noxfile's install step failed: record that, exit 125;
1. record what the environment holds (the install record, `HUMMING_MATRIX_INSTALL_RECORD`);
2. refuse (125) unless the installed humming-kernels is the one NAME says;
3. compare with sibling environments of the same stack (the single-variable check; recorded);
4. the CPU preflight (125 on failure), unless the matrix recipe declares `preflight = false`;
5. with HUMMING_MATRIX_PREFLIGHT_ONLY=1: stop after the preflight (exit 0); without the GPUs
   the cell needs: stop, saying only the preflight ran (exit 3);
6. `humming-matrix run RUN_ARGS` (or `kernels` with --kernels), its exit code the session's;
7. the divergence stage (docs/divergence.md), opt-in per config: the configs of the run that
   the list file --divergence-list (else $HUMMING_MATRIX_DIVERGENCE_LIST) names get
   `humming-matrix divergence run --repeat 2` after step 6, under the same GPU lease; with
   HUMMING_MATRIX_DIVERGENCE_ONLY=1 (a `bisect --tier divergence` probe) every config of the run
   gets it and step 6 is left out. The session's exit code is the worse of its stages'.

The noxfile only installs and calls this; every decision lives here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from humming_matrix import distributions, environment
from humming_matrix.ci.slots import CUDA_ENV, Holder, SlotPool
from humming_matrix.divergence.passes import (
    DIVERGENCE_LIST_ENV,
    DIVERGENCE_ONLY_ENV,
    STAGE_REPEAT,
)
from humming_matrix.errors import (
    ExitCode,
    HummingMatrixError,
    NoGPUError,
    UntestableError,
    UsageError,
)
from humming_matrix.matrix import installation
from humming_matrix.matrix.cells import (
    CHECKOUT_CONFIG_LIST,
    MATRIX_ENV,
    Cell,
    checkout_file,
    load_matrix,
)
from humming_matrix.matrix.installation import Outcome, Stage
from humming_matrix.matrix.preflight import PreflightReport, run_preflight
from humming_matrix.suite.config import EvalConfig, load_configs

PREFLIGHT_ONLY_ENV = "HUMMING_MATRIX_PREFLIGHT_ONLY"


@contextlib.contextmanager
def gpu_lease(owner: str, needed: int) -> Iterator[None]:
    """Hold `needed` GPUs from the machine's slot pool while the stage runs, so `nox -j N` never
    puts two servers on one GPU; the run (and the `vllm serve` it starts) sees only those GPUs."""
    if needed == 0:
        yield
        return

    def waiting(holders: tuple[Holder, ...]) -> None:
        print(
            f"{owner}: waiting for {needed} GPU(s): " + "; ".join(h.describe() for h in holders),
            flush=True,
        )

    with SlotPool.from_environment().acquire(needed, owner=owner, on_wait=waiting) as lease:
        previous = os.environ.get(CUDA_ENV)
        os.environ.update(lease.environ())
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(CUDA_ENV, None)
            else:
                os.environ[CUDA_ENV] = previous


@dataclass(frozen=True)
class Seams:
    """The side effects a test may replace: what is installed, the GPUs seen, the preflight,
    the next command."""

    packages: Callable[[], dict[str, str]] = distributions.installed_packages
    gpus: Callable[[], list[dict[str, str]]] = environment.gpus
    preflight: Callable[..., PreflightReport] = run_preflight
    command: Callable[[Sequence[str]], int] | None = None  # None: humming_matrix.cli.main
    gpu_lease: Callable[[str, int], AbstractContextManager[None]] = gpu_lease


def register(sub: Any) -> None:
    p = sub.add_parser(
        "session",
        help="one nox matrix session: record, verify, preflight, then run (called by noxfile)",
        description="Record the environment, refuse a wrong humming-kernels (125), run the CPU "
        f"preflight (125 on failure), stop there with {PREFLIGHT_ONLY_ENV}=1 (0) or without the "
        "GPUs the cell needs (3), then `humming-matrix run` with the arguments after `--`.",
    )
    p.add_argument("name", help="the session name, e.g. humming-0.1.19 or kernels-0.1.19-cu128")
    p.add_argument(
        "--matrix",
        type=Path,
        metavar="FILE",
        help=f"the matrix file (the noxfile passes its own; default: ${MATRIX_ENV}, else "
        "configs/matrix.toml of the checkout at or above the working directory)",
    )
    p.add_argument(
        "--record",
        type=Path,
        metavar="PATH",
        help=f"install record to write (default: ${environment.ENV_INSTALL_RECORD})",
    )
    p.add_argument(
        "--results",
        type=Path,
        default=Path("results/local"),
        metavar="DIR",
        help="result store used when the run arguments name none",
    )
    p.add_argument(
        "--default-config-list",
        type=Path,
        metavar="FILE",
        help="config list used when the run arguments name none (the noxfile passes its own; "
        f"default: {CHECKOUT_CONFIG_LIST} of the checkout at or above the working directory)",
    )
    p.add_argument(
        "--kernels",
        action="store_true",
        help="after verifying, run `humming-matrix kernels` instead of the GSM8K stage",
    )
    p.add_argument(
        "--divergence-list",
        type=Path,
        metavar="FILE",
        help="a config list: those of the run's configs it names also get a divergence stage "
        f"(default: ${DIVERGENCE_LIST_ENV}; none); ${DIVERGENCE_ONLY_ENV}=1: every config, and "
        "no GSM8K stage",
    )
    p.add_argument(
        "--install-failed",
        action="store_true",
        help="the installer failed (the noxfile says so): record it and exit 125",
    )
    p.add_argument(
        "--install-seconds",
        type=float,
        metavar="SECONDS",
        help="how long the noxfile's install step took (kept in the install record; result "
        "records show it as timings.install)",
    )
    p.add_argument("run_args", nargs=argparse.REMAINDER, help="arguments for `run` after `--`")
    p.set_defaults(handler=main)


def _split_run_args(args: Sequence[str]) -> list[str]:
    """The arguments for `run`. argparse's REMAINDER takes everything after the name, so a session
    option written after it (`NAME --record R -- --config C`) would silently become a run
    argument, and the preflight would check no config: a `--` after other arguments says so."""
    rest = list(args)
    if rest[:1] == ["--"]:  # some Pythons' argparse keep the separator, others drop it
        rest = rest[1:]
    if "--" in rest:
        raise UsageError(
            f"session: {rest[0]!r} after the session name: session options go before the name, "
            "arguments for `run` after `--` (humming-matrix session [OPTIONS] NAME -- RUN_ARGS)"
        )
    return rest


def _run_arguments(
    run_args: list[str], results: Path, config_list: Callable[[], Path]
) -> list[str]:
    """The caller's arguments, plus the defaults they did not override (the config list is
    looked up only when it is needed: a session given its configs needs no checkout)."""
    out = list(run_args)

    def named(flag: str) -> bool:
        return any(a == flag or a.startswith(flag + "=") for a in out)

    if not named("--results"):
        out += ["--results", str(results)]
    if not named("--config") and not named("--config-list"):
        out += ["--config-list", str(config_list())]
    return out


def _configs_of(run_args: Sequence[str]) -> tuple[list[Path], list[Path]]:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config", action="append", type=Path, default=[])
    parser.add_argument("--config-list", action="append", type=Path, default=[])
    known, _ = parser.parse_known_args(list(run_args))
    return known.config, known.config_list


def _divergence_configs(
    args: argparse.Namespace, configs: Sequence[EvalConfig], environ: Mapping[str, str]
) -> list[EvalConfig]:
    """The configs of this run that get a divergence stage, in the run's order."""
    if environ.get(DIVERGENCE_ONLY_ENV) == "1":
        return list(configs)
    listed = args.divergence_list or environ.get(DIVERGENCE_LIST_ENV)
    if not listed:
        return []
    names = {c.name for c in load_configs([], [Path(listed)])}
    return [c for c in configs if c.name in names]


def _divergence_arguments(full_args: Sequence[str], configs: Sequence[EvalConfig]) -> list[str]:
    """`divergence run` for `configs`, with the run's store, limit, endpoint and retry budget."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for flag in ("--results", "--limit", "--endpoint", "--retries", "--max-errors"):
        parser.add_argument(flag)
    known, _ = parser.parse_known_args(list(full_args))
    out = ["divergence", "run"]
    for config in configs:
        out += ["--config", str(config.path)]
    for flag, value in vars(known).items():
        if value is not None:
            out += [f"--{flag.replace('_', '-')}", value]
    return [*out, "--repeat", str(STAGE_REPEAT)]


def _worse(codes: Sequence[int]) -> int:
    """The session's code from its stages': a fault (3) over a usage error (2) over a failed
    threshold (1) over success."""
    return max(codes, default=int(ExitCode.OK))


def _default_config_list(args: argparse.Namespace) -> Path:
    if args.default_config_list is not None:
        return Path(args.default_config_list)
    return checkout_file(CHECKOUT_CONFIG_LIST, "--default-config-list")


def _gpus_needed(cell: Cell, tensor_parallel: Sequence[int]) -> int:
    if cell.gpus == 0:
        return 0
    return max([cell.gpus, *tensor_parallel])


def _record_path(args: argparse.Namespace, environ: Mapping[str, str]) -> Path:
    if args.record is not None:
        return Path(args.record)
    configured = environ.get(environment.ENV_INSTALL_RECORD)
    if not configured:
        raise UsageError(
            f"session needs --record PATH or ${environment.ENV_INSTALL_RECORD} "
            "(the noxfile sets it)"
        )
    return Path(configured)


def execute(
    args: argparse.Namespace,
    seams: Seams = Seams(),
    environ: Mapping[str, str] | None = None,
) -> int:
    environ = os.environ if environ is None else environ
    _split_run_args(args.run_args)  # refuse a misplaced session option before anything is written
    cell = load_matrix(args.matrix).cell(args.name)
    path = _record_path(args, environ)
    try:
        return _pipeline(args, cell, path, seams, environ)
    except HummingMatrixError as exc:
        # Whatever stopped the session, its record must end with the code (CI reads it there).
        if path.is_file():
            record = installation.read_record(path)
            if record.exit_code is None:
                installation.write_outcome(path, record, Outcome.ERROR, exc.exit_code, str(exc))
        raise


def _pipeline(
    args: argparse.Namespace, cell: Cell, path: Path, seams: Seams, environ: Mapping[str, str]
) -> int:
    record = replace(
        installation.capture(cell, packages=seams.packages()), install_seconds=args.install_seconds
    )
    if args.install_failed:
        message = (
            f"{cell.session}: installing the cell failed (the installer's error is above); "
            f"untestable (install record: {path})"
        )
        installation.write_outcome(
            path, record, Outcome.INSTALL_FAILED, ExitCode.UNTESTABLE, message
        )
        raise UntestableError(message)
    installation.write_record(path, record)
    record = installation.verify_humming(record, cell, path)

    checks = installation.single_variable_checks(record, installation.sibling_records(path))
    record = replace(record, single_variable=checks)
    for warning in installation.describe(checks):
        print(f"humming-matrix: warning: {warning}", file=sys.stderr)
    installation.write_record(path, record)
    print(
        f"{cell.session}: humming-kernels {record.humming} installed and verified (record: {path})",
        flush=True,
    )

    run_args = _split_run_args(args.run_args)
    command = seams.command or _cli_main
    if args.kernels:
        record = record.advance(Stage.RUN)
        installation.write_record(path, record)
        code = command(["kernels", *run_args])
        installation.write_outcome(path, record, Outcome.RAN, code)
        return code

    full_args = _run_arguments(run_args, args.results, lambda: _default_config_list(args))
    configs = load_configs(*_configs_of(full_args))
    if cell.recipe.preflight:
        report = seams.preflight(configs, expect_vllm=cell.vllm is not None)
        for check in report.checks:
            print(f"preflight: {check.line()}", flush=True)
        record = record.advance(Stage.PREFLIGHT, preflight=report.to_dict())
        if not report.passed:
            message = f"{cell.session}: preflight failed, untestable: {report.reason()}"
            installation.write_outcome(
                path, record, Outcome.PREFLIGHT_FAILED, ExitCode.UNTESTABLE, message
            )
            raise UntestableError(message)
    else:
        skipped = f"not run: recipe {cell.recipe.name!r} declares preflight = false"
        record = replace(record, preflight={"passed": None, "skipped": skipped})
        print(f"preflight: {skipped}", flush=True)

    if environ.get(PREFLIGHT_ONLY_ENV) == "1" and cell.recipe.preflight:
        message = f"{cell.session}: preflight passed; GSM8K stage not run ({PREFLIGHT_ONLY_ENV}=1)"
        installation.write_outcome(path, record, Outcome.PREFLIGHT_ONLY, 0, message)
        print(message, flush=True)
        return int(ExitCode.OK)

    needed = _gpus_needed(cell, [c.tensor_parallel_size for c in configs])
    seen = seams.gpus() if needed else []
    if len(seen) < needed:
        ran = "only the preflight ran" if cell.recipe.preflight else "nothing was run"
        message = (
            f"{cell.session}: needs {needed} CUDA GPU(s), {len(seen)} visible; "
            f"{ran}, the GSM8K stage did not"
        )
        installation.write_outcome(
            path, record, Outcome.PREFLIGHT_ONLY, ExitCode.INFRASTRUCTURE, message
        )
        hint = f" (set {PREFLIGHT_ONLY_ENV}=1 for a preflight-only run)"
        raise NoGPUError(message + (hint if cell.recipe.preflight else ""))

    divergence = _divergence_configs(args, configs, environ)
    only = environ.get(DIVERGENCE_ONLY_ENV) == "1"
    record = record.advance(Stage.RUN)
    installation.write_record(path, record)
    codes = []
    with seams.gpu_lease(cell.session, needed):
        if not only:
            codes.append(command(["run", *full_args]))
        if divergence:
            print(
                f"{cell.session}: divergence stage: {', '.join(c.name for c in divergence)}",
                flush=True,
            )
            codes.append(command(_divergence_arguments(full_args, divergence)))
    code = _worse(codes)
    installation.write_outcome(path, record, Outcome.RAN, code)
    return code


def _cli_main(argv: Sequence[str]) -> int:
    from humming_matrix.cli import main as cli_main

    return cli_main(list(argv))


def main(args: argparse.Namespace) -> int:
    return execute(args)
