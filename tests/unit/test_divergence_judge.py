"""The divergence judge: the sign test against the A/A floor, Holm over the family, refusals, and
its error rates shown by simulation through `compare_divergence`."""

from __future__ import annotations

import math
import random
import subprocess
import sys
from array import array
from pathlib import Path

import pytest
from scipy.stats import binomtest

from humming_matrix.cli import main
from humming_matrix.divergence import metrics as divergence_metrics
from humming_matrix.divergence.judge import Metric, Verdict, compare_divergence, sign_test
from humming_matrix.divergence.record import (
    AnswerLogprobs,
    DivergenceRecord,
    write_divergence_record,
)
from humming_matrix.divergence.render import comparison_junit
from humming_matrix.divergence.store_report import build_divergence_report
from humming_matrix.errors import RecordError, UsageError
from humming_matrix.store.results import ConfigInfo

REPO = Path(__file__).resolve().parents[2]
VOCAB, K, TOKENS = 16, 4, 5


def logits_for(question: int, position: int) -> list[float]:
    rng = random.Random(question * 1009 + position)
    return [rng.gauss(0.0, 2.0) for _ in range(VOCAB)]


def make_record(
    run: str,
    humming: str,
    rng: random.Random,
    *,
    jitter: float,
    shift: float = 0.0,
    questions: int = 30,
    complete: bool = True,
    tokens_offset: int = 0,
    created: str = "2026-12-03T10:00:00+00:00",
) -> DivergenceRecord:
    """A pass of a toy model: fixed logits per (question, position), plus a fixed `shift`
    (seeded apart from the run: a changed kernel) and fresh `jitter` (the run's own noise)."""
    answers = []
    for q in range(questions):
        a = AnswerLogprobs(q, None, 40, array("i"), array("f"), array("i"), array("f"))
        for t in range(TOKENS):
            shifted = random.Random(10_000 + q * 31 + t)
            logits = [
                x + shift * shifted.gauss(0, 1) + jitter * rng.gauss(0, 1) for x in logits_for(q, t)
            ]
            top = max(logits)
            norm = top + math.log(sum(math.exp(x - top) for x in logits))
            lps = [x - norm for x in logits]
            order = sorted(range(VOCAB), key=lambda v: (-lps[v], v))[:K]
            forced = (q + t) % VOCAB
            a.tokens.append(forced + tokens_offset)
            a.logprobs.append(lps[forced])
            a.top_ids.extend(order)
            a.top_logprobs.extend(lps[v] for v in order)
        answers.append(a)
    return DivergenceRecord(
        run_id=run,
        created=created,
        complete=complete,
        config=ConfigInfo("toy", "toy.yaml", "c0ffee", {}),
        environment={"humming_kernels": humming, "vllm": "0.32.0"},
        top_k=K,
        questions=tuple(answers),
    )


def write(store: Path, record: DivergenceRecord) -> Path:
    return write_divergence_record(store, record)


def test_sign_test_matches_the_binomial_worked_example_and_scipy() -> None:
    """9 of 10 untied questions above the floor: P(X >= 9 | Bin(10, 1/2)) = 11/1024 (the
    textbook sign test; R's binom.test(9, 10, alternative = "greater") prints 0.01074)."""
    above, below, ties, p = sign_test([0.1] * 9 + [-0.2] + [0.0] * 3)
    assert (above, below, ties) == (9, 1, 3)
    assert p == pytest.approx(11 / 1024, rel=1e-12)
    for a, b in [(0, 0), (3, 7), (15, 15), (40, 2), (120, 80)]:
        _, _, _, p = sign_test([1.0] * a + [-1.0] * b)
        expected = 1.0 if a + b == 0 else binomtest(a, a + b, 0.5, alternative="greater").pvalue
        assert p == pytest.approx(expected, rel=1e-9)


def test_a_repeat_of_the_baseline_is_same_and_a_shifted_kernel_diverged(tmp_path: Path) -> None:
    rng = random.Random(0)
    base = tmp_path / "base"
    write(base, make_record("r1", "0.1.6", rng, jitter=1e-3, created="2026-12-03T10:00:00+00:00"))
    write(base, make_record("r2", "0.1.6", rng, jitter=1e-3, created="2026-12-03T10:01:00+00:00"))
    again = write(tmp_path / "again", make_record("r3", "0.1.6", rng, jitter=1e-3))
    shifted = write(tmp_path / "shifted", make_record("r4", "0.1.7", rng, jitter=1e-3, shift=3e-3))

    same = compare_divergence(base, again)
    [config] = same.configs
    assert (config.verdict, same.diverged) == (Verdict.SAME, False)
    # The newest baseline record is the baseline; the other is its floor.
    assert (config.baseline.record.run_id, config.replicate.record.run_id) == ("r2", "r1")
    assert config.questions == 30

    diverged = compare_divergence(base, shifted)
    [config] = diverged.configs
    assert config.verdict is Verdict.DIVERGED
    kl = config.test(Metric.KL)
    assert (kl.above, kl.below, kl.ties) == (30, 0, 0)
    assert kl.p_value == pytest.approx(0.5**30)
    # Holm over three tests: the smallest p-value is multiplied by 3.
    assert kl.adjusted_p == pytest.approx(3 * 0.5**30)
    assert kl.candidate_mean > kl.floor_mean


def test_holm_runs_over_every_config_and_metric(tmp_path: Path) -> None:
    """Two configs, three metrics: a family of six tests."""
    rng = random.Random(1)
    for side, runs in (("base", ["a", "b"]), ("cand", ["c"])):
        for run in runs:
            for name in ("toy", "toy2"):
                r = make_record(
                    run + name,
                    "0.1.6" if side == "base" else "0.1.7",
                    rng,
                    jitter=1e-3,
                    shift=3e-3 if side == "cand" else 0.0,
                    created=f"2026-12-03T10:0{ord(run) - 97}:00+00:00",
                )
                r = DivergenceRecord(
                    r.run_id,
                    r.created,
                    r.complete,
                    ConfigInfo(name, f"{name}.yaml", "c0ffee", {}),
                    r.environment,
                    r.top_k,
                    r.questions,
                )
                write(tmp_path / side, r)
    comparison = compare_divergence(tmp_path / "base", tmp_path / "cand")
    tests = [t for c in comparison.configs for t in c.tests]
    assert len(tests) == 6
    smallest = min(tests, key=lambda t: t.p_value)
    assert smallest.adjusted_p == pytest.approx(min(1.0, 6 * smallest.p_value))
    assert [c.verdict for c in comparison.configs] == [Verdict.DIVERGED, Verdict.DIVERGED]


def test_the_family_error_rate_under_the_null_stays_below_alpha(tmp_path: Path) -> None:
    """200 A/A/A triples (baseline, replicate, candidate all the same version with their own
    jitter), judged through the public API: the share called diverged is at most alpha (0.05),
    allowing three binomial standard errors."""
    rng = random.Random(2024)
    false_alarms = 0
    runs = 200
    for i in range(runs):
        base = tmp_path / f"b{i}"
        write(
            base,
            make_record(
                f"b{i}a",
                "0.1.6",
                rng,
                jitter=1e-3,
                questions=20,
                created="2026-12-03T10:00:00+00:00",
            ),
        )
        write(
            base,
            make_record(
                f"b{i}b",
                "0.1.6",
                rng,
                jitter=1e-3,
                questions=20,
                created="2026-12-03T10:01:00+00:00",
            ),
        )
        cand = write(
            tmp_path / f"c{i}", make_record(f"c{i}", "0.1.6", rng, jitter=1e-3, questions=20)
        )
        false_alarms += compare_divergence(base, cand).diverged
    assert false_alarms / runs <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs)


def test_a_small_shift_is_found_with_power(tmp_path: Path) -> None:
    """A fixed shift twice the run-to-run jitter (the candidate's divergence from the baseline
    has three times the floor's variance), 20 questions: diverged in at least 95 of 100
    simulated comparisons. (At a shift equal to the jitter it is about 70 of 100.)"""
    rng = random.Random(7)
    hits = 0
    for i in range(100):
        base = tmp_path / f"b{i}"
        write(
            base,
            make_record(
                f"b{i}a",
                "0.1.6",
                rng,
                jitter=1e-3,
                questions=20,
                created="2026-12-03T10:00:00+00:00",
            ),
        )
        write(
            base,
            make_record(
                f"b{i}b",
                "0.1.6",
                rng,
                jitter=1e-3,
                questions=20,
                created="2026-12-03T10:01:00+00:00",
            ),
        )
        cand = write(
            tmp_path / f"c{i}",
            make_record(f"c{i}", "0.1.7", rng, jitter=1e-3, shift=2e-3, questions=20),
        )
        hits += compare_divergence(base, cand).diverged
    assert hits >= 95


def _bit_identical_floor(base: Path, rng: random.Random) -> None:
    for run, minute in (("r1", 0), ("r2", 1)):
        write(
            base,
            make_record(run, "0.1.6", rng, jitter=0.0, created=f"2026-12-03T10:0{minute}:00+00:00"),
        )


def test_rounding_common_to_a_whole_pass_ties_with_the_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI failure: the baseline's replicate bit-identical, an A/A candidate off by float32
    rounding in every question (a pass-wide effect, not independent per question). Without the
    snapping the sign test calls it diverged; with it every question ties at exactly 0."""
    rng = random.Random(5)
    base = tmp_path / "base"
    _bit_identical_floor(base, rng)
    cand = write(tmp_path / "cand", make_record("c", "0.1.6", rng, jitter=3e-7))
    same = compare_divergence(base, cand)
    [config] = same.configs
    assert config.verdict is Verdict.SAME
    assert [
        (t.candidate_mean, t.floor_mean, t.above, t.below, t.ties, t.p_value) for t in config.tests
    ] == [(0.0, 0.0, 0, 0, 30, 1.0)] * 3
    assert same.to_json()["rounding_ulps"] == 8

    monkeypatch.setattr(divergence_metrics, "ROUNDING_ULPS", 0)
    [unsnapped] = compare_divergence(base, cand).configs
    assert unsnapped.verdict is Verdict.DIVERGED
    # KL and NLL: every question moved (in 2 the forced tokens' float32 logprobs came out the
    # same), none below the floor.
    assert [(t.above, t.below) for t in unsnapped.tests[::2]] == [(30, 0), (28, 0)]


def test_a_change_beyond_rounding_is_still_found(tmp_path: Path) -> None:
    """Jitter of 1e-4 in the logits, a few hundred ulps of the logprobs: every question is
    above a bit-identical floor on KL and on NLL."""
    rng = random.Random(6)
    base = tmp_path / "base"
    _bit_identical_floor(base, rng)
    cand = write(tmp_path / "cand", make_record("c", "0.1.7", rng, jitter=1e-4))
    [config] = compare_divergence(base, cand).configs
    assert config.verdict is Verdict.DIVERGED
    kl, nll = config.test(Metric.KL), config.test(Metric.NLL)
    assert [(t.above, t.below, t.ties) for t in (kl, nll)] == [(30, 0, 0), (30, 0, 0)]


def test_within_rounding_counts_ulps_at_the_spacing_of_one_or_the_value() -> None:
    """8 float32 ulps apart is the same value, 9 is not; near 0 the spacing is that of 1.0."""
    one = 2.0**-23
    for base in (-1e-4, -0.5, -1.0):
        assert divergence_metrics.within_rounding(base, base - 8 * one)
        assert not divergence_metrics.within_rounding(base, base - 9 * one)
    for base in (-3.0, -17.25):
        spacing = one * abs(base)
        assert divergence_metrics.within_rounding(base, base + 8 * spacing)
        assert not divergence_metrics.within_rounding(base, base + 9 * spacing)


def test_snapping_keeps_a_top_k_token_the_baseline_did_not_list() -> None:
    """Only a token the baseline listed at that position can be snapped; a new one keeps its
    own logprob, and the forced token is snapped through either list."""
    base = AnswerLogprobs(
        0,
        None,
        3,
        array("i", [7]),
        array("f", [-2.0]),
        array("i", [1, 7]),
        array("f", [-0.2, -2.0]),
    )
    cand = AnswerLogprobs(
        0,
        None,
        3,
        array("i", [7]),
        array("f", [-2.0000002]),
        array("i", [1, 9]),
        array("f", [-0.2000001, -1.9999998]),
    )
    got = divergence_metrics.snapped(base, cand, 2, 2)
    assert list(got.logprobs) == list(array("f", [-2.0]))
    assert list(got.top_ids) == [1, 9]
    assert list(got.top_logprobs) == list(array("f", [-0.2, -1.9999998]))


def test_two_tokens_swapping_within_rounding_are_no_top1_disagreement() -> None:
    """Two near-tied tokens: swapped 1 ulp apart, the same top-1; swapped 100 ulps apart, a
    disagreement at the one position."""

    def answer(first: int, values: tuple[float, float]) -> AnswerLogprobs:
        # The forced token is 2 in every pass; the top-2 lists `first` first.
        second = 3 if first == 2 else 2
        forced = values[0] if first == 2 else values[1]
        return AnswerLogprobs(
            0,
            None,
            0,
            array("i", [2]),
            array("f", [forced]),
            array("i", [first, second]),
            array("f", values),
        )

    base = answer(2, (-0.75, -0.75))
    ulp = 2.0**-23
    within = answer(3, (-0.75 + ulp, -0.75))
    beyond = answer(3, (-0.75 + 100 * ulp, -0.75))
    assert divergence_metrics.question_divergence(base, within, 2, 2).top1_disagreement == 0.0
    assert divergence_metrics.question_divergence(base, beyond, 2, 2).top1_disagreement == 1.0


def test_refusals_name_the_file_and_the_key(tmp_path: Path) -> None:
    rng = random.Random(3)
    base = tmp_path / "base"
    first = write(base, make_record("r1", "0.1.6", rng, jitter=1e-3))
    other_tokens = write(
        tmp_path / "tok", make_record("t", "0.1.7", rng, jitter=1e-3, tokens_offset=1)
    )
    with pytest.raises(UsageError, match=r"config toy: no A/A floor for baseline .*r1.*--repeat 2"):
        compare_divergence(first, other_tokens)
    write(base, make_record("r2", "0.1.6", rng, jitter=1e-3, created="2026-12-03T10:01:00+00:00"))
    with pytest.raises(RecordError) as caught:
        compare_divergence(base, other_tokens)
    assert str(caught.value) == (
        f"{other_tokens}: questions[0].tokens: question 0 was tokenized differently from the "
        f"baseline's in {base / first.name.replace('r1', 'r2')}: different tokenizers cannot "
        "be compared token by token"
    )
    partial = write(
        tmp_path / "partial", make_record("p", "0.1.7", rng, jitter=1e-3, complete=False)
    )
    with pytest.raises(
        RecordError,
        match=r"partial.*: complete: divergence record p of config "
        r"toy is incomplete",
    ):
        compare_divergence(base, partial)
    with pytest.raises(RecordError, match="holds no divergence record"):
        compare_divergence(base, _empty(tmp_path))


def _empty(tmp_path: Path) -> Path:
    empty = tmp_path / "empty"
    empty.mkdir()
    return empty


def test_the_store_report_judges_every_environment_against_the_oldest(tmp_path: Path) -> None:
    rng = random.Random(11)
    store = tmp_path / "store"
    write(store, make_record("a1", "0.1.6", rng, jitter=1e-3, created="2026-12-03T10:00:00+00:00"))
    write(store, make_record("a2", "0.1.6", rng, jitter=1e-3, created="2026-12-03T10:01:00+00:00"))
    write(store, make_record("b", "0.1.10", rng, jitter=1e-3, shift=5e-3))
    write(store, make_record("c", "0.1.8", rng, jitter=1e-3))
    report = build_divergence_report(store)
    assert [
        (c.candidate.record.run_id, c.baseline.record.run_id, c.replicate.record.run_id, c.verdict)
        for c in report.configs
    ] == [("c", "a2", "a1", Verdict.SAME), ("b", "a2", "a1", Verdict.DIVERGED)]
    junit = comparison_junit(report)
    assert 'tests="2" failures="1"' in junit
    assert junit.count("<failure") == 1
    with pytest.raises(UsageError, match=r"--baseline 0\.1\.9: no divergence records of that "):
        build_divergence_report(store, baseline_version="0.1.9")
    with pytest.raises(
        UsageError,
        match=r"config toy: the baseline environment \(humming-kernels "
        r"0\.1\.8, vllm 0\.32\.0\) has one divergence record",
    ):
        build_divergence_report(store, baseline_version="0.1.8")


def test_report_tier_divergence_writes_the_store_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(12)
    store = tmp_path / "store"
    write(store, make_record("a1", "0.1.6", rng, jitter=1e-3, created="2026-12-03T10:00:00+00:00"))
    write(store, make_record("a2", "0.1.6", rng, jitter=1e-3, created="2026-12-03T10:01:00+00:00"))
    write(store, make_record("b", "0.1.10", rng, jitter=1e-3, shift=5e-3))
    junit = tmp_path / "r.xml"
    assert main(["report", "--tier", "divergence", str(store), "--junit", str(junit)]) == 0
    assert capsys.readouterr().out == ""
    assert 'tests="1" failures="1"' in junit.read_text(encoding="utf-8")
    assert main(["report", "--tier", "divergence", str(store)]) == 0
    assert "| ❌ diverged | toy | 30 |" in capsys.readouterr().out


def test_the_ulps_tool_reports_each_pair_of_passes(tmp_path: Path) -> None:
    """tools/divergence_ulps.py over three passes: a bit-identical replicate, and a candidate
    with one logprob 1 ulp off and one 20 ulps off (at the spacing of max(1, |logprob|))."""
    rng = random.Random(9)
    base = make_record("b", "0.1.6", rng, jitter=0.0, questions=2)
    same = make_record("r", "0.1.6", rng, jitter=0.0, questions=2)
    moved = make_record("c", "0.1.6", rng, jitter=0.0, questions=2)
    first, second = moved.questions[0], moved.questions[1]
    first.logprobs[0] -= 2.0**-23 * max(1.0, abs(first.logprobs[0]))
    second.top_logprobs[0] -= 20 * 2.0**-23 * max(1.0, abs(second.top_logprobs[0]))
    for record in (base, same, moved):
        write(tmp_path, record)
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "divergence_ulps.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    # Each position's top-K, and the forced token where it is not among them.
    shared = sum(
        len({*q.top_ids[t * K : t * K + K], q.tokens[t]})
        for q in base.questions
        for t in range(TOKENS)
    )
    assert shared == 43
    lines = done.stdout.splitlines()
    assert lines[0] == "snapped as the same value: at most 8 ulps"
    assert sorted(lines[1:]) == sorted(
        [
            f"b vs c: {shared} logprobs, 2 moved, 1 beyond 8 ulps; questions moved 2/2; ulps "
            "median 0.00, p99 20.00, max 20.00",
            f"b vs r: {shared} logprobs, 0 moved, 0 beyond 8 ulps; questions moved 0/2; ulps "
            "median 0.00, p99 0.00, max 0.00",
            f"c vs r: {shared} logprobs, 2 moved, 1 beyond 8 ulps; questions moved 2/2; ulps "
            "median 0.00, p99 20.00, max 20.00",
        ]
    )
