"""Pairing, refusals, the verdict rule and the noise floor, on records built in the test (the
integration tests judge records from real runs)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from scipy import stats as sp

from humming_matrix.cli import main
from humming_matrix.errors import RecordError, UsageError
from humming_matrix.judge.compare import (
    FlipDirection,
    LoadedRecord,
    RunEnvironment,
    Settings,
    Verdict,
    compare_locations,
    compare_records,
    decide,
)
from humming_matrix.judge.stats import PairedTable, paired_difference_interval, wilson_interval
from humming_matrix.store.results import (
    ConfigInfo,
    Gsm8kRecord,
    Metrics,
    QuestionOutcome,
    write_record,
)

LABELS = [10 + i for i in range(400)]
_counter = iter(range(10_000))


def make_record(
    wrong: Iterable[int] = (),
    *,
    n: int = 40,
    version: str = "0.1.6",
    config: str = "cfg",
    sha: str = "a" * 64,
    complete: bool = True,
    threshold: float = 0.5,
    tolerance: float = 0.08,
    errors: Iterable[int] = (),
    indices: Sequence[int] | None = None,
    created: str | None = None,
    session: str | None = None,
    labels: Sequence[int] = LABELS,
) -> Gsm8kRecord:
    """A record whose questions are right except `wrong` (answered label + 1) and `errors`
    (request failed). Run ids and creation times increase with every call."""
    wrong, errors = set(wrong), set(errors)
    serial = next(_counter)
    questions = []
    for i in indices if indices is not None else range(n):
        if i in errors:
            questions.append(QuestionOutcome(i, False, None, labels[i], "HTTP 500", ""))
        else:
            ok = i not in wrong
            questions.append(QuestionOutcome(i, ok, labels[i] + (0 if ok else 1), labels[i]))
    correct = sum(q.correct for q in questions)
    accuracy = correct / len(questions) if questions else 0.0
    return Gsm8kRecord(
        run_id=f"20261202T1000{serial:04d}Z-test-{serial:06x}",
        created=created or f"2026-12-02T10:{serial // 60 % 60:02d}:{serial % 60:02d}+00:00",
        complete=complete,
        config=ConfigInfo(
            config, f"/configs/{config}.yaml", sha, {"accuracy_threshold": threshold}
        ),
        environment={
            "humming_kernels": version,
            "vllm": "0.24.0",
            "torch": "2.11.0",
            "session": session,
            "packages": {"humming-kernels": version},
        },
        metrics=Metrics(
            accuracy,
            0.0,
            len(errors),
            len(questions),
            threshold,
            tolerance,
            complete and accuracy >= threshold - tolerance,
            12.5,
        ),
        questions=tuple(questions),
    )


def loaded(record: Gsm8kRecord, path: str = "rec.json") -> LoadedRecord:
    return LoadedRecord(Path(path), record)


SETTINGS = Settings()


@pytest.mark.parametrize(
    ("b", "c", "n", "min_effect", "verdict"),
    [
        (5, 0, 500, 0.01, Verdict.REGRESSION),  # exactly one point, exact p 1/32 < 0.05
        # one point, mid-p 1/32 < 0.05 but the gated exact p is 1/16: mid-p's size exceeds alpha
        (4, 0, 400, 0.01, Verdict.INCONCLUSIVE),
        (3, 0, 300, 0.01, Verdict.INCONCLUSIVE),  # one point but exact p 1/8
        (5, 0, 1000, 0.01, Verdict.NO_CHANGE),  # significant (1/64) but half a point
        (0, 5, 500, 0.01, Verdict.IMPROVEMENT),
        (0, 4, 400, 0.01, Verdict.INCONCLUSIVE),
        (0, 3, 300, 0.01, Verdict.INCONCLUSIVE),
        (0, 0, 40, 0.01, Verdict.NO_CHANGE),
        (20, 20, 40, 0.01, Verdict.NO_CHANGE),
        (40, 0, 40, 0.01, Verdict.REGRESSION),  # all discordant
        (1, 0, 40, 0.0, Verdict.INCONCLUSIVE),  # min effect 0: any drop counts, p is 0.25
        (12, 4, 200, 0.05, Verdict.NO_CHANGE),  # a 4-point drop, below a 5-point min effect
    ],
)
def test_verdict_rule(b: int, c: int, n: int, min_effect: float, verdict: Verdict) -> None:
    table = PairedTable(n - b - c, b, c, 0)
    assert decide(table, Settings(min_effect=min_effect)) is verdict


def test_pairs_question_by_question() -> None:
    base = make_record(wrong=[0, 1, 2])
    cand = make_record(wrong=[0, 5, 6, 7, 9])
    result = compare_records(loaded(base, "base.json"), loaded(cand, "cand.json"), SETTINGS)
    t = result.table
    assert (t.both_right, t.right_to_wrong, t.wrong_to_right, t.both_wrong) == (33, 4, 2, 1)
    assert [(f.index, f.direction) for f in result.flips] == [
        (1, FlipDirection.WRONG_TO_RIGHT),
        (2, FlipDirection.WRONG_TO_RIGHT),
        (5, FlipDirection.RIGHT_TO_WRONG),
        (6, FlipDirection.RIGHT_TO_WRONG),
        (7, FlipDirection.RIGHT_TO_WRONG),
        (9, FlipDirection.RIGHT_TO_WRONG),
    ]
    flip5 = result.flips[2]
    assert (flip5.label, flip5.baseline_prediction, flip5.candidate_prediction) == (15, 15, 16)
    assert result.baseline.accuracy == 37 / 40
    assert result.candidate.accuracy == 35 / 40
    assert result.baseline.interval == wilson_interval(37, 40)
    assert result.difference == -2 / 40
    assert result.difference_interval == paired_difference_interval(t)
    expected_p = sp.binomtest(4, 6, 0.5, alternative="greater").pvalue - 0.5 * sp.binom.pmf(
        4, 6, 0.5
    )
    assert result.p_regression == pytest.approx(expected_p)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert not result.gate_failed


def test_request_errors_are_left_out_of_the_pairing() -> None:
    base = make_record(wrong=[3], errors=[1])
    cand = make_record(wrong=[4, 5], errors=[2])
    result = compare_records(loaded(base), loaded(cand), SETTINGS)
    assert result.excluded_errors == 2
    assert result.table.n == 38
    assert (result.table.right_to_wrong, result.table.wrong_to_right) == (2, 1)


def test_regression_fails_the_gate_and_the_line_says_why() -> None:
    base = make_record(n=200)
    cand = make_record(wrong=range(10), n=200)
    result = compare_records(loaded(base), loaded(cand), SETTINGS)
    assert result.verdict is Verdict.REGRESSION
    assert result.gate_failed
    assert result.line() == (
        "cfg: regression: 1.0000 -> 0.9500 (-5.00 points, 95% CI "
        f"[{100 * result.difference_interval.low:+.2f}, "
        f"{100 * result.difference_interval.high:+.2f}]) on 200 paired questions; b=10 c=0; "
        f"mid-p(worse) {0.5**11:.3g}, gated p (exact) {0.5**10:.3g} vs alpha 0.05; min effect "
        "1, verdict MDE "
        f"{100 * result.mde:.2f} points at 0% discordance (2 min(b, c)/n)"  # type: ignore[operator]
    )


def test_below_threshold_fails_the_gate_without_a_regression() -> None:
    base = make_record(wrong=range(20), threshold=0.9)
    cand = make_record(wrong=range(20), threshold=0.9)
    result = compare_records(loaded(base), loaded(cand), SETTINGS)
    assert result.verdict is Verdict.NO_CHANGE
    assert result.gate_failed
    assert result.line().endswith("; below threshold: 0.5000 < 0.9 - 0.08")


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_refuses_incomplete_records(side: str) -> None:
    good, partial = make_record(), make_record(complete=False)
    pair = (good, partial) if side == "candidate" else (partial, good)
    with pytest.raises(RecordError) as err:
        compare_records(loaded(pair[0], "b.json"), loaded(pair[1], "c.json"), SETTINGS)
    assert err.value.key == "complete"
    assert err.value.path == Path("c.json" if side == "candidate" else "b.json")
    assert str(err.value) == (
        f"{err.value.path}: complete: record {partial.run_id} of config cfg is incomplete (the "
        "run stopped early; finish it with `humming-matrix run --resume`); compare refuses "
        "incomplete records"
    )


def test_refuses_different_configs() -> None:
    with pytest.raises(RecordError, match=r"c\.json: config\.sha256: config cfg differs"):
        compare_records(
            loaded(make_record(), "b.json"), loaded(make_record(sha="b" * 64), "c.json"), SETTINGS
        )


def test_refuses_different_question_sets() -> None:
    with pytest.raises(
        RecordError,
        match=r"c\.json: questions: question set differs .*"
        r"\(30 questions, 0\.\.29 vs 40 questions, 0\.\.39\)",
    ):
        compare_records(
            loaded(make_record(), "b.json"), loaded(make_record(n=30), "c.json"), SETTINGS
        )
    with pytest.raises(
        RecordError,
        match=re.escape(
            "rec.json: questions: question set differs from the baseline's in rec.json (40 "
            "questions, 1..40 vs 40 questions, 0..39): run both with the same --limit"
        ),
    ):
        compare_records(loaded(make_record()), loaded(make_record(indices=range(1, 41))), SETTINGS)


def test_refuses_different_labels() -> None:
    other = list(LABELS)
    other[7] = 999
    with pytest.raises(RecordError, match=r"questions\[7\]\.label: question 7 has label 999"):
        compare_records(loaded(make_record()), loaded(make_record(labels=other)), SETTINGS)


def test_settings_are_validated() -> None:
    with pytest.raises(UsageError, match=r"^--alpha must be in \(0, 0\.5\), got 0\.5$"):
        Settings(alpha=0.5)
    with pytest.raises(UsageError, match=r"^--min-effect must be in \[0, 1\), got -0\.1$"):
        Settings(min_effect=-0.1)


def store(directory: Path, *records: Gsm8kRecord) -> Path:
    for r in records:
        write_record(directory, r)
    return directory


def test_locations_pair_by_config_and_take_the_newest(tmp_path: Path) -> None:
    base = store(
        tmp_path / "base",
        make_record(wrong=[1], config="x"),
        make_record(wrong=[2], config="x"),
        make_record(config="y"),
    )
    cand = store(
        tmp_path / "cand",
        make_record(wrong=[2, 3], config="x"),
        make_record(config="y", wrong=range(10)),
    )
    result = compare_locations(base, cand, SETTINGS)
    assert [c.config for c in result.configs] == ["x", "y"]
    x, y = result.configs
    assert (x.table.right_to_wrong, x.table.wrong_to_right) == (1, 0)  # vs the newer wrong=[2]
    assert (y.table.right_to_wrong, y.verdict) == (10, Verdict.REGRESSION)
    assert result.gate_failed


def test_a_config_missing_on_one_side_is_refused(tmp_path: Path) -> None:
    base = store(tmp_path / "base", make_record(config="x"), make_record(config="y"))
    cand = store(tmp_path / "cand", make_record(config="x"))
    with pytest.raises(RecordError, match=r"cand: config y: no record of this config"):
        compare_locations(base, cand, SETTINGS)


def test_a_side_with_two_environments_is_refused(tmp_path: Path) -> None:
    base = store(tmp_path / "base", make_record(version="0.1.6"), make_record(version="0.1.7"))
    cand = store(tmp_path / "cand", make_record(version="0.1.10"))
    with pytest.raises(RecordError, match=r"base: config cfg: records from 2 environments"):
        compare_locations(base, cand, SETTINGS)


def test_the_record_of_a_config_is_the_newest_complete_one(tmp_path: Path) -> None:
    """One lookup policy (`compare.the_record`, also the report's): complete records only; a
    newer run that stopped early does not hide an older complete one."""
    older = make_record(wrong=[7])
    partial = make_record(complete=False)  # made second: the newer run
    base = store(tmp_path / "base", older, partial)
    cand = store(tmp_path / "cand", make_record(version="0.1.10"))
    [config] = compare_locations(base, cand, SETTINGS).configs
    assert config.baseline.run_id == older.run_id
    assert (config.table.right_to_wrong, config.table.wrong_to_right) == (0, 1)


def test_a_side_with_only_an_incomplete_record_is_refused(tmp_path: Path) -> None:
    partial = make_record(complete=False)
    base = store(tmp_path / "base", partial)
    cand = store(tmp_path / "cand", make_record(version="0.1.10"))
    with pytest.raises(RecordError) as refused:
        compare_locations(base, cand, SETTINGS)
    assert str(refused.value) == (
        f"{base}/gsm8k__cfg__0.1.6__{partial.run_id}.json: complete: record {partial.run_id} of "
        "config cfg is incomplete (the run stopped early; finish it with `humming-matrix run "
        "--resume`); compare refuses incomplete records"
    )


def test_calibration_comes_from_an_a_a_pair_within_one_side(tmp_path: Path) -> None:
    base = store(tmp_path / "base", make_record(wrong=[1, 2]), make_record(wrong=[1, 3]))
    cand = store(tmp_path / "cand", make_record(version="0.1.10", wrong=[1, 3, 4, 5, 6, 7]))
    [result] = compare_locations(base, cand, SETTINGS).configs
    noise = result.noise
    assert noise is not None
    assert (noise.calibration.discordant, noise.calibration.n) == (2, 40)
    assert noise.expected_right_to_wrong == pytest.approx(40 * (2 / 40) / 2)
    # b = 4 right->wrong when noise flips each question right->wrong with probability 1/40.
    assert noise.p_beyond_noise == pytest.approx(sp.binom.sf(3, 40, 1 / 40), rel=1e-9)
    assert noise.discordance_ratio == pytest.approx((4 / 40) / (2 / 40))


def test_no_calibration_across_sides_even_when_environments_match(tmp_path: Path) -> None:
    base = store(tmp_path / "base", make_record(wrong=[1]))
    cand = store(tmp_path / "cand", make_record(wrong=[2]))
    [result] = compare_locations(base, cand, SETTINGS).configs
    assert result.noise is None
    extra = store(tmp_path / "aa", make_record(wrong=[1]), make_record(wrong=[1]))
    [result] = compare_locations(base, cand, SETTINGS, [extra]).configs
    assert result.noise is not None
    assert result.noise.calibration.discordant == 0
    assert result.noise.discordance_ratio is None


def test_cell_label() -> None:
    cell = RunEnvironment("0.1.6", "0.24.0", "2.11.0", "12.8", "NVIDIA H200")
    assert cell.label == "humming-kernels 0.1.6, vllm 0.24.0, torch 2.11.0 (CUDA 12.8), NVIDIA H200"


# --- the command line ------------------------------------------------------------------------


def scipy_wilson(k: int, n: int) -> str:
    """The 95% Wilson interval as the reports print it, computed by scipy."""
    ci = sp.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return f"[{100 * ci.low:.2f}, {100 * ci.high:.2f}]"


def test_cli_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = store(tmp_path / "base", make_record(n=200))
    cand = store(
        tmp_path / "cand", make_record(n=200, wrong=[3, 9, 27, 81, 100, 150], version="0.1.10")
    )
    out = tmp_path / "out" / "cmp.json"
    md = tmp_path / "out" / "cmp.md"
    assert main(["compare", str(base), str(cand), "--json", str(out), "--markdown", str(md)]) == 1
    text = capsys.readouterr().out
    assert "cfg: REGRESSION  [GATE FAILED]" in text
    assert "b=6 right->wrong, c=0 wrong->right" in text
    assert text.endswith("\ngate failed for 1 of 1 config\n")
    data = json.loads(out.read_text())
    [entry] = data["configs"]
    assert (entry["b"], entry["c"], entry["verdict"]) == (6, 0, "regression")
    assert [f["index"] for f in entry["flips"]] == [3, 9, 27, 81, 100, 150]
    assert entry["flips"][0] == {
        "index": 3,
        "label": 13,
        "baseline_prediction": 13,
        "candidate_prediction": 14,
        "direction": "right->wrong",
    }
    assert entry["midp_regression"] == 0.5**7
    assert data["gate_failed"] is True
    assert f"| cfg | 100.00 {scipy_wilson(200, 200)} | 97.00 {scipy_wilson(194, 200)} |" in (
        md.read_text()
    )
    assert "**FAIL**: the gate fails for 1 of 1 config (regression: " in md.read_text()
    # With a larger minimum effect, the same data no longer fails.
    assert main(["compare", str(base), str(cand), "--min-effect", "0.05"]) == 0
    text = capsys.readouterr().out
    assert "cfg: NO CHANGE" in text
    assert text.endswith("\nno regression in 1 config\n")


def test_cli_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = store(tmp_path / "base", make_record())
    cand = store(tmp_path / "cand", make_record(sha="c" * 64))
    assert main(["compare", str(base), str(cand)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"humming-matrix: error: {cand}/gsm8k__cfg__0.1.6__")
    assert ": config.sha256: config cfg differs from the baseline's" in err
    assert main(["compare", str(base), str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == (
        f"humming-matrix: error: {tmp_path / 'nowhere'}: no such file or directory\n"
    )
    assert main(["compare", str(base), str(cand), "--alpha", "0.7"]) == 2
    assert "--alpha must be in (0, 0.5), got 0.7" in capsys.readouterr().err


def kernel_record(run_id: str, version: str, state: str) -> dict[str, object]:
    return {
        "schema_version": 1,
        "kind": "kernels",
        "run_id": run_id,
        "created": "2026-12-02",
        "complete": True,
        "environment": {"humming_kernels": version},
        "cases": [
            {"name": "w4a16-4096x4096", "state": state, "batches": [{"m": 1, "state": state}]}
        ],
    }


def test_cli_sends_kernel_records_to_the_kernel_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = tmp_path / "base", tmp_path / "cand"
    base.mkdir()
    cand.mkdir()
    (base / "kernels__suite__0.1.6__r1.json").write_text(
        json.dumps(kernel_record("r1", "0.1.6", "ok"))
    )
    (cand / "kernels__suite__0.1.10__r2.json").write_text(
        json.dumps(kernel_record("r2", "0.1.10", "crash"))
    )
    out = tmp_path / "k.json"
    assert main(["compare", str(base), str(cand), "--json", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "## Kernel tier: humming 0.1.10 vs 0.1.6: REGRESSION"
    row = (
        "| w4a16-4096x4096 | 1 | newly-broken | - -> crash | - -> crash | - -> - | unknown"
        " | crash |"
    )
    assert row in lines
    data = json.loads(out.read_text())
    assert (data["kind"], data["regression"], data["exit_code"]) == ("kernels", True, 1)
    assert [
        (v["case"], v["m"], v["verdict"], v["candidate"]["state"]) for v in data["verdicts"]
    ] == [("w4a16-4096x4096", 1, "newly-broken", "crash")]


def test_cli_refuses_to_pair_gsm8k_with_kernel_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = store(tmp_path / "base", make_record())
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "kernels__suite__0.1.10__r2.json").write_text(
        json.dumps(kernel_record("r2", "0.1.10", "ok"))
    )
    assert main(["compare", str(base), str(cand)]) == 2
    assert capsys.readouterr().err == (
        f"humming-matrix: error: nothing to pair: {base} holds gsm8k records and {cand} holds "
        "kernels records\n"
    )


def test_compare_help_has_single_percent_signs(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse does not %-format a description: a "%%" there reached the user doubled."""
    with pytest.raises(SystemExit) as done:
        main(["compare", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "accuracies with 95% Wilson intervals" in text
    assert "%%" not in text
