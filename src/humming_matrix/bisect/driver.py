"""The bisect driver: runs the search, probes through the prober, judges, and keeps a log.

The log is JSON lines, one event per line, flushed and fsynced as each probe ends:

    {"event": "start", "schema": 1, "plan": {...}}          the range, suite and settings
    {"event": "probe", "version": "0.1.15", "verdict": "good", ...}   one per finished probe
    {"event": "done", "conclusion": "found", ...}           informational

A bisect killed mid-way (CI timeout, Ctrl-C) is resumed by running the same command again: the
verdicts in the log are replayed into the search and no finished probe runs again. A log written
for another plan (other range, configs, limit, variant) is refused rather than mixed in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

from humming_matrix.bisect.paired_judge import Judgement, judge_failed_start, stack
from humming_matrix.bisect.search import Bisection, Outcome, Verdict, search
from humming_matrix.bisect.version_runner import Prober, ProbeResult, ProbeStatus, Tier
from humming_matrix.errors import RecordError, UsageError
from humming_matrix.matrix.cells import Matrix
from humming_matrix.store.results import utc_now_iso

LOG_SCHEMA = 1
STARTED = (ProbeStatus.RAN, ProbeStatus.REUSED)


def judge_crash(crashed: ProbeResult) -> Judgement:
    """A server that served and then died with a CUDA error: the kernel under test is what
    faulted (the machine and the stack answered questions), so the release is bad."""
    return Judgement(
        Verdict.BAD,
        crashed.reason,
        {name: {"record": str(p)} for name, p in crashed.records.items()},
    )


# (baseline records, candidate records) -> judgement; records are config name -> path.
Judge = Callable[[Mapping[str, Path], Mapping[str, Path]], Judgement]
# The good endpoint has nothing to be compared with: it is judged by its own thresholds.
SelfJudge = Callable[[Mapping[str, Path]], Judgement]


@dataclass(frozen=True)
class Plan:
    """Everything that makes two bisects the same bisect (and so makes a log resumable)."""

    good: str
    bad: str
    versions: tuple[str, ...]
    configs: Mapping[str, str]  # config name -> sha256
    limit: int | None
    variant: str | None
    verify_endpoints: bool
    tier: Tier = Tier.GSM8K

    def to_json(self) -> dict[str, Any]:
        return {
            "tier": self.tier.value,
            "good": self.good,
            "bad": self.bad,
            "versions": list(self.versions),
            "configs": dict(sorted(self.configs.items())),
            "limit": self.limit,
            "variant": self.variant,
            "verify_endpoints": self.verify_endpoints,
        }


@dataclass(frozen=True)
class ProbeEntry:
    version: str
    session: str
    status: ProbeStatus
    verdict: Verdict
    reason: str
    records: Mapping[str, str]
    evidence: Mapping[str, Any]
    duration: float

    def to_json(self) -> dict[str, Any]:
        return {
            "event": "probe",
            "version": self.version,
            "session": self.session,
            "status": self.status.value,
            "verdict": self.verdict.value,
            "reason": self.reason,
            "records": dict(self.records),
            "evidence": dict(self.evidence),
            "duration": round(self.duration, 3),
            "time": utc_now_iso(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], path: Path, line: int) -> ProbeEntry:
        try:
            return cls(
                version=str(data["version"]),
                session=str(data["session"]),
                status=ProbeStatus(data["status"]),
                verdict=Verdict(data["verdict"]),
                reason=str(data["reason"]),
                records=MappingProxyType({str(k): str(v) for k, v in data["records"].items()}),
                evidence=MappingProxyType(dict(data["evidence"])),
                duration=float(data["duration"]),
            )
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise RecordError(path, f"line {line}", f"not a probe entry ({exc})") from None


class BisectLog:
    """An append-only JSON-lines log; use as a context manager."""

    def __init__(self, path: Path, plan: Plan, *, fresh: bool = False) -> None:
        self.path = path
        self.plan = plan
        self.entries: list[ProbeEntry] = []
        self._fh: IO[str] | None = None
        if fresh and path.exists():
            path.unlink()
        if path.exists():
            self.entries = self._read()

    def _read(self) -> list[ProbeEntry]:
        lines = self.path.read_text(encoding="utf-8").splitlines()
        entries: list[ProbeEntry] = []
        for number, text in enumerate(lines, start=1):
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                if number == len(lines):
                    break  # killed while writing its last line; that probe runs again
                raise RecordError(self.path, f"line {number}", "not JSON") from None
            event = data.get("event") if isinstance(data, dict) else None
            if number == 1:
                if event != "start" or data.get("schema") != LOG_SCHEMA:
                    raise RecordError(self.path, "line 1", "not a bisect log")
                if data.get("plan") != self.plan.to_json():
                    raise UsageError(
                        f"{self.path}: this log is for another bisect (range, configs, limit or "
                        "variant differ); pass --fresh to start over or --log for a new file"
                    )
            elif event == "probe":
                entries.append(ProbeEntry.from_json(data, self.path, number))
        return entries

    def __enter__(self) -> BisectLog:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        if not new:
            self._truncate_partial_line()
        self._fh = self.path.open("a", encoding="utf-8")
        if new:
            self._write(
                {
                    "event": "start",
                    "schema": LOG_SCHEMA,
                    "plan": self.plan.to_json(),
                    "time": utc_now_iso(),
                }
            )
        return self

    def _truncate_partial_line(self) -> None:
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with self.path.open("r+b") as fh:
                fh.truncate(cut)

    def __exit__(self, *exc: object) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _write(self, data: Mapping[str, Any]) -> None:
        if self._fh is None:
            raise UsageError("the bisect log is not open")
        self._fh.write(json.dumps(data, sort_keys=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def append(self, entry: ProbeEntry) -> None:
        self._write(entry.to_json())
        self.entries.append(entry)

    def finish(self, outcome: Outcome) -> None:
        self._write(
            {
                "event": "done",
                "conclusion": outcome.conclusion.value,
                "first_bad": outcome.first_bad,
                "last_good": outcome.last_good,
                "undecided": list(outcome.undecided),
                "reason": outcome.reason,
                "time": utc_now_iso(),
            }
        )


@dataclass(frozen=True)
class BisectResult:
    state: Bisection
    outcome: Outcome
    entries: Mapping[str, ProbeEntry]  # version -> its probe
    resumed: tuple[str, ...]  # versions whose verdicts came from the log
    sessions_run: tuple[str, ...]  # nox sessions this invocation actually ran


class Driver:
    def __init__(
        self,
        plan: Plan,
        matrix: Matrix,
        prober: Prober,
        judge: Judge,
        judge_self: SelfJudge,
        log: BisectLog,
        *,
        jobs: int = 1,
        say: Callable[[str], None] = print,
    ) -> None:
        self.plan = plan
        self.matrix = matrix
        self.prober = prober
        self.judge = judge
        self.judge_self = judge_self
        self.log = log
        self.jobs = jobs
        self.say = say
        self.entries: dict[str, ProbeEntry] = {}

    def _baseline(self) -> Mapping[str, Path] | None:
        entry = self.entries.get(self.plan.good)
        if entry is None or entry.status not in STARTED:
            return None
        return {name: Path(p) for name, p in entry.records.items()}

    def _started_neighbour(self, version: str) -> str | None:
        """The nearest release probed so far whose server started in the same environment."""
        here = stack(self.matrix.cell_for(version, self.plan.variant))
        position = self.plan.versions.index(version)
        started = [
            v
            for v, e in self.entries.items()
            if e.status in STARTED and stack(self.matrix.cell_for(v, self.plan.variant)) == here
        ]
        return min(started, key=lambda v: abs(self.plan.versions.index(v) - position), default=None)

    def _entry(self, result: ProbeResult) -> ProbeEntry:
        records = {name: str(p) for name, p in result.records.items()}
        if result.status is ProbeStatus.START_FAILED:
            cell = self.matrix.cell_for(result.version, self.plan.variant)
            judgement = judge_failed_start(result, cell, self._started_neighbour(result.version))
        elif result.status is ProbeStatus.CRASHED:
            judgement = judge_crash(result)
        elif not result.testable:
            judgement = Judgement(Verdict.SKIP, f"untestable: {result.reason}")
        elif result.version == self.plan.good:
            judgement = self.judge_self(result.records)
        else:
            baseline = self._baseline()
            if baseline is None:
                raise UsageError("internal: a probe was judged before its baseline existed")
            judgement = self.judge(baseline, result.records)
        return ProbeEntry(
            version=result.version,
            session=result.session,
            status=result.status,
            verdict=judgement.verdict,
            reason=judgement.summary,
            records=MappingProxyType(records),
            evidence=MappingProxyType(dict(judgement.evidence)),
            duration=result.duration,
        )

    def _probe(self, versions: Sequence[str]) -> dict[str, Verdict]:
        cells = [self.matrix.cell_for(v, self.plan.variant) for v in versions]
        need_baseline = self.plan.good not in self.entries and self.plan.good not in versions
        if need_baseline:
            # Endpoints not verified: the good version still provides the baseline.
            cells.insert(0, self.matrix.cell_for(self.plan.good, self.plan.variant))
        results = self.prober.probe_many(cells)
        # The good version first: every other probe is judged against it; failed starts last,
        # so a neighbour that started in this round counts for them.
        results.sort(
            key=lambda r: (r.version != self.plan.good, r.status is ProbeStatus.START_FAILED)
        )
        verdicts: dict[str, Verdict] = {}
        for result in results:
            if result.version != self.plan.good and self._baseline() is None:
                # Without a baseline nothing can be judged; the search stops as unverified.
                verdicts[result.version] = Verdict.SKIP
                continue
            entry = self._entry(result)
            self.entries[entry.version] = entry
            self.log.append(entry)
            verdicts[entry.version] = entry.verdict
            how = {
                ProbeStatus.REUSED: "stored records",
                ProbeStatus.RAN: "ran",
                ProbeStatus.UNTESTABLE: "could not run",
                ProbeStatus.START_FAILED: "server never ready",
                ProbeStatus.CRASHED: "server crashed",
            }[result.status]
            self.say(f"bisect: {entry.version}: {entry.verdict.value} ({how}) - {entry.reason}")
        return {v: verdicts[v] for v in versions}

    def run(self) -> BisectResult:
        state = Bisection(self.plan.versions, verify_endpoints=self.plan.verify_endpoints)
        resumed: list[str] = []
        for entry in self.log.entries:
            if entry.version in self.plan.versions:
                self.entries[entry.version] = entry
                if entry.version != self.plan.good or self.plan.verify_endpoints:
                    state = state.record(entry.version, entry.verdict)
                resumed.append(entry.version)
        if resumed:
            self.say(
                f"bisect: resumed {len(resumed)} verdict(s) from {self.log.path}: "
                + ", ".join(f"{v} {self.entries[v].verdict.value}" for v in resumed)
            )
        self.say(
            f"bisect: {len(self.plan.versions)} versions {self.plan.good}..{self.plan.bad}; "
            f"about {state.steps_left(self.jobs)} step(s) left"
        )

        def on_round(now: Bisection, verdicts: Mapping[str, Verdict]) -> None:
            lo, hi = now.window()
            self.say(
                f"bisect: window {now.versions[lo]}..{now.versions[hi]}; "
                f"{now.steps_left(self.jobs)} step(s) left"
            )

        if not self.plan.verify_endpoints and self._baseline() is None:
            self._probe([])
            if self._baseline() is None:
                known = self.entries.get(self.plan.good)
                why = known.reason if known else "no result"
                state = state.record(self.plan.good, Verdict.SKIP)
                self.say(f"bisect: the good version {self.plan.good} cannot be tested: {why}")
        state = search(state, self._probe, self.jobs, on_round)
        outcome = state.outcome()
        self.log.finish(outcome)
        return BisectResult(
            state=state,
            outcome=outcome,
            entries=MappingProxyType(dict(self.entries)),
            resumed=tuple(resumed),
            sessions_run=tuple(self.prober.sessions_run),
        )
