"""Real `nox` runs over a test matrix that installs only humming-kernels (real wheels from the
package index, --no-deps), with the `vllm` test double first on PATH.

One nox invocation (session-scoped, it is the expensive part) runs two cells; the tests read what
it left behind: two environments, two install records, result records whose environment carries
each session's own humming-kernels, and the answers the double gave for that version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "vllm_double.py"
NOX_TIMEOUT = 540

TEST_MATRIX = """
[matrix]
recipe = "bare"

[recipe.bare]
description = "humming-kernels only; the vLLM test double serves"
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 0
preflight = false

[recipe.checked]
description = "humming-kernels only, with the CPU preflight on"
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 1

[recipe.pinned]
description = "a recipe whose pin wins over the session's version (as vLLM's would)"
requirements = ["humming-kernels==0.1.5"]
no_deps = true
gpus = 0
preflight = false

[variant.cpu]

[[pairing]]
humming = ">=0.1.6,<0.1.20"
versions = ["0.1.6", "0.1.19"]
variants = ["cpu"]

[[pairing]]
humming = "==0.1.99"
versions = ["0.1.99"]
variants = ["cpu"]

[[pairing]]
humming = ">=0.1.4,<0.1.5"
versions = ["0.1.4"]
recipe = "checked"
variants = ["cpu"]

[[pairing]]
humming = "==0.1.3"
versions = ["0.1.3"]
recipe = "pinned"
variants = ["cpu"]
"""

# Question 0 is answered wrongly only when the environment holds humming-kernels >= 0.1.19.
POLICY = {"wrong_if_humming": {">=0.1.19": [0]}}


@dataclass(frozen=True)
class NoxRun:
    returncode: int
    output: str
    envdir: Path
    results: Path


def _gsm8k_dir() -> str:
    return os.environ.get("HUMMING_MATRIX_GSM8K_DIR") or str(REPO.parent / "shared" / "gsm8k")


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nox")
    (root / "matrix.toml").write_text(TEST_MATRIX, encoding="utf-8")
    bin_dir = root / "double-bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").symlink_to(DOUBLE)
    config = {
        "model_name": "double/gsm8k",
        "accuracy_threshold": 0.5,
        "num_questions": 3,
        "num_fewshot": 2,
        "startup_max_wait_seconds": 60,
        "env": {"HUMMING_DOUBLE_POLICY": json.dumps(POLICY)},
    }
    (root / "double-gsm8k.yaml").write_text(json.dumps(config), encoding="utf-8")
    return root


def _nox(workspace: Path, name: str, sessions: list[str], posargs: list[str]) -> NoxRun:
    envdir = workspace / f"envs-{name}"
    results = workspace / f"results-{name}"
    env = dict(os.environ)
    env.update(
        PATH=f"{workspace / 'double-bin'}{os.pathsep}{os.environ['PATH']}",
        HUMMING_MATRIX_FILE=str(workspace / "matrix.toml"),
        HUMMING_MATRIX_GSM8K_DIR=_gsm8k_dir(),
    )
    env.pop("HUMMING_MATRIX_SESSION", None)
    env.pop("HUMMING_MATRIX_INSTALL_RECORD", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nox",
            "-f",
            str(REPO / "noxfile.py"),
            "--envdir",
            str(envdir),
            "-s",
            *sessions,
            "--",
            "--results",
            str(results),
            *posargs,
        ],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=NOX_TIMEOUT,
        check=False,
    )
    return NoxRun(done.returncode, done.stdout + done.stderr, envdir, results)


@pytest.fixture(scope="session")
def two_cells(workspace: Path) -> NoxRun:
    return _nox(
        workspace,
        "pair",
        ["humming-0.1.6", "humming-0.1.19"],
        ["--config", str(workspace / "double-gsm8k.yaml"), "--limit", "3"],
    )


def _records(results: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]


def _by_humming(run: NoxRun) -> Mapping[str, dict[str, Any]]:
    return {r["environment"]["humming_kernels"]: r for r in _records(run.results)}


def test_both_sessions_succeed(two_cells: NoxRun) -> None:
    assert two_cells.returncode == 0, two_cells.output[-4000:]
    assert "Session humming-0.1.6 was successful" in two_cells.output
    assert "Session humming-0.1.19 was successful" in two_cells.output


def test_each_record_carries_its_own_humming_and_answers(two_cells: NoxRun) -> None:
    records = _by_humming(two_cells)
    assert sorted(records) == ["0.1.19", "0.1.6"]
    old, new = records["0.1.6"], records["0.1.19"]
    assert [q["correct"] for q in old["questions"]] == [True, True, True]
    assert [q["correct"] for q in new["questions"]] == [False, True, True]
    assert new["questions"][0]["prediction"] == new["questions"][0]["label"] + 1
    assert (old["metrics"]["accuracy"], new["metrics"]["accuracy"]) == (1.0, pytest.approx(2 / 3))
    assert old["environment"]["session"] == "humming-0.1.6"
    assert new["environment"]["session"] == "humming-0.1.19"


def test_sessions_get_isolated_environments(two_cells: NoxRun) -> None:
    installs = {h: r["environment"]["install"] for h, r in _by_humming(two_cells).items()}
    old, new = installs["0.1.6"], installs["0.1.19"]
    assert (old["session"], new["session"]) == ("humming-0.1.6", "humming-0.1.19")
    assert (old["humming_kernels"], new["humming_kernels"]) == ("0.1.6", "0.1.19")
    old_env = Path(old["executable"]).parents[1]
    new_env = Path(new["executable"]).parents[1]
    assert old_env != new_env
    assert {old_env.parent, new_env.parent} == {two_cells.envdir}
    # Each environment's own install record says the same, and the cache dir is per session.
    record = json.loads((old_env / "humming-install.json").read_text())
    assert (record["packages"]["humming-kernels"], record["outcome"], record["exit_code"]) == (
        "0.1.6",
        "ran",
        0,
    )
    assert record["stages"] == ["installed", "verified", "run"]
    assert record["preflight"]["skipped"] == "not run: recipe 'bare' declares preflight = false"
    # The noxfile timed its install step; the result record carries it beside the run's own.
    for humming, result in _by_humming(two_cells).items():
        install = result["environment"]["install"]["install_seconds"]
        assert isinstance(install, float), humming
        assert install > 0, humming
        assert result["timings"]["install"] == round(install, 3)
        assert result["timings"]["asking"] == round(result["metrics"]["duration"], 3)
        assert result["timings"]["startup"] == result["startup"]["seconds"]


def test_single_variable_check_is_recorded(two_cells: NoxRun) -> None:
    new = _by_humming(two_cells)["0.1.19"]["environment"]["install"]
    [check] = new["single_variable"]
    assert check["against"] == "humming-0.1.6"
    assert check["humming_kernels"] == ["0.1.6", "0.1.19"]
    assert (check["single_variable"], check["others_differ"]) == (True, {})


def test_posargs_reach_run(two_cells: NoxRun) -> None:
    # --limit 3 and --config reached `run` in both sessions.
    assert sorted(
        (r["environment"]["session"], r["metrics"]["num_questions"], r["config"]["name"])
        for r in _records(two_cells.results)
    ) == [("humming-0.1.19", 3, "double-gsm8k"), ("humming-0.1.6", 3, "double-gsm8k")]


def test_mismatched_version_is_refused(workspace: Path) -> None:
    run = _nox(
        workspace,
        "pinned",
        ["humming-0.1.3"],
        ["--config", str(workspace / "double-gsm8k.yaml"), "--limit", "1"],
    )
    assert run.returncode == 1
    expected = (
        "session humming-0.1.3 expects humming-kernels 0.1.3, but the environment has "
        "0.1.5; refusing to run"
    )
    assert expected in run.output
    assert "failed with exit code 125" in run.output
    [record_path] = run.envdir.glob("*/humming-install.json")
    record = json.loads(record_path.read_text())
    assert (record["outcome"], record["exit_code"], record["stages"]) == (
        "version_mismatch",
        125,
        ["installed"],
    )
    assert not run.results.exists()  # nothing ran


def test_preflight_reports_a_humming_that_cannot_import(workspace: Path) -> None:
    run = _nox(
        workspace,
        "checked",
        ["humming-0.1.4"],
        ["--config", str(workspace / "double-gsm8k.yaml"), "--limit", "1"],
    )
    assert run.returncode == 1
    assert "failed with exit code 125" in run.output
    [record_path] = run.envdir.glob("*/humming-install.json")
    record = json.loads(record_path.read_text())
    assert (record["outcome"], record["exit_code"]) == ("preflight_failed", 125)
    checks = {
        (c["name"], c["subject"]): (c["status"], c["detail"]) for c in record["preflight"]["checks"]
    }
    assert checks[("humming_import", "humming")] == (
        "failed",
        "import humming (humming-kernels 0.1.4) failed: ModuleNotFoundError: No module named "
        "'torch'",
    )
    assert checks[("vllm_integration", "vllm")] == (
        "skipped",
        "vLLM is not installed (this recipe installs none)",
    )
    assert checks[("humming_env", "double-gsm8k")] == ("skipped", "no humming JSON in env")
    assert record["stages"] == ["installed", "verified", "preflight"]


def test_a_cell_that_cannot_be_installed_is_untestable(workspace: Path) -> None:
    run = _nox(workspace, "absent", ["humming-0.1.99"], ["--limit", "1"])
    assert run.returncode == 1
    assert "humming-kernels==0.1.99" in run.output  # the installer's own error is shown
    assert "humming-0.1.99: installing the cell failed (the installer's error is above)" in (
        run.output
    )
    assert "failed with exit code 125" in run.output
    [record_path] = run.envdir.glob("*/humming-install.json")
    record = json.loads(record_path.read_text())
    assert (record["outcome"], record["exit_code"], record["humming_kernels"]) == (
        "install_failed",
        125,
        None,
    )
    assert record["install_seconds"] > 0  # how long the failing install took


def test_bad_matrix_is_one_line_and_exit_2(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(TEST_MATRIX.replace('versions = ["0.1.4"]', 'versions = ["0.1.4", "0.1.4"]'))
    done = subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(REPO / "noxfile.py"), "-l"],
        env=dict(os.environ, HUMMING_MATRIX_FILE=str(matrix)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"nox: error: {matrix}: pairing[2].versions: duplicate cell: 0.1.4 listed twice\n"
    )
