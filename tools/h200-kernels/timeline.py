#!/usr/bin/env python3
"""Where a sweep's time went, case by case, from its workers' event files (the JSON lines
`humming_matrix.kernels.runner` writes; `ingest.sh` puts a call's under its log folder):

    python tools/h200-kernels/timeline.py LOGS/work-0.1.4@11,15!13-14 [EVENTS.jsonl ...]

A folder stands for every events-*.jsonl under it. One line a case, in the order the workers
started them: its events file, seconds from that worker's start, then seconds spent building,
waiting for the GPU lock, inside GPU turns (checks and timing, a case run alone's one hold
included), in first calls outside a turn (a compile), and how it ended: its state, or the
stage it was in when its events stop (a hang the watchdog killed, or a call cut short: how long
it stayed there is the watchdog's to say, not the file's). The records say what a case gave;
this says what it waited for, which they do not (gen7 call 21's rerun alone waited 130 s).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from humming_matrix.kernels.assess import assess_case
from humming_matrix.kernels.watchdog import EventReader

ENDED = "events end in "  # a case's end, when its events stop before a result


@dataclass(frozen=True)
class Span:
    """One case's seconds by what its worker was doing."""

    source: str
    case: str
    start: float
    build: float
    wait: float
    gpu: float
    first_call: float
    end: str
    until: float  # the clock time of the case's last event


def _stage(event: dict[str, Any]) -> str:
    m = event.get("m")
    return f"{event.get('stage')}" + (f" m={m}" if m is not None else "")


def spans(path: Path, source: str) -> list[Span]:
    """The cases of one worker's events file. Each event's seconds run until the next event
    (the last case's until the file's last event)."""
    events = EventReader(path).read()
    if not events:
        return []
    origin = events[0]["time"]
    found: list[Span] = []
    case: dict[str, Any] | None = None
    for event, following in zip(events, [*events[1:], None], strict=True):
        kind = event.get("event")
        if kind == "start":
            case = {"case": event["case"], "start": event["time"] - origin}
            case.update(build=0.0, wait=0.0, gpu=0.0, first_call=0.0, end="")
        if case is None:
            continue
        until = following["time"] if following is not None else event["time"]
        seconds = until - event["time"]
        stage = event.get("stage")
        if stage == "built":
            case["build"] += event.get("seconds", 0.0)
        elif stage == "gpu_wait":
            case["wait"] += seconds
        elif event.get("on_gpu"):
            case["gpu"] += seconds
        elif stage == "first_call":
            case["first_call"] += seconds
        if kind == "case":
            # The worker sends the numbers; the state is the parent's reading of them.
            case["end"] = assess_case(event["result"])[0].value
        elif following is None or following.get("event") == "start":
            case["end"] = f"{ENDED}{_stage(event)}"
        if case["end"]:
            found.append(Span(source=source, until=event["time"], **case))
            case = None
    return found


def _files(arguments: list[str]) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found += [(p, str(p.relative_to(path))) for p in sorted(path.rglob("events-*.jsonl"))]
        else:
            found.append((path, path.name))
    return found


def main(arguments: list[str]) -> int:
    if not arguments:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    print("| events | case | from (s) | build | wait | on GPU | first call | end |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for path, source in _files(arguments):
        for s in spans(path, source):
            print(
                f"| {s.source} | {s.case} | {s.start:.1f} | {s.build:.1f} | {s.wait:.1f}"
                f" | {s.gpu:.1f} | {s.first_call:.1f} | {s.end} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
