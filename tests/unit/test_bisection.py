"""The pure search: every planted boundary, skips around it, N-ary rounds, endpoint checks."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import pytest

from humming_matrix.bisect.search import (
    Bisection,
    Conclusion,
    Phase,
    Verdict,
    search,
    sort_versions,
)
from humming_matrix.errors import UsageError

RELEASED = tuple(f"0.1.{i}" for i in range(21))


class PlantedOracleDouble:
    """Monotonic ground truth: index < first_bad is good; `skipped` cannot be tested."""

    def __init__(
        self, versions: Sequence[str], first_bad: int, skipped: frozenset[int] = frozenset()
    ) -> None:
        self.versions = tuple(versions)
        self.first_bad = first_bad
        self.skipped = skipped
        self.rounds: list[tuple[str, ...]] = []

    def __call__(self, probes: Sequence[str]) -> Mapping[str, Verdict]:
        self.rounds.append(tuple(probes))
        result = {}
        for version in probes:
            i = self.versions.index(version)
            if i in self.skipped:
                result[version] = Verdict.SKIP
            else:
                result[version] = Verdict.GOOD if i < self.first_bad else Verdict.BAD
        return result

    @property
    def probed(self) -> list[str]:
        return [v for r in self.rounds for v in r]


def _expected_window(n: int, first_bad: int, skipped: frozenset[int]) -> tuple[int, int]:
    lo = max(i for i in range(first_bad) if i not in skipped)
    hi = min(i for i in range(first_bad, n) if i not in skipped)
    return lo, hi


@pytest.mark.parametrize("jobs", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 13, 21])
def test_finds_every_planted_first_bad(n: int, jobs: int) -> None:
    versions = RELEASED[:n]
    for first_bad in range(1, n):
        state = Bisection(versions)
        budget = state.steps_left(jobs)
        oracle = PlantedOracleDouble(versions, first_bad)
        done = search(state, oracle, jobs)
        outcome = done.outcome()
        assert outcome.conclusion is Conclusion.FOUND
        assert (outcome.last_good, outcome.first_bad) == (
            versions[first_bad - 1],
            versions[first_bad],
        )
        assert outcome.undecided == ()
        assert outcome.contradictions == ()
        assert len(oracle.rounds) <= budget
        assert all(len(r) <= jobs for r in oracle.rounds)
        assert len(oracle.probed) == len(set(oracle.probed)), "a version was probed twice"
        assert done.steps_left(jobs) == 0


@pytest.mark.parametrize("jobs", [1, 3])
def test_skips_anywhere_never_count_as_bad(jobs: int) -> None:
    """Every planted boundary with every set of up to two skipped inner versions (n = 9)."""
    n = 9
    versions = RELEASED[:n]
    inner = range(1, n - 1)
    for first_bad in range(1, n):
        for k in (1, 2):
            for combo in itertools.combinations(inner, k):
                skipped = frozenset(combo)
                oracle = PlantedOracleDouble(versions, first_bad, skipped)
                outcome = search(Bisection(versions), oracle, jobs).outcome()
                lo, hi = _expected_window(n, first_bad, skipped)
                between = tuple(versions[i] for i in range(lo + 1, hi))
                assert (outcome.last_good, outcome.first_bad) == (versions[lo], versions[hi])
                assert outcome.undecided == between
                expected = Conclusion.AMBIGUOUS if between else Conclusion.FOUND
                assert outcome.conclusion is expected, (first_bad, combo)


def test_binary_probe_order_and_skip_next_to_the_boundary() -> None:
    versions = tuple(f"0.1.{i}" for i in range(12, 20))
    oracle = PlantedOracleDouble(versions, versions.index("0.1.17"))
    outcome = search(Bisection(versions), oracle).outcome()
    assert oracle.probed == ["0.1.12", "0.1.19", "0.1.15", "0.1.17", "0.1.16"]
    assert outcome.reason == "first bad 0.1.17, last good 0.1.16"

    skipping = PlantedOracleDouble(versions, versions.index("0.1.17"), frozenset({4}))
    outcome = search(Bisection(versions), skipping).outcome()
    assert skipping.probed == ["0.1.12", "0.1.19", "0.1.15", "0.1.17", "0.1.16"]
    assert outcome.conclusion is Conclusion.AMBIGUOUS
    assert (outcome.last_good, outcome.first_bad, outcome.undecided) == (
        "0.1.15",
        "0.1.17",
        ("0.1.16",),
    )
    assert outcome.reason == "first bad is one of 0.1.16, 0.1.17; 0.1.16 could not be tested"


def test_skipped_midpoint_moves_to_the_nearest_untested_version() -> None:
    versions = RELEASED[:9]
    oracle = PlantedOracleDouble(versions, 7, frozenset({4}))
    search(Bisection(versions), oracle)
    # 4 is the midpoint of (0, 8); skipped, the next probe is its lower neighbour 3.
    assert oracle.rounds[2:4] == [("0.1.4",), ("0.1.3",)]


def test_all_skipped_window_is_ambiguous_over_all_of_it() -> None:
    versions = RELEASED[:6]
    oracle = PlantedOracleDouble(versions, 3, frozenset({1, 2, 3, 4}))
    outcome = search(Bisection(versions), oracle, jobs=2).outcome()
    assert outcome.conclusion is Conclusion.AMBIGUOUS
    assert outcome.last_good == "0.1.0"
    assert outcome.first_bad == "0.1.5"
    assert outcome.undecided == ("0.1.1", "0.1.2", "0.1.3", "0.1.4")
    assert sorted(oracle.probed) == sorted(versions)


def test_nary_rounds_split_the_window() -> None:
    versions = tuple(f"0.1.{i}" for i in range(12, 20))
    oracle = PlantedOracleDouble(versions, versions.index("0.1.17"))
    state = Bisection(versions)
    # One round verifies both endpoints and spends the third job on the midpoint; the four
    # versions left then fit in one round of three.
    assert state.steps_left(3) == 2
    outcome = search(state, oracle, jobs=3).outcome()
    assert oracle.rounds == [
        ("0.1.12", "0.1.19", "0.1.15"),
        ("0.1.16", "0.1.17", "0.1.18"),
    ]
    assert outcome.first_bad == "0.1.17"


def test_nary_worst_case_rounds_on_a_wide_range() -> None:
    """19 untested versions: binary needs ceil(log2 20) = 5 rounds, 4 jobs ceil(log5 20) = 2."""
    worst = {}
    for jobs in (1, 4):
        rounds = []
        for first_bad in range(1, len(RELEASED)):
            oracle = PlantedOracleDouble(RELEASED, first_bad)
            search(Bisection(RELEASED, verify_endpoints=False), oracle, jobs)
            rounds.append(len(oracle.rounds))
        worst[jobs] = max(rounds)
    assert worst == {1: 5, 4: 2}


def test_verification_round_uses_spare_jobs_over_the_full_release_list() -> None:
    """0.1.0..0.1.20 with endpoints verified: worst-case rounds per job count."""
    worst = {}
    for jobs in (1, 2, 4, 8):
        worst[jobs] = max(
            len(search_rounds(PlantedOracleDouble(RELEASED, first_bad), jobs))
            for first_bad in range(1, len(RELEASED))
        )
    assert worst == {1: 7, 2: 4, 4: 3, 8: 2}


def search_rounds(oracle: PlantedOracleDouble, jobs: int) -> list[tuple[str, ...]]:
    search(Bisection(oracle.versions), oracle, jobs)
    return oracle.rounds


def test_non_monotonic_results_are_reported_not_hidden() -> None:
    versions = tuple(f"0.1.{i}" for i in range(12, 20))
    bad = {"0.1.15", "0.1.17", "0.1.18", "0.1.19"}  # 0.1.16 good again: not monotonic

    def oracle(probes: Sequence[str]) -> Mapping[str, Verdict]:
        return {v: Verdict.BAD if v in bad else Verdict.GOOD for v in probes}

    outcome = search(Bisection(versions), oracle, jobs=4).outcome()
    assert (outcome.last_good, outcome.first_bad) == ("0.1.14", "0.1.15")
    assert outcome.contradictions == ("0.1.16",)


def test_endpoints_are_verified_first_and_the_good_one_leads() -> None:
    versions = RELEASED[:5]
    state = Bisection(versions)
    assert state.phase is Phase.VERIFYING
    assert state.next_probes(1) == ("0.1.0",)
    assert state.next_probes(2) == ("0.1.0", "0.1.4")
    # Spare jobs already cut the window while the endpoints are verified.
    assert state.next_probes(4) == ("0.1.0", "0.1.4", "0.1.1", "0.1.3")
    state = state.record("0.1.0", Verdict.GOOD)
    assert state.next_probes(1) == ("0.1.4",)


@pytest.mark.parametrize(
    ("good", "bad", "conclusion", "reason"),
    [
        (Verdict.BAD, Verdict.BAD, Conclusion.UNVERIFIED, "good endpoint 0.1.0 tested bad"),
        (Verdict.SKIP, Verdict.BAD, Conclusion.UNVERIFIED, "good endpoint 0.1.0 tested skip"),
        (
            Verdict.GOOD,
            Verdict.SKIP,
            Conclusion.UNVERIFIED,
            "bad endpoint 0.1.4 could not be tested",
        ),
        (
            Verdict.GOOD,
            Verdict.GOOD,
            Conclusion.NO_REGRESSION,
            "bad endpoint 0.1.4 tested good against 0.1.0",
        ),
    ],
)
def test_endpoint_failures(
    good: Verdict, bad: Verdict, conclusion: Conclusion, reason: str
) -> None:
    state = Bisection(RELEASED[:5]).record_all({"0.1.0": good, "0.1.4": bad})
    assert state.phase is Phase.DONE
    assert state.next_probes(2) == ()
    outcome = state.outcome()
    assert (outcome.conclusion, outcome.reason, outcome.first_bad) == (conclusion, reason, None)


def test_unverified_endpoints_are_assumed_and_never_probed() -> None:
    versions = RELEASED[:7]
    oracle = PlantedOracleDouble(versions, 2)
    outcome = search(Bisection(versions, verify_endpoints=False), oracle, 2).outcome()
    assert "0.1.0" not in oracle.probed
    assert "0.1.6" not in oracle.probed
    assert outcome.first_bad == "0.1.2"


def test_adjacent_endpoints_need_only_verification() -> None:
    state = Bisection(("0.1.5", "0.1.6"))
    assert state.steps_left(1) == 2
    done = state.record_all({"0.1.5": Verdict.GOOD, "0.1.6": Verdict.BAD})
    assert done.outcome().reason == "first bad 0.1.6, last good 0.1.5"


def test_between_takes_released_versions_inside_the_range_in_version_order() -> None:
    released = ["0.1.10", "0.1.9", "0.1.2", "0.1.12", "0.1.11", "0.2.0"]
    state = Bisection.between("0.1.9", "0.1.12", released)
    assert state.versions == ("0.1.9", "0.1.10", "0.1.11", "0.1.12")


def test_between_keeps_endpoints_missing_from_the_listing() -> None:
    assert Bisection.between("0.1.1", "0.1.4", ["0.1.2"]).versions == ("0.1.1", "0.1.2", "0.1.4")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Bisection(("0.1.2", "0.1.1")), "versions must be unique and ascending"),
        (lambda: Bisection(("0.1.1",)), "a bisection needs a good and a bad version"),
        (lambda: Bisection.between("0.1.4", "0.1.4", []), "--good 0.1.4 must be older than"),
        (lambda: sort_versions(["0.1", "nightly"]), "not a version: 'nightly'"),
        (lambda: Bisection(RELEASED[:3]).next_probes(0), "--jobs must be at least 1, got 0"),
        (lambda: Bisection(RELEASED[:3]).outcome(), "the bisection has not finished"),
        (lambda: Bisection(RELEASED[:3], {"9.9": Verdict.BAD}), "outside the range: 9.9"),
    ],
)
def test_bad_input_is_a_usage_error(call: object, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        call()  # type: ignore[operator]


def test_oracle_must_answer_every_probe() -> None:
    with pytest.raises(UsageError, match=r"no verdict for 0\.1\.0"):
        search(Bisection(RELEASED[:3]), lambda probes: {})


def test_state_is_immutable() -> None:
    state = Bisection(RELEASED[:3])
    state.record("0.1.0", Verdict.GOOD)
    assert dict(state.verdicts) == {}
    with pytest.raises(TypeError):
        state.verdicts["0.1.0"] = Verdict.GOOD  # type: ignore[index]
