"""Runs the worker (`probe`) in its own process group and keeps the suite going past failures.

A case whose worker sends no event for `timeout_s` seconds is a hang: the whole process group
is killed (SIGTERM, then SIGKILL), the case is recorded as "hang", and a fresh worker starts on
the next case, so the GPU context of the hung kernel dies with its process and the card stays
usable. A worker that dies mid-case leaves a "crash" with its exit status and log tail. A worker
stops by itself after a case that raised (a CUDA error can poison its context), and a fresh one
picks up the next case.

The worker command, the clock and the sleep are parameters: the tests drive the real
subprocess and file plumbing with a stand-in worker (tests/doubles/kernel_worker_double.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from humming_matrix.errors import InfrastructureError
from humming_matrix.process_group import stop_group

DEFAULT_WORKER: tuple[str, ...] = (sys.executable, "-m", "humming_matrix.kernels.runner")
LOG_TAIL_CHARS = 3000


@dataclass(frozen=True)
class SuiteRun:
    """What the workers reported. `results[i]` is case i's result (state included)."""

    results: tuple[dict[str, Any], ...]
    env: dict[str, Any] = field(default_factory=dict)
    ceilings: dict[str, float] | None = None
    import_error: str | None = None
    launches: int = 0


# A hung kernel ignores SIGTERM; a healthy worker exits at once.
KILL_GRACE_SECONDS = 5.0


@contextmanager
def worker_process(argv: Sequence[str], log: IO[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """The worker in a new session; on leaving, its whole process group is gone, always."""
    proc = subprocess.Popen(
        list(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        yield proc
    finally:
        stop_group(proc, KILL_GRACE_SECONDS)


class _EventReader:
    """Reads complete JSON lines appended to a file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        events = []
        for line in data[:end].splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict):
                events.append(event)
        return events


@contextmanager
def _finished_cases_kept(
    reader: _EventReader, results: dict[int, dict[str, Any]]
) -> Iterator[None]:
    """On an interrupt, also keep the cases the worker finished since the last poll: they are
    in the event file (read once the worker's group is gone) and belong in the partial record."""
    try:
        yield
    except BaseException:
        for event in reader.read():
            if event.get("event") == "case":
                results[int(event["index"])] = dict(event["result"])
        raise


@dataclass
class _Progress:
    """What the workers have reported so far (kept on the watchdog so an interrupted run can
    still save the cases that finished)."""

    results: dict[int, dict[str, Any]] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)
    ceilings: dict[str, float] | None = None
    import_error: str | None = None
    launches: int = 0

    def snapshot(self) -> SuiteRun:
        return SuiteRun(
            results=tuple(self.results[i] for i in sorted(self.results)),
            env=self.env,
            ceilings=self.ceilings,
            import_error=self.import_error,
            launches=self.launches,
        )


class Watchdog:
    def __init__(
        self,
        timeout_s: float,
        worker: Sequence[str] = DEFAULT_WORKER,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        poll_s: float = 0.2,
    ) -> None:
        self.timeout_s = timeout_s
        self.worker = tuple(worker)
        self.clock = clock
        self.sleep = sleep
        self.poll_s = poll_s
        self.progress = _Progress()

    def run(self, plan: dict[str, Any], workdir: Path) -> SuiteRun:
        """Run every case of `plan` (its "cases" list), `workdir` holding plans, events and logs."""
        workdir.mkdir(parents=True, exist_ok=True)
        total = len(plan["cases"])
        p = self.progress = _Progress()
        results = p.results
        start = 0
        while start < total and p.import_error is None:
            p.launches += 1
            launches = p.launches
            # Ceilings are measured once, by the first worker.
            ceil = bool(plan.get("ceilings")) and launches == 1
            launch_plan = dict(plan, start=start, ceilings=ceil)
            plan_path = workdir / f"plan-{launches}.json"
            plan_path.write_text(json.dumps(launch_plan), encoding="utf-8")
            events_path = workdir / f"events-{launches}.jsonl"
            log_path = workdir / f"worker-{launches}.log"
            reader = _EventReader(events_path)
            current: int | None = None
            with (
                log_path.open("wb") as log,
                _finished_cases_kept(reader, results),
                worker_process([*self.worker, str(plan_path), str(events_path)], log) as proc,
            ):
                last_pulse = self.clock()
                while True:
                    events = reader.read()
                    for event in events:
                        kind = event.get("event")
                        if kind == "env":
                            p.env = {k: v for k, v in event.items() if k not in ("event", "time")}
                        elif kind == "ceilings":
                            p.ceilings = {
                                k: float(v) for k, v in event.items() if k not in ("event", "time")
                            }
                        elif kind == "import_error":
                            p.import_error = str(event.get("message", ""))
                        elif kind == "start":
                            current = int(event["index"])
                        elif kind == "case":
                            results[int(event["index"])] = dict(event["result"])
                            current = None
                    if events:
                        last_pulse = self.clock()
                    if proc.poll() is not None:
                        for event in reader.read():
                            if event.get("event") == "case":
                                results[int(event["index"])] = dict(event["result"])
                                current = None
                            elif event.get("event") == "import_error":
                                p.import_error = str(event.get("message", ""))
                        break
                    if self.clock() - last_pulse > self.timeout_s:
                        stalled = current if current is not None else start
                        stop_group(proc, KILL_GRACE_SECONDS)
                        results[stalled] = {
                            "case": plan["cases"][stalled],
                            "state": "hang",
                            "reason": f"no progress for {self.timeout_s:g} s; worker process "
                            "group killed, next case runs in a fresh process",
                            "batches": [],
                        }
                        current = None
                        break
                    self.sleep(self.poll_s)
            if p.import_error is not None:
                break
            if current is not None and current not in results:
                results[current] = {
                    "case": plan["cases"][current],
                    "state": "crash",
                    "reason": f"worker exited with status {proc.returncode} during the case",
                    "log_tail": _tail(log_path),
                    "batches": [],
                }
            done = [i for i in results if i >= start]
            if not done:
                # The worker died before starting any case: charge it to the next case so the
                # loop always advances.
                results[start] = {
                    "case": plan["cases"][start],
                    "state": "crash",
                    "reason": f"worker exited with status {proc.returncode} before the case began",
                    "log_tail": _tail(log_path),
                    "batches": [],
                }
            start = max(i for i in results if i >= start) + 1
        if not p.env and p.import_error is None and not results:
            raise InfrastructureError(f"the kernel worker never reported; see {workdir}")
        if p.import_error is not None:
            for i in range(total):
                results.setdefault(
                    i,
                    {
                        "case": plan["cases"][i],
                        "state": "unsupported",
                        "reason": f"import humming: {p.import_error}",
                        "batches": [],
                    },
                )
        return p.snapshot()


def _tail(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return ""
