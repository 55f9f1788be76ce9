"""The worker: runs kernel cases in this process and streams one JSON line per event.

    python -m humming_matrix.kernels.runner PLAN.json EVENTS.jsonl

It imports torch and humming, so a hung kernel or a crashed CUDA context takes only this process
down; the watchdog (`humming_matrix.kernels.watchdog`) starts a fresh one on the next case. Events:

    {"event": "env", ...}                       versions, GPU (first thing, before any case)
    {"event": "import_error", "message": ...}   humming cannot be imported here: every case is moot
    {"event": "ceilings", ...}                  the GPU's measured TFLOP/s and GB/s (when asked)
    {"event": "start", "index": i, "case": n}   case i begins
    {"event": "progress", "index": i, ...}      built, or one batch size done (the watchdog's pulse)
    {"event": "case", "index": i, "result": {}} case i finished (any outcome but a hang or crash)
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

import numpy as np

from humming_matrix.kernels.assess import BOUND, channel_bound
from humming_matrix.kernels.cases import Activation, GemmKind, KernelCase, WeightScheme
from humming_matrix.kernels.inputs import (
    E2M1_VALUES,
    E8M0_BIAS,
    GPTQ_ZERO,
    GptqWeights,
    Mxfp4Weights,
    Weights,
    digest,
    make_activations,
    make_routing,
    make_weights,
)
from humming_matrix.kernels.reference import (
    FP8_QUANTIZER,
    INT8_QUANTIZER,
    column_scale,
    measure,
    quantize_fp8_per_token,
    quantize_int8_per_token,
)

DETERMINISM_RUNS = 2  # relaunches of every draw at every batch size
GRAPH_MAX_M = 16  # decode sizes: timed from a captured CUDA graph


def quantize_input(case: KernelCase, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if case.activation is Activation.FP8_E4M3:
        return quantize_fp8_per_token(x)
    if case.activation is Activation.INT8:
        return quantize_int8_per_token(x)
    return x


def bound_units(
    out: Any, ref: Any, natural: Any, abs_ref: Any, k: int, topk_ids: Any
) -> dict[str, Any]:
    """Errors in units of the rounding bound (`assess.channel_bound`): the whole output, the
    worst channel, and for MoE the worst (expert, channel) pair. `natural` is x^2 @ w^2^T and
    `abs_ref` |x| @ |w|^T, row for row with `ref`."""
    import torch

    diff = out.double() - ref.double()
    diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
    d2, r2, n2, q2 = diff * diff, ref.double() ** 2, natural.double(), abs_ref.double() ** 2

    def ratio(dd: Any, rr: Any, nn: Any, qq: Any) -> Any:
        bound = channel_bound(torch.sqrt(rr), torch.sqrt(nn), torch.sqrt(qq), k)
        err = torch.sqrt(dd)
        safe = torch.where(bound > 0, bound, torch.ones_like(bound))
        return torch.where(bound > 0, err / safe, torch.where(err > 0, math.inf, 0.0))

    result: dict[str, Any] = {
        "err_units": float(ratio(d2.sum(), r2.sum(), n2.sum(), q2.sum())),
        "worst_channel_units": float(ratio(d2.sum(0), r2.sum(0), n2.sum(0), q2.sum(0)).max()),
    }
    if topk_ids is not None:
        ids = torch.from_numpy(topk_ids.reshape(-1)).to(out.device).long()
        e = int(topk_ids.max()) + 1

        def per_expert(t: Any) -> Any:
            zeros = torch.zeros((e, t.shape[1]), dtype=t.dtype, device=t.device)
            return zeros.index_add_(0, ids, t)

        units = ratio(per_expert(d2), per_expert(r2), per_expert(n2), per_expert(q2))
        flat = int(torch.argmax(units))
        result["worst_expert_units"] = float(units.reshape(-1)[flat])
        result["worst_expert"] = flat // units.shape[1]
    return result


class Events:
    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def emit(self, event: str, **fields: Any) -> None:
        self.stream.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")
        self.stream.flush()


@contextmanager
def gpu_turn(lock_path: str | None) -> Iterator[None]:
    """Exclusive use of the GPU among workers sharing `lock_path`.

    Several humming versions can run at once on one GPU (their JIT compiles and numpy work are
    CPU-bound); every launch whose time or memory traffic matters (the kernel, the reference,
    the timing loop, the ceilings) takes this lock, so no other worker's kernels overlap it.
    """
    if not lock_path:
        yield
        return
    with open(lock_path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def describe(exc: BaseException) -> str:
    """`Type: message`; for a bare `assert` (no message) the failing line, which says what."""
    text = f"{type(exc).__name__}: {exc}".strip()
    if str(exc):
        return text
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return text
    last = frames[-1]
    where = "/".join(Path(last.filename).parts[-3:])
    return f"{text} at {where}:{last.lineno}: {(last.line or '').strip()}"


def load_weights(case: KernelCase, seed: int, cache_dir: Path | None) -> Weights:
    """Seeded weights, cached on disk so that every version's worker loads the same bytes fast."""
    if cache_dir is None:
        return make_weights(case, seed)
    path = cache_dir / f"weights-{case.weight_key()}-{seed}.npz"
    if path.is_file():
        with np.load(path) as data:
            if case.scheme is WeightScheme.MXFP4:
                return Mxfp4Weights(codes=data["codes"], scales=data["scales"])
            return GptqWeights(codes=data["codes"], scales=data["scales"])
    weights = make_weights(case, seed)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    np.savez(tmp, codes=weights.codes, scales=weights.scales)
    os.replace(tmp, path)
    return weights


def _dequantize_on_gpu(weights: Weights) -> Any:
    """reference.dequantize, on the GPU (the MoE weights are 0.4-0.5 G values)."""
    import torch

    codes = torch.from_numpy(weights.codes).cuda().long()
    if isinstance(weights, Mxfp4Weights):
        lut = torch.from_numpy(E2M1_VALUES).cuda()
        scale = torch.exp2(torch.from_numpy(weights.scales).cuda().float() - E8M0_BIAS)
        group = codes.shape[-1] // scale.shape[-1]
        return lut[codes] * scale.repeat_interleave(group, dim=-1)
    scale = torch.from_numpy(weights.scales).cuda()
    group = codes.shape[-1] // scale.shape[-1]
    return (codes.float() - GPTQ_ZERO) * scale.repeat_interleave(group, dim=-1)


def _reference_on_gpu(x: Any, w: Any, topk_ids: np.ndarray[Any, Any] | None) -> Any:
    """reference.reference_dense / reference_moe in float32 on the GPU, TF32 off."""
    import torch

    if topk_ids is None:
        return x @ w.T
    m, top_k = topk_ids.shape
    out = torch.zeros((m * top_k, w.shape[1]), dtype=torch.float32, device=x.device)
    ids = torch.from_numpy(topk_ids).to(x.device).long()
    for expert in torch.unique(ids).tolist():
        tokens, slots = torch.nonzero(ids == expert, as_tuple=True)
        out[tokens * top_k + slots] = x[tokens] @ w[expert].T
    return out


def _weight_bytes_per_expert(case: KernelCase) -> int:
    n, k = case.shape_n, case.shape_k
    if case.scheme is WeightScheme.MXFP4:
        return n * k // 2 + n * k // 32
    return n * k // 2 + n * (k // 128) * 2


def _work(case: KernelCase, m: int, topk_ids: np.ndarray[Any, Any] | None) -> tuple[int, int]:
    """FLOPs and the fewest bytes the GEMM must move (weights touched, activations, output)."""
    rows = m * case.top_k if topk_ids is not None else m
    experts = len(np.unique(topk_ids)) if topk_ids is not None else 1
    flop = 2 * rows * case.shape_n * case.shape_k
    activations = m * case.shape_k * 2 + rows * case.shape_n * 2
    moved = experts * _weight_bytes_per_expert(case) + activations
    return flop, moved


def run_case(case: KernelCase, plan: dict[str, Any], events: Events, index: int) -> dict[str, Any]:
    import torch

    from humming_matrix.kernels import adapter

    device = torch.device("cuda", torch.cuda.current_device())
    seed = int(plan["seed"])
    cache_dir = Path(plan["cache_dir"]) if plan.get("cache_dir") else None
    weights = load_weights(case, seed, cache_dir)
    result: dict[str, Any] = {
        "case": case.to_json(),
        "weights_sha256": digest(weights.codes, weights.scales),
        "reference": {
            "weights": "exact dequantisation of the checkpoint tensors, float32",
            "matmul": "float32 on the GPU, TF32 off",
            "activation_quantizer": {
                Activation.FP8_E4M3: FP8_QUANTIZER,
                Activation.INT8: INT8_QUANTIZER,
            }.get(case.activation),
        },
        "batches": [],
    }
    began = time.perf_counter()
    lock = plan.get("gpu_lock")
    try:
        # transform() repacks the weights on the GPU: not while another worker is timing.
        with gpu_turn(lock):
            layer = adapter.build(case, weights, device)
    except Exception as exc:
        result["state"] = "unsupported" if adapter.is_api_gap(exc) else "error"
        result["reason"] = f"build: {describe(exc)}"
        result["traceback"] = traceback.format_exc(limit=-4)
        return result
    torch.cuda.synchronize()
    result["build_seconds"] = time.perf_counter() - began
    events.emit("progress", index=index, stage="built", seconds=result["build_seconds"])
    with gpu_turn(lock):
        w_ref = _dequantize_on_gpu(weights)
        w_sq = (torch.linalg.vector_norm(w_ref, dim=-1).double() ** 2).cpu().numpy()
    for m in plan["batch_sizes"]:
        batch = run_batch(case, layer, w_ref, w_sq, m, plan, device)
        result["batches"].append(batch)
        events.emit("progress", index=index, stage="batch", m=m)
    del layer, w_ref
    torch.cuda.empty_cache()
    return result


def run_batch(
    case: KernelCase,
    layer: Any,
    w_ref: Any,
    w_sq: np.ndarray[Any, Any],
    m: int,
    plan: dict[str, Any],
    device: Any,
) -> dict[str, Any]:
    import torch

    from humming_matrix.kernels import timing

    seed = int(plan["seed"])
    batch: dict[str, Any] = {
        "m": m,
        "rel_err": [],
        "worst_row_rel_err": [],
        "err_units": [],
        "worst_channel_units": [],
        "deterministic": [],
        "output_sha256": [],
        "nan": 0,
        "inf": 0,
    }
    if case.kind is GemmKind.MOE:
        batch["worst_expert_units"] = []
        batch["worst_expert"] = []
    if case.activation.quantized:
        batch["rel_err_vs_unquantized"] = []
        batch["quant_err"] = []
    try:
        for draw in range(int(plan["draws"])):
            x = make_activations(m, case.shape_k, seed + draw)
            topk_ids = (
                make_routing(m, case.num_experts, case.top_k, seed + draw).topk_ids
                if case.kind is GemmKind.MOE
                else None
            )
            lock = plan.get("gpu_lock")
            x_gpu = torch.from_numpy(x).to(device).to(torch.bfloat16)
            moe = layer.routing(topk_ids, device) if topk_ids is not None else None
            fn = layer.call(x_gpu, moe)
            if draw == 0:
                fn()  # the first call JIT-compiles: CPU work, kept out of the GPU lock
                torch.cuda.synchronize()
            with gpu_turn(lock):
                out = fn().contiguous()
                torch.cuda.synchronize()
                same = 0
                for _ in range(DETERMINISM_RUNS):
                    again = fn().contiguous()
                    torch.cuda.synchronize()
                    same += int(torch.equal(again.view(torch.uint8), out.view(torch.uint8)))
                del again
                x_ref = quantize_input(case, x)
                xr = torch.from_numpy(x_ref).to(device)
                ref = _reference_on_gpu(xr, w_ref, topk_ids)
                abs_ref = _reference_on_gpu(xr.abs(), w_ref.abs(), topk_ids)
                natural = _reference_on_gpu(xr * xr, w_ref * w_ref, topk_ids)
                units = bound_units(out.float(), ref, natural, abs_ref, case.shape_k, topk_ids)
                del abs_ref, natural
                ref_np = ref.cpu().numpy()
                del ref
                plain_np = None
                if case.activation.quantized:
                    plain = _reference_on_gpu(torch.from_numpy(x).to(device), w_ref, topk_ids)
                    plain_np = plain.cpu().numpy()
                    del plain
                out_np = out.float().cpu().numpy()
                raw = out.view(torch.uint8).cpu().numpy().tobytes()
            x_sq = np.sum(x_ref.astype(np.float64) ** 2, axis=1)
            scale = column_scale(x_sq, w_sq, case.shape_k, topk_ids)
            metrics = measure(out_np, ref_np, raw, col_scale=scale)
            batch["rel_err"].append(metrics.rel_err)
            batch["worst_row_rel_err"].append(metrics.worst_row_rel_err)
            batch["err_units"].append(units["err_units"])
            batch["worst_channel_units"].append(units["worst_channel_units"])
            if "worst_expert_units" in units:
                batch["worst_expert_units"].append(units["worst_expert_units"])
                batch["worst_expert"].append(units["worst_expert"])
            batch["deterministic"].append(same == DETERMINISM_RUNS)
            batch["output_sha256"].append(metrics.sha256)
            batch["nan"] += metrics.nan
            batch["inf"] += metrics.inf
            if plain_np is not None:
                batch["rel_err_vs_unquantized"].append(measure(out_np, plain_np).rel_err)
                batch["quant_err"].append(measure(ref_np, plain_np).rel_err)
            if draw:
                continue
            batch["bound"] = BOUND
            batch["worst_row"] = metrics.worst_row
            batch["floor"] = metrics.floor
            batch["sha256"] = metrics.sha256
            batch["input_sha256"] = digest(x, *([topk_ids] if topk_ids is not None else []))
            if moe is not None:
                batch["moe_block"] = moe.block
            batch["kernel_config"] = layer.kernel_config(moe, m * case.top_k)
            with gpu_turn(lock):
                if m <= GRAPH_MAX_M:
                    t = timing.time_graph(fn, repeats=int(plan["repeats"]))
                else:
                    t = timing.time_kernel(fn, repeats=int(plan["repeats"]))
            flop, moved = _work(case, m, topk_ids)
            batch["time"] = t.to_json()
            batch["flop"] = flop
            batch["bytes"] = moved
            batch["tflops"] = flop / (t.median_ms * 1e-3) / 1e12
            batch["gbps"] = moved / (t.median_ms * 1e-3) / 1e9
    except Exception as exc:
        batch["error"] = describe(exc)
        batch["traceback"] = traceback.format_exc(limit=-4)
        with suppress(Exception):  # a poisoned context raises here too; the worker then exits
            torch.cuda.synchronize()
    return batch


def environment() -> dict[str, Any]:
    import torch

    from humming_matrix.kernels.adapter import humming_version

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "humming_kernels": humming_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "gpu": props.name,
        "gpu_capability": f"{props.major}.{props.minor}",
        "gpu_sms": props.multi_processor_count,
        "numpy": np.__version__,
    }


def main(argv: list[str]) -> int:
    plan_path, events_path = Path(argv[0]), Path(argv[1])
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    with events_path.open("a", encoding="utf-8") as stream:
        events = Events(stream)
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        events.emit("env", **environment())
        try:
            import humming  # noqa: F401
        except Exception as exc:  # a native wheel that cannot load is a finding, not a crash
            events.emit("import_error", message=f"{type(exc).__name__}: {exc}".strip())
            return 0
        if plan.get("ceilings"):
            from humming_matrix.kernels.timing import measure_ceilings

            with gpu_turn(plan.get("gpu_lock")):
                ceilings = measure_ceilings()
            events.emit("ceilings", **ceilings)
        cases = [KernelCase.from_json(c) for c in plan["cases"]]
        for index in range(int(plan.get("start", 0)), len(cases)):
            events.emit("start", index=index, case=cases[index].name)
            result = run_case(cases[index], plan, events, index)
            events.emit("case", index=index, result=result)
            if result.get("state") == "error" or any("error" in b for b in result["batches"]):
                # A CUDA error can poison this process's context: the next case gets a fresh one.
                return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
