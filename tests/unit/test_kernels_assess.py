"""The numerics-derived tolerance (`kernels.assess`) on synthetic outputs: correct kernels (one or
two bf16 roundings, split-K partials kept in bf16) stay within the bound, a single bad channel or a
single bad expert does not; and the kernels package has no import cycle."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from humming_matrix.kernels.assess import (
    BOUND,
    BOUND_WITH_TIES,
    CaseState,
    assess_batch,
    channel_bound,
)
from humming_matrix.kernels.inputs import bf16_round, make_activations

K = 2048
F64 = npt.NDArray[np.float64]


def _operands(m: int, n: int, seed: int = 0) -> tuple[F64, F64]:
    x = make_activations(m, K, seed).astype(np.float64)
    w = bf16_round(np.random.default_rng(seed).standard_normal((n, K)).astype(np.float32) * 0.02)
    return x, w.astype(np.float64)


def _units(out: F64, x: F64, w: F64, rows: npt.NDArray[np.int64] | None = None) -> float:
    """The worst channel's error in bound units (per group of rows when `rows` labels them)."""
    ref = x @ w.T
    natural = (x * x) @ (w * w).T
    absolute = np.abs(x) @ np.abs(w).T
    labels = np.zeros(len(out), dtype=np.int64) if rows is None else rows
    worst = 0.0
    for label in np.unique(labels):
        sel = labels == label
        err = np.sqrt(((out[sel] - ref[sel]) ** 2).sum(0))
        bound = channel_bound(
            np.sqrt((ref[sel] ** 2).sum(0)),
            np.sqrt(natural[sel].sum(0)),
            np.sqrt((absolute[sel] ** 2).sum(0)),
            K,
        )
        worst = max(worst, float((err / bound).max()))
    return worst


def _split_k(x: F64, w: F64, splits: int) -> F64:
    """A split-K kernel whose partial sums are rounded to bf16, then summed and rounded again."""
    parts = [
        bf16_round((x[:, s::splits] @ w[:, s::splits].T).astype(np.float32)) for s in range(splits)
    ]
    return bf16_round(np.sum(parts, axis=0, dtype=np.float32)).astype(np.float64)


def test_correct_kernels_stay_within_the_bound_at_any_batch() -> None:
    for m in (1, 16, 128):
        x, w = _operands(m, 512, seed=m)
        exact = bf16_round((x @ w.T).astype(np.float32)).astype(np.float64)
        assert _units(exact, x, w) <= 0.5  # one rounding: half the 2u allowance at most
        assert _units(_split_k(x, w, 4), x, w) <= 1.0


def test_a_single_bad_channel_is_caught() -> None:
    x, w = _operands(16, 512)
    out = bf16_round((x @ w.T).astype(np.float32)).astype(np.float64)
    out[:, 300] *= 1.04  # one channel of 512 four per cent off
    assert _units(out, x, w) > 1.0
    # The whole output barely moves: a pooled relative error would not see it.
    ref = x @ w.T
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 3e-3


def test_a_single_bad_expert_is_caught_per_expert_not_pooled() -> None:
    x, w = _operands(64, 256)
    experts = np.arange(64) % 8  # token t went to expert t mod 8
    out = bf16_round((x @ w.T).astype(np.float32)).astype(np.float64)
    out[experts == 5, 17] *= 1.1  # one channel of one expert of eight
    assert _units(out, x, w, experts) > 1.0


def _batch(**extra: Any) -> dict[str, Any]:
    return {
        "m": 16,
        "rel_err": [2e-3],
        "worst_row_rel_err": [4e-3],
        "floor": 1.6e-3,
        "nan": 0,
        "inf": 0,
        "bound": BOUND,
        "err_units": [0.2],
        "worst_channel_units": [0.6],
        "deterministic": [True],
        **extra,
    }


def test_batch_states_from_bound_units() -> None:
    assert assess_batch(_batch()) is CaseState.OK
    assert assess_batch(_batch(worst_channel_units=[0.6, 1.3])) is CaseState.FAIL
    assert assess_batch(_batch(worst_expert_units=[9.5])) is CaseState.FAIL
    assert assess_batch(_batch(deterministic=[True, False])) is CaseState.NONDETERMINISTIC
    # Quantized activations: no further from the unquantized product than 2x the quantizer.
    assert assess_batch(_batch(rel_err_vs_unquantized=[0.05], quant_err=[0.024])) is CaseState.OK
    assert assess_batch(_batch(rel_err_vs_unquantized=[0.06], quant_err=[0.024])) is (
        CaseState.FAIL
    )
    # Units written under another bound (the first device trial's) are not judged by this one:
    # the floor rule applies (mean rel_err 2e-3 < 16 x 1.6e-3).
    assert assess_batch(_batch(bound="trial", worst_channel_units=[40.0])) is CaseState.OK


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return {n.rsplit(".", 1)[-1] for n in names if n.startswith("humming_matrix.kernels.")}


def find_cycle(package: Path) -> list[str] | None:
    """A cycle in the imports among the package's modules (function-level imports count)."""
    graph = {p.stem: _imports(p) for p in package.glob("*.py")}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*trail, node, nxt]
            if nxt not in state and (found := visit(nxt, [*trail, node])):
                return found
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module, [])):
            return found
    return None


def test_the_kernels_package_has_no_import_cycle() -> None:
    package = Path(__file__).resolve().parents[2] / "src" / "humming_matrix" / "kernels"
    assert find_cycle(package) is None


def test_units_under_the_bound_with_rounding_ties_are_judged_by_it_and_others_by_the_floor() -> (
    None
):
    assert assess_batch(_batch(bound=BOUND_WITH_TIES, worst_channel_units=[0.9])) is CaseState.OK
    assert assess_batch(_batch(bound=BOUND_WITH_TIES, worst_channel_units=[1.1])) is (
        CaseState.FAIL
    )
    # Units of an unknown bound are not read: the floor rule judges (rel_err 2e-3 < 16 x floor).
    assert assess_batch(_batch(bound="another", worst_channel_units=[9.0])) is CaseState.OK


def test_the_ties_term_adds_to_the_bound_linearly() -> None:
    plain = channel_bound(1.0, 2.0, 3.0, 2048)
    assert channel_bound(1.0, 2.0, 3.0, 2048, 0.25) == plain + 0.25
