"""Runs the worker (`probe`) in its own process group and keeps the suite going past failures.

A case whose worker sends no event for `timeout_s` seconds is a hang: the whole process group
is killed (SIGTERM, then SIGKILL), the case is recorded as "hang" with the worker's last event,
and a fresh worker starts on the next case, so the GPU context of the hung kernel dies with its
process and the card stays usable. A worker waiting for its turn on the GPU lock sends a pulse
every few seconds (`runner.gpu_turn`): only the worker that stalls is hung, not those queued
behind it. Inside a turn of its own (its last event says `on_gpu`) a worker runs kernels only,
so it is hung after `gpu_timeout_s`, a shorter limit: every worker of the machine waits while a
hung kernel holds the lock (gen6 calls 12 - 14 lost 90 - 150 s of the whole machine a hang).
Where other workers shared the GPU (`jobs` > 1, or a lock shared with other runs), each case
that hung is run once more, alone: one worker of its own that holds the GPU lock exclusively
from its first check to its timing (`"alone"` in its plan, `runner.AloneHold`), started as
soon as the hang is seen (`ALONE_LANES` at a time; the other workers go on with the queue, their
GPU turns waiting while it holds the lock). Cases the caller names (`"alone_cases"` in the plan:
`kernels --alone`, a sweep resuming hangs an earlier call never reran) run alone from the
start, the same way, and skip the attempt beside the others. A case run alone is marked
`"alone": true`; a rerun's result is that rerun's, with the hang beside the others kept as
`first_attempt`: gen6 calls
15 - 17 recorded 53 hangs of dense GEMMs at 2048 tokens inside their check turns, beside 15
other workers, that the records alone cannot tell from a kernel starved by another's hang.
Reruns once came only after the last case: a run that a deadline cut first left every hang a
single attempt, which a resumed sweep ran again beside others (gen7 call 16 met 17 hangs of
0.1.4's and 0.1.5's FP8 dense GEMMs in 568 s and decided none). Since the rerun alone decides,
a turn beside the others is hung sooner, once its case has finished a turn to measure it by:
after `TURN_FACTOR` times the longest, at least `GPU_FLOOR_S`, at most `gpu_timeout_s`.
A worker that dies mid-case leaves a "crash" with its exit status and log tail. A worker stops
by itself after a case that raised (a CUDA error can poison its context), and a fresh one
picks up the next case. With `jobs` > 1 that many workers run at once, each claiming the next
case from the run's queue (`claims.CaseQueue`), each watched on its own.

The worker command, the clock and the sleep are parameters: the tests drive the real
subprocess and file plumbing with a stand-in worker (tests/doubles/kernel_worker_double.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from humming_matrix.errors import InfrastructureError
from humming_matrix.kernels.assess import CaseState
from humming_matrix.kernels.claims import CaseQueue
from humming_matrix.process_group import stop_group

DEFAULT_WORKER: tuple[str, ...] = (sys.executable, "-m", "humming_matrix.kernels.runner")
LOG_TAIL_CHARS = 3000
# A crash's cause, in its reason: enough for a CUDA error's message, short enough for a table.
CAUSE_CHARS = 200


@dataclass(frozen=True)
class SuiteRun:
    """What the workers reported. `results[i]` is case i's result (state included)."""

    results: tuple[dict[str, Any], ...]
    env: dict[str, Any] = field(default_factory=dict)
    ceilings: dict[str, float] | None = None
    import_error: str | None = None
    launches: int = 0


# Four times the longest GPU turn of 11,700 recorded batches (a check turn of 7.3 s on an H100
# that 18 workers shared).
DEFAULT_GPU_TIMEOUT_S = 30.0

# Beside other workers, where a hang is only a first attempt (the rerun alone decides it), a turn
# is hung after this many times the longest turn the case finished, at least GPU_FLOOR_S and at
# most the GPU limit: 2x for the next batch size's doubled work, 4x the margin the GPU limit
# keeps over the longest turn recorded. Gen7 calls 17 - 18 spent 21 of 27 case results on hangs
# of 0.1.4's and 0.1.5's FP8 dense GEMMs at 1024 - 2048 tokens, each holding its shared turn,
# and every timing loop queued behind it, for the whole 30 s; a dense FP8 check turn of gen7 took
# at most 0.54 s at 512 tokens and 1.26 s at 1024, the longest of its 17,519 batches 5.86 s.
TURN_FACTOR = 8.0
GPU_FLOOR_S = 10.0
# In the reason of a hang cut at that shorter limit (`record.cut_short`).
CUT_SHORT = ", beside other workers"

# Cases run alone at once: their GPU work takes turns on the lock, so two overlap only a
# worker's start, weights and build (a cold JIT compile of an old release's dense table takes
# minutes) with the other's turn on the GPU.
ALONE_LANES = 2

# A hung kernel ignores SIGTERM; a healthy worker exits at once.
KILL_GRACE_SECONDS = 5.0


# numpy's BLAS and torch's CPU ops each start a thread per core; `jobs` workers (and the other
# releases of a sweep) each doing so oversubscribe the machine that their compiles need.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def worker_environment(jobs: int, environ: Mapping[str, str], cpus: int | None) -> dict[str, str]:
    """The worker's environment: the caller's, with each CPU thread pool given its share of the
    cores unless the caller sized it."""
    share = str(max(1, (cpus or 1) // jobs))
    return {**dict.fromkeys(THREAD_VARIABLES, share), **environ}


@contextmanager
def worker_process(
    argv: Sequence[str], log: IO[bytes], env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """The worker in a new session; on leaving, its whole process group is gone, always."""
    proc = subprocess.Popen(
        list(argv),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=None if env is None else dict(env),
    )
    try:
        yield proc
    finally:
        stop_group(proc, KILL_GRACE_SECONDS)


class EventReader:
    """Reads complete JSON lines appended to a file since the last call: a line a killed worker
    left half-written is not one (`tools/h200-kernels/timeline.py` reads whole files with it)."""

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

    def take(self, events: list[dict[str, Any]], lane: _Lane) -> None:
        for event in events:
            kind = event.get("event")
            at = event.get("time")
            lane.saw(
                float(at) if isinstance(at, (int, float)) else None,
                kind == "progress" and event.get("on_gpu") is True,
            )
            fields = {k: v for k, v in event.items() if k not in ("event", "time")}
            if kind == "env":
                self.env = fields
            elif kind == "ceilings":
                self.ceilings = {k: float(v) for k, v in fields.items()}
            elif kind == "import_error":
                self.import_error = str(event.get("message", ""))
            elif kind == "start":
                lane.current = lane.run_index(int(event["index"]))
                lane.started = True
                lane.stage = "start"
                lane.longest_turn = None
            elif kind == "progress":
                m = event.get("m")
                lane.stage = str(event.get("stage")) + ("" if m is None else f" m={m}")
            elif kind == "case":
                self.settle(lane, lane.run_index(int(event["index"])), dict(event["result"]))
                lane.current = None

    def settle(self, lane: _Lane, index: int, result: dict[str, Any]) -> None:
        """Case `index`'s result; one run alone is marked so, and a rerun alone's keeps the hang
        it replaces as `first_attempt`."""
        if lane.alone:
            result = {**result, "alone": True}
            first = self.results.get(index)
            if first is not None:
                result["first_attempt"] = {"state": first["state"], "reason": first["reason"]}
        self.results[index] = result


@dataclass
class _Lane:
    """One worker process and what it has said: the watchdog runs `jobs` of them at once."""

    proc: subprocess.Popen[bytes]
    reader: EventReader
    log_path: Path
    resources: ExitStack
    last_pulse: float
    queue: CaseQueue  # the cases its plan holds: the run's, or the one it runs alone
    # The run's index of each case of its plan; None: the same (the plan is the run's).
    indices: tuple[int, ...] | None = None
    alone: bool = False  # it runs one case alone (`Watchdog._launch_alone`)
    current: int | None = None  # the run's case it started and has not finished
    started: bool = False  # it claimed at least one case
    # Its last event, for a hang's reason: "start" (built nothing yet), "built", "batch m=16",
    # "gpu_wait" (it had been waiting for the GPU lock, then got it), "gpu_check m=2048" (inside
    # a turn), "left_gpu m=2048", "first_call m=2048" (a rerun alone holding the GPU for its
    # first, possibly compiling, call), "timed".
    stage: str = "launch"
    on_gpu: bool = False  # the last event entered a GPU turn
    turn_began: float | None = None  # the worker's clock when it entered that turn
    longest_turn: float | None = None  # seconds, of the turns its current case finished

    def saw(self, at: float | None, on_gpu: bool) -> None:
        """An event of the worker at `at` (its clock), entering a GPU turn (`on_gpu`) or not: a
        turn it was in has ended."""
        if self.on_gpu and self.turn_began is not None and at is not None:
            self.longest_turn = max(self.longest_turn or 0.0, at - self.turn_began)
        self.on_gpu = on_gpu
        self.turn_began = at if on_gpu else None

    def run_index(self, index: int) -> int:
        """The run's index of case `index` of this worker's plan."""
        return index if self.indices is None else self.indices[index]


class Watchdog:
    def __init__(
        self,
        timeout_s: float,
        worker: Sequence[str] = DEFAULT_WORKER,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        poll_s: float = 0.2,
        jobs: int = 1,
        gpu_timeout_s: float | None = None,
        gpu_floor_s: float = GPU_FLOOR_S,
    ) -> None:
        self.timeout_s = timeout_s
        # Never longer than the limit outside a turn.
        self.gpu_timeout_s = min(timeout_s, gpu_timeout_s or timeout_s)
        self.gpu_floor_s = gpu_floor_s
        self.worker = tuple(worker)
        self.clock = clock
        self.sleep = sleep
        self.poll_s = poll_s
        self.jobs = jobs
        self.progress = _Progress()

    def run(self, plan: dict[str, Any], workdir: Path) -> SuiteRun:
        """Run every case of `plan` (its "cases" list) on up to `jobs` workers at once, `workdir`
        holding plans, events, logs, the case queue and (with several workers and no lock of
        the caller's) the GPU lock under which their timing loops run alone; each case that
        hung beside other workers is rerun alone meanwhile (in `alone/`)."""
        workdir.mkdir(parents=True, exist_ok=True)
        if self.jobs > 1 and not plan.get("gpu_lock"):
            plan = dict(plan, gpu_lock=str(workdir / "gpu.lock"))
        total = len(plan["cases"])
        p = self.progress = _Progress()
        self._pass(plan, workdir, p)
        if not p.env and p.import_error is None and not p.results:
            raise InfrastructureError(f"the kernel worker never reported; see {workdir}")
        if p.import_error is not None:
            for i in range(total):
                p.results.setdefault(i, _moot(plan, i, f"import humming: {p.import_error}"))
        return p.snapshot()

    def _pass(self, plan: dict[str, Any], workdir: Path, p: _Progress) -> None:
        """Every case of `plan` on up to `jobs` workers, what they report going into `p`; under
        a GPU lock, beside them `ALONE_LANES` workers run alone the cases the plan names and
        those that hung."""
        workdir.mkdir(parents=True, exist_ok=True)
        # With no lock nothing shares the GPU: every case runs alone as it is.
        locked = bool(plan.get("gpu_lock"))
        alone = sorted(set(plan.get("alone_cases") or [])) if locked else []
        # The cases to run alone, oldest hang first after those the plan names.
        hung: list[int] | None = list(alone) if locked else None
        beside = [i for i in range(len(plan["cases"])) if i not in alone]
        indices = tuple(beside) if alone else None
        shared = dict(plan, cases=[plan["cases"][i] for i in beside]) if alone else plan
        queue = CaseQueue(workdir / "queue", len(beside))
        queue.reset()
        lanes: list[_Lane] = []
        with ExitStack() as stack:
            # Runs last on the way out, after every lane's process group is gone: an interrupt
            # keeps the cases the workers finished since the last poll.
            stack.push(lambda kind, exc, tb: _keep_finished(lanes, p) if kind else None)
            while True:
                workers = [lane for lane in lanes if not lane.alone]
                idle = sum(1 for lane in workers if not lane.started)
                while (
                    p.import_error is None and len(workers) < self.jobs and queue.remaining() > idle
                ):
                    workers.append(self._launch(stack, shared, workdir, queue, p, indices))
                    lanes.append(workers[-1])
                    idle += 1
                while hung and p.import_error is None and len(lanes) - len(workers) < ALONE_LANES:
                    lanes.append(self._launch_alone(stack, plan, workdir / "alone", hung.pop(0), p))
                if not lanes:
                    break
                for lane in list(lanes):
                    if self._tend(lane, plan, p, hung):
                        lane.resources.close()
                        lanes.remove(lane)
                if p.import_error is not None:
                    for lane in lanes:
                        lane.resources.close()
                    lanes.clear()
                    break
                if lanes:
                    self.sleep(self.poll_s)

    def _launch_alone(
        self, stack: ExitStack, plan: dict[str, Any], workdir: Path, index: int, p: _Progress
    ) -> _Lane:
        """A worker that runs case `index` alone: a plan of that case only, a queue of its own."""
        workdir.mkdir(parents=True, exist_ok=True)
        queue = CaseQueue(workdir / f"queue-{index + 1}", 1)
        queue.reset()
        rerun = dict(plan, cases=[plan["cases"][index]], ceilings=False, alone=True)
        return self._launch(stack, rerun, workdir, queue, p, (index,), alone=True)

    def _launch(
        self,
        stack: ExitStack,
        plan: dict[str, Any],
        workdir: Path,
        queue: CaseQueue,
        p: _Progress,
        indices: tuple[int, ...] | None,
        alone: bool = False,
    ) -> _Lane:
        p.launches += 1
        n = p.launches
        # Ceilings are measured once, by the first worker.
        ceilings = bool(plan.get("ceilings")) and n == 1
        launch_plan = dict(plan, queue=str(queue.path), ceilings=ceilings)
        plan_path = workdir / f"plan-{n}.json"
        plan_path.write_text(json.dumps(launch_plan), encoding="utf-8")
        events_path = workdir / f"events-{n}.jsonl"
        # A reused workdir (`--workdir`, a sweep's rerun) holds an earlier run's events under the
        # same name; the reader starts at byte 0 and would take them for this worker's.
        events_path.unlink(missing_ok=True)
        log_path = workdir / f"worker-{n}.log"
        resources = ExitStack()
        stack.callback(resources.close)
        log = resources.enter_context(log_path.open("wb"))
        argv = [*self.worker, str(plan_path), str(events_path)]
        env = worker_environment(1 if alone else self.jobs, os.environ, os.cpu_count())
        proc = resources.enter_context(worker_process(argv, log, env))
        reader = EventReader(events_path)
        return _Lane(proc, reader, log_path, resources, self.clock(), queue, indices, alone)

    def _tend(
        self, lane: _Lane, plan: dict[str, Any], p: _Progress, hung: list[int] | None
    ) -> bool:
        """Take the lane's new events; True once its worker is gone (exited, or killed as hung),
        with what that means for its case recorded. A hang beside other workers joins `hung`
        (None: nothing is rerun)."""
        events = lane.reader.read()
        p.take(events, lane)
        if events:
            lane.last_pulse = self.clock()
        if lane.proc.poll() is not None:
            p.take(lane.reader.read(), lane)
            _exited(lane, plan, p)
            return True
        beside = hung is not None and not lane.alone
        limit = self._gpu_limit(lane, beside) if lane.on_gpu else self.timeout_s
        if self.clock() - lane.last_pulse > limit:
            stop_group(lane.proc, KILL_GRACE_SECONDS)
            stalled = lane.current if lane.current is not None else _claim(lane)
            where = f"in its GPU turn ({lane.stage})" if lane.on_gpu else f"after {lane.stage}"
            if lane.alone:
                where += ", rerun alone" if stalled in p.results else ", run alone"
            elif lane.on_gpu and limit < self.gpu_timeout_s:
                where += CUT_SHORT
            if stalled is not None:
                hang = {
                    "case": plan["cases"][stalled],
                    "state": CaseState.HANG.value,
                    "reason": f"no progress for {round(limit, 1):g} s {where}; "
                    "worker process group killed, next case runs in a fresh process",
                    "batches": [],
                }
                p.settle(lane, stalled, hang)
                if hung is not None and not lane.alone:
                    hung.append(stalled)
            return True
        return False

    def _gpu_limit(self, lane: _Lane, beside: bool) -> float:
        """The limit inside the lane's GPU turn: shorter beside other workers, once its case has
        finished a turn to measure it by (`TURN_FACTOR`); a hang there is rerun alone under the
        whole GPU limit, so a slow turn cut short costs that rerun, not a verdict."""
        if not beside or lane.longest_turn is None:
            return self.gpu_timeout_s
        return min(self.gpu_timeout_s, max(self.gpu_floor_s, TURN_FACTOR * lane.longest_turn))


def _claim(lane: _Lane) -> int | None:
    """The next case of the lane's queue, claimed for a worker that died or hung before it
    claimed one (so the run always advances), as the run's index."""
    index = lane.queue.claim()
    return None if index is None else lane.run_index(index)


def _exited(lane: _Lane, plan: dict[str, Any], p: _Progress) -> None:
    if p.import_error is not None:
        return
    status = lane.proc.returncode
    # A rerun's case is in `p.results` already: the hang it reruns.
    if lane.current is not None and (lane.current not in p.results or lane.alone):
        crash = _crash(
            plan["cases"][lane.current],
            f"worker exited with status {status} during the case",
            lane.log_path,
        )
        p.settle(lane, lane.current, crash)
        return
    if lane.started or (status == 0 and not lane.queue.remaining()):
        return
    # The worker died before starting any case: charge it to the next case so the run
    # always advances.
    index = _claim(lane)
    if index is not None:
        p.settle(
            lane,
            index,
            _crash(
                plan["cases"][index],
                f"worker exited with status {status} before the case began",
                lane.log_path,
            ),
        )


def _keep_finished(lanes: list[_Lane], p: _Progress) -> None:
    for lane in lanes:
        for event in lane.reader.read():
            if event.get("event") == "case":
                p.settle(lane, lane.run_index(int(event["index"])), dict(event["result"]))


def _moot(plan: dict[str, Any], index: int, reason: str) -> dict[str, Any]:
    return {"case": plan["cases"][index], "state": "unsupported", "reason": reason, "batches": []}


def crash_cause(log_tail: str) -> str | None:
    """The exception a dead worker's log ends on (`torch.AcceleratorError: CUDA error: an
    illegal memory access was encountered`): the first unindented line after its last
    traceback header. None where the log holds no traceback (a signal kills without one)."""
    _, header, after = log_tail.rpartition("Traceback (most recent call last):")
    if not header:
        return None
    for line in after.splitlines():
        if line.strip() and not line[0].isspace():
            return line.strip()[:CAUSE_CHARS]
    return None


def _crash(case: Any, what: str, log_path: Path) -> dict[str, Any]:
    """A crashed case's result: `what` happened, with the cause its log ends on and the tail."""
    tail = _tail(log_path)
    cause = crash_cause(tail)
    reason = what if cause is None else f"{what}: {cause}"
    return {"case": case, "state": "crash", "reason": reason, "log_tail": tail, "batches": []}


def _tail(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return ""
