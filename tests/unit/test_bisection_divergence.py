"""`bisect --tier divergence` in the driver: probes run the sessions' divergence stage (an A/A
pair of passes per config), each version's records are judged against the good version's with
the divergence judge, the good version's repeat as the floor. The nox session is replaced by a
double that writes divergence records the way the divergence stage does (tests/integration/
test_bisect_divergence.py runs the real CLI)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from packaging.version import Version

from humming_matrix.bisect.driver import BisectLog, BisectResult, Driver, Plan
from humming_matrix.bisect.paired_judge import DivergenceJudge
from humming_matrix.bisect.search import Conclusion, Verdict
from humming_matrix.bisect.version_runner import (
    DIVERGENCE_REPEAT_SUFFIX,
    Prober,
    ProbeStatus,
    Suite,
    Tier,
)
from humming_matrix.divergence.passes import DIVERGENCE_ONLY_ENV, STAGE_REPEAT
from humming_matrix.matrix.cells import Matrix, load_matrix
from humming_matrix.suite.config import EvalConfig, load_config
from tests.doubles.divergence_pass_double import write_pass
from tests.unit.test_bisection_driver import TEST_MATRIX, VERSIONS

N = 40


class DivergenceSessionDouble:
    """TEST DOUBLE of a nox session's divergence stage: `STAGE_REPEAT` passes of each config
    into the store `--results` names, the toy model shifted for versions >= `bad_from`; an
    `uninstallable` version writes an install error to the log and no record."""

    def __init__(
        self, config: EvalConfig, *, bad_from: str, uninstallable: frozenset[str] = frozenset()
    ) -> None:
        self.config = config
        self.bad_from = Version(bad_from)
        self.uninstallable = uninstallable
        self.calls: list[str] = []

    def __call__(
        self, session: str, posargs: Sequence[str], env: Mapping[str, str], log: Path
    ) -> int:
        self.calls.append(session)
        assert env[DIVERGENCE_ONLY_ENV] == "1"
        version = session.removeprefix("humming-")
        log.parent.mkdir(parents=True, exist_ok=True)
        if version in self.uninstallable:
            log.write_text(
                f"  x No solution found when resolving: humming-kernels=={version}\n"
                f"nox > Session {session} failed.\n"
            )
            return 1
        store = Path(posargs[posargs.index("--results") + 1])
        limit = int(posargs[posargs.index("--limit") + 1])
        shift = 0.3 if Version(version) >= self.bad_from else 0.0
        for n in range(STAGE_REPEAT):
            seed = 100 * VERSIONS.index(version) + n
            write_pass(store, self.config, version, session, limit, seed=seed, shift=shift)
        log.write_text(f"nox > Session {session} was successful.\n")
        return 0

    def stop_all(self) -> None:
        """Nothing runs in the background here."""


@pytest.fixture
def matrix(tmp_path: Path) -> Matrix:
    path = tmp_path / "matrix.toml"
    path.write_text(TEST_MATRIX)
    return load_matrix(path)


@pytest.fixture
def config(tmp_path: Path) -> EvalConfig:
    path = tmp_path / "toy.yaml"
    path.write_text(
        'model_name: "toy"\naccuracy_threshold: 0.0\nnum_questions: 1319\nnum_fewshot: 0\n'
    )
    return load_config(path)


def bisect(
    tmp_path: Path,
    matrix: Matrix,
    config: EvalConfig,
    session: DivergenceSessionDouble,
    log_name: str = "log.jsonl",
) -> tuple[BisectResult, list[str]]:
    suite = Suite((config,), ("--config", str(config.path)), tmp_path / "store", N, Tier.DIVERGENCE)
    prober = Prober(suite, session, log_dir=tmp_path / "logs", base_env={})
    plan = Plan(
        "0.1.2", "0.1.8", VERSIONS, {config.name: config.sha256}, N, None, True, Tier.DIVERGENCE
    )
    judge = DivergenceJudge()
    said: list[str] = []
    with BisectLog(tmp_path / log_name, plan) as log:
        result = Driver(plan, matrix, prober, judge, judge.alone, log, say=said.append).run()
    return result, said


def test_finds_the_first_diverged_version_and_skips_an_unrunnable_one(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    session = DivergenceSessionDouble(config, bad_from="0.1.4", uninstallable=frozenset({"0.1.5"}))
    result, said = bisect(tmp_path, matrix, config, session)
    assert session.calls == [
        "humming-0.1.2",
        "humming-0.1.8",
        "humming-0.1.5",
        "humming-0.1.4",
        "humming-0.1.3",
    ]
    outcome = result.outcome
    assert (outcome.conclusion, outcome.last_good, outcome.first_bad) == (
        Conclusion.FOUND,
        "0.1.3",
        "0.1.4",
    )
    verdicts = {v: (e.status, e.verdict) for v, e in result.entries.items()}
    assert verdicts == {
        "0.1.2": (ProbeStatus.RAN, Verdict.GOOD),
        "0.1.8": (ProbeStatus.RAN, Verdict.BAD),
        "0.1.5": (ProbeStatus.UNTESTABLE, Verdict.SKIP),
        "0.1.4": (ProbeStatus.RAN, Verdict.BAD),
        "0.1.3": (ProbeStatus.RAN, Verdict.GOOD),
    }
    assert result.entries["0.1.5"].reason == (
        "untestable: nox session humming-0.1.5 exited 1 without two complete divergence "
        "records of every config: x No solution found when resolving: humming-kernels==0.1.5"
    )
    # The good version's probe holds its A/A pair; every other probe is judged against it.
    good = result.entries["0.1.2"]
    assert sorted(good.records) == ["toy", "toy" + DIVERGENCE_REPEAT_SUFFIX]
    assert good.reason.startswith("baseline, toy: A/A floor mean token KL ")
    bad = result.entries["0.1.4"].evidence["toy"]
    assert (bad["kind"], bad["verdict"], bad["questions"]) == ("divergence", "diverged", N)
    kl = bad["tests"][0]
    # A fixed shift makes every question diverge more than the floor: the exact sign test's p
    # is 0.5^N, and Holm multiplies the smallest of three by 3.
    assert (kl["metric"], kl["above"], kl["below"]) == ("kl", N, 0)
    assert kl["p_value"] == pytest.approx(0.5**N, rel=1e-12)
    assert bad["baseline"]["path"] == good.records["toy"]
    assert bad["replicate"]["path"] == good.records["toy" + DIVERGENCE_REPEAT_SUFFIX]
    same = result.entries["0.1.3"].evidence["toy"]
    assert same["verdict"] == "same"
    assert min(t["adjusted_p"] for t in same["tests"]) > 0.05
    assert "bisect: 0.1.4: bad (ran) - toy: diverged, mean token KL " in "\n".join(said)


def test_a_second_bisect_reuses_both_passes_and_runs_nothing(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    bisect(tmp_path, matrix, config, DivergenceSessionDouble(config, bad_from="0.1.4"))
    again = DivergenceSessionDouble(config, bad_from="0.1.4")
    result, _ = bisect(tmp_path, matrix, config, again, log_name="second.jsonl")
    assert again.calls == []
    assert {e.status for e in result.entries.values()} == {ProbeStatus.REUSED}
    assert (result.outcome.last_good, result.outcome.first_bad) == ("0.1.3", "0.1.4")
    log = [json.loads(x) for x in (tmp_path / "second.jsonl").read_text().splitlines()]
    assert log[0]["plan"]["tier"] == "divergence"


def test_a_single_pass_is_not_reused(tmp_path: Path, matrix: Matrix, config: EvalConfig) -> None:
    """A cell with one divergence record has no A/A pair: the probe runs its session again."""
    store = tmp_path / "store"
    write_pass(store, config, "0.1.4", "humming-0.1.4", N, seed=1)
    session = DivergenceSessionDouble(config, bad_from="0.1.8")
    suite = Suite((config,), (), store, N, Tier.DIVERGENCE)
    prober = Prober(suite, session, log_dir=tmp_path / "logs", base_env={})
    cell = matrix.cell_for("0.1.4")
    assert prober.stored(cell) is None
    assert prober.probe(cell).status is ProbeStatus.RAN
    assert session.calls == ["humming-0.1.4"]
    assert prober.probe(cell).status is ProbeStatus.REUSED
    assert (
        Prober(
            Suite((config,), (), store, N - 1, Tier.DIVERGENCE),
            session,
            log_dir=tmp_path / "logs",
            base_env={},
        ).stored(cell)
        is None
    )


def test_a_gsm8k_probe_never_passes_divergence_only_on(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    """Left in the caller's environment, HUMMING_MATRIX_DIVERGENCE_ONLY=1 would make every
    GSM8K probe's session skip its GSM8K stage (and so be untestable)."""
    seen: list[Mapping[str, str]] = []

    class Runner:
        def __call__(
            self, session: str, posargs: Sequence[str], env: Mapping[str, str], log: Path
        ) -> int:
            seen.append(dict(env))
            log.write_text("nox > Session failed.\n")
            return 1

        def stop_all(self) -> None:
            """Nothing runs in the background here."""

    suite = Suite((config,), (), tmp_path / "store", N)
    prober = Prober(
        suite,
        Runner(),
        log_dir=tmp_path / "logs",
        base_env={DIVERGENCE_ONLY_ENV: "1", "KEPT": "yes"},
    )
    assert prober.probe(matrix.cell_for("0.1.4")).status is ProbeStatus.UNTESTABLE
    assert [(DIVERGENCE_ONLY_ENV in env, env["KEPT"]) for env in seen] == [(False, "yes")]
