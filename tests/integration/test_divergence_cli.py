"""`humming-matrix divergence run|compare` end to end: the product's launcher, health wait,
teardown and records, against the logprobs test double (tests/doubles/logprobs_double.py) put
first on PATH as `vllm`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from humming_matrix.cli import build_parser
from humming_matrix.cli.session import Seams, execute
from humming_matrix.divergence.passes import DIVERGENCE_ONLY_ENV
from humming_matrix.divergence.record import load_divergence_records

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "logprobs_double.py"
TEST = [
    json.loads(line)
    for line in (
        Path(os.environ.get("HUMMING_MATRIX_GSM8K_DIR", REPO.parent / "shared" / "gsm8k"))
        / "test.jsonl"
    )
    .read_text(encoding="utf-8")
    .splitlines()
    if line.strip()
]


@pytest.fixture(autouse=True)
def logprobs_double(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "double-bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").symlink_to(DOUBLE)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def config(directory: Path, name: str, policy: Mapping[str, object]) -> Path:
    # No shots: the double's toy model costs per prompt byte.
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(
        'model_name: "toy"\naccuracy_threshold: 0.0\nnum_questions: 12\nnum_fewshot: 0\n'
        f"startup_max_wait_seconds: 60\nenv:\n  LOGPROBS_DOUBLE_POLICY: '{json.dumps(policy)}'\n",
        encoding="utf-8",
    )
    return path


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "humming_matrix", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_repeat_is_same_and_a_shifted_model_diverged(tmp_path: Path) -> None:
    jitter = {"jitter": 0.01}
    base = config(tmp_path / "a", "toy", jitter)
    done = cli(
        "divergence", "run", "--config", base, "--results", tmp_path / "base", "--repeat", "2"
    )
    assert done.returncode == 0, done.stderr
    records = load_divergence_records(tmp_path / "base")
    assert len(records) == 2
    lines = done.stdout.splitlines()
    assert [ln.split(" -> ")[1] for ln in lines] == sorted(str(p) for p, _ in records)
    for _, record in records:
        assert (record.complete, record.top_k) == (True, 5)
        assert (len(record.questions), record.error_count) == (12, 0)
        assert record.server["launched"] is True
        assert "--max-logprobs" in record.server["command"]
        # The launch's own API key (its identity) is sent, never stored.
        command = record.server["command"]
        assert command[command.index("--api-key") + 1] == "***"
        assert (
            f"DONE toy: 12 questions, {record.token_count} answer tokens, top-5, errors 0"
            in done.stdout
        )
        # The answer span is GSM8K's reference answer, byte for byte (the double's tokens).
        assert [bytes(list(q.tokens)) for q in record.questions] == [
            f" {row['answer']}".encode() for row in TEST[:12]
        ]

    # Another launch: its own jitter (the double's noise is seeded, so this test's outcome is
    # the same on every run; it is the outcome an A/A comparison has 95% of the time).
    again = cli(
        "divergence",
        "run",
        "--config",
        config(tmp_path / "c", "toy", {**jitter, "jitter_seed": 2}),
        "--results",
        tmp_path / "again",
    )
    assert again.returncode == 0, again.stderr
    shifted = cli(
        "divergence",
        "run",
        "--config",
        config(tmp_path / "b", "toy", {**jitter, "shift": 0.02}),
        "--results",
        tmp_path / "shifted",
    )
    assert shifted.returncode == 0, shifted.stderr

    same = cli("divergence", "compare", tmp_path / "base", tmp_path / "again")
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.splitlines()[0] == "toy: SAME"
    assert same.stdout.splitlines()[-1] == "0 of 1 config diverged (family-wise alpha 0.05, Holm)"

    out = tmp_path / "out"
    diverged = cli(
        "divergence",
        "compare",
        tmp_path / "base",
        tmp_path / "shifted",
        "--json",
        out / "d.json",
        "--markdown",
        out / "d.md",
        "--junit",
        out / "d.xml",
        "--html",
        out / "d.html",
    )
    assert diverged.returncode == 1, diverged.stdout + diverged.stderr
    assert diverged.stdout.splitlines()[0] == "toy: DIVERGED"
    document = json.loads((out / "d.json").read_text())
    [c] = document["configs"]
    kl = c["tests"][0]
    assert (c["verdict"], c["questions"], kl["metric"], kl["above"]) == ("diverged", 12, "kl", 12)
    assert kl["p_value"] == pytest.approx(0.5**12, rel=1e-12)
    assert "| ❌ diverged | toy | 12 |" in (out / "d.md").read_text()
    assert 'failures="1"' in (out / "d.xml").read_text()
    assert "<polyline" in (out / "d.html").read_text()

    # `compare --tier divergence` is the same judgement; --floor names the A/A pair's records
    # when the baseline is a single record file.
    [newest, older] = sorted(records, key=lambda r: r[1].run_id, reverse=True)
    tier = cli(
        "compare", "--tier", "divergence", newest[0], tmp_path / "shifted", "--floor", older[0]
    )
    assert tier.returncode == 1, tier.stdout + tier.stderr
    assert tier.stdout == diverged.stdout
    no_floor = cli("compare", "--tier", "divergence", newest[0], tmp_path / "shifted")
    assert no_floor.returncode == 2
    assert no_floor.stderr.startswith(
        f"humming-matrix: error: config toy: no A/A floor for baseline {newest[0]}: "
    )


def test_a_server_that_keeps_failing_leaves_a_partial_record_and_exits_3(tmp_path: Path) -> None:
    done = cli(
        "divergence",
        "run",
        "--config",
        config(tmp_path, "toy", {"fail_first": 10_000}),
        "--results",
        tmp_path / "s",
        "--retries",
        "0",
        "--limit",
        "3",
    )
    assert done.returncode == 3, done.stderr
    [error] = [ln for ln in done.stderr.splitlines() if ln.startswith("humming-matrix: error:")]
    [(path, record)] = load_divergence_records(tmp_path / "s")
    assert error == (
        f"humming-matrix: error: toy: 3 divergence requests failed after 0 retries "
        f"(allowed 0); partial record saved: {path}"
    )
    assert not record.complete
    assert {q.error for q in record.questions} == {
        'HTTP 500 from /v1/completions: {"error": "double: failing as told"}'
    }


def test_bad_input_is_one_line_naming_the_file_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "divergence__x.json"
    bad.write_text('{"schema_version": 1, "kind": "divergence"}', encoding="utf-8")
    done = cli("divergence", "compare", bad, bad)
    assert done.returncode == 2
    assert done.stderr == f"humming-matrix: error: {bad}: top_k: missing\n"
    done = cli("divergence", "run", "--config", tmp_path / "none.yaml", "--results", tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "none.yaml" in done.stderr


def test_a_server_that_dies_at_start_leaves_a_record_saying_so(tmp_path: Path) -> None:
    done = cli(
        "divergence",
        "run",
        "--config",
        config(tmp_path, "toy", {"exit_at_start": 1}),
        "--results",
        tmp_path / "s",
        "--limit",
        "2",
    )
    assert done.returncode == 3, done.stderr
    [(_, record)] = load_divergence_records(tmp_path / "s")
    assert (record.complete, record.startup is not None) == (False, True)
    assert record.startup is not None
    assert record.startup["status"] == "failed"
    assert record.startup["reason"] == "vllm serve exited with code 1 before becoming ready"
    assert [q.error for q in record.questions] == ["not asked: the server never became ready"] * 2


SESSION_MATRIX = """\
[recipe.humming_only]
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 0
preflight = false
[variant.cpu]
[[pairing]]
humming = ">=0.1.0,<0.2"
versions = ["0.1.2"]
variants = ["cpu"]
"""


def test_a_matrix_session_divergence_stage_writes_an_a_a_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`humming-matrix session` as `nox -s humming-<v>` runs it, with the divergence stage
    asked for (as a `bisect --tier divergence` probe asks): the real `divergence run`, its
    server the double, two passes against one launch, no GSM8K stage. Only the installed
    packages are a seam (no humming-kernels is installed here)."""
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(SESSION_MATRIX, encoding="utf-8")
    install = tmp_path / "env" / "humming-install.json"
    monkeypatch.setenv("HUMMING_MATRIX_SESSION", "humming-0.1.2")
    monkeypatch.setenv("HUMMING_MATRIX_INSTALL_RECORD", str(install))
    toy = config(tmp_path / "c", "toy", {"jitter": 0.01})
    args = build_parser().parse_args(
        [
            "session",
            "--matrix",
            str(matrix),
            "--results",
            str(tmp_path / "store"),
            "humming-0.1.2",
            "--",
            "--config",
            str(toy),
            "--limit",
            "4",
        ]
    )
    code = execute(
        args,
        Seams(packages=lambda: {"humming-kernels": "0.1.2"}),
        {**os.environ, DIVERGENCE_ONLY_ENV: "1"},
    )
    assert code == 0
    records = load_divergence_records(tmp_path / "store")
    assert [
        (r.config.name, r.complete, len(r.questions), r.environment["session"]) for _, r in records
    ] == [("toy", True, 4, "humming-0.1.2")] * 2
    assert records[0][1].server["command"] == records[1][1].server["command"]
    # The install record the session wrote is in each divergence record, as in a GSM8K one.
    assert records[0][1].environment["install"]["humming_kernels"] == "0.1.2"
    assert list((tmp_path / "store").glob("gsm8k__*")) == []
    outcome = json.loads(install.read_text())
    assert (outcome["outcome"], outcome["exit_code"]) == ("ran", 0)
