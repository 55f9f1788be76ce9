"""The timing loop on a real GPU (opt in: -m gpu): launches queued behind the spin time the GPU
alone, however slow the host is to issue them, and `queued_ahead` says when that did not hold.

A host delay inside the timed call stands in for a launch path slowed by a loaded machine: each
call sleeps on the host, then enqueues one tiny kernel.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from humming_matrix.kernels import timing

pytestmark = pytest.mark.gpu

REPEATS = 20


def _slow_host_launch(torch: Any, host_delay_s: float) -> Any:
    x = torch.zeros(1, device="cuda")

    def launch() -> None:
        time.sleep(host_delay_s)
        x.add_(1)

    return launch


def test_host_gaps_shorter_than_the_spin_are_not_timed(torch: Any) -> None:
    # 20 x 0.5 ms of host time is enqueued inside the ~25 ms spin: the events see only the GPU.
    got = timing.time_kernel(_slow_host_launch(torch, 0.0005), REPEATS)
    assert got.queued_ahead is True
    assert got.median_ms < 0.1, got


def test_host_gaps_longer_than_the_spin_are_flagged(torch: Any) -> None:
    # 20 x 4 ms outlasts the spin: the later launches' events hold the host's 4 ms.
    got = timing.time_kernel(_slow_host_launch(torch, 0.004), REPEATS)
    assert got.queued_ahead is False
    assert got.median_ms > 2.0, got


def test_graph_replays_are_queued_ahead(torch: Any) -> None:
    a = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    got = timing.time_graph(lambda: torch.mm(a, b), REPEATS)
    assert (got.graph, got.graph_error, got.queued_ahead) == (True, None, True)
    assert 0 < got.median_ms < 1.0, got
