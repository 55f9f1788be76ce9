"""Faults in state shared between processes and users on one machine: the GPU slot pool, the
GSM8K download, the environment's matrix variables. Real CLI, real files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.faults


def hm(*args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "humming_matrix", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )


def test_a_new_slot_pool_is_sticky_and_world_writable(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    done = hm(
        "slots",
        "--gpus",
        "1",
        "--",
        "true",
        env={"HUMMING_MATRIX_SLOT_DIR": str(pool), "HUMMING_MATRIX_GPUS": "0"},
    )
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(pool.stat().st_mode) == 0o1777
    assert sorted(p.name for p in pool.iterdir()) == ["gpu-0.lock", "pool.lock"]


def test_a_link_planted_in_the_slot_pool_is_not_followed(tmp_path: Path) -> None:
    pool, victim = tmp_path / "pool", tmp_path / "victim.txt"
    pool.mkdir(mode=0o1777)
    victim.write_text("private\n")
    victim.chmod(0o600)
    (pool / "gpu-0.lock").symlink_to(victim)
    done = hm(
        "slots",
        "--gpus",
        "1",
        "--",
        "true",
        env={"HUMMING_MATRIX_SLOT_DIR": str(pool), "HUMMING_MATRIX_GPUS": "0"},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"humming-matrix: error: GPU slot pool {pool}: Too many levels of symbolic links; set "
        "HUMMING_MATRIX_SLOT_DIR to a writable directory on a local disk\n"
    )
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert victim.read_text() == "private\n"


def test_a_network_failure_while_downloading_gsm8k_is_infrastructure(tmp_path: Path) -> None:
    from humming_matrix.suite.server import free_port

    config = tmp_path / "c.yaml"
    config.write_text(
        'model_name: "m"\naccuracy_threshold: 0.5\nnum_questions: 5\nnum_fewshot: 5\n'
    )
    mirror = f"http://127.0.0.1:{free_port()}/gsm8k"  # nothing listens there
    env = {k: v for k, v in os.environ.items() if k != "HUMMING_MATRIX_GSM8K_DIR"}
    env.update(HUMMING_MATRIX_CACHE_DIR=str(tmp_path / "cache"), HUMMING_MATRIX_GSM8K_URL=mirror)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "run",
            "--config",
            str(config),
            "--results",
            str(tmp_path / "store"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"humming-matrix: error: cannot download {mirror}/train.jsonl: ")
    assert not (tmp_path / "store").exists()
    assert list((tmp_path / "cache").rglob("*")) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "0.1.6,not-a-version",
            "nox: error: $HUMMING_MATRIX_EXTRA_VERSIONS: 'not-a-version' is not a version\n",
        ),
        (
            "9.0.0",
            "nox: error: $HUMMING_MATRIX_EXTRA_VERSIONS: 9.0.0: no pairing's humming range "
            "in {matrix} covers it\n",
        ),
    ],
    ids=["not-a-version", "uncovered"],
)
def test_a_bad_extra_versions_value_blames_the_variable(value: str, message: str) -> None:
    """The variable a bisect sets for nox; a bad value is bad input (exit 2, one line), and it is
    the variable's fault, not the matrix file's."""
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "HUMMING_MATRIX_FILE"}
    env["HUMMING_MATRIX_EXTRA_VERSIONS"] = value
    done = subprocess.run(
        [sys.executable, "-m", "nox", "-l", "-f", str(repo / "noxfile.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == message.format(matrix=repo / "configs" / "matrix.toml")
