"""Progress a person can follow: a bar on a terminal, a line per stage and per tenth in a CI log."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from tqdm import tqdm


class Progress:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self._bar: tqdm[Any] | None = None
        self._total = 0
        self._done = 0
        self._label = ""
        self._started = 0.0
        self._next_report = 0

    def stage(self, message: str) -> None:
        if self._bar is not None:
            self._bar.write(f"[humming-matrix] {message}", file=self.stream)
        else:
            print(f"[humming-matrix] {message}", file=self.stream, flush=True)

    def start(self, label: str, total: int, done: int = 0) -> None:
        self._label, self._total, self._done = label, total, done
        self._started = self.clock()
        self._next_report = self._step_after(done)
        if self.tty:
            self._bar = tqdm(
                total=total,
                initial=done,
                desc=label,
                unit="q",
                file=self.stream,
                dynamic_ncols=True,
            )

    def _step_after(self, done: int) -> int:
        step = max(1, self._total // 10)
        return (done // step + 1) * step

    def advance(self, n: int = 1) -> None:
        self._done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self._done >= self._next_report or self._done == self._total:
            elapsed = self.clock() - self._started
            print(
                f"[humming-matrix] {self._label}: {self._done}/{self._total} questions, "
                f"{elapsed:.1f} s",
                file=self.stream,
                flush=True,
            )
            self._next_report = self._step_after(self._done)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
