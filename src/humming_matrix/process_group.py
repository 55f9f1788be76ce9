"""Process groups: a server or a nox session runs as the leader of its own group, so stopping it
reaches every process it spawned (vLLM's engine workers, a session's server), however it was
started and whatever it ignores."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any


def stop_group(process: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM the group led by `process`, SIGKILL whatever is left after `grace` seconds, and
    return once no member runs."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        process.wait()
        return  # the whole group is gone already
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if process.poll() is not None and not group_alive(process.pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    # SIGKILL is delivered asynchronously; give the members a moment to be gone.
    deadline = time.monotonic() + 5.0
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


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
