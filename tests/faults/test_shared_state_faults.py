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
    return subprocess.run([sys.executable, "-m", "humming_matrix", *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=60,
                          check=False)


def test_a_new_slot_pool_is_sticky_and_world_writable(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    done = hm("slots", "--gpus", "1", "--", "true",
              env={"HUMMING_MATRIX_SLOT_DIR": str(pool), "HUMMING_MATRIX_GPUS": "0"})
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(pool.stat().st_mode) == 0o1777
    assert sorted(p.name for p in pool.iterdir()) == ["gpu-0.lock", "pool.lock"]


def test_a_link_planted_in_the_slot_pool_is_not_followed(tmp_path: Path) -> None:
    pool, victim = tmp_path / "pool", tmp_path / "victim.txt"
    pool.mkdir(mode=0o1777)
    victim.write_text("private\n")
    victim.chmod(0o600)
    (pool / "gpu-0.lock").symlink_to(victim)
    done = hm("slots", "--gpus", "1", "--", "true",
              env={"HUMMING_MATRIX_SLOT_DIR": str(pool), "HUMMING_MATRIX_GPUS": "0"})
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"humming-matrix: error: GPU slot pool {pool}: Too many levels of symbolic links; set "
        "HUMMING_MATRIX_SLOT_DIR to a writable directory on a local disk\n")
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert victim.read_text() == "private\n"
