"""The GPU side of the kernel tier, with the installed torch and humming-kernels (opt in: -m gpu).

Run where a CUDA GPU and humming-kernels are installed, e.g. on the lent H200:
    PYTHONPATH=<humming site>:src python3 -m pytest -m gpu tests/gpu/test_kernels_gpu.py
"""

from __future__ import annotations

import io
import json
import threading
import time
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

# The probe module imports torch-dependent code lazily, so this module collects anywhere.
from humming_matrix.kernels import runner as probe
from humming_matrix.kernels.assess import BOUND, BOUND_WITH_TIES
from humming_matrix.kernels.cases import Activation, GemmKind, KernelCase, WeightDist, WeightScheme
from humming_matrix.kernels.inputs import make_activations, make_routing, make_weights
from humming_matrix.kernels.judge import CaseState, assess_case
from humming_matrix.kernels.reference import dequantize, measure, reference_dense, reference_moe

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def humming(torch: Any) -> None:
    """humming-kernels beside the GPU (conftest's `torch`), checked only when selected."""
    pytest.importorskip("humming")


DENSE = KernelCase(
    name="mxfp4-bf16-small",
    model="test",
    scheme=WeightScheme.MXFP4,
    activation=Activation.BF16,
    kind=GemmKind.DENSE,
    shape_n=1024,
    shape_k=512,
    shards=(512, 256, 256),
)
MOE = replace(
    DENSE, name="moe-mxfp4-bf16-small", kind=GemmKind.MOE, shards=(512, 512), num_experts=8, top_k=2
)
GPTQ = replace(DENSE, name="gptq-small", scheme=WeightScheme.GPTQ_INT4_G128, shards=(512, 512))
FP8_BLOCK = replace(DENSE, name="fp8-block-small", scheme=WeightScheme.FP8_BLOCK, shards=(512, 512))
FP8_BLOCK_MOE = replace(MOE, name="moe-fp8-block-small", scheme=WeightScheme.FP8_BLOCK)
FP8_CHANNEL = replace(DENSE, name="fp8-channel-small", scheme=WeightScheme.FP8_CHANNEL)
INT8_CHANNEL_MOE = replace(MOE, name="moe-int8-w8a8-small", scheme=WeightScheme.INT8_CHANNEL)
AWQ_MOE = replace(MOE, name="moe-awq-small", scheme=WeightScheme.AWQ_INT4_G128)
GPTQ_MOE_INT8 = replace(
    MOE, name="moe-gptq-int8-small", scheme=WeightScheme.GPTQ_INT4_G128, activation=Activation.INT8
)


# A worker's plan for one case: two draws, a decode and a prefill size, no weight cache.
PLAN: dict[str, Any] = {
    "seed": 0,
    "draws": 2,
    "repeats": 3,
    "batch_sizes": [1, 256],
    "cache_dir": None,
}


@pytest.mark.parametrize(
    "case",
    [DENSE, MOE, GPTQ, FP8_BLOCK, FP8_BLOCK_MOE, FP8_CHANNEL, INT8_CHANNEL_MOE, AWQ_MOE],
    ids=lambda c: c.name,
)
def test_gpu_dequantisation_equals_the_numpy_reference(case: KernelCase) -> None:
    weights = make_weights(case, 0)
    on_gpu = probe._Checkpoint(weights).dequantize().cpu().numpy()
    assert np.array_equal(on_gpu, dequantize(weights))


@pytest.mark.parametrize("case", [DENSE, MOE], ids=lambda c: c.name)
def test_gpu_references_equal_the_numpy_reference(torch: Any, case: KernelCase) -> None:
    weights = make_weights(case, 0)
    w = dequantize(weights)
    x = make_activations(16, case.shape_k, 0)
    ids = make_routing(16, MOE.num_experts, MOE.top_k, 0).topk_ids if case is MOE else None

    def numpy_reference(xs: Any, ws: Any) -> Any:
        return reference_dense(xs, ws) if ids is None else reference_moe(xs, ws, ids)

    checkpoint = probe._Checkpoint(weights)
    xq = x * 0.5  # stands in for quantised activations: `plain` must use x, not these
    ties = np.where(np.arange(x.size).reshape(x.shape) % 7 == 0, 0.25, 0.0).astype(np.float32)
    xq_gpu, x_gpu, ties_gpu = (torch.from_numpy(a).cuda() for a in (xq, x, ties))
    got = probe._references(checkpoint, xq_gpu, x_gpu, ties_gpu, ids)
    expected = {
        "ref": numpy_reference(xq, w),
        "abs": numpy_reference(np.abs(xq), np.abs(w)),
        "natural": numpy_reference(xq * xq, w * w),
        "plain": numpy_reference(x, w),
        "ties": numpy_reference(ties, np.abs(w)),
    }
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        np.testing.assert_allclose(got[name].cpu().numpy(), want, rtol=1e-4, atol=1e-4)
    norms = checkpoint.row_norms_sq()
    np.testing.assert_allclose(norms, np.sum(w.astype(np.float64) ** 2, axis=-1), rtol=1e-5)


def test_gpu_rel_err_equals_the_numpy_measure(torch: Any) -> None:
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((64, 96)).astype(np.float32)
    out = (ref + 1e-3 * rng.standard_normal((64, 96))).astype(np.float32)
    got = probe._rel_err(torch.from_numpy(out).cuda(), torch.from_numpy(ref).cuda())
    assert got == pytest.approx(measure(out, ref).rel_err, rel=1e-12)
    out[3, 5] = np.nan
    assert probe._rel_err(torch.from_numpy(out).cuda(), torch.from_numpy(ref).cuda()) == np.inf


@pytest.mark.parametrize(
    "case",
    [
        DENSE,
        replace(DENSE, name="mxfp4-fp8-small", activation=Activation.FP8_E4M3),
        MOE,
        GPTQ,
        GPTQ_MOE_INT8,
        replace(MOE, name="moe-mxfp4-wide-small", weights=WeightDist.WIDE_SCALES),
        FP8_BLOCK,
        replace(FP8_BLOCK_MOE, name="moe-fp8-block-fp8-small", activation=Activation.FP8_E4M3),
        FP8_CHANNEL,
        replace(INT8_CHANNEL_MOE, name="moe-int8-w8a8-int8-small", activation=Activation.INT8),
        AWQ_MOE,
    ],
    ids=lambda c: c.name,
)
def test_installed_humming_builds_and_matches_the_reference(case: KernelCase) -> None:
    plan = dict(PLAN)
    stream = io.StringIO()
    result = probe.run_case(case, plan, probe.Events(stream), 0)
    state, batches = assess_case(result)
    # Within the rounding bound; some releases' kernels are not bit-identical on relaunch (a
    # finding the tier reports as `nondeterministic`, not a failure of this test).
    assert state in (CaseState.OK, CaseState.NONDETERMINISTIC), json.dumps(result, default=str)[
        :2000
    ]
    assert [b["m"] for b in batches] == [1, 256]
    for batch in batches:
        assert batch["nan"] == 0
        assert batch["time"]["median_ms"] > 0
        assert (
            batch["time"]["graph"] is (batch["m"] <= probe.GRAPH_MAX_M)
            or batch["time"]["graph_error"]
        )
        assert len(batch["rel_err"]) == 2
        assert batch["bound"] == (BOUND_WITH_TIES if case.activation.quantized else BOUND)
        assert max(batch["err_units"] + batch["worst_channel_units"]) <= 1.0
        assert len(batch["deterministic"]) == 2
        assert {"inputs", "compile", "gpu_wait", "gpu_check", "host_check", "gpu_timing"} == set(
            batch["seconds"]
        )
        if case.kind is GemmKind.MOE:
            assert max(batch["worst_expert_units"]) <= 1.0
    # Each draw's check, and the one timing turn, entered (under the watchdog's GPU limit) and
    # left again: the watchdog's evidence of where a worker is.
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    turns = [(e["stage"], e["m"], e.get("on_gpu")) for e in events if "m" in e and "stage" in e]
    per_size = [
        [("gpu_check", m, True), ("left_gpu", m, None)] * PLAN["draws"] + [("batch", m, None)]
        for m in PLAN["batch_sizes"]
    ]
    assert turns == [
        *(turn for size in per_size for turn in size),
        ("gpu_timing", None, True),
        ("left_gpu", None, None),
    ]


@pytest.mark.parametrize("case", [DENSE, GPTQ, FP8_CHANNEL], ids=lambda c: c.name)
def test_compiling_only_the_used_dense_kernels_runs_the_same_kernels(case: KernelCase) -> None:
    from humming_matrix.kernels import adapter

    def run(compiled: str) -> dict[str, Any]:
        return probe.run_case(case, {**PLAN, "compile": compiled}, probe.Events(io.StringIO()), 0)

    whole, used = run("all"), run("used")
    # The rows the batch sizes (1 and 256) dispatch to, each with its own token range.
    layer = adapter.build(
        case, probe.load_weights(case, 0, None), probe_device(), PLAN["batch_sizes"]
    )
    table, rows = layer.dense_table(), layer.dense_tuning()
    assert rows == [r for r in table if adapter._serves(r, 1) or adapter._serves(r, 256)]
    assert whole["dense_kernels"] == {"table": len(table), "compiled": len(table)}
    assert used["dense_kernels"] == {"table": len(table), "compiled": len(rows)}
    # The same kernel configs picked, and where both runs' outputs are bit-identical on
    # relaunch, the same bytes.
    assert [b["kernel_config"] for b in used["batches"]] == [
        b["kernel_config"] for b in whole["batches"]
    ]
    assert all(b["kernel_config"] for b in whole["batches"])
    steady = [
        (w["output_sha256"], u["output_sha256"])
        for w, u in zip(whole["batches"], used["batches"], strict=True)
        if all(w["deterministic"] + u["deterministic"])
    ]
    assert steady, json.dumps(whole, default=str)[:2000]
    assert all(w == u for w, u in steady)


def probe_device() -> Any:
    import torch

    return torch.device("cuda", torch.cuda.current_device())


class _LayerThatCannotCompile:
    """A real built layer whose calls fail as an uncompilable kernel does (0.1.8's int8 w8a8)."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer

    def routing(self, topk_ids: Any, device: Any) -> Any:
        return self.layer.routing(topk_ids, device)

    def table_rows(self) -> Any:
        return self.layer.table_rows()

    def call(self, x: Any, moe: Any) -> Any:
        def fail() -> Any:
            raise RuntimeError("<class 'humming.jit.compiler.NVRTCCompiler'> run failed")

        return fail


def test_a_case_with_nothing_to_time_takes_no_timing_turn(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from humming_matrix.kernels import adapter

    real_build = adapter.build
    monkeypatch.setattr(adapter, "build", lambda *a: _LayerThatCannotCompile(real_build(*a)))
    lock = str(tmp_path / "gpu.lock")
    plan = {**PLAN, "gpu_lock": lock}
    stream = io.StringIO()
    done: list[dict[str, Any]] = []
    # Another worker's check holds the GPU (shared) throughout: an exclusive timing turn would
    # wait for it forever; the checks of this case share it.
    with probe.gpu_turn(lock, exclusive=False):
        worker = threading.Thread(
            target=lambda: done.append(probe.run_case(GPTQ, plan, probe.Events(stream), 0)),
            daemon=True,
        )
        worker.start()
        worker.join(300)
        assert done, "the case waited for a timing turn it had nothing to time in"
    result = done[0]
    assert [b["error"] for b in result["batches"]] == [
        "RuntimeError: <class 'humming.jit.compiler.NVRTCCompiler'> run failed"
    ] * 2
    assert "timing_wait_seconds" not in result
    stages = [json.loads(line).get("stage") for line in stream.getvalue().splitlines()]
    # The first call at 256 tokens only launches (the table compiled at 1 token): a shared turn,
    # left when it raises.
    assert stages == ["built", "batch", "first_call", "left_gpu", "batch"]


@pytest.mark.parametrize("alone", [False, True], ids=["beside-others", "alone"])
def test_a_case_run_alone_holds_the_gpu_from_its_first_check_to_its_timing(
    tmp_path: Any, alone: bool
) -> None:
    # Another worker's check holds the GPU (shared) until this case waits for it. Beside others,
    # the case launches and checks under that shared turn and first waits for its timing turn;
    # run alone (the watchdog's rerun of a hang, `kernels --alone`), it makes its first call at
    # its first batch size (the whole table's compile) beside the others, waits once, before its
    # first check, and holds the GPU until its timing is done: a check asked for meanwhile waits
    # for all of it.
    lock = str(tmp_path / "gpu.lock")
    plan = {**PLAN, "gpu_lock": lock, "alone": alone}
    stream = io.StringIO()
    done: list[dict[str, Any]] = []

    def stages() -> list[str]:
        return [json.loads(line).get("stage") for line in stream.getvalue().splitlines()]

    with probe.gpu_turn(lock, exclusive=False):
        worker = threading.Thread(
            target=lambda: done.append(probe.run_case(DENSE, plan, probe.Events(stream), 0)),
            daemon=True,
        )
        worker.start()
        deadline = time.monotonic() + 300
        while "gpu_wait" not in stages() and time.monotonic() < deadline:
            time.sleep(0.2)
    if alone:
        deadline = time.monotonic() + 300
        while "gpu_check" not in stages() and time.monotonic() < deadline:
            time.sleep(0.05)
        with probe.gpu_turn(lock, exclusive=False):
            timed_first = "timed" in stages()
    worker.join(300)
    assert done, "the case never finished"
    state, _ = assess_case(done[0])
    assert state in (CaseState.OK, CaseState.NONDETERMINISTIC)
    seen = stages()
    first_wait, first_check = seen.index("gpu_wait"), seen.index("gpu_check")
    if alone:
        assert seen[:first_wait] == ["built", "first_call"]
        assert first_wait < first_check
        assert "gpu_wait" not in seen[first_check:]
        # The whole table compiled on the first call (no `compile` in the plan): the first
        # call at 256 tokens only launches, a GPU turn's work under the short limit.
        firsts = [json.loads(line) for line in stream.getvalue().splitlines()]
        firsts = [e for e in firsts if e.get("stage") == "first_call"]
        assert [(e["m"], e.get("on_gpu")) for e in firsts] == [(1, None), (256, True)]
        assert timed_first
        assert done[0]["alone_wait_seconds"] > 0
    else:
        # Its later first calls only launch: shared turns like its checks (the test's shared
        # turn does not hold them back), so it first waits for its timing turn.
        firsts = [json.loads(line) for line in stream.getvalue().splitlines()]
        firsts = [e for e in firsts if e.get("stage") == "first_call"]
        assert [(e["m"], e.get("on_gpu")) for e in firsts] == [(256, True)]
        assert first_wait > max(i for i, stage in enumerate(seen) if stage == "gpu_check")
