"""Pre-merge logic: which pins changed, which cells that makes, and when the matrix cannot say."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import pytest

from humming_matrix.bisect.paired_judge import Judgement, PairedJudge
from humming_matrix.bisect.premerge import cells_for, diff_pins, humming_version, run_gate
from humming_matrix.bisect.search import Verdict
from humming_matrix.bisect.version_runner import ProbeResult, ProbeStatus
from humming_matrix.errors import InfrastructureError, RequirementsError
from humming_matrix.matrix.cells import Cell, Matrix, load_matrix
from humming_matrix.matrix.requirements_file import Pin, parse_requirements
from humming_matrix.store.results import (
    ConfigInfo,
    Gsm8kRecord,
    Metrics,
    QuestionOutcome,
    new_run_id,
    utc_now_iso,
    write_record,
)
from humming_matrix.suite.evaluate import NOT_STARTED
from humming_matrix.suite.server_log import StartupPhase, StartupReport

MATRIX = """\
[matrix]
schema_version = 1

[recipe.vllm]
requirements = ["vllm=={vllm}", "torch=={torch}", "humming-kernels=={humming}"]

[variant.cu130]
torch_backend = "cu130"

[variant.cu128]
torch_backend = "cu128"

[[pairing]]
humming = ">=0.1.0,<0.1.7"
versions = ["0.1.6"]
vllm = "0.24.0"
torch = "2.11.0"
variants = ["cu128"]

[[pairing]]
humming = ">=0.1.7,<0.2"
versions = ["0.1.19"]
vllm = "0.33.0"
torch = "2.14.0"
variants = ["cu130", "cu128"]
"""


def pins(text: str) -> tuple[Pin, ...]:
    return parse_requirements(PurePosixPath("cuda.txt"), lambda _: text)


@pytest.fixture
def matrix(tmp_path: Path) -> Matrix:
    (tmp_path / "m.toml").write_text(MATRIX)
    return load_matrix(tmp_path / "m.toml")


def test_diff_reports_guarded_changes_only() -> None:
    old = pins("torch==2.14.0\nnumpy==1\nhumming-kernels[cu13]==0.1.17\nvllm==0.33.0\n")
    new = pins("torch==2.14.0\nnumpy==2\nhumming-kernels[cu13]==0.1.19\nvllm==0.33.0\n")
    changes = diff_pins(old, new)
    assert [(c.name, c.describe()) for c in changes] == [
        ("humming-kernels", "humming-kernels[cu13]==0.1.17 -> humming-kernels[cu13]==0.1.19"),
    ]


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        ("humming-kernels==0.1.19\n", "# moved\n\nhumming-kernels == 0.1.19  # same\n", []),
        ("humming-kernels==0.1.19\n", "Humming_Kernels==0.1.19\n", []),
        ("humming-kernels[cu12]==0.1.19\n", "humming-kernels[cu13]==0.1.19\n", ["humming-kernels"]),
        ("torch==2.14.0\n", 'torch==2.14.0; platform_machine == "x86_64"\n', ["torch"]),
        ("vllm==0.33.0\n", "", ["vllm"]),
        ("", "torch==2.14.0\n", ["torch"]),
    ],
)
def test_diff_sees_extras_markers_and_removals_but_not_formatting(
    before: str, after: str, changed: list[str]
) -> None:
    assert [c.name for c in diff_pins(pins(before), pins(after))] == changed


def test_cells_for_pairs_each_side_with_its_matrix_cell(matrix: Matrix) -> None:
    old = pins("torch==2.11.0\nhumming-kernels==0.1.6\nvllm==0.24.0\n")
    new = pins("torch==2.14.0\nhumming-kernels==0.1.19\nvllm==0.33.0\n")
    cells = cells_for(matrix, old, new, None, "cuda.txt")
    assert (cells.old.session, cells.new.session) == ("humming-0.1.6", "humming-0.1.19")


def test_cells_for_honours_the_variant(matrix: Matrix) -> None:
    old = pins("humming-kernels==0.1.17\n")
    new = pins("humming-kernels==0.1.19\n")
    cells = cells_for(matrix, old, new, "cu128", "cuda.txt")
    assert (cells.old.session, cells.new.session) == (
        "humming-0.1.17-cu128",
        "humming-0.1.19-cu128",
    )


def test_pins_the_matrix_does_not_pair_are_an_infrastructure_failure(matrix: Matrix) -> None:
    old = pins("torch==2.14.0\nhumming-kernels==0.1.17\n")
    new = pins("torch==2.15.0+cu130\nhumming-kernels==0.1.19\n")
    with pytest.raises(InfrastructureError) as caught:
        cells_for(matrix, old, new, None, "cuda.txt")
    assert str(caught.value) == (
        f"the matrix ({matrix.path}) cannot build these cells: new side: torch is pinned to "
        "2.15.0 but the matrix pairs humming-kernels 0.1.19 with torch 2.14.0; add a pairing "
        "for them (docs/matrix.md)"
    )


def test_same_cell_on_both_sides_cannot_be_tested(matrix: Matrix) -> None:
    old = pins("humming-kernels==0.1.19\nnumpy==1\n")
    with pytest.raises(InfrastructureError) as caught:
        cells_for(matrix, old, old, None, "cuda.txt")
    assert str(caught.value) == (
        "the change maps old and new to the same matrix cell humming-0.1.19: the matrix varies "
        "humming-kernels only, so this change cannot be tested by it"
    )


def test_humming_pin_must_be_exact() -> None:
    with pytest.raises(RequirementsError) as caught:
        humming_version(pins("humming-kernels>=0.1.17\n"), "cuda.txt at HEAD")
    assert str(caught.value) == (
        "cuda.txt at HEAD: humming-kernels: needs exactly one `==` version to gate: "
        "cuda.txt:1 (humming-kernels>=0.1.17)"
    )


def test_missing_humming_pin_is_not_a_pass() -> None:
    with pytest.raises(
        InfrastructureError,
        match=(r"^cuda\.txt at the merge base: no humming-kernels pin, nothing to compare with$"),
    ):
        humming_version(pins("torch==2.14.0\n"), "cuda.txt at the merge base")


class ProberDouble:
    """TEST DOUBLE of the prober: the old pin's probe ran, the new pin's server never became
    ready, having reached `phase`; both write records as `run` does."""

    def __init__(self, store: Path, phase: StartupPhase) -> None:
        self.store = store
        self.phase = phase

    def probe_many(self, cells: Sequence[Cell]) -> list[ProbeResult]:
        old, new = cells
        config = ConfigInfo("cfg", "/c/cfg.yaml", "ab" * 32, {})
        started = write_record(
            self.store,
            Gsm8kRecord(
                new_run_id(),
                utc_now_iso(),
                True,
                config,
                {"humming_kernels": str(old.humming)},
                Metrics(1.0, 0.0, 0, 2, 0.5, 0.08, True, 1.0),
                (QuestionOutcome(0, True, 1, 1), QuestionOutcome(1, True, 2, 2)),
            ),
        )
        report = StartupReport(False, self.phase, 90.0, "vllm serve not ready after 90 s")
        failed = write_record(
            self.store,
            Gsm8kRecord(
                "20261203T000000Z-h-abcdef",
                utc_now_iso(),
                False,
                config,
                {"humming_kernels": str(new.humming)},
                Metrics(0.0, 0.0, 2, 2, 0.5, 0.08, False, 0.0),
                (
                    QuestionOutcome(0, False, None, 1, NOT_STARTED),
                    QuestionOutcome(1, False, None, 2, NOT_STARTED),
                ),
                startup=report.to_json(),
            ),
        )
        return [
            ProbeResult(str(old.humming), old.session, ProbeStatus.RAN, {"cfg": started}),
            ProbeResult(
                str(new.humming),
                new.session,
                ProbeStatus.START_FAILED,
                {"cfg": failed},
                "the server of config cfg never became ready: ...",
            ),
        ]


def gate_0_1_6_to_0_1_5(
    matrix: Matrix, store: Path, phase: StartupPhase
) -> tuple[ProbeResult, Judgement]:
    """Bump 0.1.6 -> 0.1.5 under vLLM 0.24, the new pin's server reaching `phase` only."""
    old = pins("vllm==0.24.0\ntorch==2.11.0\nhumming-kernels==0.1.6\n")
    new = pins("vllm==0.24.0\ntorch==2.11.0\nhumming-kernels==0.1.5\n")
    cells = cells_for(matrix, old, new, None, "cuda.txt")
    _, new_probe, judgement = run_gate(cells, ProberDouble(store, phase), PairedJudge())
    return new_probe, judgement


def test_a_new_pin_whose_server_never_gets_ready_is_a_regression(
    matrix: Matrix, tmp_path: Path
) -> None:
    new_probe, judgement = gate_0_1_6_to_0_1_5(matrix, tmp_path, StartupPhase.WEIGHTS_LOADED)
    assert new_probe.status is ProbeStatus.START_FAILED
    assert judgement.verdict is Verdict.BAD
    assert judgement.summary == (
        "the server of config cfg never became ready: ...; humming-kernels 0.1.6 started in the "
        "same environment (vLLM 0.24.0, torch 2.11.0, cu128)"
    )


def test_a_new_pin_that_dies_before_loading_weights_is_infrastructure(
    matrix: Matrix, tmp_path: Path
) -> None:
    with pytest.raises(InfrastructureError) as caught:
        gate_0_1_6_to_0_1_5(matrix, tmp_path, StartupPhase.LAUNCHED)
    assert str(caught.value) == (
        "the new pin humming-kernels==0.1.5 could not be tested: the server of config cfg never "
        "became ready: ..."
    )


class CrashingProberDouble:
    """TEST DOUBLE of the prober: the old pin's probe ran; the new pin's server served one
    answer and died with a CUDA error, leaving the partial record `run` writes."""

    def __init__(self, store: Path) -> None:
        self.store = store

    def probe_many(self, cells: Sequence[Cell]) -> list[ProbeResult]:
        old, new = cells
        config = ConfigInfo("cfg", "/c/cfg.yaml", "ab" * 32, {})
        started = write_record(
            self.store,
            Gsm8kRecord(
                new_run_id(),
                utc_now_iso(),
                True,
                config,
                {"humming_kernels": str(old.humming)},
                Metrics(1.0, 0.0, 0, 2, 0.5, 0.08, True, 1.0),
                (QuestionOutcome(0, True, 1, 1), QuestionOutcome(1, True, 2, 2)),
            ),
        )
        crashed = write_record(
            self.store,
            Gsm8kRecord(
                new_run_id(),
                utc_now_iso(),
                False,
                config,
                {"humming_kernels": str(new.humming)},
                Metrics(0.5, 0.0, 1, 2, 0.5, 0.08, False, 1.0),
                (
                    QuestionOutcome(0, True, 1, 1),
                    QuestionOutcome(1, False, None, 2, "not asked: the run stopped first"),
                ),
                server={"crash": {"cuda_error": True, "reason": "AcceleratorError: CUDA error"}},
            ),
        )
        return [
            ProbeResult(str(old.humming), old.session, ProbeStatus.RAN, {"cfg": started}),
            ProbeResult(
                str(new.humming),
                new.session,
                ProbeStatus.CRASHED,
                {"cfg": crashed},
                "the server of config cfg crashed while serving with a CUDA error: "
                "AcceleratorError: CUDA error",
            ),
        ]


def test_a_new_pin_whose_server_crashes_in_cuda_is_a_regression(
    matrix: Matrix, tmp_path: Path
) -> None:
    old = pins("vllm==0.24.0\ntorch==2.11.0\nhumming-kernels==0.1.6\n")
    new = pins("vllm==0.24.0\ntorch==2.11.0\nhumming-kernels==0.1.5\n")
    cells = cells_for(matrix, old, new, None, "cuda.txt")
    _, new_probe, judgement = run_gate(cells, CrashingProberDouble(tmp_path), PairedJudge())
    assert judgement.verdict is Verdict.BAD
    assert judgement.summary == (
        "the server of config cfg crashed while serving with a CUDA "
        "error: AcceleratorError: CUDA error"
    )
    assert judgement.evidence == {"cfg": {"record": str(new_probe.records["cfg"])}}
