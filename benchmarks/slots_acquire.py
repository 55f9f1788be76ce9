"""What a GPU slot lease costs: `SlotPool.acquire` + release against a bare `flock` of one file.

Target: taking and releasing a lease costs under 10 ms even for all 8 GPUs of a node, so the pool
is never what a session waits on while GPUs are free (one lease per cell, beside a server start of
tens of seconds and an hour of evaluation). Each repeat times N leases of 1
GPU from a pool of 8 (the worst case scans all 8 lock files: the other 7 held by a helper
process), then N leases of 8, then N bare flock/unlock pairs.

    python benchmarks/slots_acquire.py --repeats 5 --leases 2000
"""

from __future__ import annotations

import argparse
import fcntl
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from humming_matrix.ci.slots import SlotPool

HOLD_SEVEN = """\
import sys, time
from pathlib import Path
from humming_matrix.ci.slots import SlotPool
pool = SlotPool(Path(sys.argv[1]), [str(i) for i in range(8)])
with pool.acquire(7, owner="benchmark holder"):
    print("held", flush=True)
    sys.stdin.read()
"""


def _time(n: int, action: Callable[[], None]) -> float:
    start = time.perf_counter()
    for _ in range(n):
        action()
    return (time.perf_counter() - start) / n * 1e6  # microseconds per lease


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--leases", type=int, default=2000)
    args = parser.parse_args()
    legs: dict[str, list[float]] = {
        "lease 1 of 8 (7 held elsewhere)": [],
        "lease 8 of 8": [],
        "bare flock + unlock": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for _ in range(args.repeats):
            busy = root / "busy"
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLD_SEVEN, str(busy)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert holder.stdout is not None
            assert holder.stdout.readline() == "held\n"
            pool = SlotPool(busy, [str(i) for i in range(8)])

            def one(pool: SlotPool = pool) -> None:
                with pool.acquire(1, timeout=0):
                    pass

            legs["lease 1 of 8 (7 held elsewhere)"].append(_time(args.leases, one))
            holder.communicate("")

            free = SlotPool(root / "free", [str(i) for i in range(8)])

            def eight(pool: SlotPool = free) -> None:
                with pool.acquire(8, timeout=0):
                    pass

            legs["lease 8 of 8"].append(_time(args.leases, eight))

            path = root / "bare.lock"

            def bare(path: Path = path) -> None:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.close(fd)

            legs["bare flock + unlock"].append(_time(args.leases, bare))
    base = statistics.median(legs["bare flock + unlock"])
    print("| leg | median (us per lease) | ratio to bare flock | runs (us) |")
    print("| --- | --- | --- | --- |")
    for name, runs in legs.items():
        median = statistics.median(runs)
        print(
            f"| {name} | {median:.1f} | {median / base:.1f} | "
            + " ".join(f"{r:.1f}" for r in runs)
            + " |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
