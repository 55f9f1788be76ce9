"""`humming-matrix premerge` end to end in a temporary git repository: an unchanged file passes at
once, a bump to the planted bad version fails, a bump to a good one passes (reusing the stored
baseline of the old pin), an uninstallable pin is an infrastructure failure."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.bisect_workspace import Workspace, make_workspace

CUDA_TXT = """\
# Common dependencies
-r common.txt
--extra-index-url https://download.pytorch.org/whl/cu130

# Dependencies for NVIDIA GPUs
torch==2.14.0 ; platform_system == "Linux"
humming-kernels[cu13]=={humming}   # the kernels under test
"""
COMMON = "requests>=2.26\nvllm==0.33.0\n"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
            "HOME": str(repo),
            "PATH": "/usr/bin:/bin",
        },
    )
    return done.stdout


def branch(repo: Path, name: str, cuda_txt: str) -> None:
    git(repo, "checkout", "-q", "-b", name, "main")
    (repo / "requirements" / "cuda.txt").write_text(cuda_txt)
    git(repo, "commit", "-q", "-am", name)
    git(repo, "checkout", "-q", "main")


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = make_workspace(tmp_path_factory.mktemp("premerge"))
    repo = ws.root / "vllm"
    (repo / "requirements").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "requirements" / "cuda.txt").write_text(CUDA_TXT.format(humming="0.1.4"))
    (repo / "requirements" / "common.txt").write_text(COMMON)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "base")
    branch(repo, "bump-bad", CUDA_TXT.format(humming="0.1.6"))
    branch(repo, "bump-good", CUDA_TXT.format(humming="0.1.5"))
    branch(repo, "bump-missing", CUDA_TXT.format(humming="0.1.4.post1"))
    branch(repo, "comment-only", CUDA_TXT.format(humming="0.1.4") + "# a new comment\n")
    branch(repo, "torch-only", CUDA_TXT.format(humming="0.1.4").replace("2.14.0", "2.15.0"))
    return ws


def premerge(ws: Workspace, head: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return ws.cli(
        "premerge",
        "--repo",
        str(ws.root / "vllm"),
        "--base",
        "main",
        "--head",
        head,
        *ws.common_args(),
        *extra,
    )


@pytest.mark.parametrize("head", ["main", "comment-only"])
def test_nothing_guarded_changed_passes_at_once(ws: Workspace, head: str) -> None:
    def probe_logs() -> list[Path]:
        logs = ws.store / "probe-logs"
        return sorted(logs.rglob("*")) if logs.exists() else []

    before = ws.record_files() if ws.store.exists() else set()
    logs_before = probe_logs()
    done = premerge(ws, head)
    assert done.returncode == 0, done.stderr
    base = git(ws.root / "vllm", "rev-parse", "main").strip()
    assert done.stdout.splitlines() == [
        "premerge: nothing to check: no guarded pin (humming-kernels, torch, vllm) changed in "
        f"requirements/cuda.txt since the merge base {base[:12]}"
    ]
    assert (ws.record_files() if ws.store.exists() else set()) == before
    assert probe_logs() == logs_before  # no session was even started


def test_bump_to_bad_fails_and_bump_to_good_passes_reusing_the_baseline(ws: Workspace) -> None:
    markdown = ws.root / "premerge.md"
    bad = premerge(ws, "bump-bad", "--markdown", str(markdown))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    lines = bad.stdout.splitlines()
    assert lines[0] == (
        "premerge: humming-kernels: humming-kernels[cu13]==0.1.4 -> humming-kernels[cu13]==0.1.6"
    )
    assert "premerge: old cell humming-0.1.4, new cell humming-0.1.6" in lines
    assert "premerge: humming-0.1.4: ran" in lines
    assert lines[-1] == (
        "premerge: regression: humming-0.1.4 -> humming-0.1.6: double: regression, -33.33 "
        "points [-51.22, -15.23], mid-p 0.000488, b=10 c=0"
    )
    text = markdown.read_text()
    assert text.startswith("## humming-kernels pre-merge gate: REGRESSION\n")
    change = "humming-kernels[cu13]==0.1.4 -> humming-kernels[cu13]==0.1.6"
    assert f"| humming-kernels | {change} |" in text
    assert "| double | regression | double: regression: 1.0000 -> 0.6667" in text

    records = ws.record_files()
    good = premerge(ws, "bump-good")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "premerge: humming-0.1.4: reused stored records" in good.stdout.splitlines()
    assert "premerge: humming-0.1.5: ran" in good.stdout.splitlines()
    assert good.stdout.splitlines()[-1] == (
        "premerge: pass: humming-0.1.4 -> humming-0.1.5: double: no change detected (could miss "
        "a drop of 21.39 points), +0.00 points [-11.35, +11.35], mid-p 0.5, b=0 c=0"
    )
    assert len(ws.record_files() - records) == 1  # only the new pin ran


def test_uninstallable_pin_is_an_infrastructure_failure(ws: Workspace) -> None:
    done = premerge(ws, "bump-missing")
    assert done.returncode == 3, done.stdout + done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith(
        "premerge: infrastructure failure: the new pin humming-kernels==0.1.4.post1 could not be "
        "tested: nox session humming-0.1.4.post1 exited 1 without a complete record of every "
        "config: "
    )
    assert "| error: No solution found when resolving dependencies: cause: " in last


def test_change_the_matrix_cannot_vary_is_not_a_pass(ws: Workspace) -> None:
    done = premerge(ws, "torch-only")
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        'premerge: torch: torch==2.14.0; platform_system == "Linux" -> '
        'torch==2.15.0; platform_system == "Linux"',
        "premerge: infrastructure failure: the change maps old and new to the same matrix cell "
        "humming-0.1.4: the matrix varies humming-kernels only, so this change cannot be tested "
        "by it",
    ]


def test_unknown_base_is_a_usage_error(ws: Workspace) -> None:
    done = premerge(ws, "HEAD", "--base", "no-such-branch")
    assert done.returncode == 2
    assert done.stderr.startswith("humming-matrix: error: --base no-such-branch: fatal: ")
    assert len(done.stderr.strip().splitlines()) == 1


def test_broken_requirements_file_names_file_and_line(ws: Workspace) -> None:
    repo = ws.root / "vllm"
    branch(repo, "broken", CUDA_TXT.format(humming="0.1.4") + "humming-kernels==!!\n")
    done = premerge(ws, "broken")
    head = git(repo, "rev-parse", "broken").strip()
    assert done.returncode == 2
    assert done.stderr.startswith(
        f"humming-matrix: error: {head[:12]}:requirements/cuda.txt: line 8: not a requirement:"
    )
