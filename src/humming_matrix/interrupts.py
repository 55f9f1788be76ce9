"""SIGTERM and SIGHUP (CI cancelling a job, a closed terminal) unwind like Ctrl-C, so every
`with` block on the way out runs: servers are torn down and partial records are saved."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def terminate_unwinds() -> Iterator[None]:
    signals = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
