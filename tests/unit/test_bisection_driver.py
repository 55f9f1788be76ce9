"""The driver: probes through a prober, judges with the paired comparison, logs, resumes and
reuses the store. The nox session is replaced by a double that writes records into the store the
way `humming-matrix run` does (the end-to-end test in tests/integration runs real nox sessions)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from humming_matrix.bisect.driver import BisectLog, BisectResult, Driver, Plan
from humming_matrix.bisect.paired_judge import PairedJudge
from humming_matrix.bisect.search import Conclusion, Verdict
from humming_matrix.bisect.version_runner import Prober, ProbeStatus, Suite
from humming_matrix.errors import RecordError, UsageError
from humming_matrix.matrix.cells import Matrix, load_matrix
from humming_matrix.store.results import (
    ConfigInfo,
    Gsm8kRecord,
    Metrics,
    QuestionOutcome,
    new_run_id,
    utc_now_iso,
    write_record,
)
from humming_matrix.suite.config import EvalConfig, load_config
from humming_matrix.suite.evaluate import NOT_STARTED
from humming_matrix.suite.server_log import StartupPhase, StartupReport

N = 60
CUDA_CRASH = "AcceleratorError: CUDA error: an illegal memory access was encountered"
VERSIONS = ("0.1.2", "0.1.3", "0.1.4", "0.1.5", "0.1.6", "0.1.7", "0.1.8")
TEST_MATRIX = """\
[matrix]
schema_version = 1

[recipe.humming_only]
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 0
preflight = false

[variant.cpu]
description = "no CUDA"

[[pairing]]
humming = ">=0.1.0,<0.2"
versions = ["0.1.2", "0.1.8"]
variants = ["cpu"]
"""


class SessionDouble:
    """TEST DOUBLE of a nox session: writes one complete record per config into the store given
    by `--results`, with `wrong` questions answered wrongly for versions >= `bad_from`; an
    `uninstallable` version writes an install error to the log and no record; a version in
    `start_fails` writes the record `run` writes when the server never became ready, having
    reached that phase."""

    def __init__(
        self,
        config: EvalConfig,
        *,
        bad_from: str | None,
        wrong: Sequence[int],
        uninstallable: frozenset[str] = frozenset(),
        interrupt_at: int | None = None,
        start_fails: Mapping[str, StartupPhase] | None = None,
        crashes: frozenset[str] = frozenset(),
    ) -> None:
        self.config = config
        self.crashes = crashes
        self.start_fails = dict(start_fails or {})
        self.bad_from = bad_from
        self.wrong = frozenset(wrong)
        self.uninstallable = uninstallable
        self.interrupt_at = interrupt_at
        self.calls: list[str] = []

    def __call__(
        self, session: str, posargs: Sequence[str], env: Mapping[str, str], log: Path
    ) -> int:
        self.calls.append(session)
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        version = session.removeprefix("humming-")
        assert version in env["HUMMING_MATRIX_EXTRA_VERSIONS"].split(",")
        log.parent.mkdir(parents=True, exist_ok=True)
        if version in self.uninstallable:
            log.write_text(
                f"nox > uv pip install humming-kernels=={version}\n"
                f"  x No solution found when resolving: humming-kernels=={version}\n"
                f"nox > Session {session} failed.\n"
            )
            return 1
        store = Path(posargs[posargs.index("--results") + 1])
        limit = int(posargs[posargs.index("--limit") + 1])
        from packaging.version import Version

        if version in self.start_fails:
            write_record(store, self._failed_start(version, session, limit))
            log.write_text(f"nox > Session {session} failed.\n")
            return 1
        if version in self.crashes:
            write_record(store, self._crashed(version, session, limit))
            log.write_text(
                "humming-matrix: error: vllm serve exited with code 1 while serving\n"
                f"nox > Session {session} failed.\n"
            )
            return 3
        bad = self.bad_from is not None and Version(version) >= Version(self.bad_from)
        questions = tuple(
            QuestionOutcome(i, not (bad and i in self.wrong), i, i) for i in range(limit)
        )
        correct = sum(q.correct for q in questions)
        record = Gsm8kRecord(
            run_id=new_run_id(),
            created=utc_now_iso(),
            complete=True,
            config=ConfigInfo(self.config.name, str(self.config.path), self.config.sha256, {}),
            environment={"humming_kernels": version, "session": session, "gpu": None},
            metrics=Metrics(
                correct / limit, 0.0, 0, limit, 0.5, 0.08, correct / limit >= 0.42, 1.0
            ),
            questions=questions,
        )
        write_record(store, record)
        log.write_text(f"nox > Session {session} was successful.\n")
        return 0

    def _failed_start(self, version: str, session: str, limit: int) -> Gsm8kRecord:
        phase = self.start_fails[version]
        report = StartupReport(
            ready=False,
            phase=phase,
            seconds=150.0,
            reason="vllm serve not ready after 150 s (startup_max_wait_seconds; last phase: "
            f"{phase.label})",
            log_tail=("INFO Model loading took 0.12 GiB memory and 0.73 seconds",),
            gpu=({"index": "0", "utilization_percent": 100, "memory_used_mib": 887},),
        )
        return Gsm8kRecord(
            run_id=new_run_id(),
            created=utc_now_iso(),
            complete=False,
            config=ConfigInfo(self.config.name, str(self.config.path), self.config.sha256, {}),
            environment={"humming_kernels": version, "session": session, "gpu": None},
            metrics=Metrics(0.0, 0.0, limit, limit, 0.5, 0.08, False, 0.0),
            questions=tuple(QuestionOutcome(i, False, None, i, NOT_STARTED) for i in range(limit)),
            startup=report.to_json(),
        )

    def _crashed(self, version: str, session: str, limit: int) -> Gsm8kRecord:
        """What `run` leaves when the server served 10 answers, then died in CUDA."""
        questions = tuple(
            QuestionOutcome(i, True, i, i)
            if i < 10
            else QuestionOutcome(i, False, None, i, "not asked: the run stopped first")
            for i in range(limit)
        )
        return Gsm8kRecord(
            run_id=new_run_id(),
            created=utc_now_iso(),
            complete=False,
            config=ConfigInfo(self.config.name, str(self.config.path), self.config.sha256, {}),
            environment={"humming_kernels": version, "session": session, "gpu": None},
            metrics=Metrics(10 / limit, 0.0, limit - 10, limit, 0.5, 0.08, False, 1.0),
            questions=questions,
            server={"crash": {"cuda_error": True, "reason": CUDA_CRASH}},
        )

    def stop_all(self) -> None:
        """Nothing runs in the background here."""


@pytest.fixture
def matrix(tmp_path: Path) -> Matrix:
    path = tmp_path / "matrix.toml"
    path.write_text(TEST_MATRIX)
    return load_matrix(path)


@pytest.fixture
def config(tmp_path: Path) -> EvalConfig:
    path = tmp_path / "double.yaml"
    path.write_text(
        'model_name: "double/model"\naccuracy_threshold: 0.5\nnum_questions: 1319\nnum_fewshot: 5\n'
    )
    return load_config(path)


def plan_for(config: EvalConfig, *, verify: bool = True) -> Plan:
    return Plan("0.1.2", "0.1.8", VERSIONS, {config.name: config.sha256}, N, None, verify)


def bisect(
    tmp_path: Path,
    matrix: Matrix,
    config: EvalConfig,
    session: SessionDouble,
    *,
    verify: bool = True,
    jobs: int = 1,
    fresh: bool = False,
    log_name: str = "log.jsonl",
) -> tuple[BisectResult, list[str]]:
    suite = Suite((config,), ("--config", str(config.path)), tmp_path / "store", N)
    prober = Prober(suite, session, log_dir=tmp_path / "logs", base_env={})
    said: list[str] = []
    judge = PairedJudge()
    plan = plan_for(config, verify=verify)
    with BisectLog(tmp_path / log_name, plan, fresh=fresh) as log:
        result = Driver(
            plan, matrix, prober, judge, judge.alone, log, jobs=jobs, say=said.append
        ).run()
    return result, said


def test_finds_planted_first_bad_and_logs_each_probe(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    session = SessionDouble(config, bad_from="0.1.6", wrong=range(10))
    result, said = bisect(tmp_path, matrix, config, session)
    assert result.outcome.conclusion is Conclusion.FOUND
    assert (result.outcome.last_good, result.outcome.first_bad) == ("0.1.5", "0.1.6")
    assert session.calls == ["humming-0.1.2", "humming-0.1.8", "humming-0.1.5", "humming-0.1.6"]
    evidence = result.entries["0.1.6"].evidence[config.name]
    assert (evidence["b"], evidence["c"], evidence["verdict"]) == (10, 0, "regression")
    assert [f["index"] for f in evidence["flips"]] == list(range(10))
    assert evidence["difference"] == pytest.approx(-10 / 60)
    lines = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [x["event"] for x in lines] == ["start"] + ["probe"] * 4 + ["done"]
    assert [(x["version"], x["verdict"]) for x in lines[1:5]] == [
        ("0.1.2", "good"),
        ("0.1.8", "bad"),
        ("0.1.5", "good"),
        ("0.1.6", "bad"),
    ]
    assert lines[-1]["first_bad"] == "0.1.6"
    assert "bisect: window 0.1.5..0.1.8; 2 step(s) left" in said
    assert said[-1] == "bisect: window 0.1.5..0.1.6; 0 step(s) left"


def test_second_bisect_reuses_the_store_and_runs_nothing(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    first = SessionDouble(config, bad_from="0.1.6", wrong=range(10))
    bisect(tmp_path, matrix, config, first)
    again = SessionDouble(config, bad_from="0.1.6", wrong=range(10))
    result, said = bisect(tmp_path, matrix, config, again, log_name="second.jsonl")
    assert again.calls == []
    assert result.sessions_run == ()
    assert {e.status for e in result.entries.values()} == {ProbeStatus.REUSED}
    assert result.outcome.first_bad == "0.1.6"
    assert "bisect: 0.1.6: bad (stored records)" in "\n".join(said)


def test_store_reuse_requires_the_same_question_count(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    session = SessionDouble(config, bad_from="0.1.6", wrong=range(10))
    suite = Suite((config,), (), tmp_path / "store", N)
    prober = Prober(suite, session, log_dir=tmp_path / "logs", base_env={})
    cell = matrix.cell_for("0.1.4")
    assert prober.probe(cell).status is ProbeStatus.RAN
    assert prober.probe(cell).status is ProbeStatus.REUSED
    other = Prober(
        Suite((config,), (), tmp_path / "store", N - 1),
        session,
        log_dir=tmp_path / "logs",
        base_env={},
    )
    assert other.stored(cell) is None
    on_gpu = Prober(suite, session, log_dir=tmp_path / "logs", base_env={}, hardware="NVIDIA H200")
    assert on_gpu.stored(cell) is None


def test_unreadable_record_in_the_store_does_not_stop_a_probe(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "gsm8k__double__0.1.4__broken.json").write_text("{")
    session = SessionDouble(config, bad_from=None, wrong=())
    prober = Prober(Suite((config,), (), store, N), session, log_dir=tmp_path / "l", base_env={})
    assert prober.probe(matrix.cell_for("0.1.4")).status is ProbeStatus.RAN


def test_uninstallable_version_is_skipped_with_the_reason(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    session = SessionDouble(
        config, bad_from="0.1.6", wrong=range(10), uninstallable=frozenset({"0.1.5"})
    )
    result, _ = bisect(tmp_path, matrix, config, session)
    entry = result.entries["0.1.5"]
    assert (entry.status, entry.verdict) == (ProbeStatus.UNTESTABLE, Verdict.SKIP)
    assert entry.reason == (
        "untestable: nox session humming-0.1.5 exited 1 without a complete record of every "
        "config: x No solution found when resolving: humming-kernels==0.1.5"
    )
    # The skipped midpoint moves the probe to its lower neighbour. 0.1.5 sits right at the
    # boundary, so the honest answer names both candidates rather than blaming 0.1.6.
    assert session.calls == [
        "humming-0.1.2",
        "humming-0.1.8",
        "humming-0.1.5",
        "humming-0.1.4",
        "humming-0.1.6",
    ]
    outcome = result.outcome
    assert (outcome.conclusion, outcome.last_good, outcome.first_bad, outcome.undecided) == (
        Conclusion.AMBIGUOUS,
        "0.1.4",
        "0.1.6",
        ("0.1.5",),
    )


def test_killed_bisect_resumes_without_redoing_probes(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    killed = SessionDouble(config, bad_from="0.1.4", wrong=range(10), interrupt_at=4)
    with pytest.raises(KeyboardInterrupt):
        bisect(tmp_path, matrix, config, killed)
    log = tmp_path / "log.jsonl"
    assert [json.loads(x)["event"] for x in log.read_text().splitlines()] == [
        "start",
        "probe",
        "probe",
        "probe",
    ]
    # Simulate a kill while writing: half a line at the end is dropped, not an error.
    with log.open("a") as fh:
        fh.write('{"event": "probe", "vers')
    resumed = SessionDouble(config, bad_from="0.1.4", wrong=range(10))
    result, said = bisect(tmp_path, matrix, config, resumed, log_name="log.jsonl")
    assert result.resumed == ("0.1.2", "0.1.8", "0.1.5")
    # 0.1.5 (bad) was the last logged probe; next the midpoint of 0.1.2..0.1.5, then the rest.
    assert resumed.calls == ["humming-0.1.3", "humming-0.1.4"]
    assert (result.outcome.last_good, result.outcome.first_bad) == ("0.1.3", "0.1.4")
    assert said[0] == (f"bisect: resumed 3 verdict(s) from {log}: 0.1.2 good, 0.1.8 bad, 0.1.5 bad")
    assert all(json.loads(x) for x in log.read_text().splitlines())


def test_log_of_another_plan_is_refused(tmp_path: Path, config: EvalConfig) -> None:
    with BisectLog(tmp_path / "log.jsonl", plan_for(config)):
        pass
    other = Plan("0.1.2", "0.1.8", VERSIONS, {config.name: config.sha256}, N + 1, None, True)
    with pytest.raises(UsageError, match="this log is for another bisect"):
        BisectLog(tmp_path / "log.jsonl", other)
    assert BisectLog(tmp_path / "log.jsonl", other, fresh=True).entries == []


def test_damaged_log_line_names_file_and_line(tmp_path: Path, config: EvalConfig) -> None:
    with BisectLog(tmp_path / "log.jsonl", plan_for(config)):
        pass
    with (tmp_path / "log.jsonl").open("a") as fh:
        fh.write("garbage\n{}\n")
    with pytest.raises(RecordError, match=r"log\.jsonl: line 2: not JSON"):
        BisectLog(tmp_path / "log.jsonl", plan_for(config))


def test_bad_endpoint_that_tests_good_is_no_regression(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    session = SessionDouble(config, bad_from=None, wrong=())
    result, _ = bisect(tmp_path, matrix, config, session)
    assert result.outcome.conclusion is Conclusion.NO_REGRESSION
    assert session.calls == ["humming-0.1.2", "humming-0.1.8"]


def test_untestable_good_endpoint_is_unverified(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    session = SessionDouble(
        config, bad_from="0.1.6", wrong=range(10), uninstallable=frozenset({"0.1.2"})
    )
    result, _ = bisect(tmp_path, matrix, config, session, jobs=2)
    assert result.outcome.conclusion is Conclusion.UNVERIFIED
    assert result.outcome.reason == "good endpoint 0.1.2 tested skip"
    assert "0.1.8" not in result.entries  # nothing can be judged without the baseline


def test_without_verification_the_good_still_gives_the_baseline(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    session = SessionDouble(config, bad_from="0.1.6", wrong=range(10))
    result, _ = bisect(tmp_path, matrix, config, session, verify=False)
    assert session.calls[0] == "humming-0.1.2"
    assert "humming-0.1.8" not in session.calls
    assert result.outcome.first_bad == "0.1.6"


def test_nary_probes_run_in_parallel_rounds(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    session = SessionDouble(config, bad_from="0.1.6", wrong=range(10))
    result, _ = bisect(tmp_path, matrix, config, session, jobs=3)
    assert result.outcome.first_bad == "0.1.6"
    # Round 1: both endpoints and, with the spare job, the midpoint; round 2: the rest.
    assert sorted(session.calls[:3]) == ["humming-0.1.2", "humming-0.1.5", "humming-0.1.8"]
    assert sorted(session.calls[3:]) == ["humming-0.1.6", "humming-0.1.7"]
    assert result.entries["0.1.5"].verdict is Verdict.GOOD


def test_a_release_whose_server_hangs_after_loading_weights_is_bad(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    hang = dict.fromkeys(("0.1.6", "0.1.7", "0.1.8"), StartupPhase.WEIGHTS_LOADED)
    session = SessionDouble(config, bad_from=None, wrong=(), start_fails=hang)
    result, said = bisect(tmp_path, matrix, config, session)
    assert result.outcome.conclusion is Conclusion.FOUND
    assert (result.outcome.last_good, result.outcome.first_bad) == ("0.1.5", "0.1.6")
    entry = result.entries["0.1.6"]
    assert (entry.status, entry.verdict) == (ProbeStatus.START_FAILED, Verdict.BAD)
    [path] = (tmp_path / "store").glob("gsm8k__double__0.1.6__*.json")
    run_id = path.stem.split("__")[-1]
    reason = (
        f"the server of config double never became ready: run {run_id}: last phase weights "
        "loaded after 150 s (GPU 0 100 % busy, 887 MiB used); vllm serve not ready after 150 s "
        "(startup_max_wait_seconds; last phase: weights loaded)"
    )
    # The nearest release that started in the same environment is named.
    assert entry.reason == f"{reason}; humming-kernels 0.1.5 started in the same environment (cpu)"
    assert entry.evidence == {"double": {"record": str(path), "startup_phase": "weights_loaded"}}
    assert f"bisect: 0.1.6: bad (server never ready) - {entry.reason}" in said


def test_a_server_that_dies_before_loading_weights_is_untestable(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    session = SessionDouble(
        config, bad_from="0.1.6", wrong=range(10), start_fails={"0.1.5": StartupPhase.LAUNCHED}
    )
    result, _ = bisect(tmp_path, matrix, config, session)
    entry = result.entries["0.1.5"]
    assert (entry.status, entry.verdict) == (ProbeStatus.START_FAILED, Verdict.SKIP)
    assert entry.reason.startswith("untestable: the server of config double never became ready")
    assert entry.reason.endswith(
        "(it failed before loading the weights, so before any humming kernel ran)"
    )
    assert (result.outcome.last_good, result.outcome.first_bad) == ("0.1.4", "0.1.6")
    assert result.outcome.undecided == ("0.1.5",)


TWO_STACKS = TEST_MATRIX.replace(
    '[[pairing]]\nhumming = ">=0.1.0,<0.2"\nversions = ["0.1.2", "0.1.8"]\nvariants = ["cpu"]\n',
    '[[pairing]]\nhumming = ">=0.1.0,<0.1.5"\nversions = ["0.1.2"]\nvllm = "0.24.0"\n'
    'variants = ["cpu"]\n\n[[pairing]]\nhumming = ">=0.1.5,<0.2"\nversions = ["0.1.8"]\n'
    'vllm = "0.33.0"\nvariants = ["cpu"]\n',
)


def test_a_failed_start_with_no_started_neighbour_in_its_environment_is_untestable(
    tmp_path: Path, config: EvalConfig
) -> None:
    assert TWO_STACKS != TEST_MATRIX
    path = tmp_path / "two.toml"
    path.write_text(TWO_STACKS)
    session = SessionDouble(
        config, bad_from=None, wrong=(), start_fails={"0.1.8": StartupPhase.WEIGHTS_LOADED}
    )
    result, _ = bisect(tmp_path, load_matrix(path), config, session)
    entry = result.entries["0.1.8"]
    assert (entry.status, entry.verdict) == (ProbeStatus.START_FAILED, Verdict.SKIP)
    assert entry.reason.endswith(
        "(no other release of the same environment, vLLM 0.33.0, cpu, has started here to tell "
        "a bad release from a bad machine)"
    )
    assert result.outcome.conclusion is Conclusion.UNVERIFIED


def test_a_release_whose_server_crashes_in_cuda_while_serving_is_bad(
    tmp_path: Path, matrix: Matrix, config: EvalConfig
) -> None:
    """Unlike a server that never started, one that served and then died with a CUDA error is
    evidence against the kernel (docs/reliability.md)."""
    session = SessionDouble(
        config, bad_from=None, wrong=(), crashes=frozenset({"0.1.6", "0.1.7", "0.1.8"})
    )
    result, said = bisect(tmp_path, matrix, config, session)
    assert result.outcome.conclusion is Conclusion.FOUND
    assert (result.outcome.last_good, result.outcome.first_bad) == ("0.1.5", "0.1.6")
    entry = result.entries["0.1.6"]
    assert (entry.status, entry.verdict) == (ProbeStatus.CRASHED, Verdict.BAD)
    [path] = (tmp_path / "store").glob("gsm8k__double__0.1.6__*.json")
    assert entry.reason == (
        f"the server of config double crashed while serving with a CUDA error: {CUDA_CRASH}"
    )
    assert entry.evidence == {"double": {"record": str(path)}}
    assert f"bisect: 0.1.6: bad (server crashed) - {entry.reason}" in said
