"""What lets several kernel workers share one run and one GPU: the case queue and the GPU lock."""

from __future__ import annotations

import io
import itertools
import json
import multiprocessing
import threading
import time
from contextlib import ExitStack, suppress
from pathlib import Path

from humming_matrix.kernels.cases import GemmKind
from humming_matrix.kernels.claims import CaseQueue
from humming_matrix.kernels.models import SUITE
from humming_matrix.kernels.runner import (
    AloneHold,
    CaseSignals,
    Events,
    Stopwatch,
    first_call_turn,
    gpu_turn,
)
from humming_matrix.kernels.watchdog import worker_environment


def _claim_all(path: str, total: int, out: multiprocessing.Queue[list[int]]) -> None:
    queue = CaseQueue(Path(path), total)
    mine = []
    while (index := queue.claim()) is not None:
        mine.append(index)
    out.put(mine)


def test_each_case_is_claimed_exactly_once_by_racing_processes(tmp_path: Path) -> None:
    queue = CaseQueue(tmp_path / "queue", 400)
    queue.reset()
    results: multiprocessing.Queue[list[int]] = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=_claim_all, args=(str(queue.path), 400, results))
        for _ in range(6)
    ]
    for proc in procs:
        proc.start()
    claimed = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    assert sorted(i for mine in claimed for i in mine) == list(range(400))
    assert queue.remaining() == 0
    assert queue.claim() is None


def test_reset_makes_every_case_claimable_again(tmp_path: Path) -> None:
    queue = CaseQueue(tmp_path / "queue", 3)
    queue.reset()
    assert [queue.claim(), queue.claim(), queue.remaining()] == [0, 1, 1]
    queue.reset()
    assert [queue.remaining(), queue.claim()] == [3, 0]


class _Turn(threading.Thread):
    """Takes a GPU turn in a thread (each opens its own lock file description, as a process
    would) and records when it got it; holds it until `release` is set."""

    def __init__(self, lock: str, exclusive: bool, log: list[str], name: str) -> None:
        super().__init__(daemon=True)
        self.lock, self.exclusive, self.log, self.label = lock, exclusive, log, name
        self.entered = threading.Event()
        self.release = threading.Event()

    def run(self) -> None:
        with gpu_turn(self.lock, exclusive=self.exclusive):
            self.log.append(self.label)
            self.entered.set()
            self.release.wait(30)


def test_checks_share_the_gpu_and_a_waiting_timing_loop_goes_before_later_checks(
    tmp_path: Path,
) -> None:
    lock = str(tmp_path / "gpu.lock")
    log: list[str] = []
    with ExitStack() as stack:
        stack.enter_context(gpu_turn(lock, exclusive=False))
        check = _Turn(lock, False, log, "check")
        check.start()
        assert check.entered.wait(10)  # a second shared turn runs beside the first
        timing = _Turn(lock, True, log, "timing")
        timing.start()
        time.sleep(0.3)
        later = _Turn(lock, False, log, "later-check")
        later.start()
        time.sleep(0.3)
        # The timing loop waits for the checks; the later check waits behind the timing loop.
        assert log == ["check"]
        check.release.set()
    assert timing.entered.wait(10)
    time.sleep(0.3)
    assert log == ["check", "timing"]  # alone: the later check still waits
    timing.release.set()
    assert later.entered.wait(10)
    later.release.set()
    assert log == ["check", "timing", "later-check"]


def test_a_worker_waiting_for_its_turn_pulses_until_it_gets_the_gpu(tmp_path: Path) -> None:
    lock = str(tmp_path / "gpu.lock")
    pulses: list[float] = []
    entered = threading.Event()

    def timing() -> None:
        with gpu_turn(
            lock, exclusive=True, waiting=lambda: pulses.append(time.monotonic()), pulse_s=0.1
        ):
            entered.set()

    with gpu_turn(lock, exclusive=False):
        waiter = threading.Thread(target=timing, daemon=True)
        waiter.start()
        time.sleep(1.0)
        assert not entered.is_set()
        waited = len(pulses)
    assert entered.wait(10)
    waiter.join(10)
    # About one pulse per 0.1 s of the 1 s wait (fewer on a loaded machine, never more).
    assert 3 <= waited <= 10
    assert len(pulses) <= waited + 1  # none once it has the GPU
    assert all(b - a >= 0.1 for a, b in itertools.pairwise(pulses))


def test_a_case_run_alone_holds_the_gpu_once_from_its_first_take_until_its_stack_closes(
    tmp_path: Path,
) -> None:
    lock = str(tmp_path / "gpu.lock")
    log: list[str] = []
    result: dict[str, float] = {}
    stream = io.StringIO()
    check = _Turn(lock, False, log, "check")
    check.start()
    assert check.entered.wait(10)
    with ExitStack() as stack:
        hold = AloneHold(lock, CaseSignals(Events(stream), 0), stack, result)
        taken = threading.Thread(target=hold.take, daemon=True)
        taken.start()
        time.sleep(0.5)
        # It waits for the check in flight, and its waiting closes the GPU to a new check.
        assert taken.is_alive()
        assert result == {}
        later = _Turn(lock, False, log, "later-check")
        later.start()
        time.sleep(0.3)
        check.release.set()
        taken.join(10)
        assert not taken.is_alive()
        assert result["alone_wait_seconds"] >= 0.5
        waited = result["alone_wait_seconds"]
        # Held already: a second take neither waits (for its own hold, forever) nor locks again.
        again = threading.Thread(target=hold.take, daemon=True)
        again.start()
        again.join(2)
        assert not again.is_alive()
        assert result == {"alone_wait_seconds": waited}
        time.sleep(0.3)
        assert log == ["check"]  # the later check waits for the whole hold
    assert later.entered.wait(10)
    later.release.set()
    assert log == ["check", "later-check"]


DENSE = next(c for c in SUITE if c.kind is GemmKind.DENSE)
MOE = next(c for c in SUITE if c.kind is GemmKind.MOE)


def test_a_first_call_that_only_launches_takes_a_gpu_turn_and_one_that_compiles_takes_none(
    tmp_path: Path,
) -> None:
    lock = str(tmp_path / "gpu.lock")
    # The whole table compiles at the first batch size (no `compile` in the plan).
    plan = {"gpu_lock": lock, "batch_sizes": [1, 1024]}
    stream = io.StringIO()
    watch = Stopwatch(CaseSignals(Events(stream), 2))
    log: list[str] = []
    timing = _Turn(lock, True, log, "timing")
    timing.start()
    assert timing.entered.wait(10)
    # The compile runs beside another worker's timing loop: CPU work, no turn, no event.
    with first_call_turn(DENSE, plan, 1, watch, None):
        log.append("compile")
    launched = threading.Event()

    def launch() -> None:
        with first_call_turn(DENSE, plan, 1024, watch, None):
            log.append("launch")
        launched.set()

    threading.Thread(target=launch, daemon=True).start()
    time.sleep(0.3)
    # A launch waits for the timing loop, as a check does: inside a turn the watchdog judges a
    # launch that never returns on the short GPU limit.
    assert log == ["timing", "compile"]
    timing.release.set()
    assert launched.wait(10)
    assert log == ["timing", "compile", "launch"]
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [
        (e["stage"], e.get("m"), e.get("on_gpu")) for e in events if e["stage"] != "gpu_wait"
    ] == [
        ("first_call", 1024, True),
        ("left_gpu", 1024, None),
    ]
    assert sorted(watch.seconds) == ["compile", "first_call", "gpu_wait"]
    # A case run alone (its plan's lock None, as `run_case` makes it): the compile says so (the
    # hold is not taken yet); the launch takes the hold and runs inside it.
    alone = io.StringIO()
    result: dict[str, float] = {}
    inside = {**plan, "gpu_lock": None}
    with ExitStack() as stack:
        signals = CaseSignals(Events(alone), 5)
        hold = AloneHold(lock, signals, stack, result)
        watch = Stopwatch(signals)
        with first_call_turn(DENSE, inside, 1, watch, hold):
            assert result == {}
        with first_call_turn(DENSE, inside, 1024, watch, hold):
            assert "alone_wait_seconds" in result
            # Held: a check of another worker waits.
            other = _Turn(lock, False, log, "other-check")
            other.start()
            time.sleep(0.3)
            assert "other-check" not in log
        stages = [json.loads(line) for line in alone.getvalue().splitlines()]
        assert [(e["stage"], e.get("m"), e.get("on_gpu")) for e in stages] == [
            ("first_call", 1, None),
            ("first_call", 1024, True),
            ("left_gpu", 1024, None),
        ]
        assert sorted(watch.seconds) == ["compile", "first_call", "gpu_wait"]
    assert other.entered.wait(10)
    other.release.set()
    # Where the plan compiles each batch size's kernels alone, every first call compiles.
    used = {**plan, "compile": "used"}
    quiet = io.StringIO()
    watch = Stopwatch(CaseSignals(Events(quiet), 6))
    with first_call_turn(DENSE, used, 1024, watch, None):
        pass
    assert (quiet.getvalue(), sorted(watch.seconds)) == ("", ["compile"])
    # And a MoE layer's: its call compiles the config its row count picks. It runs beside the
    # timing loop of another worker.
    timing = _Turn(lock, True, log, "moe-timing")
    timing.start()
    assert timing.entered.wait(10)
    watch = Stopwatch(CaseSignals(Events(quiet), 7))
    with first_call_turn(MOE, plan, 1024, watch, None):
        log.append("moe-compile")
    timing.release.set()
    assert log[-2:] == ["moe-timing", "moe-compile"]
    assert (quiet.getvalue(), sorted(watch.seconds)) == ("", ["compile"])


def test_a_turn_on_the_gpu_is_entered_and_left_in_the_event_stream_even_when_its_work_raises() -> (
    None
):
    stream = io.StringIO()
    signals = CaseSignals(Events(stream), 4)
    signals.waiting()
    with signals.on_gpu("gpu_check", 2048):
        pass
    with suppress(RuntimeError), signals.on_gpu("gpu_timing"):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [{k: v for k, v in e.items() if k != "time"} for e in events] == [
        {"event": "progress", "index": 4, "stage": "gpu_wait"},
        {"event": "progress", "index": 4, "stage": "gpu_check", "m": 2048, "on_gpu": True},
        {"event": "progress", "index": 4, "stage": "left_gpu", "m": 2048},
        {"event": "progress", "index": 4, "stage": "gpu_timing", "m": None, "on_gpu": True},
        {"event": "progress", "index": 4, "stage": "left_gpu", "m": None},
    ]


def test_without_a_lock_file_a_turn_is_free() -> None:
    with gpu_turn(None, exclusive=True), gpu_turn(None, exclusive=True):
        pass


def test_each_worker_gets_its_share_of_the_cores_unless_the_caller_sized_the_pools() -> None:
    env = worker_environment(4, {"PATH": "/bin"}, 16)
    assert env == {
        "PATH": "/bin",
        "OMP_NUM_THREADS": "4",
        "OPENBLAS_NUM_THREADS": "4",
        "MKL_NUM_THREADS": "4",
    }
    assert worker_environment(8, {}, 2)["OMP_NUM_THREADS"] == "1"
    assert worker_environment(1, {}, None)["MKL_NUM_THREADS"] == "1"
    assert worker_environment(2, {"OMP_NUM_THREADS": "3"}, 16)["OMP_NUM_THREADS"] == "3"
