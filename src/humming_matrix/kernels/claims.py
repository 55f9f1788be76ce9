"""The queue of one run's cases, shared by its workers: each claims the next case under a lock.

With `kernels --jobs N` several workers run one release's cases at once (humming's NVRTC
compiles are CPU work, one kernel a thread, and a GPU machine has many cores). A worker that
finishes a case claims the next unclaimed one, so one slow case does not hold the others back. The
watchdog claims too, on behalf of a worker that died or hung before claiming, so a run always
advances. The queue is one small file holding the next index; `fcntl.flock` serialises claims
across processes (humming's own JIT cache locks the same way).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class CaseQueue:
    def __init__(self, path: Path, total: int) -> None:
        self.path = path
        self.total = total

    def reset(self) -> None:
        """Every case unclaimed again (a new run in a reused workdir)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("0", encoding="ascii")

    def claim(self) -> int | None:
        """The next unclaimed case index, or None once every case is claimed."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            following = int(os.read(fd, 32).decode("ascii").strip() or "0")
            if following >= self.total:
                return None
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, str(following + 1).encode("ascii"))
            return following
        finally:
            os.close(fd)  # closing releases the lock

    def remaining(self) -> int:
        """How many cases nobody has claimed yet."""
        fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            claimed = int(os.read(fd, 32).decode("ascii").strip() or "0")
        finally:
            os.close(fd)
        return max(self.total - claimed, 0)
