"""`python -m humming_matrix.ci.ci_job`: a CI job's exit status is the cell's own, through real nox.

The real noxfile over a test matrix that installs only humming-kernels (a real wheel from the
package index, --no-deps) with the `vllm` test double first on PATH. nox itself exits 1 for every
failure; the job must exit 3 for an infrastructure failure (the only status CI retries), 1 for a
config below its threshold, 125 for an untestable cell.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from humming_matrix.ci.ci_job import session_exit_code

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "vllm_double.py"

MATRIX = """\
[matrix]
recipe = "bare"

[recipe.bare]
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 0
preflight = false

[recipe.pinned]
description = "installs another humming-kernels than the session names: refused, 125"
requirements = ["humming-kernels==0.1.5"]
no_deps = true
gpus = 0
preflight = false

[variant.cpu]

[[pairing]]
humming = ">=0.1.6,<0.1.7"
versions = ["0.1.6"]
variants = ["cpu"]

[[pairing]]
humming = "==0.1.3"
versions = ["0.1.3"]
recipe = "pinned"
variants = ["cpu"]
"""


@dataclass(frozen=True)
class Job:
    status: int
    stderr: str


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ci-job")
    (root / "matrix.toml").write_text(MATRIX)
    (root / "bin").mkdir()
    (root / "bin" / "vllm").symlink_to(DOUBLE)
    for name, threshold, policy in (
        ("pass", 0.5, {}),
        ("low", 0.99, {"wrong": [0, 1]}),
        ("dies", 0.5, {"exit_at_start": 1}),
    ):
        (root / f"{name}.yaml").write_text(
            json.dumps(
                {
                    "model_name": "double/model",
                    "accuracy_threshold": threshold,
                    "num_questions": 3,
                    "num_fewshot": 2,
                    "startup_max_wait_seconds": 60,
                    "env": {"HUMMING_DOUBLE_POLICY": json.dumps(policy)},
                }
            )
        )
    return root


def _job(root: Path, session: str, config: str) -> Job:
    env = dict(os.environ)
    env.update(
        PATH=f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}",
        HUMMING_MATRIX_FILE=str(root / "matrix.toml"),
        HUMMING_MATRIX_GSM8K_DIR=os.environ.get("HUMMING_MATRIX_GSM8K_DIR")
        or str(REPO.parent / "shared" / "gsm8k"),
        PYTHONPATH=str(REPO / "src"),
    )
    for name in ("HUMMING_MATRIX_SESSION", "HUMMING_MATRIX_INSTALL_RECORD"):
        env.pop(name, None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "humming_matrix.ci.ci_job",
            session,
            "--envdir",
            str(root / "envs"),
            "--noxfile",
            str(REPO / "noxfile.py"),
            "--",
            "--config",
            str(root / f"{config}.yaml"),
            "--results",
            str(root / "results"),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    return Job(done.returncode, done.stderr)


def test_exit_status_is_the_sessions_own(workspace: Path) -> None:
    passed = _job(workspace, "humming-0.1.6", "pass")
    assert passed.status == 0, passed.stderr

    below = _job(workspace, "humming-0.1.6", "low")
    assert below.status == 1, below.stderr
    assert "ci_job: nox exited 1; the session's own status is 1" in below.stderr

    infrastructure = _job(workspace, "humming-0.1.6", "dies")
    assert infrastructure.status == 3, infrastructure.stderr
    assert "ci_job: nox exited 1; the session's own status is 3" in infrastructure.stderr
    assert "outcome 'ran', exit code 3" in infrastructure.stderr

    untestable = _job(workspace, "humming-0.1.3", "pass")
    assert untestable.status == 125, untestable.stderr
    assert "outcome 'version_mismatch', exit code 125" in untestable.stderr


def test_a_failure_before_the_session_is_1(workspace: Path) -> None:
    missing = _job(workspace, "humming-9.9.9", "pass")  # nox exits 3: no such session
    assert missing.status == 1  # not 3: that would be retried as an infrastructure failure
    assert (
        f"ci_job: nox exited 3; humming-9.9.9 left no install record in "
        f"{workspace / 'envs'} during this job; failing with 1"
    ) in missing.stderr


def test_only_a_record_of_this_job_counts(tmp_path: Path) -> None:
    def record(venv: str, session: str, created: str, code: object) -> None:
        (tmp_path / venv).mkdir()
        (tmp_path / venv / "humming-install.json").write_text(
            json.dumps(
                {"session": session, "created": created, "outcome": "ran", "exit_code": code}
            )
        )

    record("old", "humming-0.1.6", "2026-01-01T10:00:00+00:00", 3)
    record("other", "humming-0.1.7", "2026-01-01T12:00:00+00:00", 125)
    record("broken", "humming-0.1.6", "not a time", 3)
    since = datetime(2026, 1, 1, 11, 0, tzinfo=timezone.utc)
    assert session_exit_code(tmp_path, "humming-0.1.6", since) == (
        None,
        f"humming-0.1.6 left no install record in {tmp_path} during this job",
    )
    record("new", "humming-0.1.6", "2026-01-01T11:00:00+00:00", 1)
    assert session_exit_code(tmp_path, "humming-0.1.6", since) == (
        1,
        f"{tmp_path / 'new' / 'humming-install.json'}: outcome 'ran', exit code 1",
    )
    # The newest record of this job wins; a session killed before it ended recorded no code.
    record("killed", "humming-0.1.6", "2026-01-01T11:30:00+00:00", None)
    assert session_exit_code(tmp_path, "humming-0.1.6", since) == (
        None,
        f"{tmp_path / 'killed' / 'humming-install.json'}: outcome 'ran', exit code None",
    )
