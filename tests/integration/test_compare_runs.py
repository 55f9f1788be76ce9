"""`compare` on records from real runs: `humming-matrix run` against the stand-in `vllm`
(tests/doubles/vllm_double.py), whose policy plants known flips per humming-kernels version, so
b, c and the flipped questions are known exactly."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from humming_matrix.store.results import iter_gsm8k_records
from tests.conftest import DOUBLES, REPO
from tests.unit.test_compare import scipy_wilson

from .runner_harness import cli, write_config

LIMIT = 40
ALWAYS_WRONG = [1, 5, 38]
WRONG_FROM_0_1_10 = [2, 3, 4, 6, 8, 9, 10, 12]  # 0.1.10 and 0.1.11 only
WRONG_BEFORE_0_1_10 = [20]
AA_NOISE = 25  # the second 0.1.6 run also misses this one: run-to-run noise
POLICY = {
    "wrong": ALWAYS_WRONG,
    "wrong_if_humming": {
        ">=0.1.10,<0.1.12": WRONG_FROM_0_1_10,
        "<0.1.10": WRONG_BEFORE_0_1_10,
    },
}


def humming_metadata_double(directory: Path, version: str) -> Path:
    """TEST DOUBLE: a metadata-only stand-in for an installed humming-kernels `version`.

    Put on PYTHONPATH, it is what `importlib.metadata` finds, both in the runner (which records
    the version) and in the `vllm` double (which picks its planted flips by it). No code of
    humming is needed: the double serves the answers."""
    site = directory / f"humming-stand-in-{version}"
    info = site / f"humming_kernels-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: humming-kernels\nVersion: {version}\n", encoding="utf-8"
    )
    return site


def run_env(root: Path, version: str, policy: Mapping[str, Any]) -> dict[str, str]:
    bin_dir = root / "double-bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "vllm").symlink_to(DOUBLES / "vllm_double.py")
    site = root / "site" / f"humming-stand-in-{version}"
    if not site.exists():
        humming_metadata_double(root / "site", version)
    gsm8k = os.environ.get("HUMMING_MATRIX_GSM8K_DIR") or str(REPO.parent / "shared" / "gsm8k")
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "HUMMING_MATRIX_GSM8K_DIR": gsm8k,
        "HUMMING_DOUBLE_POLICY": json.dumps(policy),
        "HUMMING_MATRIX_SESSION": f"humming-{version}",
    }


def run(root: Path, version: str, policy: Mapping[str, Any], expect: int = 0) -> None:
    config = root / "double.yaml"
    if not config.exists():
        write_config(root, threshold=0.8)
    done = cli(
        "run",
        "--config",
        config,
        "--results",
        root / "store" / f"v{version}",
        "--limit",
        str(LIMIT),
        env=run_env(root, version, policy),
    )
    assert done.returncode == expect, done.stderr


def build_run_store(root: Path, versions: tuple[str, ...]) -> Path:
    """Real runs into root/store/v<version>/. "0.1.6" gets an A/A pair: a noisy run first, then,
    a second later (records order by their creation second), the clean one that is the newest.
    "0.1.12" is cut short by the server dying: an incomplete record."""
    for version in versions:
        if version == "0.1.6":
            run(root, version, {**POLICY, "wrong": [*ALWAYS_WRONG, AA_NOISE]})
            time.sleep(1.1)
            run(root, version, POLICY)
        elif version == "0.1.12":
            run(root, version, {**POLICY, "die_at": 21}, expect=3)
        else:
            run(root, version, POLICY)
    return root / "store"


RUN_VERSIONS = ("0.1.6", "0.1.7", "0.1.10", "0.1.12")


@pytest.fixture(scope="module")
def runs(gsm8k_runs: Path) -> Path:
    """build_run_store(RUN_VERSIONS), made once per session (conftest) and only read here."""
    return gsm8k_runs


def labels() -> list[int]:
    gsm8k = Path(os.environ["HUMMING_MATRIX_GSM8K_DIR"]) / "test.jsonl"
    rows = [json.loads(line) for line in gsm8k.read_text(encoding="utf-8").splitlines()[:LIMIT]]
    return [int(r["answer"].split("####")[-1].strip().replace(",", "")) for r in rows]


def clean_baseline(store: Path) -> Path:
    """The 0.1.6 record without the A/A noise question wrong."""
    [path] = [p for p, r in iter_gsm8k_records(store / "v0.1.6") if r.questions[AA_NOISE].correct]
    return path


def test_regression_with_exact_flips(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    done = cli(
        "compare",
        clean_baseline(runs),
        runs / "v0.1.10",
        "--calibration",
        runs / "v0.1.6",
        "--json",
        out,
        "--markdown",
        tmp_path / "cmp.md",
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""
    [entry] = json.loads(out.read_text())["configs"]
    assert (entry["b"], entry["c"]) == (len(WRONG_FROM_0_1_10), 1)
    assert entry["verdict"] == "regression"
    assert entry["midp_regression"] == (1 + 9 / 2) / 2**9
    assert entry["difference"] == -7 / LIMIT
    assert entry["baseline"]["correct"] == LIMIT - 4
    assert entry["candidate"]["correct"] == LIMIT - 11
    assert entry["baseline"]["environment"]["humming_kernels"] == "0.1.6"
    assert entry["candidate"]["session"] == "humming-0.1.10"
    label = labels()
    assert entry["flips"] == [
        {
            "index": i,
            "label": label[i],
            "baseline_prediction": label[i],
            "candidate_prediction": label[i] + 1,
            "direction": "right->wrong",
        }
        for i in WRONG_FROM_0_1_10
    ] + [
        {
            "index": 20,
            "label": label[20],
            "baseline_prediction": label[20] + 1,
            "candidate_prediction": label[20],
            "direction": "wrong->right",
        }
    ]
    noise = entry["noise_floor"]
    assert (noise["discordant"], noise["n"]) == (1, LIMIT)
    assert noise["discordance_ratio"] == pytest.approx(9 / 1)
    assert "double: REGRESSION  [GATE FAILED]" in done.stdout
    assert "noise      A/A 1/40 discordant; 9.0x the A/A discordance" in done.stdout
    assert (
        f"| double | 90.00 {scipy_wilson(36, 40)} | 72.50 {scipy_wilson(29, 40)} |"
        in (tmp_path / "cmp.md").read_text()
    )


def test_same_answers_is_no_change(runs: Path) -> None:
    done = cli("compare", clean_baseline(runs), runs / "v0.1.7")
    assert done.returncode == 0, done.stderr
    assert "double: NO CHANGE" in done.stdout
    assert "b=0 right->wrong, c=0 wrong->right; one-sided mid-p 0.5 (worse), 0.5 (better)" in (
        done.stdout
    )


def test_incomplete_run_is_refused(runs: Path) -> None:
    [(partial, record)] = list(iter_gsm8k_records(runs / "v0.1.12"))
    assert not record.complete
    done = cli("compare", clean_baseline(runs), runs / "v0.1.12")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"humming-matrix: error: {partial}: complete: record {record.run_id} of config double "
        "is incomplete (the run stopped early; finish it with `humming-matrix run --resume`); "
        "compare refuses incomplete records\n"
    )


def test_store_with_an_a_a_pair_calibrates_itself(runs: Path) -> None:
    done = cli("compare", runs / "v0.1.6", runs / "v0.1.10")
    assert done.returncode == 1, done.stderr
    assert "noise      A/A 1/40 discordant" in done.stdout
