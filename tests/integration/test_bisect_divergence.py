"""`humming-matrix bisect --tier divergence` through the real CLI over a store of recorded
divergence passes (an A/A pair per version, written as the sessions' divergence stage writes
them; the toy model perturbed from the planted first bad version on), with one listed version
that has no records and whose nox session cannot install (tests/doubles/
noxfile_uninstallable_double.py): it is skipped, never bad."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from humming_matrix.divergence.record import load_divergence_records
from humming_matrix.suite.config import load_config
from tests.doubles.divergence_pass_double import write_pass
from tests.integration.bisect_workspace import LISTED as REAL_LISTED
from tests.integration.bisect_workspace import gsm8k_dir

REPO = Path(__file__).resolve().parents[2]
NOXFILE = REPO / "tests" / "doubles" / "noxfile_uninstallable_double.py"
LISTED = ("0.1.2", "0.1.3", "0.1.4", "0.1.5", "0.1.6", "0.1.7", "0.1.8")
UNRUNNABLE = "0.1.5"
FIRST_BAD = "0.1.4"
LIMIT = 30
MATRIX = """\
[matrix]
schema_version = 1

[recipe.humming_only]
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 0
preflight = false

[variant.cpu]
description = "no CUDA"

[[pairing]]
humming = ">=0.1.0,<0.2"
versions = ["0.1.2"]
variants = ["cpu"]
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    links = tmp_path / "links"
    links.mkdir()
    for version in LISTED:
        (links / f"humming_kernels-{version}-py3-none-any.whl").touch()
    (tmp_path / "matrix.toml").write_text(MATRIX)
    config = tmp_path / "toy.yaml"
    config.write_text(
        'model_name: "toy"\naccuracy_threshold: 0.0\nnum_questions: 1319\nnum_fewshot: 0\n'
    )
    loaded = load_config(config)
    for n, version in enumerate(LISTED):
        if version == UNRUNNABLE:
            continue
        shift = 0.3 if Version(version) >= Version(FIRST_BAD) else 0.0
        for repeat in range(2):
            write_pass(
                tmp_path / "store",
                loaded,
                version,
                f"humming-{version}",
                LIMIT,
                seed=10 * n + repeat,
                shift=shift,
            )
    return tmp_path


def bisect(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "NOXFILE_DOUBLE_VERSIONS": ",".join(LISTED),
        "HUMMING_MATRIX_FILE": str(root / "matrix.toml"),
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "bisect",
            "--tier",
            "divergence",
            "--good",
            "0.1.2",
            "--bad",
            "0.1.8",
            "--find-links",
            str(root / "links"),
            "--index-cache",
            str(root / "ic"),
            "--config",
            str(root / "toy.yaml"),
            "--limit",
            str(LIMIT),
            "--results",
            str(root / "store"),
            "--noxfile",
            str(NOXFILE),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
        cwd=root,
    )


def test_finds_the_first_diverged_version_and_skips_the_unrunnable_one(workspace: Path) -> None:
    markdown = workspace / "bisect.md"
    done = bisect(workspace, "--markdown", str(markdown))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "bisect: first bad 0.1.4, last good 0.1.3" in lines, done.stdout
    verdicts = [
        line.split(" - ")[0] for line in lines if line.startswith("bisect: 0.") and " - " in line
    ]
    assert verdicts == [
        "bisect: 0.1.2: good (stored records)",
        "bisect: 0.1.8: bad (stored records)",
        "bisect: 0.1.5: skip (could not run)",
        "bisect: 0.1.4: bad (stored records)",
        "bisect: 0.1.3: good (stored records)",
    ]
    skip = next(line for line in lines if line.startswith("bisect: 0.1.5:"))
    assert skip == (
        "bisect: 0.1.5: skip (could not run) - untestable: nox session humming-0.1.5 exited 1 "
        "without two complete divergence records of every config: error: No solution found "
        "when resolving dependencies: humming-kernels==0.1.5 has no wheel here"
    )
    evidence = next(line for line in lines if line.startswith("bisect: evidence: "))
    assert evidence.startswith(f"bisect: evidence: toy: diverged on {LIMIT} questions: kl ")
    assert f"above {LIMIT} below 0" in evidence
    log_path = workspace / "store" / "bisect" / "0.1.2..0.1.8.divergence.jsonl"
    assert f"bisect: sessions run: humming-0.1.5; log: {log_path}" in lines
    log = [json.loads(x) for x in log_path.read_text().splitlines()]
    assert log[0]["plan"]["tier"] == "divergence"
    assert [(e["version"], e["verdict"]) for e in log if e["event"] == "probe"] == [
        ("0.1.2", "good"),
        ("0.1.8", "bad"),
        ("0.1.5", "skip"),
        ("0.1.4", "bad"),
        ("0.1.3", "good"),
    ]
    assert (log[-1]["conclusion"], log[-1]["first_bad"]) == ("found", "0.1.4")
    assert markdown.read_text().startswith(
        "## humming-kernels bisect 0.1.2..0.1.8: first bad 0.1.4, last good 0.1.3\n"
    )


def test_an_untestable_good_version_exits_3(workspace: Path) -> None:
    for path in (workspace / "store").glob("divergence__toy__0.1.2__*.json"):
        path.unlink()
    env_versions = bisect(workspace)
    assert env_versions.returncode == 3, env_versions.stdout + env_versions.stderr
    assert (
        "bisect: endpoints could not be verified: good endpoint 0.1.2 tested skip"
        in env_versions.stdout.splitlines()
    )


def test_real_sessions_run_the_divergence_stage_and_the_bisect_finds_the_shift(
    tmp_path: Path,
) -> None:
    """The same bisect with real nox sessions of the project's noxfile: each probe installs
    the real humming-kernels wheel into its own venv (uv, --no-deps) and runs the session's
    divergence stage against the logprobs double as `vllm`, which perturbs its logits when the
    venv holds humming-kernels >= 0.1.6. 0.1.4.post1 was never released: its install fails."""
    links = tmp_path / "links"
    links.mkdir()
    for version in REAL_LISTED:
        (links / f"humming_kernels-{version}-py3-none-any.whl").touch()
    (tmp_path / "matrix.toml").write_text(MATRIX)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").symlink_to(REPO / "tests" / "doubles" / "logprobs_double.py")
    policy = {"jitter": 0.01, "shift_if_humming": {">=0.1.6": 0.02}}
    config = tmp_path / "toy.yaml"
    config.write_text(
        'model_name: "toy"\naccuracy_threshold: 0.0\nnum_questions: 1319\n'
        "num_fewshot: 0\nstartup_max_wait_seconds: 60\n"
        f"env:\n  LOGPROBS_DOUBLE_POLICY: '{json.dumps(policy)}'\n"
    )
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HUMMING_MATRIX_FILE": str(tmp_path / "matrix.toml"),
        "HUMMING_MATRIX_GSM8K_DIR": str(gsm8k_dir()),
    }
    for name in ("CUDA_VISIBLE_DEVICES", "HUMMING_MATRIX_SESSION", "HUMMING_MATRIX_INSTALL_RECORD"):
        env.pop(name, None)
    store = tmp_path / "store"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "bisect",
            "--tier",
            "divergence",
            "--good",
            "0.1.2",
            "--bad",
            "0.1.8",
            "--find-links",
            str(links),
            "--index-cache",
            str(tmp_path / "ic"),
            "--config",
            str(config),
            "--limit",
            "8",
            "--results",
            str(store),
            "--noxfile",
            str(REPO / "noxfile.py"),
            "--envdir",
            str(tmp_path / "envs"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "bisect: first bad 0.1.6, last good 0.1.5" in lines, done.stdout
    assert (
        f"bisect: sessions run: humming-0.1.2, humming-0.1.8, humming-0.1.4.post1, "
        f"humming-0.1.5, humming-0.1.6; log: "
        f"{store / 'bisect' / '0.1.2..0.1.8.divergence.jsonl'}"
    ) in lines
    skip = next(line for line in lines if line.startswith("bisect: 0.1.4.post1:"))
    assert skip.startswith(
        "bisect: 0.1.4.post1: skip (could not run) - untestable: nox session "
        "humming-0.1.4.post1 exited 1 without two complete divergence records of every config: "
    )
    # Two passes per probed version, each from its own venv's humming-kernels and session, and
    # no GSM8K record: the probes ran the divergence stage only.
    seen = sorted(
        (r.humming_version, r.environment["session"], r.complete)
        for _, r in load_divergence_records(store)
    )
    assert seen == [
        (v, f"humming-{v}", True) for v in ("0.1.2", "0.1.5", "0.1.6", "0.1.8") for _ in range(2)
    ]
    assert list(store.rglob("gsm8k__*.json")) == []
