"""The kernel timing loop's order of work on the stream, with a torch double in place of CUDA."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from humming_matrix.kernels import timing


class TorchCudaDouble:
    """Stands in for `torch` and `torch.cuda`: logs every call in stream order; event i's
    elapsed time is `times[i]`; the spin's event reports `spin_done` when queried."""

    def __init__(self, times: list[float], spin_done: bool, has_sleep: bool = True) -> None:
        self.log: list[str] = []
        self.times = list(times)
        self.int32 = "int32"
        double = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.timing = enable_timing

            def record(self) -> None:
                double.log.append("record" if self.timing else "record-spun")

            def query(self) -> bool:
                double.log.append("query")
                return spin_done

            def elapsed_time(self, end: Any) -> float:
                return double.times.pop(0)

        class Flush:
            def zero_(self) -> None:
                double.log.append("flush")

        def _sleep(cycles: int) -> None:
            double.log.append(f"spin {cycles}")

        self.cuda = types.SimpleNamespace(Event=Event, synchronize=lambda: self.log.append("sync"))
        if has_sleep:
            self.cuda._sleep = _sleep
        self.empty = lambda *a, **k: Flush()


def _install(monkeypatch: pytest.MonkeyPatch, double: TorchCudaDouble) -> None:
    monkeypatch.setitem(sys.modules, "torch", double)


def test_timed_launches_are_queued_behind_a_spin_and_their_times_summarised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    double = TorchCudaDouble([1.0, 3.0, 2.0], spin_done=False)
    _install(monkeypatch, double)
    got = timing.time_kernel(lambda: double.log.append("fn"), repeats=3, warmup=1)
    assert double.log == [
        "fn",
        "sync",
        f"spin {timing.SPIN_CYCLES}",
        "record-spun",
        *["flush", "record", "fn", "record"] * 3,
        "query",
        "sync",
    ]
    assert got == timing.Timing(2.0, 1.0, 1.0, 3, queued_ahead=True)
    assert got.to_json()["queued_ahead"] is True


def test_a_spin_that_ended_before_the_last_launch_was_queued_marks_the_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _install(monkeypatch, TorchCudaDouble([5.0, 5.0], spin_done=True))
    assert timing.time_kernel(lambda: None, repeats=2, warmup=0).queued_ahead is False


def test_without_a_spin_kernel_the_times_say_nothing_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    double = TorchCudaDouble([4.0], spin_done=False, has_sleep=False)
    _install(monkeypatch, double)
    got = timing.time_kernel(lambda: None, repeats=1, warmup=0)
    assert got.queued_ahead is None
    assert "query" not in double.log
    assert got.median_ms == 4.0
