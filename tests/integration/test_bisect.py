"""`humming-matrix bisect` end to end: real nox sessions, real venvs with real humming-kernels
wheels (uv, --no-deps), the `vllm` double answering wrongly from the planted first bad version,
a listed version that cannot be installed, store reuse and log resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from humming_matrix.store.results import iter_gsm8k_records
from tests.integration.bisect_workspace import REPO, Workspace, make_workspace


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    return make_workspace(tmp_path_factory.mktemp("bisect"))


def bisect_args(ws: Workspace, *extra: str) -> list[str]:
    return [
        "bisect",
        "--good",
        "0.1.2",
        "--bad",
        "0.1.8",
        *ws.index_args(),
        *ws.common_args(),
        *extra,
    ]


def test_finds_first_bad_skips_uninstallable_then_resumes_and_reuses(ws: Workspace) -> None:
    markdown = ws.root / "bisect.md"
    done = ws.cli(*bisect_args(ws, "--markdown", str(markdown)))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "bisect: first bad 0.1.6, last good 0.1.5" in lines
    sessions = [line for line in lines if line.startswith("bisect: sessions run:")]
    assert sessions == [
        "bisect: sessions run: humming-0.1.2, humming-0.1.8, humming-0.1.4.post1, humming-0.1.5, "
        f"humming-0.1.6; log: {ws.store / 'bisect' / '0.1.2..0.1.8.jsonl'}"
    ]
    skip = next(line for line in lines if line.startswith("bisect: 0.1.4.post1:"))
    assert skip.startswith(
        "bisect: 0.1.4.post1: skip (could not run) - untestable: nox session "
        "humming-0.1.4.post1 exited 1 without a complete record of every config: "
    )
    # uv's own words, with the cause, reach the report.
    assert (
        "| error: No solution found when resolving dependencies: cause: Because there is no "
        "version of humming-kernels==0.1.4.post1"
    ) in skip
    assert (
        "bisect: evidence: double: regression, accuracy 1.0000 -> 0.6667, delta -33.33 points "
        "(95% CI [-51.22, -15.23]), mid-p 0.000488, b=10 c=0; right->wrong questions: "
        "0, 1, 2, 3, 4, 5, 6, 7, 8, 9"
    ) in lines
    link = "https://github.com/vllm-project/humming/compare/v0.1.5...v0.1.6"
    assert f"bisect: changes: {link}" in lines

    # Each record came from its own environment holding the version its session names.
    seen = sorted(
        (r.humming_version, r.environment["session"], r.metrics.accuracy)
        for _, r in iter_gsm8k_records(ws.store)
    )
    assert seen == [
        ("0.1.2", "humming-0.1.2", 1.0),
        ("0.1.5", "humming-0.1.5", 1.0),
        ("0.1.6", "humming-0.1.6", 20 / 30),
        ("0.1.8", "humming-0.1.8", 20 / 30),
    ]
    text = markdown.read_text()
    assert text.startswith(
        "## humming-kernels bisect 0.1.2..0.1.8: first bad 0.1.6, last good 0.1.5\n"
    )
    assert "| 0.1.4.post1 | `humming-0.1.4.post1` | skip | untestable |" in text
    assert "| 0.1.3 | | not probed | | |" in text

    # The same command again resumes from the log: nothing runs at all.
    records_before = ws.record_files()
    again = ws.cli(*bisect_args(ws))
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0].startswith("bisect: resumed 5 verdict(s) from ")
    assert "bisect: first bad 0.1.6, last good 0.1.5" in again.stdout
    assert "bisect: sessions run: none;" in again.stdout

    # A fresh log over the same range reuses the store: no evaluation runs; only the version
    # that never produced a record is tried again (and fails to install again).
    fresh = ws.cli(*bisect_args(ws, "--fresh"))
    assert fresh.returncode == 0, fresh.stderr
    assert "bisect: 0.1.6: bad (stored records)" in fresh.stdout
    assert "bisect: sessions run: humming-0.1.4.post1;" in fresh.stdout
    assert "bisect: first bad 0.1.6, last good 0.1.5" in fresh.stdout
    assert ws.record_files() == records_before
    log = [
        json.loads(x) for x in (ws.store / "bisect" / "0.1.2..0.1.8.jsonl").read_text().splitlines()
    ]
    assert [(e["version"], e["status"]) for e in log if e["event"] == "probe"] == [
        ("0.1.2", "reused"),
        ("0.1.8", "reused"),
        ("0.1.4.post1", "untestable"),
        ("0.1.5", "reused"),
        ("0.1.6", "reused"),
    ]


def test_untestable_good_endpoint_exits_3(ws: Workspace) -> None:
    done = ws.cli(
        "bisect",
        "--good",
        "0.1.4.post1",
        "--bad",
        "0.1.8",
        *ws.index_args(),
        *ws.common_args(),
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert (
        "bisect: endpoints could not be verified: good endpoint 0.1.4.post1 tested skip"
        in done.stdout.splitlines()
    )


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("0.1.8", "0.1.2", "humming-matrix: error: --good 0.1.8 must be older than --bad 0.1.2"),
        ("nightly", "0.1.2", "humming-matrix: error: --good: not a version: 'nightly'"),
    ],
)
def test_bad_range_is_a_one_line_usage_error(
    ws: Workspace, good: str, bad: str, message: str
) -> None:
    done = ws.cli("bisect", "--good", good, "--bad", bad, *ws.index_args(), *ws.common_args())
    assert (done.returncode, done.stderr.strip()) == (2, message)


def test_matrix_without_a_pairing_is_refused_before_anything_runs(
    ws: Workspace, tmp_path: Path
) -> None:
    links = tmp_path / "links"
    links.mkdir()
    (links / "humming_kernels-0.2.1-py3-none-any.whl").touch()
    done = ws.cli(
        "bisect",
        "--good",
        "0.1.8",
        "--bad",
        "0.2.1",
        "--find-links",
        str(links),
        "--index-cache",
        str(tmp_path / "cache"),
        *ws.common_args(),
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"humming-matrix: error: {ws.root / 'matrix.toml'}: pairing: no pairing's humming "
        "range covers version 0.2.1"
    )


def test_nox_bisect_session_forwards_to_the_cli(ws: Workspace) -> None:
    """`nox -s bisect -- ARGS` (the nightly job's entry point) runs `humming-matrix bisect ARGS`
    in its own venv; its probes find nox on PATH. Over the range the first test bisected, the
    log answers everything and no probe runs."""
    first = ws.cli(*bisect_args(ws))
    assert first.returncode == 0, first.stderr
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nox",
            "-f",
            str(REPO / "noxfile.py"),
            "--envdir",
            str(ws.root / "envs"),
            "-s",
            "bisect",
            "--",
            *bisect_args(ws)[1:],
        ],
        capture_output=True,
        text=True,
        env=ws.env,
        timeout=300,
        check=False,
        cwd=ws.root,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "bisect: first bad 0.1.6, last good 0.1.5" in out
    assert "bisect: sessions run: none;" in out
