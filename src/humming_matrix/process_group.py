"""Process groups: every child process this package starts (a server, a nox session, lm-eval's
worker, a preflight probe, a kernel runner) runs as the leader of its own group, so stopping it
reaches every process it spawned (vLLM's engine workers, a session's server), however it was
started and whatever it ignores.

This is the only place that starts or stops one. Teardown always ends with SIGKILL of the whole
group and waits until no member runs: signals that arrive meanwhile (a second Ctrl-C, CI's
SIGTERM, bisect's own) are held back until it is done, and only cut the SIGTERM grace short.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from humming_matrix.interrupts import deferred, pending

POLL_SECONDS = 0.05
# SIGKILL is delivered asynchronously and a process in uninterruptible sleep (a GPU driver call)
# goes only when the call returns; this long, then the group is reported as gone.
KILL_WAIT_SECONDS = 10.0

File = int | IO[Any] | None


def die_with_parent() -> None:
    """For `preexec_fn`: if this process is killed outright (SIGKILL, OOM), the child gets
    SIGTERM and its group goes with it."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdin: File = subprocess.DEVNULL,
    stdout: File = None,
    stderr: File = None,
    text: bool = False,
) -> subprocess.Popen[Any]:
    """Start `argv` as the leader of a new process group (and session) that dies with us."""
    return subprocess.Popen(
        list(argv),
        env=None if env is None else dict(env),
        cwd=cwd,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        text=text,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )


@contextlib.contextmanager
def group(
    argv: Sequence[str],
    *,
    grace: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdin: File = subprocess.DEVNULL,
    stdout: File = None,
    stderr: File = None,
    text: bool = False,
) -> Iterator[subprocess.Popen[Any]]:
    """`start` it, yield it, and `stop_group` it on every way out of the block."""
    process = start(argv, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, text=text)
    try:
        yield process
    finally:
        stop_group(process, grace)


def stop_group(process: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM the group led by `process`, SIGKILL it after `grace` seconds (at once if a signal
    arrives meanwhile), and return once no member runs and the leader is reaped. Signals that
    arrive during the teardown are delivered when it returns."""
    with deferred():
        _stop(process, grace)


def _stop(process: subprocess.Popen[Any], grace: float) -> None:
    pgid = process.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        process.wait()
        return  # the whole group is gone already
    except PermissionError:
        pass  # a member we may not signal; SIGKILL below still reaches the others
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not pending():
        if process.poll() is not None and not group_alive(pgid):
            return
        time.sleep(POLL_SECONDS)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs. Zombies (dead, awaiting a reaper that a
    container's init may never be) do not count; /proc tells them apart where it exists."""
    proc = Path("/proc")
    if proc.is_dir():
        for stat in proc.glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
                return True
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
