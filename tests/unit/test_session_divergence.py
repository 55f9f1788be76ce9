"""The divergence stage of a matrix session (cli/session.py, docs/divergence.md): the configs a
divergence list names get `divergence run --repeat 2` after the GSM8K stage, under the same GPU
lease; HUMMING_MATRIX_DIVERGENCE_ONLY=1 runs it for every config and leaves GSM8K out; the
session's code is the worse of its stages'. The installed packages, GPUs, preflight and the
commands are the seams (tests/integration/test_divergence_cli.py runs the stage for real)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from humming_matrix.cli import build_parser
from humming_matrix.cli.session import Seams, execute
from humming_matrix.divergence.passes import DIVERGENCE_LIST_ENV, DIVERGENCE_ONLY_ENV
from humming_matrix.errors import ConfigError
from tests.unit.test_preflight_session import CONFIG, H200, MATRIX, SeamsDouble, passing

OTHER = CONFIG.parent / "Qwen3-30B-A3B-MXFP4A16-humming.yaml"


class CodesDouble(SeamsDouble):
    """TEST DOUBLE of the command and GPU lease seams: answers each subcommand with its own exit
    code, and notes whether the lease was held when it ran."""

    def __init__(self, codes: dict[str, int]) -> None:
        super().__init__(passing())
        self.codes = codes
        self.held = False
        self.leases: list[tuple[str, int]] = []
        self.under_lease: list[bool] = []

    def command(self, argv: Sequence[str]) -> int:
        super().command(argv)
        self.under_lease.append(self.held)
        return self.codes[argv[0]]

    @contextlib.contextmanager
    def gpu_lease(self, owner: str, needed: int) -> Iterator[None]:
        self.leases.append((owner, needed))
        self.held = True
        try:
            yield
        finally:
            self.held = False


@pytest.fixture
def matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(MATRIX, encoding="utf-8")
    monkeypatch.setenv("HUMMING_MATRIX_FILE", str(path))
    monkeypatch.delenv("HUMMING_MATRIX_GPUS", raising=False)
    return path


def divergence_list(tmp_path: Path, *configs: Path) -> Path:
    path = tmp_path / "divergence-list.txt"
    path.write_text("".join(f"{os.path.relpath(c, tmp_path)}\n" for c in configs))
    return path


def run_session(tmp_path: Path, calls: CodesDouble, environ: dict[str, str], *options: str) -> int:
    args = build_parser().parse_args(
        [
            "session",
            "--record",
            str(tmp_path / "env" / "humming-install.json"),
            "--results",
            str(tmp_path / "store"),
            *options,
            "humming-0.1.19",
            "--",
            "--config",
            str(CONFIG),
            "--config",
            str(OTHER),
            "--limit",
            "5",
        ]
    )
    seams = Seams(
        packages=lambda: {"humming-kernels": "0.1.19", "vllm": "0.33.0"},
        gpus=lambda: [H200],
        preflight=calls.run_preflight,
        command=calls.command,
        gpu_lease=calls.gpu_lease,
    )
    return execute(args, seams, environ)


def test_a_listed_config_gets_a_divergence_stage_after_gsm8k(tmp_path: Path, matrix: Path) -> None:
    calls = CodesDouble({"run": 1, "divergence": 0})
    # A config the list names and the run does not (gpt-oss) is left out.
    listed = divergence_list(tmp_path, OTHER, CONFIG.parent / "gpt-oss-20b-humming.yaml")
    code = run_session(tmp_path, calls, {}, "--divergence-list", str(listed))
    store = str(tmp_path / "store")
    assert calls.commands == [
        [
            "run",
            "--config",
            str(CONFIG),
            "--config",
            str(OTHER),
            "--limit",
            "5",
            "--results",
            store,
        ],
        [
            "divergence",
            "run",
            "--config",
            str(OTHER),
            "--results",
            store,
            "--limit",
            "5",
            "--repeat",
            "2",
        ],
    ]
    assert code == 1  # the worse of the two stages
    # One lease for both stages: the GPUs the GSM8K server had, the divergence server gets.
    assert (calls.leases, calls.under_lease) == ([("humming-0.1.19", 1)], [True, True])


def test_the_list_may_come_from_the_environment_and_a_fault_wins(
    tmp_path: Path, matrix: Path
) -> None:
    calls = CodesDouble({"run": 1, "divergence": 3})
    listed = divergence_list(tmp_path, CONFIG, OTHER)
    code = run_session(tmp_path, calls, {DIVERGENCE_LIST_ENV: str(listed)})
    assert [c[:4] for c in calls.commands] == [
        ["run", "--config", str(CONFIG), "--config"],
        ["divergence", "run", "--config", str(CONFIG)],
    ]
    assert calls.commands[1][4:6] == ["--config", str(OTHER)]
    assert code == 3


def test_without_a_list_there_is_no_divergence_stage(tmp_path: Path, matrix: Path) -> None:
    calls = CodesDouble({"run": 0})
    assert run_session(tmp_path, calls, {}) == 0
    assert [c[0] for c in calls.commands] == ["run"]


def test_divergence_only_runs_every_config_and_no_gsm8k(tmp_path: Path, matrix: Path) -> None:
    calls = CodesDouble({"divergence": 0})
    assert run_session(tmp_path, calls, {DIVERGENCE_ONLY_ENV: "1"}) == 0
    assert calls.commands == [
        [
            "divergence",
            "run",
            "--config",
            str(CONFIG),
            "--config",
            str(OTHER),
            "--results",
            str(tmp_path / "store"),
            "--limit",
            "5",
            "--repeat",
            "2",
        ],
    ]


def test_a_list_naming_a_missing_config_is_refused_before_anything_runs(
    tmp_path: Path, matrix: Path
) -> None:
    calls = CodesDouble({})
    listed = tmp_path / "divergence-list.txt"
    listed.write_text("missing.yaml\n")
    with pytest.raises(ConfigError) as raised:
        run_session(tmp_path, calls, {}, "--divergence-list", str(listed))
    assert str(raised.value) == f"{listed}: line 1: missing.yaml: no such config file"
    assert raised.value.exit_code == 2
    assert calls.commands == []
    record = json.loads((tmp_path / "env" / "humming-install.json").read_text())
    assert (record["outcome"], record["exit_code"]) == ("error", 2)
