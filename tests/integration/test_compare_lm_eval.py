"""`compare` on lm-eval records from real runs: the real `humming-matrix lm-eval` (real lm-eval,
`local-completions`) against the stand-in `vllm` (tests/doubles/vllm_double.py), whose policy
plants each document's outcome per run, so b, c, the flipped documents, the verdicts and the exit
codes are known exactly.

The planted outcomes (20 documents; `wrong`: answered label + 1, `no_marker`: right but without
`####`, so only lm-eval's flexible-extract filter reads it):

    run                      strict-match wrong         flexible-extract wrong
    baseline (0.1.6)         1, 2, 4                    1, 4
    candidate (0.1.10)       1, 5..16                   1

strict-match:     both right 5, b = 12 (5..16), c = 2 (2, 4), both wrong 1 (doc 1)
flexible-extract: both right 18, b = 0, c = 1 (4), both wrong 1
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sp

from humming_matrix.judge.stats import PairedTable, paired_difference_interval
from humming_matrix.lmeval.record import iter_lm_eval_records
from humming_matrix.store.results import iter_gsm8k_records

from .runner_harness import cli
from .runner_harness import write_config as write_gsm8k_config
from .test_compare_runs import run_env
from .test_lm_eval import FLEXIBLE, STRICT, write_config

BASELINE = {"lm_eval": True, "wrong": [1, 4], "no_marker": [2]}
CANDIDATE = {"lm_eval": True, "wrong": [1], "no_marker": list(range(5, 17))}
STRICT_FLIPS = [(2, "wrong->right"), (4, "wrong->right")] + [
    (i, "right->wrong") for i in range(5, 17)
]
# b = 12 of m = 14: mid-p 2 (C(14,13) + C(14,14)) + C(14,12) over 2^15; exact p C(14,12..14) / 2^14
STRICT_MIDP = (2 * (14 + 1) + 91) / 2**15
STRICT_EXACT = (91 + 14 + 1) / 2**14


def only_path(store: Path) -> Path:
    [(path, _)] = iter_lm_eval_records(store)
    return path


@pytest.fixture(scope="module")
def runs(lm_eval_runs: Path) -> Path:
    """build_lm_eval_runs, made once per session (conftest) and only read here."""
    return lm_eval_runs


def build_lm_eval_runs(root: Path) -> Path:
    """Two real lm-eval runs (store/v0.1.6, store/v0.1.10) and one short GSM8K run (gsm8k/)."""
    config = write_config(root, strict=0.9, flexible=0.9)  # threshold 0.9 * 0.92 = 0.828
    for version, policy in (("0.1.6", BASELINE), ("0.1.10", CANDIDATE)):
        done = cli(
            "lm-eval",
            "--config",
            config,
            "--results",
            root / "store" / f"v{version}",
            env=run_env(root, version, policy),
            timeout=300,
        )
        # The candidate's strict-match (0.55) misses its threshold: lm-eval's own gate fails.
        assert done.returncode == (0 if version == "0.1.6" else 1), done.stderr
    gsm8k = cli(
        "run",
        "--config",
        write_gsm8k_config(root, threshold=0.5),
        "--results",
        root / "gsm8k",
        "--limit",
        "10",
        env=run_env(root, "0.1.6", {"wrong": [3]}),
    )
    assert gsm8k.returncode == 0, gsm8k.stderr
    return root


def compare(*args: str | Path) -> tuple[int, str, str]:
    done = cli("compare", *args)
    return done.returncode, done.stdout, done.stderr


def test_a_regression_in_one_filter_with_exact_flips(runs: Path, tmp_path: Path) -> None:
    out, md = tmp_path / "cmp.json", tmp_path / "cmp.md"
    code, stdout, stderr = compare(
        runs / "store" / "v0.1.6", runs / "store" / "v0.1.10", "--json", out, "--markdown", md
    )
    assert (code, stderr) == (1, "")
    document = json.loads(out.read_text())
    assert (document["kind"], document["gate_failed"]) == ("lm-eval", True)
    [config] = document["configs"]
    assert config["config"] == "Model-FP8"
    assert config["baseline"]["environment"]["humming_kernels"] == "0.1.6"
    assert config["candidate"]["environment"]["humming_kernels"] == "0.1.10"
    assert config["baseline"]["session"] == "humming-0.1.6"
    assert config["unpaired_checks"] == []
    strict, flexible = config["metrics"]  # in the order the config names them

    assert (strict["task"], strict["key"], strict["verdict"]) == ("gsm8k", STRICT, "regression")
    assert strict["table"] == {
        "both_right": 5,
        "right_to_wrong": 12,
        "wrong_to_right": 2,
        "both_wrong": 1,
    }
    assert (strict["b"], strict["c"], strict["paired_documents"]) == (12, 2, 20)
    assert strict["midp_regression"] == STRICT_MIDP
    assert strict["p_regression_exact"] == STRICT_EXACT
    # The family is both rows: Holm doubles the smaller exact p (flexible's "worse" p is 1).
    assert (strict["family_size"], strict["p_regression_family"]) == (2, 2 * STRICT_EXACT)
    assert strict["difference"] == -10 / 20
    assert (strict["baseline"]["correct"], strict["candidate"]["correct"]) == (17, 7)
    wilson = sp.binomtest(7, 20).proportion_ci(0.95, method="wilson")  # independent of stats
    assert strict["candidate"]["accuracy_interval"] == pytest.approx(
        [wilson.low, wilson.high], abs=1e-12
    )
    interval = paired_difference_interval(PairedTable(5, 12, 2, 1))
    assert strict["difference_interval"] == [interval.low, interval.high]
    assert [(f["doc_id"], f["direction"]) for f in strict["flips"]] == STRICT_FLIPS
    assert (
        strict["flips"][0]["baseline_prediction"],
        strict["flips"][0]["candidate_prediction"],
    ) == ("[invalid]", "70000")
    assert strict["flips"][0]["target"].endswith("#### 70000")
    assert strict["backstop"]["measured"] == 0.35
    assert (strict["backstop"]["verdict"], strict["gate_failed"]) == ("failed", True)

    assert (flexible["key"], flexible["verdict"]) == (FLEXIBLE, "inconclusive")
    assert (flexible["b"], flexible["c"]) == (0, 1)
    assert (flexible["midp_improvement"], flexible["midp_regression"]) == (0.25, 0.75)
    assert [
        (f["doc_id"], f["baseline_prediction"], f["candidate_prediction"])
        for f in flexible["flips"]
    ] == [(4, "21", "20")]
    assert (flexible["backstop"]["measured"], flexible["backstop"]["verdict"]) == (0.95, "passed")
    assert flexible["gate_failed"] is False

    assert "  gsm8k exact_match,strict-match: REGRESSION  [GATE FAILED]\n" in stdout
    assert "    baseline   0.8500 [0.6396, 0.9476] (17/20)\n" in stdout
    assert (
        "    flips      b=12 right->wrong, c=2 wrong->right; one-sided mid-p 0.00369 (worse), "
        "0.996 (better)\n"
    ) in stdout
    assert ("    gated p    0.0129 (worse), 1 (better): exact, Holm over 2\n") in stdout
    assert "    backstop   FAIL (0.3500 vs 0.9 * (1 - 0.08) = 0.8280)\n" in stdout
    assert "  gsm8k exact_match,flexible-extract: INCONCLUSIVE\n" in stdout
    assert stdout.endswith("\ngate failed for 1 of 2 lm-eval metrics\n")
    assert (
        "| Model-FP8 | gsm8k | exact_match,strict-match | 85.00 [63.96, 94.76] | "
        "35.00 [18.12, 56.71] | -50.00 [-71.73, -15.81] | 12 / 2 | 0.00369 | 53.36 | "
        "FAIL (0.3500 vs 0.9 * (1 - 0.08) = 0.8280) | regression |"
    ) in md.read_text()


def test_the_other_way_round_is_an_improvement_and_passes(runs: Path) -> None:
    code, stdout, stderr = compare(
        only_path(runs / "store" / "v0.1.10"), only_path(runs / "store" / "v0.1.6")
    )
    assert (code, stderr) == (0, "")
    assert "  gsm8k exact_match,strict-match: IMPROVEMENT\n" in stdout
    assert (
        "    flips      b=2 right->wrong, c=12 wrong->right; one-sided mid-p 0.996 (worse), "
        "0.00369 (better)\n"
    ) in stdout
    assert "  gsm8k exact_match,flexible-extract: INCONCLUSIVE\n" in stdout
    assert "    backstop   pass (0.8500 vs 0.9 * (1 - 0.08) = 0.8280)\n" in stdout
    assert "GATE FAILED" not in stdout
    assert stdout.endswith("\nno regression in 2 lm-eval metrics\n")


def test_the_backstop_alone_fails_the_gate(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    # A 50-point drop under a 60-point minimum effect is "no change"; lm-eval's rule still fails.
    code, stdout, _ = compare(
        runs / "store" / "v0.1.6", runs / "store" / "v0.1.10", "--min-effect", "0.6", "--json", out
    )
    assert code == 1
    strict, flexible = json.loads(out.read_text())["configs"][0]["metrics"]
    assert (strict["verdict"], strict["gate_failed"]) == ("no change detected", True)
    assert (flexible["verdict"], flexible["gate_failed"]) == ("no change detected", False)
    assert "  gsm8k exact_match,strict-match: NO CHANGE DETECTED  [GATE FAILED]\n" in stdout


def edited_copy(source: Path, directory: Path, edit: Any) -> Path:
    data = json.loads(source.read_text())
    edit(data)
    directory.mkdir()
    path = directory / source.name
    path.write_text(json.dumps(data))
    return path


def test_a_graded_metric_is_judged_by_its_backstop_alone(runs: Path, tmp_path: Path) -> None:
    def graded(data: dict[str, Any]) -> None:
        # A partial-credit value makes flexible-extract a graded metric, with no flips to count.
        for s in data["samples"]:
            if s["filter"] == "flexible-extract" and s["doc_id"] == 0:
                s["values"]["exact_match"] = 0.5

    base = edited_copy(only_path(runs / "store" / "v0.1.6"), tmp_path / "base", graded)
    cand = edited_copy(only_path(runs / "store" / "v0.1.10"), tmp_path / "cand", graded)
    out = tmp_path / "cmp.json"
    code, stdout, _ = compare(base, cand, "--json", out)
    assert code == 1
    [config] = json.loads(out.read_text())["configs"]
    assert [m["key"] for m in config["metrics"]] == [STRICT]
    [unpaired] = config["unpaired_checks"]
    assert (unpaired["key"], unpaired["verdict"], unpaired["failed"]) == (FLEXIBLE, "passed", False)
    assert (
        "  gsm8k exact_match,flexible-extract: backstop only (no 0/1 outcome per document): "
        "pass (0.9500 vs 0.9 * (1 - 0.08) = 0.8280)\n"
    ) in stdout


def test_a_metric_lm_eval_did_not_report_fails_the_backstop(runs: Path, tmp_path: Path) -> None:
    def unreported(data: dict[str, Any]) -> None:
        data["metrics"]["checks"][1]["measured"] = None

    # The 0.1.6 run passes both rules; only the metric made unreported fails.
    base = only_path(runs / "store" / "v0.1.10")
    cand = edited_copy(only_path(runs / "store" / "v0.1.6"), tmp_path / "cand", unreported)
    code, stdout, _ = compare(base, cand)
    assert code == 1
    assert "  gsm8k exact_match,flexible-extract: INCONCLUSIVE  [GATE FAILED]\n" in stdout
    assert f"    backstop   MISSING (lm-eval reported no {FLEXIBLE})\n" in stdout


def test_refusals_are_one_line_naming_the_file_and_key(runs: Path, tmp_path: Path) -> None:
    base = only_path(runs / "store" / "v0.1.6")
    cand = only_path(runs / "store" / "v0.1.10")
    base_sha = json.loads(base.read_text())["config"]["sha256"]

    def other_config(data: dict[str, Any]) -> None:
        data["config"]["sha256"] = "f" * 64

    def incomplete(data: dict[str, Any]) -> None:
        data["complete"] = False

    def fewer_documents(data: dict[str, Any]) -> None:
        data["samples"] = [s for s in data["samples"] if s["doc_id"] != 19]

    changed = edited_copy(cand, tmp_path / "sha", other_config)
    assert compare(base, changed) == (
        2,
        "",
        (
            f"humming-matrix: error: {changed}: config.sha256: config Model-FP8 differs from the "
            f"baseline's (ffffffffffff vs {base_sha[:12]} in {base}): different configs cannot be "
            "paired\n"
        ),
    )

    unfinished = edited_copy(cand, tmp_path / "incomplete", incomplete)
    run_id = json.loads(cand.read_text())["run_id"]
    assert compare(base, unfinished) == (
        2,
        "",
        (
            f"humming-matrix: error: {unfinished}: complete: record {run_id} of config "
            "Model-FP8 is incomplete; compare refuses incomplete records\n"
        ),
    )

    short = edited_copy(cand, tmp_path / "short", fewer_documents)
    assert compare(base, short) == (
        2,
        "",
        (
            f"humming-matrix: error: {short}: samples[gsm8k {STRICT}]: documents differ from the "
            f"baseline's in {base} (19 documents, 0..18 vs 20 documents, 0..19): run both with the "
            "same --limit\n"
        ),
    )

    assert compare(base, cand, "--calibration", base) == (
        2,
        "",
        (
            "humming-matrix: error: --calibration: the A/A noise floor is measured for GSM8K "
            "records only\n"
        ),
    )


def test_gsm8k_and_lm_eval_sides_do_not_pair(runs: Path) -> None:
    lm_eval, gsm8k = runs / "store" / "v0.1.6", runs / "gsm8k"
    assert compare(lm_eval, gsm8k) == (
        2,
        "",
        (
            f"humming-matrix: error: nothing to pair: {lm_eval} holds lm-eval records and {gsm8k} "
            "holds gsm8k records\n"
        ),
    )


def test_a_store_of_both_suites_is_judged_on_both(runs: Path, tmp_path: Path) -> None:
    """Judging only the GSM8K records of such a store would pass while lm-eval regressed."""
    [(gsm8k_record, _)] = iter_gsm8k_records(runs / "gsm8k")
    sides = []
    for version in ("0.1.6", "0.1.10"):
        side = tmp_path / version
        side.mkdir()
        shutil.copy(gsm8k_record, side)
        shutil.copy(only_path(runs / "store" / f"v{version}"), side)
        sides.append(side)
    out = tmp_path / "cmp.json"
    code, stdout, stderr = compare(*sides, "--json", out)
    assert (code, stderr) == (1, "")
    document = json.loads(out.read_text())
    [gsm8k] = document["configs"]
    assert (gsm8k["config"], gsm8k["verdict"], gsm8k["gate_failed"]) == (
        "double",
        "no change detected",
        False,
    )
    assert document["gate_failed"] is True
    assert document["lm_eval"]["gate_failed"] is True
    assert [m["verdict"] for m in document["lm_eval"]["configs"][0]["metrics"]] == [
        "regression",
        "inconclusive",
    ]
    assert "\nno regression in 1 config\n\nModel-FP8 (lm-eval)  [GATE FAILED]\n" in stdout


def test_a_kind_only_one_side_holds_is_named_not_dropped(runs: Path, tmp_path: Path) -> None:
    """The baseline ran both suites, the candidate only GSM8K: the lm-eval side is not judged,
    and the output says so rather than letting a pass stand for both."""
    [(gsm8k_record, _)] = iter_gsm8k_records(runs / "gsm8k")
    baseline, candidate = tmp_path / "base", tmp_path / "cand"
    baseline.mkdir()
    candidate.mkdir()
    shutil.copy(gsm8k_record, baseline)
    shutil.copy(gsm8k_record, candidate)
    shutil.copy(only_path(runs / "store" / "v0.1.6"), baseline)
    code, _, stderr = compare(baseline, candidate)
    assert (code, stderr) == (
        0,
        (
            f"humming-matrix: note: lm-eval records were not compared: only {baseline} holds them, "
            f"{candidate} has none to pair with\n"
        ),
    )
