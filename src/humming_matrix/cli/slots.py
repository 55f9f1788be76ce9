"""`humming-matrix slots`: run a command on GPUs of its own, taken from the machine's slot pool.

    humming-matrix slots -- humming-matrix run --config-list configs/gsm8k/humming/config.txt
    humming-matrix slots --gpus 2 -- ./my-gpu-job.sh
    humming-matrix slots --status

The command runs with `CUDA_VISIBLE_DEVICES` naming the GPUs it was given and the slots are held
until it exits; its exit status is this command's. A nox session, a bisect probe or a CI job that
shares a machine wraps its GPU stage in this, or calls `humming_matrix.ci.slots` directly.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from humming_matrix.ci.slots import Holder, SlotPool
from humming_matrix.errors import ExitCode, UsageError
from humming_matrix.suite.config import load_configs

# How long a child gets to finish after Ctrl-C before it is killed.
INTERRUPT_GRACE_SECONDS = 60.0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "slots",
        help="run a command on GPUs reserved from this machine's slot pool",
        description="Reserve GPUs from this machine's slot pool (file locks shared by every "
        "process using the same pool directory), run COMMAND with CUDA_VISIBLE_DEVICES set to "
        "them, release them when it exits. Exit: COMMAND's status; 2 usage or config error; "
        "3 not enough GPUs on this machine, or --timeout passed.",
    )
    need = p.add_mutually_exclusive_group()
    need.add_argument("--gpus", type=int, metavar="N", help="how many GPUs to reserve")
    need.add_argument("--status", action="store_true", help="list who holds which GPU and exit")
    p.add_argument(
        "--config",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="reserve the largest --tensor-parallel-size of these configs; repeatable"
        " (default: those the wrapped command names with --config/--config-list)",
    )
    p.add_argument(
        "--config-list",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="as --config, for every config of a list file; repeatable",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="give up (exit 3) if the GPUs are not free by then (default: wait)",
    )
    p.add_argument(
        "--owner",
        default="",
        help="a name for the holder, shown to those who wait (default: the command)",
    )
    p.add_argument(
        "--pool",
        type=Path,
        metavar="DIR",
        help="the pool directory (default: $HUMMING_MATRIX_SLOT_DIR or "
        "<tmp>/humming-matrix-gpu-slots)",
    )
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the command to run on the reserved GPUs",
    )
    p.set_defaults(handler=main)


def _configs_of(command: Sequence[str]) -> tuple[list[Path], list[Path]]:
    """The `--config`/`--config-list` options of a wrapped `humming-matrix run` command."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--config", action="append", type=Path, default=[])
    parser.add_argument("--config-list", action="append", type=Path, default=[])
    known, _ = parser.parse_known_args(list(command))
    return known.config, known.config_list


def gpus_needed(args: argparse.Namespace, command: Sequence[str]) -> int:
    """--gpus; else the largest tensor parallel size of --config/--config-list; else of the
    configs the wrapped command names."""
    if args.gpus is not None:
        if args.config or args.config_list:
            raise UsageError("slots: give --gpus or --config/--config-list, not both")
        return int(args.gpus)
    configs, lists = (args.config, args.config_list)
    if not configs and not lists:
        configs, lists = _configs_of(command)
    if not configs and not lists:
        raise UsageError(
            "slots: say how many GPUs (--gpus N, --config/--config-list, or a wrapped command"
            " with --config/--config-list)"
        )
    return max(c.tensor_parallel_size for c in load_configs(configs, lists))


def run_child(
    argv: Sequence[str],
    env: Mapping[str, str],
    pass_fds: Sequence[int] = (),
    popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
) -> int:
    """Run `argv` to completion and return its status the way a shell reports it.

    `pass_fds` (the lease's lock descriptors) keep the GPUs reserved while the child lives, even
    if this process is killed without a chance to stop it.

    SIGTERM and SIGHUP (a CI agent cancelling the job) are passed on to the child, which tears
    down its own server; Ctrl-C reaches the child through the terminal's process group, so it is
    only waited for, then killed if it lingers.
    """
    try:
        proc = popen(list(argv), env=dict(env), pass_fds=tuple(pass_fds))
    except FileNotFoundError:
        raise UsageError(f"slots: command not found: {argv[0]}") from None
    except PermissionError:
        raise UsageError(f"slots: command not executable: {argv[0]}") from None

    def forward(signum: int, frame: FrameType | None) -> None:
        proc.send_signal(signum)

    forwarded = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in forwarded}
    try:
        try:
            status = proc.wait()
        except KeyboardInterrupt:
            try:
                proc.wait(timeout=INTERRUPT_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return status if status >= 0 else 128 - status


def _pool(args: argparse.Namespace) -> SlotPool:
    if args.pool is None:
        return SlotPool.from_environment()
    return SlotPool(args.pool, SlotPool.from_environment().devices)


def _report_wait(count: int) -> Callable[[tuple[Holder, ...]], None]:
    def report(holders: tuple[Holder, ...]) -> None:
        held = "; ".join(h.describe() for h in holders) or "taken by others"
        print(
            f"humming-matrix slots: waiting for {count} GPU(s): {held}", file=sys.stderr, flush=True
        )

    return report


def main(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    pool = _pool(args)
    if args.status:
        holders = pool.holders()
        free = len(pool.devices) - len(holders)
        print(
            f"{pool.directory}: {len(pool.devices)} GPU(s) ({','.join(pool.devices) or '-'}),"
            f" {free} free"
        )
        for holder in holders:
            print(holder.describe())
        return int(ExitCode.OK)
    if not command:
        raise UsageError("slots: give the command to run after `--`")
    count = gpus_needed(args, command)
    owner = args.owner or " ".join(command)[:200]
    with pool.acquire(
        count, owner=owner, timeout=args.timeout, on_wait=_report_wait(count)
    ) as lease:
        print(
            f"humming-matrix slots: {owner}: CUDA_VISIBLE_DEVICES={lease.cuda_visible_devices}",
            file=sys.stderr,
            flush=True,
        )
        return run_child(command, {**os.environ, **lease.environ()}, lease.fds)
