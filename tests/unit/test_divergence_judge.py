"""The divergence judge: the sign test against the A/A floor, Holm over the family, refusals, and
its error rates shown by simulation through `compare_divergence`."""

from __future__ import annotations

import math
import random
from array import array
from pathlib import Path

import pytest
from scipy.stats import binomtest

from humming_matrix.cli import main
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
