"""One run's states and the baseline/candidate comparison of kernel records."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from humming_matrix.errors import RecordError
from humming_matrix.kernels.judge import (
    CaseState,
    TimeVerdict,
    Verdict,
    _sample_variance,
    assess_batch,
    compare_kernel_records,
)
from humming_matrix.kernels.record import (
    build_record,
    load_kernel_record,
    versions_table,
    write_record,
)
from humming_matrix.kernels.watchdog import SuiteRun
from humming_matrix.store.kernels import Settings


def _batch(
    m: int = 64,
    rel: tuple[float | str, ...] = (2e-3, 2.2e-3, 1.8e-3),
    time_ms: float = 1.0,
    mad_ms: float = 0.01,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "m": m,
        "rel_err": list(rel),
        "worst_row_rel_err": [4e-3] * len(rel),
        "floor": 1.6e-3,
        "nan": 0,
        "inf": 0,
        "input_sha256": f"in-{m}",
        "time": {"median_ms": time_ms, "mad_ms": mad_ms, "min_ms": time_ms, "repeats": 10},
        **extra,
    }


def _record(version: str, cases: dict[str, Any], run_id: str = "r") -> dict[str, Any]:
    results = []
    for name, value in cases.items():
        if isinstance(value, str):
            results.append(
                {"case": {"name": name}, "state": value, "reason": f"{value} reason", "batches": []}
            )
        else:
            results.append({"case": {"name": name}, "batches": value})
    run = SuiteRun(results=tuple(results), env={"humming_kernels": version})
    settings = Settings((64,), 10, 3, 0, 60.0)
    return build_record(run, settings, {"humming_kernels": version}, run_id, "2026-12-02T00:00:00")


def test_batch_states() -> None:
    assert assess_batch(_batch()) is CaseState.OK
    assert assess_batch(_batch(rel=(1.0, 1.0))) is CaseState.FAIL  # > 16 x floor
    assert assess_batch(_batch(worst_row_rel_err=[0.2])) is CaseState.FAIL  # > 64 x floor
    assert assess_batch(_batch(nan=2)) is CaseState.NONFINITE
    assert assess_batch(_batch(rel=("nan",))) is CaseState.NONFINITE
    assert assess_batch({"m": 1, "error": "RuntimeError: boom"}) is CaseState.ERROR


def test_record_keeps_states_and_json_safe_numbers(tmp_path: Path) -> None:
    record = _record("0.1.6", {"a": [_batch(rel=(math.inf,))], "b": "unsupported"})
    assert [c["state"] for c in record["cases"]] == ["fail", "unsupported"]
    assert record["cases"][0]["batches"][0]["rel_err"] == ["inf"]
    assert record["summary"]["counts"] == {"fail": 1, "unsupported": 1}
    path = write_record(tmp_path, record)
    assert path.name == "kernels__suite__0.1.6__r.json"
    assert load_kernel_record(path)["cases"][1]["reason"] == "unsupported reason"
    table = versions_table([record])
    assert table.splitlines()[2] == "| 0.1.6 | fail inf 1 ms | unsupported |"


def test_same_numbers_are_no_regression() -> None:
    base = _record("0.1.5", {"a": [_batch()]})
    cand = _record("0.1.6", {"a": [_batch(rel=(2.1e-3, 1.9e-3, 2.0e-3))]})
    cmp = compare_kernel_records([base], [cand])
    (v,) = cmp.verdicts
    assert (v.verdict, v.time) == (Verdict.SAME, TimeVerdict.SAME)
    assert cmp.exit_code == 0
    assert cmp.baseline_versions == ("0.1.5",)
    assert cmp.candidate_versions == ("0.1.6",)


def test_an_error_increase_beyond_spread_and_floor_is_a_regression() -> None:
    base = _record("0.1.5", {"a": [_batch()]})
    cand = _record("0.1.6", {"a": [_batch(rel=(6e-3, 6.2e-3, 5.8e-3))]})
    cmp = compare_kernel_records([base], [cand])
    (v,) = cmp.verdicts
    assert v.verdict is Verdict.WORSE
    assert v.delta_rel_err == pytest.approx(4e-3)
    # noise: 3 x sqrt(sem_b^2 + sem_c^2) with sd 2e-4 per side of 3 draws -> 4.9e-4 < floor
    assert v.noise_rel_err == pytest.approx(1.6e-3)
    assert cmp.exit_code == 1
    assert "REGRESSION" in cmp.to_markdown()


def test_an_increase_inside_the_draw_spread_is_not_a_regression() -> None:
    noisy = (1e-3, 9e-3, 5e-3)
    base = _record("0.1.5", {"a": [_batch(rel=noisy)]})
    cand = _record("0.1.6", {"a": [_batch(rel=(3e-3, 7e-3, 7e-3))]})  # +2e-3, -2e-3, +2e-3
    (v,) = compare_kernel_records([base], [cand]).verdicts
    assert v.verdict is Verdict.SAME
    # sample variances 16e-6 and 16e-6 / 3 over three draws each
    assert v.noise_rel_err == pytest.approx(3 * math.sqrt((16e-6 + 16e-6 / 3) / 3))


def test_a_rise_beyond_the_floor_on_every_draw_is_worse_whatever_the_spread() -> None:
    # The draws are the same inputs on both sides: +2e-3 on each (the floor is 1.6e-3) is the
    # kernel, not the inputs' spread, though the mean moved by less than 3 standard errors.
    noisy = (1e-3, 9e-3, 5e-3)
    base = _record("0.1.5", {"a": [_batch(rel=noisy)]})
    cand = _record("0.1.6", {"a": [_batch(rel=(3e-3, 1.1e-2, 7e-3))]})
    (v,) = compare_kernel_records([base], [cand]).verdicts
    assert v.verdict is Verdict.WORSE
    assert v.delta_rel_err == pytest.approx(2e-3)
    assert v.noise_rel_err == pytest.approx(3 * math.sqrt(2 * 16e-6 / 3))
    # And the other way: every draw down beyond the floor is improved.
    (back,) = compare_kernel_records([cand], [base]).verdicts
    assert back.verdict is Verdict.IMPROVED


def test_a_worse_worst_channel_within_tolerance_is_changed_not_a_regression() -> None:
    """The H200 records of 0.1.13+ against 0.1.0: one channel 30 % worse, the layer not."""
    base = _record("0.1.5", {"a": [_batch(worst_row_rel_err=[0.025] * 3)]})
    cand = _record("0.1.6", {"a": [_batch(worst_row_rel_err=[0.033] * 3)]})  # < 64 x 1.6e-3
    cmp = compare_kernel_records([base], [cand])
    (v,) = cmp.verdicts
    assert v.verdict is Verdict.CHANGED
    assert cmp.exit_code == 0
    beyond = _record("0.1.7", {"a": [_batch(worst_row_rel_err=[0.2] * 3)]})  # > 64 x floor
    (w,) = compare_kernel_records([base], [beyond]).verdicts
    assert w.verdict is Verdict.WORSE
    assert w.note == "out of tolerance; the baseline was within it"


def test_lower_error_is_an_improvement_and_passes() -> None:
    base = _record("0.1.5", {"a": [_batch(rel=(9e-3, 9.1e-3, 8.9e-3))]})
    cand = _record("0.1.6", {"a": [_batch()]})
    cmp = compare_kernel_records([base], [cand])
    assert cmp.verdicts[0].verdict is Verdict.IMPROVED
    assert cmp.exit_code == 0


def test_hang_or_build_failure_after_good_numbers_is_newly_broken() -> None:
    base = _record("0.1.5", {"a": [_batch()], "b": [_batch()]})
    cand = _record("0.1.6", {"a": "hang", "b": [{"m": 64, "error": "RuntimeError: CUDA error"}]})
    cmp = compare_kernel_records([base], [cand])
    by_case = {(v.case, v.m): v for v in cmp.verdicts}
    # A case that hung as a whole is judged at the batch size the baseline ran, not split into a
    # `missing` and a `new` row that no gate fails.
    assert set(by_case) == {("a", 64), ("b", 64)}
    assert by_case[("a", 64)].verdict is Verdict.NEWLY_BROKEN
    assert by_case[("a", 64)].note == "hang reason"
    assert by_case[("b", 64)].verdict is Verdict.NEWLY_BROKEN
    assert by_case[("b", 64)].note == "RuntimeError: CUDA error"
    assert cmp.exit_code == 1


def test_a_crash_alone_fails_the_comparison_and_its_repair_is_fixed() -> None:
    good = _record("0.1.5", {"a": [_batch(), _batch(m=2048)]})
    crashed = _record("0.1.6", {"a": "crash"})
    broke = compare_kernel_records([good], [crashed])
    assert [(v.m, v.verdict, v.note) for v in broke.verdicts] == [
        (64, Verdict.NEWLY_BROKEN, "crash reason"),
        (2048, Verdict.NEWLY_BROKEN, "crash reason"),
    ]
    assert broke.exit_code == 1
    repaired = compare_kernel_records([crashed], [good])
    assert [(v.m, v.verdict) for v in repaired.verdicts] == [
        (64, Verdict.FIXED),
        (2048, Verdict.FIXED),
    ]
    assert repaired.exit_code == 0
    # Pooled runs of one side: a run that crashed the case counts against every batch size,
    # those the side's other run gave and those only the baseline ran.
    flaky = compare_kernel_records([good], [crashed, _record("0.1.6", {"a": [_batch()]})])
    assert [(v.m, v.verdict, v.note) for v in flaky.verdicts] == [
        (64, Verdict.NEWLY_BROKEN, "crash in 1 of 2 runs; crash reason"),
        (2048, Verdict.NEWLY_BROKEN, "crash reason"),  # the other run did not reach 2048
    ]
    assert flaky.exit_code == 1


def test_a_fix_of_a_failure_that_came_now_and_then_says_how_often_it_came() -> None:
    # 0.1.3's FP8-channel q/k/v hung at 2048 tokens in one of its two runs; 0.1.4 ran it twice.
    ok = [_batch(), _batch(m=2048)]
    intermittent = [_record("0.1.3", {"a": "hang"}), _record("0.1.3", {"a": ok})]
    twice = [_record("0.1.4", {"a": ok}), _record("0.1.4", {"a": ok})]
    cmp = compare_kernel_records(intermittent, twice)
    assert [(v.m, v.verdict, v.note) for v in cmp.verdicts] == [
        (m, Verdict.FIXED, "hang in 1 of 2 runs before, 2 of 2 within tolerance now")
        for m in (64, 2048)
    ]
    # Mixed states are each counted; a failure in every run needs no such note.
    nan = [_record("0.1.3", {"a": [_batch(nan=3), _batch(m=2048, nan=3)]})]
    cmp = compare_kernel_records([*intermittent, *nan], twice)
    assert [v.note for v in cmp.verdicts] == [
        "hang in 1, nonfinite in 1 of 3 runs before, 2 of 2 within tolerance now"
    ] * 2
    always = [_record("0.1.3", {"a": "hang"}), _record("0.1.3", {"a": "hang"})]
    assert [(v.verdict, v.note) for v in compare_kernel_records(always, twice).verdicts] == [
        (Verdict.FIXED, "")
    ] * 2


def test_a_run_that_hung_beside_other_workers_and_went_through_alone_is_named() -> None:
    ok = [_batch(), _batch(m=2048)]
    rerun = _record("0.1.5", {"a": ok})
    rerun["cases"][0]["first_attempt"] = {"state": "hang", "reason": "no progress for 30 s"}
    before = [_record("0.1.5", {"a": ok}), rerun]
    after = [_record("0.1.6", {"a": ok}), _record("0.1.6", {"a": ok})]
    cmp = compare_kernel_records(before, after)
    # Judged on the rerun's numbers (the same as the other run's here), the rerun named.
    assert [(v.m, v.verdict, v.note) for v in cmp.verdicts] == [
        (m, Verdict.SAME, "baseline hung beside other workers in 1 of 2 runs, not when rerun alone")
        for m in (64, 2048)
    ]
    assert cmp.exit_code == 0
    assert [v.note for v in compare_kernel_records(after, before).verdicts] == [
        "candidate hung beside other workers in 1 of 2 runs, not when rerun alone"
    ] * 2
    # A rerun that crashed gave no numbers: broken, and still not a hang when alone.
    crashed = _record("0.1.6", {"a": "crash"})
    crashed["cases"][0]["first_attempt"] = {"state": "hang", "reason": "no progress for 30 s"}
    assert [
        (v.m, v.verdict, v.note) for v in compare_kernel_records(after, [crashed]).verdicts
    ] == [
        (
            m,
            Verdict.NEWLY_BROKEN,
            "crash reason; candidate hung beside other workers in 1 of 1 runs, not when rerun "
            "alone",
        )
        for m in (64, 2048)
    ]
    # One that hung again alone is a hang, named as no more than that.
    again = _record("0.1.6", {"a": "hang"})
    again["cases"][0]["first_attempt"] = {"state": "hang", "reason": "no progress for 30 s"}
    assert [v.note for v in compare_kernel_records(after, [again]).verdicts] == ["hang reason"] * 2


def test_a_whole_case_broken_on_both_sides_is_still_broken_and_fixed_is_fine() -> None:
    base = _record("0.1.5", {"a": "unsupported", "b": "hang"})
    cand = _record("0.1.6", {"a": "unsupported", "b": "hang"})
    cmp = compare_kernel_records([base], [cand])
    assert {v.verdict for v in cmp.verdicts} == {Verdict.STILL_BROKEN}
    assert cmp.exit_code == 0
    fixed = compare_kernel_records(
        [_record("0.1.5", {"a": [{"m": 64, "error": "x"}]})], [_record("0.1.6", {"a": [_batch()]})]
    )
    assert fixed.verdicts[0].verdict is Verdict.FIXED
    assert fixed.exit_code == 0


def test_nan_output_is_newly_broken() -> None:
    cmp = compare_kernel_records(
        [_record("0.1.5", {"a": [_batch()]})], [_record("0.1.6", {"a": [_batch(nan=5)]})]
    )
    assert cmp.verdicts[0].verdict is Verdict.NEWLY_BROKEN
    assert cmp.verdicts[0].candidate is not None
    assert cmp.verdicts[0].candidate.state is CaseState.NONFINITE


def test_time_ratio_outside_the_measured_spread_is_slower() -> None:
    base = _record("0.1.5", {"a": [_batch(time_ms=1.0, mad_ms=0.01)]})
    slower = _record("0.1.6", {"a": [_batch(time_ms=1.2, mad_ms=0.012)]})
    cmp = compare_kernel_records([base], [slower])
    (v,) = cmp.verdicts
    assert v.time is TimeVerdict.SLOWER
    assert v.time_ratio == pytest.approx(1.2)
    assert v.time_noise == pytest.approx(3 * math.sqrt(2) * 1.4826 * 0.01)
    assert cmp.exit_code == 0  # numbers are the same; speed fails only when asked
    # ... and only when the between-run spread was measured (several runs a side)
    assert not v.time_runs_measured
    assert compare_kernel_records([base], [slower], fail_on_slowdown=True).exit_code == 0
    assert "(1.200x the time, one run a side)" in cmp.to_markdown()
    bases = [base, _record("0.1.5", {"a": [_batch(time_ms=1.01, mad_ms=0.01)]}, run_id="b2")]
    slowers = [slower, _record("0.1.6", {"a": [_batch(time_ms=1.21, mad_ms=0.01)]}, run_id="c2")]
    gated = compare_kernel_records(bases, slowers, fail_on_slowdown=True)
    assert gated.verdicts[0].time is TimeVerdict.SLOWER
    assert gated.exit_code == 1
    jittery = _record("0.1.6", {"a": [_batch(time_ms=1.2, mad_ms=0.1)]})
    assert compare_kernel_records([base], [jittery]).verdicts[0].time is TimeVerdict.SAME


def test_a_timing_not_queued_ahead_of_the_gpu_judges_no_speed() -> None:
    base = _record("0.1.5", {"a": [_batch(time_ms=0.0176, mad_ms=0.0003)]})
    queued = {"median_ms": 0.077, "mad_ms": 0.0125, "min_ms": 0.05, "repeats": 20}
    gapped = _record("0.1.6", {"a": [_batch(time={**queued, "queued_ahead": False})]})
    (v,) = compare_kernel_records([base], [gapped]).verdicts
    assert v.time is TimeVerdict.UNKNOWN
    assert v.time_ratio == pytest.approx(0.077 / 0.0176)
    assert v.time_noise is None
    assert "(4.375x the time, one run a side, launches not queued ahead of the GPU)" in (
        compare_kernel_records([base], [gapped]).to_markdown()
    )
    ahead = _record("0.1.6", {"a": [_batch(time={**queued, "queued_ahead": True})]})
    assert compare_kernel_records([base], [ahead]).verdicts[0].time is TimeVerdict.SLOWER


def test_timings_from_different_gpu_models_judge_no_speed() -> None:
    def on(gpu: str, version: str, time_ms: float, run_id: str) -> dict[str, Any]:
        record = _record(version, {"a": [_batch(time_ms=time_ms, mad_ms=0.001)]}, run_id)
        record["environment"] = {"humming_kernels": version, "gpu": gpu}
        return record

    h200, h100 = "NVIDIA H200", "NVIDIA H100 80GB HBM3"
    comparison = compare_kernel_records(
        [on(h200, "0.1.16", 1.0, "b")], [on(h100, "0.1.15", 1.4, "c")]
    )
    (across,) = comparison.verdicts
    assert across.verdict is Verdict.SAME  # the errors are still compared
    assert across.time is TimeVerdict.UNKNOWN
    assert across.time_ratio == pytest.approx(1.4)
    assert across.time_noise is None
    assert (
        "(1.400x the time, one run a side, timed on different GPUs "
        "(NVIDIA H100 80GB HBM3 and NVIDIA H200))"
    ) in comparison.to_markdown()
    # one side pooling runs of two models is as unknown as two sides on two models
    mixed = [on(h200, "0.1.16", 1.0, "b"), on(h100, "0.1.16", 1.4, "b2")]
    assert compare_kernel_records(mixed, [on(h200, "0.1.15", 1.0, "c")]).verdicts[0].time is (
        TimeVerdict.UNKNOWN
    )
    (same_gpu,) = compare_kernel_records(
        [on(h100, "0.1.16", 1.0, "b")], [on(h100, "0.1.15", 1.4, "c")]
    ).verdicts
    assert same_gpu.time is TimeVerdict.SLOWER


def test_runs_pooled_per_side_widen_the_time_noise_by_their_spread() -> None:
    base = [
        _record("0.1.5", {"a": [_batch(time_ms=t, mad_ms=0.001)]}, run_id=f"b{t}")
        for t in (1.0, 1.1)
    ]
    cand = [_record("0.1.6", {"a": [_batch(time_ms=1.12, mad_ms=0.001)]})]
    (v,) = compare_kernel_records(base, cand).verdicts
    # two baseline runs 10 % apart: a 7 % difference to their median is noise
    assert v.time is TimeVerdict.SAME
    assert v.baseline is not None
    # Both runs saw the same three draws (seed 0): three draws, each the mean of its two runs.
    assert v.baseline.rel_err == (2e-3, 2.2e-3, 1.8e-3)


def test_a_rerun_of_the_same_inputs_is_not_a_new_draw() -> None:
    # Gen6's 0.1.13 -> 0.1.14 on gpt-oss's MXFP4 FP8 MoE gate/up at 16 tokens: two draws, the
    # first 3.2x worse, bit-identical in every run. One candidate run: within the noise of two
    # draws. Three runs of the same two draws must say the same, not shrink the noise by sqrt(3).
    base = [_record("0.1.13", {"a": [_batch(rel=(0.00189, 0.00200))]})]
    once = [_record("0.1.14", {"a": [_batch(rel=(0.00609, 0.00270))]})]
    thrice = [
        _record("0.1.14", {"a": [_batch(rel=(0.00609, 0.00270))]}, run_id=f"c{i}") for i in range(3)
    ]
    (one,) = compare_kernel_records(base, once).verdicts
    (three,) = compare_kernel_records(base, thrice).verdicts
    assert one.verdict is Verdict.SAME
    assert three.verdict is Verdict.SAME
    assert (three.delta_rel_err, three.noise_rel_err) == pytest.approx(
        (one.delta_rel_err, one.noise_rel_err), rel=1e-12
    )
    assert three.candidate is not None
    assert three.candidate.rel_err == pytest.approx((0.00609, 0.00270), rel=1e-12)
    # Runs of another seed are other inputs: their draws add to the count.
    other = _record("0.1.14", {"a": [_batch(rel=(0.00612, 0.00268))]}, run_id="s1")
    other["settings"]["seed"] = 1
    (more,) = compare_kernel_records(base, [*once, other]).verdicts
    assert more.candidate is not None
    assert more.candidate.rel_err == (0.00609, 0.00270, 0.00612, 0.00268)


def test_different_inputs_are_incomparable() -> None:
    base = _record("0.1.5", {"a": [_batch()]})
    cand = _record("0.1.6", {"a": [_batch(input_sha256="other")]})
    (v,) = compare_kernel_records([base], [cand]).verdicts
    assert v.verdict is Verdict.INCOMPARABLE


def test_compare_reads_record_files_and_writes_json(tmp_path: Path) -> None:
    b = write_record(tmp_path / "b", _record("0.1.5", {"a": [_batch()]}))
    c = write_record(tmp_path / "c", _record("0.1.6", {"a": [_batch(rel=(1.0, 1.0, 1.0))]}))
    cmp = compare_kernel_records([b], [c])
    data = json.loads(json.dumps(cmp.to_json()))
    assert data["regression"] is True
    assert data["exit_code"] == 1
    assert data["verdicts"][0]["verdict"] == "worse"
    assert data["verdicts"][0]["candidate"]["state"] == "fail"


def test_a_gsm8k_record_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gsm8k.json"
    path.write_text(json.dumps({"schema_version": 1, "kind": "gsm8k"}))
    with pytest.raises(RecordError, match=r"gsm8k\.json: kind: expected 'kernels', got 'gsm8k'"):
        compare_kernel_records([path], [path])
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "kind": "kernels",
                "run_id": "x",
                "environment": {},
                "cases": [{"name": "a", "state": "weird", "batches": []}],
            }
        )
    )
    with pytest.raises(
        RecordError, match=r"bad\.json: cases\[0\]\.state: invalid enum value 'weird'$"
    ):
        load_kernel_record(bad)


def test_an_erratic_out_of_tolerance_candidate_cannot_hide_behind_its_spread() -> None:
    # Seen on the H200 (GPTQ at m=2048 with humming 0.1.12): two draws 0.13 and 0.05, so wide
    # that the spread-based noise alone (0.13) would swallow the 0.09 increase.
    base = _record("0.1.11", {"a": [_batch(rel=(2.2e-3, 2.2e-3))]})
    cand = _record("0.1.12", {"a": [_batch(rel=(0.134, 0.049))]})
    (v,) = compare_kernel_records([base], [cand]).verdicts
    assert v.noise_rel_err is not None
    assert v.delta_rel_err is not None
    assert v.noise_rel_err > v.delta_rel_err
    assert v.verdict is Verdict.WORSE
    assert v.note == "out of tolerance; the baseline was within it"


def test_a_move_between_two_out_of_tolerance_sides_names_both_states() -> None:
    # 0.1.10 -> 0.1.11's FP8-channel gate/up at 2048 tokens: out of tolerance on both sides, the
    # error down on every draw. `improved` alone would read as a repair in a table of verdicts.
    base = _record("0.1.10", {"a": [_batch(rel=(0.4, 0.41))]})
    cand = _record("0.1.11", {"a": [_batch(rel=(0.2, 0.21))]})
    (v,) = compare_kernel_records([base], [cand]).verdicts
    assert (v.verdict, v.note) == (Verdict.IMPROVED, "fail on both sides")
    (back,) = compare_kernel_records([cand], [base]).verdicts
    assert (back.verdict, back.note) == (Verdict.WORSE, "fail on both sides")


def test_a_flip_between_out_of_tolerance_and_nondeterministic_is_changed_never_hidden() -> None:
    # 0.1.19 -> 0.1.20, gpt-oss's MXFP4 MoE gate/up with FP8 activations at 4 tokens: out of
    # tolerance before; within it now but not bit-identical on relaunch. The mean error did not
    # move and neither side's bytes count, so the numbers alone said `same`, and no table
    # showed the case. Either way round it is `changed` with both states, never failing: a
    # nondeterministic layer near the bound flips between runs.
    failing = _record("0.1.19", {"a": [_batch(worst_row_rel_err=[0.2] * 3)]})
    erratic = _record("0.1.20", {"a": [_batch(deterministic=[True, False, True])]})
    (v,) = compare_kernel_records([failing], [erratic]).verdicts
    assert (v.verdict, v.note) == (Verdict.CHANGED, "fail before, nondeterministic now")
    (back,) = compare_kernel_records([erratic], [failing]).verdicts
    assert (back.verdict, back.note) == (
        Verdict.CHANGED,
        "nondeterministic before, fail now; worst channel moved: rel. error +0 (toward the "
        "reference), worst channel +0.2",
    )
    assert compare_kernel_records([erratic], [failing]).exit_code == 0
    # `compare` prints the note beside the verdict: the rows' errors alone are equal.
    assert (
        "| a | 64 | changed | 2.00e-03 -> 2.00e-03 | 2.00e-01 -> 4.00e-03 | 1 -> 1 | same"
        " (1.000x the time, one run a side) | fail before, nondeterministic now |"
    ) in compare_kernel_records([failing], [erratic]).to_markdown().splitlines()
    # A side pooled from a failing run and a nondeterministic one is out of tolerance: `fail`
    # outranks `nondeterministic`, so the failing run is not hidden.
    again = _record("0.1.20", {"a": [_batch(worst_row_rel_err=[0.2] * 3)]}, run_id="r2")
    (pooled,) = compare_kernel_records([failing], [erratic, again]).verdicts
    assert pooled.candidate is not None
    assert pooled.candidate.state is CaseState.FAIL
    assert (pooled.verdict, pooled.note) == (Verdict.SAME, "")
    (fixed,) = compare_kernel_records(
        [erratic, again], [_record("0.1.21", {"a": [_batch()]})]
    ).verdicts
    assert (fixed.verdict, fixed.note) == (Verdict.FIXED, "fail before, within tolerance now")


def test_an_error_turning_into_out_of_tolerance_numbers_is_still_broken_not_fixed() -> None:
    base = _record("0.1.0", {"a": [{"m": 64, "error": "AssertionError"}]})
    cand = _record("0.1.12", {"a": [_batch(rel=(1.0, 1.0))]})
    (v,) = compare_kernel_records([base], [cand]).verdicts
    assert v.verdict is Verdict.STILL_BROKEN


def test_an_error_turning_into_numbers_within_tolerance_but_not_bit_identical_is_changed() -> None:
    # 0.1.9 -> 0.1.10's int8-activation q/k/v at 1 - 128 tokens: a compile error before, within
    # tolerance on every draw now but not bit-identical on relaunch. Neither fixed nor still
    # broken: `changed`, both states named, failing no gate.
    base = _record("0.1.9", {"a": [{"m": 64, "error": "RuntimeError: NVRTCCompiler run failed"}]})
    cand = _record("0.1.10", {"a": [_batch(deterministic=[True, False, True])]})
    cmp = compare_kernel_records([base], [cand])
    (v,) = cmp.verdicts
    assert (v.verdict, v.note) == (Verdict.CHANGED, "error before, nondeterministic now")
    assert cmp.exit_code == 0
    # A hang in one of two pooled runs says so.
    hung = _record("0.1.9", {"a": "hang"}, run_id="r2")
    fine = _record("0.1.9", {"a": [_batch()]}, run_id="r3")
    (v,) = compare_kernel_records([hung, fine], [cand]).verdicts
    assert (v.verdict, v.note) == (
        Verdict.CHANGED,
        "hang in 1 of 2 runs before, nondeterministic now",
    )


def test_different_output_bytes_on_the_same_inputs_are_changed_with_size_and_direction() -> None:
    base = _record("0.1.5", {"a": [_batch(sha256="out-1", deterministic=[True] * 3)]})
    same = _record("0.1.6", {"a": [_batch(sha256="out-1", deterministic=[True] * 3)]})
    moved = _record(
        "0.1.7",
        {"a": [_batch(rel=(2.1e-3, 2.3e-3, 1.9e-3), sha256="out-2", deterministic=[True] * 3)]},
    )
    (v,) = compare_kernel_records([base], [same]).verdicts
    assert v.verdict is Verdict.SAME
    cmp = compare_kernel_records([base], [moved])
    (w,) = cmp.verdicts
    assert w.verdict is Verdict.CHANGED
    assert w.note == (
        "output bytes differ: rel. error +0.0001 (away from the reference), worst channel +0"
    )
    assert cmp.exit_code == 0  # changed is shown, never failing


def test_output_bytes_say_nothing_when_a_side_is_not_bit_identical_on_relaunch() -> None:
    base = _record("0.1.5", {"a": [_batch(sha256="out-1", deterministic=[True, False, True])]})
    cand = _record("0.1.6", {"a": [_batch(sha256="out-2", deterministic=[True, False, True])]})
    (v,) = compare_kernel_records([base], [cand]).verdicts
    # Nondeterministic on both sides (each a failure of its own): judged by the errors alone,
    # not `changed` for bytes that differ between launches anyway.
    assert v.verdict is Verdict.SAME


def test_within_tolerance_after_out_of_it_is_fixed_and_a_nondeterministic_candidate_worse() -> None:
    failing = _record("0.1.5", {"a": [_batch(worst_row_rel_err=[0.2] * 3)]})
    good = _record("0.1.6", {"a": [_batch()]})
    (v,) = compare_kernel_records([failing], [good]).verdicts
    assert (v.verdict, v.note) == (Verdict.FIXED, "fail before, within tolerance now")
    flaky = _record("0.1.7", {"a": [_batch(deterministic=[True, False, True])]})
    cmp = compare_kernel_records([good], [flaky])
    (w,) = cmp.verdicts
    assert (w.verdict, w.note) == (Verdict.WORSE, "nondeterministic; the baseline was not")
    assert cmp.exit_code == 1


def test_a_changed_kernel_config_is_named() -> None:
    base = _record("0.1.5", {"a": [_batch(kernel_config={"block_shape": "[64, 128, 64]"})]})
    cand = _record("0.1.6", {"a": [_batch(kernel_config={"block_shape": "[128, 128, 64]"})]})
    (v,) = compare_kernel_records([base], [cand]).verdicts
    assert v.note == (
        'kernel config {"block_shape": "[64, 128, 64]"} -> {"block_shape": "[128, 128, 64]"}'
    )


@pytest.mark.parametrize(
    "values",
    [
        [1.0, 2.0, 3.0, 4.0],  # 5/3
        [0.0123, 0.0125, 0.0119, 0.0131, 0.0122, 0.0127],
        [1e-3 + i * 1e-12 for i in range(12)],  # tiny spread on a large mean: cancellation
        [math.log(m) for m in (0.0418, 0.0423, 0.0419)],
    ],
)
def test_the_float_variance_agrees_with_the_exact_one_in_statistics(values: list[float]) -> None:
    # The judge's noise bounds use a float variance (statistics.variance, exact in Fractions,
    # was most of a table's time); held to the stdlib's correctly rounded result.
    assert _sample_variance(values) == pytest.approx(statistics.variance(values), rel=1e-12)


def test_retiled_kernels_within_the_floor_are_never_worse_in_simulation() -> None:
    # A retile moves each draw's relative error by 4e-5 - 6.8e-4 (gen4, 0.1.17 -> 0.1.18's 28
    # `changed`), below the bf16 floor (1.6e-3 here). 2000 simulated bumps of two or three draws,
    # each draw moved by up to +-7e-4 around a baseline spread like the records', through the
    # public API: none is `worse` or `improved`, by the paired rule or the 3-sigma one.
    rng = random.Random(0)
    verdicts: Counter[Verdict] = Counter()
    for trial in range(2000):
        draws = 2 + trial % 2
        base_rel = tuple(rng.uniform(1.7e-3, 3.5e-3) for _ in range(draws))
        cand_rel = tuple(e + rng.uniform(-7e-4, 7e-4) for e in base_rel)
        base = _record("0.1.17", {"a": [_batch(rel=base_rel)]})
        cand = _record("0.1.18", {"a": [_batch(rel=cand_rel)]})
        (v,) = compare_kernel_records([base], [cand]).verdicts
        verdicts[v.verdict] += 1
    assert verdicts == Counter({Verdict.SAME: 2000})
    # The last bump again, each draw moved by 1.7e-3 instead (beyond the floor): `worse`.
    worse = _record("0.1.18", {"a": [_batch(rel=tuple(e + 1.7e-3 for e in base_rel))]})
    (v,) = compare_kernel_records([base], [worse]).verdicts
    assert v.verdict is Verdict.WORSE


def test_sides_that_compiled_different_dense_kernels_are_warned_of() -> None:
    whole = _record("0.1.16", {"a": "error"})
    used = _record("0.1.17", {"a": [_batch()]})
    used["settings"]["compile"] = "used"
    comparison = compare_kernel_records([whole], [used])
    (verdict,) = comparison.verdicts
    assert verdict.verdict is Verdict.FIXED
    assert comparison.warnings == (
        "the sides compiled different dense kernels (baseline: all, candidate: used; "
        "`kernels --compile`): a dense case broken on one side alone may be a kernel the other "
        "never built",
    )
    assert comparison.to_markdown().endswith(f"\n> {comparison.warnings[0]}\n")
    # Records from before `--compile` compiled every kernel: no warning beside an "all" run.
    whole_too = _record("0.1.17", {"a": [_batch()]})
    whole_too["settings"]["compile"] = "all"
    assert compare_kernel_records([whole], [whole_too]).warnings == ()
    del whole["settings"]["compile"]
    assert compare_kernel_records([whole], [whole_too]).warnings == ()
