"""Reading a `vllm serve` log: how far start-up got, and what broke it.

vLLM writes one log for several processes (API server, engine core, workers). Lines of a child
process carry a `(EngineCore_DP0 pid=123) ` prefix, and a logged exception carries the logger's
`ERROR 12-03 08:10:00 [core.py:708] ` header on every line of its traceback. Both are stripped
before reading. When the engine dies during start-up, the API server's last words are
"Engine core initialization failed. See root cause above": the cause is the first exception
raised in the log, which is what `root_cause` returns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


class StartupPhase(str, Enum):
    """The last start-up milestone a server's log shows, in order."""

    LAUNCHED = "launched"  # the process started; no weights loaded yet
    # "Loading weights took" (the checkpoint is read; quantized layers are packed next) or
    # "Model loading took" (packed too): from here on, humming's code is running.
    WEIGHTS_LOADED = "weights_loaded"
    WARMED_UP = "warmed_up"  # "init engine (profile, create kv cache, warmup model) took ..."
    READY = "ready"  # /health answered 200

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")

    @property
    def order(self) -> int:
        return list(StartupPhase).index(self)


# The log lines that mark each milestone (vLLM 0.24 - 0.33; the CPU model runner logs only the
# first of the two weight lines).
MILESTONES: tuple[tuple[StartupPhase, re.Pattern[str]], ...] = (
    (StartupPhase.WEIGHTS_LOADED, re.compile(r"Loading weights took |Model loading took ")),
    (StartupPhase.WARMED_UP, re.compile(r"init engine \(profile, create kv cache, warmup model\)")),
)

_PROCESS_PREFIX = re.compile(r"^\([^()]*? pid=\d+\) ")
_LOG_HEADER = re.compile(
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?"
)
_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit|Interrupt)\w*)"
    r"(?::\s*(.*))?$"
)


def plain_lines(text: str) -> Iterator[str]:
    """The log's lines without process prefixes and logger headers."""
    for line in text.splitlines():
        line = _PROCESS_PREFIX.sub("", line, count=1)
        yield _LOG_HEADER.sub("", line, count=1)


def phase_reached(text: str) -> StartupPhase:
    """The last milestone of start-up that the log shows (never READY: only /health says so)."""
    reached = StartupPhase.LAUNCHED
    for line in plain_lines(text):
        for phase, pattern in MILESTONES:
            if phase.order > reached.order and pattern.search(line):
                reached = phase
    return reached


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


def _where(path: str, line: str, func: str, code: str) -> str:
    short = "/".join(path.split("/")[-3:])
    return f"{short}:{line} in {func}" + (f": {code}" if code else "")


def _exceptions(lines: Iterable[str]) -> Iterator[str]:
    """The closing `Type: message` line of each traceback, in the order they were printed. An
    exception with no message (a bare `assert`) is told by where it was raised instead."""
    in_traceback = False
    frame: tuple[str, str, str] | None = None
    code = ""
    for line in lines:
        if line.strip() == _TRACEBACK:
            in_traceback, frame, code = True, None, ""
            continue
        if not in_traceback or not line.strip():
            continue
        if line.startswith((" ", "\t")):
            found = _FRAME.match(line)
            if found:
                frame, code = (found["path"], found["line"], found["func"]), ""
            elif frame is not None and not code and not set(line.strip()) <= set("^~ "):
                code = line.strip()
            continue
        # The first unindented line after the frames is the exception (carets, `^^^`, are
        # indented and were skipped above).
        match = _EXCEPTION.match(line.strip())
        if match:
            name, message = match.group(1), (match.group(2) or "").strip()
            if message:
                yield f"{name}: {message}"
            elif frame is not None:
                yield f"{name} at {_where(*frame, code)}"
            else:
                yield name
        in_traceback = False


def root_cause(text: str) -> str | None:
    """The first exception raised in the log, as `Type: first line of its message`.

    Python prints a chained exception's cause first, and vLLM's processes print theirs before
    the API server reports that the engine failed, so the first traceback holds the cause."""
    return next(_exceptions(plain_lines(text)), None)


@dataclass(frozen=True)
class StartupReport:
    """How a server's start-up went: ready, or how far it got before it died or timed out."""

    ready: bool
    phase: StartupPhase
    seconds: float  # from launch to ready, or to the failure
    reason: str = ""  # why it failed: the log's root cause, or the timeout
    log_tail: tuple[str, ...] = ()
    # GPU utilisation at the failure; None where nvidia-smi did not answer.
    gpu: tuple[Mapping[str, Any], ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "ready" if self.ready else "failed",
            "phase": self.phase.value,
            "seconds": round(self.seconds, 3),
            "reason": self.reason,
            "log_tail": list(self.log_tail),
            "gpu": None if self.gpu is None else [dict(g) for g in self.gpu],
        }
