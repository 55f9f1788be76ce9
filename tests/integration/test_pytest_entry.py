"""The pytest entry, as vLLM's CI would call it: a real pytest process loads the plugin, collects
one test per config of `--config-list-file`, runs each through the real runner against the
stand-in `vllm`, and writes JUnit XML and records."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from .runner_harness import policy_env, records, write_config

pytestmark = pytest.mark.usefixtures("vllm_double")

SUITE = "humming_matrix.vllm_ci.gsm8k_correctness"


def run_pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "humming_matrix.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "--pyargs",
            SUITE,
            "-v",
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=180,
        check=False,
    )


def test_one_test_per_config_named_by_stem_and_a_failure_carries_the_numbers(
    tmp_path: Path,
) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    write_config(configs, "good", threshold=0.9, questions=10)
    write_config(
        configs, "bad", threshold=0.9, questions=10, env=policy_env({"wrong": [0, 1, 2, 3, 4]})
    )
    (configs / "list.txt").write_text("# vLLM's list format\ngood.yaml\n\n  bad.yaml  \n")

    done = run_pytest(
        tmp_path,
        "--config-list-file=configs/list.txt",
        "--results-dir=store",
        "--question-limit=8",
        "--junitxml=junit.xml",
    )

    assert done.returncode == 1, done.stdout + done.stderr
    cases = ET.parse(tmp_path / "junit.xml").getroot().findall(".//testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        (SUITE, "test_gsm8k_correctness_param[good]"),
        (SUITE, "test_gsm8k_correctness_param[bad]"),
    ]
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure is not None
    assert re.fullmatch(
        r"AssertionError: bad: accuracy 0\.3750 < 0\.9 - 0\.08 = 0\.8200 \(invalid 0\.0000, "
        r"errors 0, 8 questions, run \S+\)",
        failure.get("message", ""),
    )
    by_name = {r.config.name: r for r in records(tmp_path / "store")}
    assert sorted(by_name) == ["bad", "good"]
    assert by_name["good"].metrics.accuracy == 1.0
    assert [q.index for q in by_name["bad"].questions if not q.correct] == [0, 1, 2, 3, 4]
    assert "1 failed, 1 passed" in done.stdout


@pytest.mark.parametrize(
    ("listing", "expected"),
    [
        (
            "good.yaml\nmissing.yaml\n",
            "configs/list.txt: line 2: missing.yaml: no such config file",
        ),
        ("good.yaml\ntypo.yaml\n", "configs/typo.yaml: acuracy_threshold: unknown key"),
    ],
)
def test_a_bad_list_stops_collection_before_any_server_starts(
    tmp_path: Path, listing: str, expected: str
) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    write_config(configs, "good", questions=10)
    (configs / "typo.yaml").write_text(
        (configs / "good.yaml").read_text().replace("accuracy_threshold", "acuracy_threshold")
    )
    (configs / "list.txt").write_text(listing)

    done = run_pytest(tmp_path, "--config-list-file=configs/list.txt", "--results-dir=store")

    assert done.returncode == 2, done.stdout + done.stderr  # pytest: interrupted by an error
    assert f"humming-matrix: {tmp_path / expected}" in done.stdout
    assert "Traceback" not in done.stdout
    assert not (tmp_path / "store").exists()


def test_the_list_option_is_required(tmp_path: Path) -> None:
    done = run_pytest(tmp_path)
    assert done.returncode == 2
    assert "--config-list-file FILE is required" in done.stdout
