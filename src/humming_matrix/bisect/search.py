"""Search over ordered versions for the first bad one, with the test injected as an oracle.

No I/O here. The state (`Bisection`) is a frozen value: which versions exist, in order, and what
each probed one was found to be. It answers which versions to probe next, how many rounds are
left, and what the window is; the driver (`humming_matrix.bisect.driver`) owns the log and the
runner, and `search` below is the bare loop for an oracle that needs neither.

Model (as git bisect and mozregression): `versions[0]` is the known-good endpoint, `versions[-1]`
the known-bad one, and goodness is monotonic in between. A version that cannot be tested is
SKIP: it never moves the window, never counts as bad, and the next probe is the untested version
nearest to where the skipped one stood. With `jobs > 1` each round probes up to `jobs` versions
that split the window into `jobs + 1` near-equal parts (N-ary search), so the window shrinks by
a factor of `jobs + 1` per round instead of 2.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType

from packaging.version import InvalidVersion, Version

from humming_matrix.errors import UsageError


class Verdict(str, Enum):
    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"  # could not be tested: install, preflight or server failure (exit 125)


class Phase(str, Enum):
    VERIFYING = "verifying"  # an endpoint still needs its verdict
    SEARCHING = "searching"
    DONE = "done"


class Conclusion(str, Enum):
    FOUND = "found"  # the window is one step wide: first bad and last good are adjacent
    AMBIGUOUS = "ambiguous"  # only skipped versions separate last good and first bad
    NO_REGRESSION = "no-regression"  # the "bad" endpoint tested good: nothing to find
    UNVERIFIED = "unverified"  # the good endpoint is not good, or the bad one could not be tested


@dataclass(frozen=True)
class Outcome:
    conclusion: Conclusion
    last_good: str
    first_bad: str | None
    # Versions that could not be tested inside the final window: the first bad version is one of
    # these or `first_bad` itself.
    undecided: tuple[str, ...]
    # Versions tested good above a version tested bad: the monotonic model does not hold there.
    contradictions: tuple[str, ...]
    reason: str


def sort_versions(versions: Iterable[str]) -> tuple[str, ...]:
    """Unique versions in packaging's order; `UsageError` names the first unparseable one."""
    parsed: dict[Version, str] = {}
    for text in versions:
        try:
            key = Version(text)
        except InvalidVersion:
            raise UsageError(f"not a version: {text!r}") from None
        parsed.setdefault(key, text)
    return tuple(parsed[v] for v in sorted(parsed))


@dataclass(frozen=True)
class Bisection:
    """What is known. `versions` runs from the good endpoint to the bad one, both included."""

    versions: tuple[str, ...]
    verdicts: Mapping[str, Verdict] = field(default_factory=lambda: MappingProxyType({}))
    verify_endpoints: bool = True

    def __post_init__(self) -> None:
        if len(self.versions) < 2:
            raise UsageError("a bisection needs a good and a bad version")
        if sort_versions(self.versions) != self.versions:
            raise UsageError(
                f"versions must be unique and ascending, good first: {', '.join(self.versions)}"
            )
        unknown = sorted(set(self.verdicts) - set(self.versions))
        if unknown:
            raise UsageError(f"verdict for a version outside the range: {', '.join(unknown)}")
        object.__setattr__(self, "verdicts", MappingProxyType(dict(self.verdicts)))

    @classmethod
    def between(
        cls, good: str, bad: str, released: Iterable[str], *, verify_endpoints: bool = True
    ) -> Bisection:
        """The endpoints plus every released version strictly between them."""
        lo, hi = Version(good), Version(bad)
        if not lo < hi:
            raise UsageError(f"--good {good} must be older than --bad {bad}")
        inner = [v for v in released if lo < Version(v) < hi]
        return cls(sort_versions([good, *inner, bad]), verify_endpoints=verify_endpoints)

    @property
    def good(self) -> str:
        return self.versions[0]

    @property
    def bad(self) -> str:
        return self.versions[-1]

    def record(self, version: str, verdict: Verdict) -> Bisection:
        merged = dict(self.verdicts)
        merged[version] = verdict
        return Bisection(self.versions, merged, self.verify_endpoints)

    def record_all(self, verdicts: Mapping[str, Verdict]) -> Bisection:
        merged = dict(self.verdicts)
        merged.update(verdicts)
        return Bisection(self.versions, merged, self.verify_endpoints)

    # -- the window ------------------------------------------------------------------------------

    def _verdict_at(self, index: int) -> Verdict | None:
        verdict = self.verdicts.get(self.versions[index])
        if verdict is None and not self.verify_endpoints:
            if index == 0:
                return Verdict.GOOD
            if index == len(self.versions) - 1:
                return Verdict.BAD
        return verdict

    def _endpoint_problem(self) -> str | None:
        good, bad = self._verdict_at(0), self._verdict_at(len(self.versions) - 1)
        if good is not None and good is not Verdict.GOOD:
            return f"good endpoint {self.good} tested {good.value}"
        if bad is Verdict.SKIP:
            return f"bad endpoint {self.bad} could not be tested"
        return None

    @property
    def phase(self) -> Phase:
        ends = (self._verdict_at(0), self._verdict_at(len(self.versions) - 1))
        if self._endpoint_problem() is not None:
            return Phase.DONE
        if None in ends:
            return Phase.VERIFYING
        if ends[1] is Verdict.GOOD:
            return Phase.DONE
        return Phase.DONE if not self._candidates() else Phase.SEARCHING

    def window(self) -> tuple[int, int]:
        """Indices (last good, first bad): the lowest bad, and the highest good below it."""
        last = len(self.versions) - 1
        bad = [i for i in range(last + 1) if self._verdict_at(i) is Verdict.BAD]
        hi = min(bad) if bad else last
        good = [i for i in range(hi) if self._verdict_at(i) is Verdict.GOOD]
        return (max(good) if good else 0), hi

    def _candidates(self) -> list[int]:
        lo, hi = self.window()
        return [i for i in range(lo + 1, hi) if self._verdict_at(i) is None]

    def steps_left(self, jobs: int = 1) -> int:
        """Rounds still needed in the worst case (endpoint checks included)."""
        if self.phase is Phase.DONE:
            return 0
        ends = sum(1 for i in (0, len(self.versions) - 1) if self._verdict_at(i) is None)
        untested = len(self._candidates())
        if ends and jobs > ends:
            # One round verifies and cuts the window with the spare jobs at the same time.
            spare = min(jobs - ends, untested)
            left = math.ceil((untested - spare) / (spare + 1))
            return 1 + _rounds(left, jobs)
        verify_rounds = math.ceil(ends / jobs) if ends else 0
        return verify_rounds + _rounds(untested, jobs)

    def next_probes(self, jobs: int = 1) -> tuple[str, ...]:
        """The versions to test next, at most `jobs` of them; empty when done."""
        if jobs < 1:
            raise UsageError(f"--jobs must be at least 1, got {jobs}")
        phase = self.phase
        if phase is Phase.DONE:
            return ()
        if phase is Phase.VERIFYING:
            # The good endpoint first: its record is the baseline every other probe is judged by.
            missing = [i for i in (0, len(self.versions) - 1) if self._verdict_at(i) is None]
            ends = tuple(self.versions[i] for i in missing[:jobs])
            # Spare jobs start the search at once rather than idle through the verification
            # round (a round is an hour of GPU time); if an endpoint fails, they were wasted.
            return ends + self._cuts(jobs - len(ends))
        return self._cuts(jobs)

    def _cuts(self, jobs: int) -> tuple[str, ...]:
        """Up to `jobs` untested versions that split the window into near-equal parts."""
        lo, hi = self.window()
        free = self._candidates()
        count = min(jobs, len(free))
        chosen: list[int] = []
        for k in range(1, count + 1):
            ideal = lo + k * (hi - lo) / (count + 1)
            # Nearest untested version to the ideal cut; ties go to the lower one, as
            # git bisect does, so a run is reproducible.
            best = min((i for i in free if i not in chosen), key=lambda i: (abs(i - ideal), i))
            chosen.append(best)
        return tuple(self.versions[i] for i in sorted(chosen))

    def outcome(self) -> Outcome:
        if self.phase is not Phase.DONE:
            raise UsageError("the bisection has not finished")
        problem = self._endpoint_problem()
        if problem is not None:
            return Outcome(Conclusion.UNVERIFIED, self.good, None, (), (), problem)
        if self._verdict_at(len(self.versions) - 1) is Verdict.GOOD:
            return Outcome(
                Conclusion.NO_REGRESSION,
                self.bad,
                None,
                (),
                (),
                f"bad endpoint {self.bad} tested good against {self.good}",
            )
        lo, hi = self.window()
        undecided = tuple(
            self.versions[i] for i in range(lo + 1, hi) if self._verdict_at(i) is Verdict.SKIP
        )
        contradictions = tuple(
            self.versions[i]
            for i in range(hi + 1, len(self.versions))
            if self._verdict_at(i) is Verdict.GOOD
        )
        first_bad, last_good = self.versions[hi], self.versions[lo]
        if undecided:
            return Outcome(
                Conclusion.AMBIGUOUS,
                last_good,
                first_bad,
                undecided,
                contradictions,
                f"first bad is one of {', '.join((*undecided, first_bad))}; "
                f"{', '.join(undecided)} could not be tested",
            )
        return Outcome(
            Conclusion.FOUND,
            last_good,
            first_bad,
            (),
            contradictions,
            f"first bad {first_bad}, last good {last_good}",
        )


def _rounds(untested: int, jobs: int) -> int:
    """Worst-case rounds to decide `untested` versions with `jobs` probes per round."""
    return math.ceil(math.log(untested + 1, jobs + 1) - 1e-9)


Oracle = Callable[[Sequence[str]], Mapping[str, Verdict]]


def search(
    state: Bisection,
    oracle: Oracle,
    jobs: int = 1,
    on_round: Callable[[Bisection, Mapping[str, Verdict]], None] | None = None,
) -> Bisection:
    """Probe until done. The oracle gets one round's versions and returns a verdict for each."""
    while probes := state.next_probes(jobs):
        verdicts = oracle(probes)
        missing = [v for v in probes if v not in verdicts]
        if missing:
            raise UsageError(f"the oracle gave no verdict for {', '.join(missing)}")
        state = state.record_all({v: verdicts[v] for v in probes})
        if on_round is not None:
            on_round(state, {v: verdicts[v] for v in probes})
    return state
