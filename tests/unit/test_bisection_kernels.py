"""`--tier kernels`: the same search over `kernels-<version>` sessions, judged by the kernel
judge. A session double writes kernel records as `humming-matrix kernels` does (no GPU here)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from humming_matrix.bisect.driver import BisectLog, Driver, Plan
from humming_matrix.bisect.paired_judge import Judgement, KernelJudge, _kernel_line
from humming_matrix.bisect.report import evidence_lines
from humming_matrix.bisect.search import Conclusion, Verdict
from humming_matrix.bisect.version_runner import KERNELS_RECORD, Prober, ProbeStatus, Suite, Tier
from humming_matrix.kernels.judge import compare_kernel_records
from humming_matrix.kernels.record import build_record, write_record
from humming_matrix.kernels.watchdog import SuiteRun
from humming_matrix.matrix.cells import Matrix, load_matrix
from humming_matrix.store.kernels import Settings
from humming_matrix.store.results import new_run_id, utc_now_iso
from tests.unit.test_bisection_driver import TEST_MATRIX, VERSIONS
from tests.unit.test_kernels_judge import _batch as _judge_batch
from tests.unit.test_kernels_judge import _record as _judge_record


def _batch(m: int, nan: int = 0) -> dict[str, Any]:
    return {
        "m": m,
        "rel_err": [2e-3, 2.1e-3, 1.9e-3],
        "worst_row_rel_err": [4e-3] * 3,
        "floor": 1.6e-3,
        "nan": nan,
        "inf": 0,
        "input_sha256": f"in-{m}",
        "time": {"median_ms": 1.0, "mad_ms": 0.01, "min_ms": 1.0, "repeats": 10},
    }


class KernelSessionDouble:
    """TEST DOUBLE of a `kernels-<version>` nox session: writes one kernel record; from
    `broken_from` on, case `moe` gives NaN at m=64. `no_import` versions record an import error
    (humming could not be imported), as the real command does before exiting 125."""

    def __init__(self, broken_from: str, no_import: frozenset[str] = frozenset()) -> None:
        self.broken_from = Version(broken_from)
        self.no_import = no_import
        self.calls: list[str] = []

    def __call__(
        self, session: str, posargs: Sequence[str], env: Mapping[str, str], log: Path
    ) -> int:
        self.calls.append(session)
        assert "--limit" not in posargs
        version = session.removeprefix("kernels-")
        record = build_record(
            self.suite_run(Version(version)),
            Settings((16, 64), 10, 3, 0, 60.0),
            {"humming_kernels": version, "session": session, "gpu": None},
            new_run_id(),
            utc_now_iso(),
        )
        write_record(Path(posargs[posargs.index("--results") + 1]), record)
        log.write_text(f"nox > Session {session} was successful.\n")
        return 0

    def suite_run(self, version: Version) -> SuiteRun:
        broken = version >= self.broken_from
        return SuiteRun(
            results=(
                {"case": {"name": "dense"}, "batches": [_batch(16), _batch(64)]},
                {
                    "case": {"name": "moe"},
                    "batches": [_batch(16), _batch(64, nan=3 if broken else 0)],
                },
            ),
            import_error="ImportError: no humming.ops" if str(version) in self.no_import else None,
        )

    def stop_all(self) -> None:
        """Nothing runs in the background here."""


@pytest.fixture
def matrix(tmp_path: Path) -> Matrix:
    (tmp_path / "matrix.toml").write_text(TEST_MATRIX)
    return load_matrix(tmp_path / "matrix.toml")


def run(
    tmp_path: Path, matrix: Matrix, session: KernelSessionDouble, log: str, kernel_runs: int = 1
) -> Any:
    """A bisect of 0.1.2 - 0.1.8; two runs a version count slowdowns (--fail-on-slowdown)."""
    plan = Plan("0.1.2", "0.1.8", VERSIONS, {}, None, None, True, Tier.KERNELS)
    suite = Suite((), (), tmp_path / "store", None, Tier.KERNELS, kernel_runs=kernel_runs)
    prober = Prober(suite, session, log_dir=tmp_path / "logs", base_env={})
    judge = KernelJudge(fail_on_slowdown=kernel_runs > 1)
    with BisectLog(tmp_path / log, plan) as bisect_log:
        return Driver(
            plan, matrix, prober, judge, judge.alone, bisect_log, say=lambda line: None
        ).run()


def test_kernel_tier_finds_the_first_broken_release_and_reuses_its_records(
    tmp_path: Path, matrix: Matrix
) -> None:
    session = KernelSessionDouble("0.1.4")
    result = run(tmp_path, matrix, session, "a.jsonl")
    assert (result.outcome.conclusion, result.outcome.last_good, result.outcome.first_bad) == (
        Conclusion.FOUND,
        "0.1.3",
        "0.1.4",
    )
    assert session.calls == [
        "kernels-0.1.2",
        "kernels-0.1.8",
        "kernels-0.1.5",
        "kernels-0.1.3",
        "kernels-0.1.4",
    ]
    entry = result.entries["0.1.4"]
    assert entry.reason == "kernels: 1 of 4 case/batch results worse: moe m=64 newly-broken"
    assert evidence_lines(entry.evidence) == [
        "kernels: regression (['0.1.2'] -> ['0.1.4']): moe m=64 newly-broken"
    ]
    assert result.entries["0.1.2"].reason == "baseline kernels: 2 ok"

    again = KernelSessionDouble("0.1.4")
    second = run(tmp_path, matrix, again, "b.jsonl")
    assert again.calls == []
    assert {e.status for e in second.entries.values()} == {ProbeStatus.REUSED}


def test_a_release_humming_cannot_import_is_skipped(tmp_path: Path, matrix: Matrix) -> None:
    session = KernelSessionDouble("0.1.6", no_import=frozenset({"0.1.5"}))
    result = run(tmp_path, matrix, session, "a.jsonl")
    entry = result.entries["0.1.5"]
    assert (entry.status, entry.verdict) == (ProbeStatus.UNTESTABLE, Verdict.SKIP)
    assert entry.reason.startswith(
        "untestable: nox session kernels-0.1.5 exited 0 without a complete kernel record: "
    )
    assert (result.outcome.last_good, result.outcome.first_bad) == ("0.1.4", "0.1.6")


class RetiledSessionDouble(KernelSessionDouble):
    """TEST DOUBLE: from `changed_from` on the output bytes differ (a retiled kernel, error the
    same: `changed`); from `broken_from` on, case `moe` at m=64 is twice as far from the
    reference (`worse`, within the run tolerance). Every relaunch bit-identical."""

    def __init__(self, changed_from: str, broken_from: str) -> None:
        super().__init__(broken_from)
        self.changed_from = Version(changed_from)

    def suite_run(self, version: Version) -> SuiteRun:
        sha = "retiled" if version >= self.changed_from else "original"

        def batch(m: int, worse: bool = False) -> dict[str, Any]:
            b = _batch(m)
            if worse:
                b["rel_err"] = [4e-3, 4.1e-3, 3.9e-3]
            return dict(b, sha256=f"{sha}-{m}", deterministic=[True] * 3)

        return SuiteRun(
            results=(
                {"case": {"name": "dense"}, "batches": [batch(16), batch(64)]},
                {
                    "case": {"name": "moe"},
                    "batches": [batch(16), batch(64, version >= self.broken_from)],
                },
            )
        )


def test_bisect_counts_worse_as_bad_and_changed_as_good(tmp_path: Path, matrix: Matrix) -> None:
    session = RetiledSessionDouble(changed_from="0.1.4", broken_from="0.1.7")
    result = run(tmp_path, matrix, session, "a.jsonl")
    assert (result.outcome.conclusion, result.outcome.last_good, result.outcome.first_bad) == (
        Conclusion.FOUND,
        "0.1.6",
        "0.1.7",
    )
    assert result.entries["0.1.7"].reason == (
        "kernels: 1 of 4 case/batch results worse: moe m=64 worse (rel. error +0.002)"
    )
    # 0.1.5 is judged against 0.1.2: every output changed, none worse: good.
    assert result.entries["0.1.5"].verdict is Verdict.GOOD
    changed = [v["verdict"] for v in result.entries["0.1.5"].evidence["kernels"]["verdicts"]]
    assert changed == ["changed"] * 4


class SlowedSessionDouble(KernelSessionDouble):
    """TEST DOUBLE: from `slower_from` on, case `moe` at m=64 takes 1.5 ms where it took 1.0,
    with the same output bytes. Every relaunch bit-identical."""

    def suite_run(self, version: Version) -> SuiteRun:
        def batch(m: int, slow: bool = False) -> dict[str, Any]:
            b = dict(_batch(m), sha256=f"same-{m}", deterministic=[True] * 3)
            if slow:
                b["time"] = {"median_ms": 1.5, "mad_ms": 0.015, "min_ms": 1.5, "repeats": 10}
            return b

        return SuiteRun(
            results=(
                {"case": {"name": "dense"}, "batches": [batch(16), batch(64)]},
                {
                    "case": {"name": "moe"},
                    "batches": [batch(16), batch(64, version >= self.broken_from)],
                },
            )
        )


def test_fail_on_slowdown_runs_each_version_twice_and_finds_the_first_slower(
    tmp_path: Path, matrix: Matrix
) -> None:
    # One run a version (no --fail-on-slowdown): same bytes, so no regression.
    once = SlowedSessionDouble("0.1.6")
    plain = run(tmp_path, matrix, once, "a.jsonl")
    assert plain.outcome.conclusion is Conclusion.NO_REGRESSION
    assert once.calls == ["kernels-0.1.2", "kernels-0.1.8"]
    # Two runs a version: the endpoints' single records are topped up by one run each.
    twice = SlowedSessionDouble("0.1.6")
    result = run(tmp_path, matrix, twice, "b.jsonl", kernel_runs=2)
    assert (result.outcome.conclusion, result.outcome.last_good, result.outcome.first_bad) == (
        Conclusion.FOUND,
        "0.1.5",
        "0.1.6",
    )
    assert twice.calls == [
        "kernels-0.1.2",
        "kernels-0.1.8",
        "kernels-0.1.5",
        "kernels-0.1.5",
        "kernels-0.1.6",
        "kernels-0.1.6",
    ]
    assert result.entries["0.1.6"].reason == (
        "kernels: 1 of 4 case/batch results worse or slower: moe m=64 same (rel. error +0), "
        "slower 1.50x"
    )
    assert result.entries["0.1.5"].reason == "kernels: no regression in 4 case/batch results"
    # Each run keeps its own log.
    assert len(list((tmp_path / "logs").glob("kernels-0.1.5.*.log"))) == 2


GEN6 = Path(__file__).resolve().parents[2] / "results" / "h200" / "gen6"


def _real(version: str, call: str) -> dict[str, Path]:
    """The first (by run id) of a release's committed records of one call of the sixth
    generation, as a probe's records."""
    return {KERNELS_RECORD: sorted((GEN6 / call).glob(f"kernels__suite__{version}__*.json"))[0]}


def test_real_records_give_a_baseline_and_find_0_1_13s_o_proj_regression() -> None:
    # Every real release has cases out of tolerance or not bit-identical on relaunch: the
    # baseline lists them and is compared with, not refused.
    judge = KernelJudge()
    assert judge.alone(_real("0.1.12", "call3")) == Judgement(
        Verdict.GOOD, "baseline kernels: 46 ok, 31 nondeterministic, 7 fail"
    )
    worse = judge(_real("0.1.12", "call3"), _real("0.1.13", "call3"))
    assert (worse.verdict, worse.summary) == (
        Verdict.BAD,
        "kernels: 5 of 336 case/batch results worse: "
        "o-awq-int4-bf16-2048x4096 m=1 worse (rel. error +0.00243), "
        "o-awq-int4-bf16-2048x4096 m=16 worse (rel. error +0.0022), "
        "o-gptq-int4-g128-bf16-2048x4096 m=1 worse (rel. error +0.00205), "
        "o-gptq-int4-g128-bf16-2048x4096 m=16 worse (rel. error +0.00191), "
        "o-mxfp4-bf16-2048x4096 m=16 worse (rel. error +0.00214)",
    )
    # 0.1.13 -> 0.1.14 retiles much (118 pairs `changed` in the README) and breaks nothing.
    good = judge(_real("0.1.13", "call3"), _real("0.1.14", "call2"))
    assert (good.verdict, good.summary) == (
        Verdict.GOOD,
        "kernels: no regression in 336 case/batch results",
    )


GEN7 = GEN6.parent / "gen7"


def _fp8_block_moe_down(version: str, tmp_path: Path) -> dict[str, Path]:
    """Gen7 call 9's record of a release cut to Qwen's FP8-block FP8 MoE down GEMM (its two
    cases: checkpoint-like and wide scales), real numbers, as a probe's records."""
    (path,) = (GEN7 / "call9").glob(f"kernels__suite__{version}__*.json")
    record = json.loads(path.read_text())
    record["cases"] = [
        c for c in record["cases"] if c["name"].startswith("moe-down-fp8-block-fp8-e4m3")
    ]
    out = tmp_path / f"{version}.json"
    out.write_text(json.dumps(record))
    return {KERNELS_RECORD: out}


def test_a_slowdown_of_one_run_a_side_is_named_but_not_counted(tmp_path: Path) -> None:
    # 0.1.13 runs this GEMM 1.37 - 1.87x slower than 0.1.12 from 1024 tokens on, with the same
    # output bytes (one run each, side by side in one call). A probe is one run: asked to count
    # slowdowns, the judge says why these do not count instead of passing silently.
    base, cand = _fp8_block_moe_down("0.1.12", tmp_path), _fp8_block_moe_down("0.1.13", tmp_path)
    plain = KernelJudge()(base, cand)
    assert (plain.verdict, plain.summary) == (
        Verdict.GOOD,
        "kernels: no regression in 26 case/batch results",
    )
    asked = KernelJudge(fail_on_slowdown=True)(base, cand)
    assert (asked.verdict, asked.summary) == (
        Verdict.GOOD,
        "kernels: no regression in 26 case/batch results; 6 slower with one run a side, not "
        "counted (a slowdown counts only beyond the spread of two or more runs a side), the most "
        "moe-down-fp8-block-fp8-e4m3-2048x768-e128k8-wide-scales m=2048 same (rel. error +0), "
        "slower 1.87x",
    )
    assert evidence_lines(asked.evidence) == [
        "kernels: no regression (['0.1.12'] -> ['0.1.13']): no case worse"
    ]


def test_a_counted_slowdown_says_slower_not_same() -> None:
    # Two runs a side: the between-run spread is measured, so a slowdown counts; its numbers
    # are the same, and the lines say what made it bad.
    def rec(version: str, run: str, ms: float) -> dict[str, Any]:
        return _judge_record(version, {"a": [_judge_batch(time_ms=ms, mad_ms=0.01)]}, run)

    comparison = compare_kernel_records(
        [rec("0.1.5", "b1", 1.0), rec("0.1.5", "b2", 1.01)],
        [rec("0.1.6", "c1", 1.2), rec("0.1.6", "c2", 1.21)],
        fail_on_slowdown=True,
    )
    (v,) = comparison.regressions
    assert _kernel_line(v) == "a m=64 same (rel. error +0), slower 1.20x"
    assert evidence_lines({"kernels": comparison.to_json()}) == [
        "kernels: regression (['0.1.5'] -> ['0.1.6']): a m=64 same, slower 1.20x"
    ]


def test_a_baseline_that_gave_no_numbers_cannot_be_compared_with(tmp_path: Path) -> None:
    run = SuiteRun(
        results=(
            {"case": {"name": "dense"}, "state": "unsupported", "batches": []},
            {"case": {"name": "moe"}, "state": "crash", "batches": []},
        )
    )
    record = build_record(
        run,
        Settings((16, 64), 10, 3, 0, 60.0),
        {"humming_kernels": "0.1.2", "session": "kernels-0.1.2", "gpu": None},
        new_run_id(),
        utc_now_iso(),
    )
    path = write_record(tmp_path, record)
    assert KernelJudge().alone({KERNELS_RECORD: path}) == Judgement(
        Verdict.BAD, "baseline kernels: no case gave numbers (1 unsupported, 1 crash)"
    )
