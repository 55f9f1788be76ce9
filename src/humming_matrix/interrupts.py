"""Signals while a command runs.

SIGTERM and SIGHUP (CI cancelling a job, a closed terminal) unwind like Ctrl-C, so every `with`
block on the way out runs: servers are torn down and partial records are saved. SIGINT gets
Python's Ctrl-C handling back even where the shell that started us ignores it (a job started
with `&` from a script), so such a run can still be interrupted and still cleans up.

`deferred()` holds these signals back while a step that must finish runs (tearing down a
process group, saving a record): they are delivered, and unwind as usual, once it is done.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

UNWINDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def terminate_unwinds() -> Iterator[None]:
    handlers = {
        signal.SIGINT: signal.default_int_handler,
        signal.SIGTERM: _raise_interrupt,
        signal.SIGHUP: _raise_interrupt,
    }
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _can_mask() -> bool:
    # Only the main thread runs Python's signal handlers; elsewhere nothing can interrupt.
    main = threading.current_thread() is threading.main_thread()
    return main and hasattr(signal, "pthread_sigmask")


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Block SIGINT, SIGTERM and SIGHUP for the block; any that arrived are delivered after it."""
    if not _can_mask():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, UNWINDING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def pending() -> bool:
    """Whether one of the deferred signals has arrived (inside `deferred()`)."""
    if not _can_mask():
        return False
    return bool(signal.sigpending() & set(UNWINDING))
