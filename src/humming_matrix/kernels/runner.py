"""The worker: runs kernel cases in this process and streams one JSON line per event.

    python -m humming_matrix.kernels.runner PLAN.json EVENTS.jsonl

It imports torch and humming, so a hung kernel or a crashed CUDA context takes only this process
down; the watchdog (`humming_matrix.kernels.watchdog`) starts a fresh one on the next case. It
takes its cases one at a time from the run's queue (the plan's "queue": `claims.CaseQueue`),
which other workers of the same run share. Events:

    {"event": "env", ...}                       versions, GPU (first thing, before any case)
    {"event": "import_error", "message": ...}   humming cannot be imported here: every case is moot
    {"event": "ceilings", ...}                  the GPU's measured TFLOP/s and GB/s (when asked)
    {"event": "start", "index": i, "case": n}   case i begins
    {"event": "progress", "index": i, ...}      built, one batch size done, still waiting for
                                                the GPU lock (the watchdog's pulse), or entering
                                                (`"on_gpu": true`) or leaving a GPU turn
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
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from humming_matrix.kernels.assess import BOUND, BOUND_WITH_TIES, channel_bound
from humming_matrix.kernels.cases import (
    Activation,
    CompiledKernels,
    GemmKind,
    KernelCase,
    WeightScheme,
)
from humming_matrix.kernels.claims import CaseQueue
from humming_matrix.kernels.inputs import (
    E2M1_VALUES,
    E4M3FN_VALUES,
    E8M0_BIAS,
    FP8_BLOCK,
    GPTQ_ZERO,
    AwqWeights,
    ChannelWeights,
    Fp8BlockWeights,
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
    Int8Rule,
    column_scale,
    int8_quantizer,
    measure,
    quantize_fp8_per_token,
    quantize_int8_per_token,
    rounding_ties,
)

DETERMINISM_RUNS = 2  # relaunches of every draw at every batch size
GRAPH_MAX_M = 16  # decode sizes: timed from a captured CUDA graph


def quantize_input(
    case: KernelCase, x: np.ndarray[Any, Any], rule: Int8Rule
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any] | None]:
    """The activations as the modelled quantizer leaves them, and their rounding ties (None for
    bf16 activations)."""
    if case.activation is Activation.FP8_E4M3:
        return quantize_fp8_per_token(x), rounding_ties(x, fp8=True)
    if case.activation is Activation.INT8:
        return quantize_int8_per_token(x, rule), rounding_ties(x, fp8=False, rule=rule)
    return x, None


def bound_units(
    out: Any, ref: Any, natural: Any, abs_ref: Any, k: int, topk_ids: Any, ties: Any = None
) -> dict[str, Any]:
    """Errors in units of the rounding bound (`assess.channel_bound`): the whole output, the
    worst channel, and for MoE the worst (expert, channel) pair. `natural` is x^2 @ w^2^T,
    `abs_ref` |x| @ |w|^T and `ties` (quantized activations) S @ |w|^T, row for row with `ref`."""
    import torch

    diff = out.double() - ref.double()
    diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
    d2, r2, n2, q2 = diff * diff, ref.double() ** 2, natural.double(), abs_ref.double() ** 2
    t2 = torch.zeros_like(d2) if ties is None else ties.double() ** 2

    def ratio(dd: Any, rr: Any, nn: Any, qq: Any, tt: Any) -> Any:
        bound = channel_bound(torch.sqrt(rr), torch.sqrt(nn), torch.sqrt(qq), k, torch.sqrt(tt))
        err = torch.sqrt(dd)
        safe = torch.where(bound > 0, bound, torch.ones_like(bound))
        return torch.where(bound > 0, err / safe, torch.where(err > 0, math.inf, 0.0))

    sums = [d2, r2, n2, q2, t2]
    result: dict[str, Any] = {
        "err_units": float(ratio(*(t.sum() for t in sums))),
        "worst_channel_units": float(ratio(*(t.sum(0) for t in sums)).max()),
    }
    if topk_ids is not None:
        ids = torch.from_numpy(topk_ids.reshape(-1)).to(out.device).long()
        e = int(topk_ids.max()) + 1

        def per_expert(t: Any) -> Any:
            zeros = torch.zeros((e, t.shape[1]), dtype=t.dtype, device=t.device)
            return zeros.index_add_(0, ids, t)

        units = ratio(*(per_expert(t) for t in sums))
        flat = int(torch.argmax(units))
        result["worst_expert_units"] = float(units.reshape(-1)[flat])
        result["worst_expert"] = flat // units.shape[1]
    return result


def _rel_err(out: Any, ref: Any) -> float:
    """reference.measure's rel_err, on the GPU: ||out - ref|| / ||ref|| in float64."""
    import torch

    diff = out.double() - ref.double()
    diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
    den = float(torch.linalg.vector_norm(ref.double()))
    num = float(torch.linalg.vector_norm(diff))
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


class Events:
    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def emit(self, event: str, **fields: Any) -> None:
        self.stream.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")
        self.stream.flush()


@dataclass(frozen=True)
class CaseSignals:
    """What a worker tells its watchdog about case `index` and the GPU: still queued for the
    lock, and when it is inside a turn of its own. Inside a turn only kernels and their checks
    run (the longest of 11,700 recorded check turns took 7.3 s, the longest timing turn 1.75 s),
    so a stall there is a kernel that never returned, judged on the watchdog's shorter GPU limit;
    outside, a JIT compile may take minutes (135 s recorded)."""

    events: Events
    index: int | None

    def waiting(self) -> None:
        """The pulse of a worker waiting for its GPU turn: alive, and not the one that stalls."""
        self.events.emit("progress", index=self.index, stage="gpu_wait")

    @contextmanager
    def on_gpu(self, stage: str, m: int | None = None) -> Iterator[None]:
        """A GPU turn's work (`gpu_check` of batch size `m`, `gpu_timing`), between an event
        that enters it and one that leaves it."""
        self.events.emit("progress", index=self.index, stage=stage, m=m, on_gpu=True)
        try:
            yield
        finally:
            self.events.emit("progress", index=self.index, stage="left_gpu", m=m)


# How often a worker waiting for the GPU lock says so, and how often it tries the lock: well
# inside any watchdog timeout, and short next to the seconds a turn lasts.
WAIT_PULSE_S = 5.0
LOCK_POLL_S = 0.05


def _flock(fh: IO[str], mode: int, waiting: Callable[[], None] | None, pulse_s: float) -> None:
    last = time.monotonic()
    while True:
        try:
            fcntl.flock(fh, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if waiting is not None and time.monotonic() - last >= pulse_s:
                waiting()
                last = time.monotonic()
            time.sleep(LOCK_POLL_S)


@contextmanager
def gpu_turn(
    lock_path: str | None,
    exclusive: bool = True,
    waiting: Callable[[], None] | None = None,
    pulse_s: float = WAIT_PULSE_S,
) -> Iterator[None]:
    """The GPU among the workers sharing `lock_path`: alone (`exclusive`) or beside others.

    Several workers run at once on one GPU (`--jobs`, several releases; their JIT compiles and
    numpy work are CPU-bound). A timing loop must run alone, so it takes the lock exclusively;
    builds and numerics checks (whose results do not depend on what else runs) take it shared,
    so they overlap one another but never a timing loop. A turnstile (`LOCK.gate`) gives a
    waiting timing loop priority: while it waits, no new shared turn begins, so the stream of
    checks from many workers cannot starve it.

    While it waits, `waiting` is called every `pulse_s` seconds. A kernel that hangs inside its
    turn holds the lock until its watchdog kills it; every other worker of the machine waits
    behind it, and without a pulse their watchdogs took them for hung too (2026-12-06, gen6
    calls 9 - 11: 24 `hang` verdicts at `--timeout 200`, beside workers that lived to record
    lock waits of 188 - 197 s).
    """
    if not lock_path:
        yield
        return
    with (
        open(f"{lock_path}.gate", "a", encoding="utf-8") as gate,
        open(lock_path, "a", encoding="utf-8") as fh,
    ):
        _flock(gate, fcntl.LOCK_EX, waiting, pulse_s)
        try:
            _flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, waiting, pulse_s)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
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
            arrays = {name: data[name] for name in data.files}
        codes, scales = arrays["codes"], arrays["scales"]
        if case.scheme is WeightScheme.MXFP4:
            return Mxfp4Weights(codes=codes, scales=scales)
        if case.scheme is WeightScheme.FP8_BLOCK:
            return Fp8BlockWeights(codes=codes, scales=scales)
        if case.scheme is WeightScheme.AWQ_INT4_G128:
            return AwqWeights(codes=codes, zeros=arrays["zeros"], scales=scales)
        if case.scheme in (WeightScheme.FP8_CHANNEL, WeightScheme.INT8_CHANNEL):
            fp8 = case.scheme is WeightScheme.FP8_CHANNEL
            return ChannelWeights(codes=codes, scales=scales, fp8=fp8)
        return GptqWeights(codes=codes, scales=scales)
    weights = make_weights(case, seed)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
    if isinstance(weights, AwqWeights):
        np.savez(tmp, codes=weights.codes, scales=weights.scales, zeros=weights.zeros)
    else:
        np.savez(tmp, codes=weights.codes, scales=weights.scales)
    os.replace(tmp, path)
    return weights


class Stopwatch:
    """Seconds per stage of one batch (`batch["seconds"]`): where a release's run goes, and how
    long a worker waited for the GPU behind the other workers of the run."""

    def __init__(self, signals: CaseSignals) -> None:
        self.seconds: dict[str, float] = {}
        self.signals = signals

    def add(self, stage: str, since: float) -> float:
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - since
        return now

    @contextmanager
    def turn(self, lock_path: str | None, stage: str, exclusive: bool, m: int) -> Iterator[None]:
        """`gpu_turn`, the wait counted as "gpu_wait" and the turn itself as `stage`."""
        began = time.perf_counter()
        with gpu_turn(lock_path, exclusive, self.signals.waiting):
            began = self.add("gpu_wait", began)
            try:
                with self.signals.on_gpu(stage, m):
                    yield
            finally:
                self.add(stage, began)


@contextmanager
def first_call_turn(
    case: KernelCase, plan: dict[str, Any], m: int, watch: Stopwatch, hold: AloneHold | None
) -> Iterator[None]:
    """Where batch size `m`'s first call runs. One that JIT-compiles is CPU work, out of any
    GPU turn (under the watchdog's long limit), its seconds `compile`. A case run alone takes
    its hold after its first batch size's first call: that one compiles the whole table (17 -
    36 s each in gen7 calls 22 - 23, while the GPU sat idle and every other worker of the
    machine waited behind the hold: the 16 workers beside them got 13.5 and 17.8 s of GPU turns
    among them a call).

    One that only launches (`first_call_only_launches`) is GPU work inside a turn, under the
    short GPU limit, its seconds `first_call`: the hold of a case run alone (one that never
    returned held the whole machine's GPU for the long limit: 0.1.4's FP8-channel o_proj at
    1024 tokens, gen7 call 21), a shared turn beside others (outside one, gen7 calls 24 - 25
    lost three workers a call for the rest of the call, 401 - 523 s each, to launches at 1024
    tokens of 0.1.4's and 0.1.5's FP8-channel GEMMs that never returned, and recorded nothing).
    A hang then reads "first_call m=1024", not the stage before it."""
    signals = watch.signals
    began = time.perf_counter()
    if not first_call_only_launches(case, plan, m):
        if hold is not None:
            signals.events.emit("progress", index=signals.index, stage="first_call", m=m)
        yield
        watch.add("compile", began)
    else:
        # Run alone, the plan's lock is None inside the hold: the turn is the hold's.
        if hold is not None:
            hold.take()
        with watch.turn(plan.get("gpu_lock"), "first_call", exclusive=False, m=m):
            yield


class _Checkpoint:
    """The case's checkpoint tensors on the GPU, as compact as on disk (uint8 codes), for the
    whole case. Float32 weights are made one expert at a time when needed and dropped at once, so
    a check needs memory for its outputs, not for the whole dequantised tensor (2 GiB for
    gpt-oss's gate/up), and many workers can check at once."""

    def __init__(self, weights: Weights) -> None:
        import torch

        self.mxfp4 = isinstance(weights, Mxfp4Weights)
        self.fp8_block = isinstance(weights, Fp8BlockWeights)
        self.channel = weights.fp8 if isinstance(weights, ChannelWeights) else None
        zeros = weights.zeros if isinstance(weights, AwqWeights) else None
        self.zeros = None if zeros is None else torch.from_numpy(zeros).cuda()
        self.codes = torch.from_numpy(weights.codes).cuda()
        self.scales = torch.from_numpy(weights.scales).cuda()
        self.experts = self.codes.shape[0] if self.codes.dim() == 3 else None

    def dequantize(self, expert: int | None = None) -> Any:
        """reference.dequantize on the GPU: the whole tensor, or one expert's (N, K)."""
        import torch

        codes = self.codes if expert is None else self.codes[expert]
        scales = self.scales if expert is None else self.scales[expert]
        if self.channel is not None:  # one scale per output row
            if self.channel:  # e4m3 bytes
                values = torch.from_numpy(E4M3FN_VALUES).to(codes.device)[codes.int()]
            else:
                values = codes.view(torch.int8).float()
            return values * scales[..., None]
        group = codes.shape[-1] // scales.shape[-1]
        if self.fp8_block:
            lut = torch.from_numpy(E4M3FN_VALUES).to(codes.device)
            block = scales.repeat_interleave(FP8_BLOCK, dim=-2).repeat_interleave(group, dim=-1)
            return lut[codes.int()] * block
        if self.mxfp4:
            lut = torch.from_numpy(E2M1_VALUES).to(codes.device)
            return lut[codes.int()] * torch.exp2(scales.float() - E8M0_BIAS).repeat_interleave(
                group, dim=-1
            )
        if self.zeros is not None:  # AWQ: the group's own zero point
            zeros = self.zeros if expert is None else self.zeros[expert]
            shifted = codes.float() - zeros.float().repeat_interleave(group, dim=-1)
            return shifted * scales.repeat_interleave(group, dim=-1)
        return (codes.float() - GPTQ_ZERO) * scales.repeat_interleave(group, dim=-1)

    def row_norms_sq(self) -> np.ndarray[Any, Any]:
        """||w_n||^2 per output row: (N,), or (E, N) for MoE."""
        import torch

        def norms(w: Any) -> Any:
            return torch.linalg.vector_norm(w, dim=-1).double() ** 2

        if self.experts is None:
            return np.asarray(norms(self.dequantize()).cpu().numpy())
        rows = [norms(self.dequantize(e)) for e in range(self.experts)]
        return np.asarray(torch.stack(rows).cpu().numpy())


def _references(
    checkpoint: _Checkpoint,
    x: Any,
    x_plain: Any | None,
    ties: Any | None,
    topk_ids: np.ndarray[Any, Any] | None,
) -> dict[str, Any]:
    """In float32 on the GPU, TF32 off: "ref" x @ w^T, and the bound's terms "abs" |x| @ |w|^T,
    "natural" x^2 @ (w^2)^T; where given, "plain" x_plain @ w^T (the unquantised activations)
    and "ties" S @ |w|^T (their rounding ties). For MoE, row t * top_k + j is token t through
    its j-th expert (reference.reference_moe's layout), one expert dequantised at a time."""
    import torch

    def products(rows: Any) -> dict[str, Any]:
        w = checkpoint.dequantize() if rows is None else checkpoint.dequantize(rows[0])

        def pick(t: Any) -> Any:
            return t if rows is None else t[rows[1]]

        xs = pick(x)
        outs = {"ref": xs @ w.T, "abs": xs.abs() @ w.abs().T, "natural": (xs * xs) @ (w * w).T}
        if x_plain is not None:
            outs["plain"] = pick(x_plain) @ w.T
        if ties is not None:
            outs["ties"] = pick(ties) @ w.abs().T
        return outs

    if topk_ids is None:
        return products(None)
    m, top_k = topk_ids.shape
    n = checkpoint.codes.shape[1]
    outs: dict[str, Any] = {}
    ids = torch.from_numpy(topk_ids).to(x.device).long()
    for expert in torch.unique(ids).tolist():
        tokens, slots = torch.nonzero(ids == expert, as_tuple=True)
        for name, part in products((expert, tokens)).items():
            if name not in outs:
                outs[name] = torch.zeros((m * top_k, n), dtype=torch.float32, device=x.device)
            outs[name][tokens * top_k + slots] = part
    return outs


def _weight_bytes_per_expert(case: KernelCase) -> int:
    n, k = case.shape_n, case.shape_k
    if case.scheme is WeightScheme.MXFP4:
        return n * k // 2 + n * k // 32
    if case.scheme is WeightScheme.FP8_BLOCK:
        return n * k + (n // 128) * (k // 128) * 4
    if case.scheme in (WeightScheme.FP8_CHANNEL, WeightScheme.INT8_CHANNEL):
        return n * k + n * 2
    if case.scheme is WeightScheme.AWQ_INT4_G128:
        return n * k // 2 + n * (k // 128) * 2 + n * (k // 128) // 2
    return n * k // 2 + n * (k // 128) * 2


def _work(case: KernelCase, m: int, topk_ids: np.ndarray[Any, Any] | None) -> tuple[int, int]:
    """FLOPs and the fewest bytes the GEMM must move (weights touched, activations, output)."""
    rows = m * case.top_k if topk_ids is not None else m
    experts = len(np.unique(topk_ids)) if topk_ids is not None else 1
    flop = 2 * rows * case.shape_n * case.shape_k
    activations = m * case.shape_k * 2 + rows * case.shape_n * 2
    moved = experts * _weight_bytes_per_expert(case) + activations
    return flop, moved


def first_call_only_launches(case: KernelCase, plan: dict[str, Any], m: int) -> bool:
    """Whether batch size `m`'s first call only launches kernels compiled already: where the
    plan compiles a dense layer's whole table, on the case's first call, every batch size after
    the first (gen7, 0.1.4's FP8-channel o_proj run alone on an H100: the first call at 1 token
    took 19 s, those at 2 - 512 tokens at most 0.4 s; the median of gen7's 5148 dense ones
    beside others 1 ms). Not a MoE layer's: the table is the dense kernels', and a MoE call
    compiles the config its row count picks (`adapter.BuiltLayer.moe_tuning`): gen7's 11,636 MoE
    first calls after the first took a median 0.34 s and up to 35 s."""
    return case.kind is GemmKind.DENSE and _used_by(plan) is None and m != plan["batch_sizes"][0]


def _used_by(plan: dict[str, Any]) -> list[int] | None:
    """The batch sizes whose dense kernels alone the plan compiles; None: the whole table (the
    default, and plans from before `compile`)."""
    if plan.get("compile", CompiledKernels.ALL.value) == CompiledKernels.USED.value:
        return [int(m) for m in plan["batch_sizes"]]
    return None


class AloneHold:
    """A case run alone's one exclusive hold of the GPU (`watchdog`): taken once, after its
    first batch size's first call (the JIT compile: CPU work), and kept to its last timing. Its
    turns inside take no lock, so a nested `flock` cannot deadlock. Its turns taken one by one
    each waited for the shared turns in flight (gen7 call 18: 0.1.4's FP8-block q/k/v waited
    279.6 s for 39 checks and 128.7 s for 13 first calls, against 7.3 s of checks)."""

    def __init__(
        self, lock: str | None, signals: CaseSignals, stack: ExitStack, result: dict[str, Any]
    ) -> None:
        self.lock = lock
        self._signals = signals
        self._stack = stack
        self._result = result
        self._held = False

    def take(self) -> None:
        """Wait for the GPU alone and keep it until the stack closes; the wait goes into the
        case's `alone_wait_seconds`. Again: nothing."""
        if self._held:
            return
        self._held = True
        began = time.perf_counter()
        waiting = self._signals.waiting
        self._stack.enter_context(gpu_turn(self.lock, exclusive=True, waiting=waiting))
        self._result["alone_wait_seconds"] = time.perf_counter() - began


def run_case(case: KernelCase, plan: dict[str, Any], events: Events, index: int) -> dict[str, Any]:
    import torch

    from humming_matrix.kernels import adapter

    device = torch.device("cuda", torch.cuda.current_device())
    seed = int(plan["seed"])
    cache_dir = Path(plan["cache_dir"]) if plan.get("cache_dir") else None
    weights = load_weights(case, seed, cache_dir)
    rule = Int8Rule.of(adapter.humming_version())
    result: dict[str, Any] = {
        "case": case.to_json(),
        "weights_sha256": digest(weights.codes, weights.scales),
        "reference": {
            "weights": "exact dequantisation of the checkpoint tensors, float32",
            "matmul": "float32 on the GPU, TF32 off",
            "activation_quantizer": {
                Activation.FP8_E4M3: FP8_QUANTIZER,
                Activation.INT8: int8_quantizer(rule),
            }.get(case.activation),
        },
        "batches": [],
    }
    began = time.perf_counter()
    lock = plan.get("gpu_lock")
    signals = CaseSignals(events, index)
    try:
        # Outside the lock: a build may JIT-compile for seconds (CPU work), and its repacking
        # kernels are short next to a timing loop's flushes.
        layer = adapter.build(case, weights, device, _used_by(plan))
    except Exception as exc:
        result["state"] = "unsupported" if adapter.is_api_gap(exc) else "error"
        result["reason"] = f"build: {describe(exc)}"
        result["traceback"] = traceback.format_exc(limit=-4)
        return result
    torch.cuda.synchronize()
    result["build_seconds"] = time.perf_counter() - began
    rows = layer.table_rows()
    if rows is not None:
        result["dense_kernels"] = rows
    events.emit("progress", index=index, stage="built", seconds=result["build_seconds"])
    with ExitStack() as held:
        hold = None
        if plan.get("alone"):
            hold = AloneHold(lock, signals, held, result)
            plan = dict(plan, gpu_lock=None)
        _check_and_time(case, layer, weights, plan, device, rule, signals, result, hold)
    del layer
    torch.cuda.empty_cache()
    return result


def _check_and_time(
    case: KernelCase,
    layer: Any,
    weights: Weights,
    plan: dict[str, Any],
    device: Any,
    rule: Int8Rule,
    signals: CaseSignals,
    result: dict[str, Any],
    hold: AloneHold | None = None,
) -> None:
    """Every batch size's checks, then their timing, into `result` (the built `layer`); a case
    run alone (`hold`) takes its turns inside that hold, the plan's lock None."""
    lock = plan.get("gpu_lock")
    # Under the long limit: uploading and reducing a checkpoint (gpt-oss's 32 experts of 5760 x
    # 2880) is untimed, so no short bound is known for it. A case run alone uploads in a shared
    # turn, before its hold.
    with gpu_turn(lock if hold is None else hold.lock, exclusive=False, waiting=signals.waiting):
        checkpoint = _Checkpoint(weights)
        w_sq = checkpoint.row_norms_sq()
    timed: list[tuple[dict[str, Any], _Timing]] = []
    for m in plan["batch_sizes"]:
        batch, timer = run_batch(
            case, layer, checkpoint, w_sq, m, plan, device, rule, signals, hold
        )
        result["batches"].append(batch)
        if timer is not None:
            timed.append((batch, timer))
        signals.events.emit("progress", index=signals.index, stage="batch", m=m)
    del checkpoint
    # Every batch size timed in one turn alone on the GPU: a timing loop waits for the checks
    # running beside it to end, and blocks new ones, once per case rather than once per batch.
    # A case whose every batch raised has nothing to time and takes no turn (gen6 call 9: 0.1.8's
    # two uncompilable cases waited 168 s each for an empty one, holding back every check).
    if timed:
        began = time.perf_counter()
        with gpu_turn(lock, exclusive=True, waiting=signals.waiting), signals.on_gpu("gpu_timing"):
            result["timing_wait_seconds"] = time.perf_counter() - began
            for batch, timer in timed:
                if not timer.run(batch, int(plan["repeats"])):
                    break  # the context may be poisoned: the worker exits after this case
        signals.events.emit("progress", index=signals.index, stage="timed")


@dataclass(frozen=True)
class _Timing:
    """How to time one batch size's call once its checks are done."""

    fn: Any
    graph: bool  # decode sizes: replayed from a captured CUDA graph, as vLLM runs them
    flop: int
    moved: int

    def run(self, batch: dict[str, Any], repeats: int) -> bool:
        """Time it into `batch`; False (and the batch's `error`) if it raised."""
        import torch

        from humming_matrix.kernels import timing

        began = time.perf_counter()
        try:
            if self.graph:
                t = timing.time_graph(self.fn, repeats=repeats)
            else:
                t = timing.time_kernel(self.fn, repeats=repeats)
        except Exception as exc:
            batch["error"] = f"timing: {describe(exc)}"
            batch["traceback"] = traceback.format_exc(limit=-4)
            with suppress(Exception):
                torch.cuda.synchronize()
            return False
        finally:
            batch.setdefault("seconds", {})["gpu_timing"] = round(time.perf_counter() - began, 3)
        batch["time"] = t.to_json()
        batch["flop"] = self.flop
        batch["bytes"] = self.moved
        batch["tflops"] = self.flop / (t.median_ms * 1e-3) / 1e12
        batch["gbps"] = self.moved / (t.median_ms * 1e-3) / 1e9
        return True


def run_batch(
    case: KernelCase,
    layer: Any,
    checkpoint: _Checkpoint,
    w_sq: np.ndarray[Any, Any],
    m: int,
    plan: dict[str, Any],
    device: Any,
    rule: Int8Rule,
    signals: CaseSignals,
    hold: AloneHold | None = None,
) -> tuple[dict[str, Any], _Timing | None]:
    """The checks of one batch size, and how to time it (None if a check raised); a case run
    alone takes its `hold` after its first call at its first batch size."""
    import torch

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
    watch = Stopwatch(signals)
    lock = plan.get("gpu_lock")
    timer: _Timing | None = None
    try:
        for draw in range(int(plan["draws"])):
            began = time.perf_counter()
            x = make_activations(m, case.shape_k, seed + draw)
            topk_ids = (
                make_routing(m, case.num_experts, case.top_k, seed + draw).topk_ids
                if case.kind is GemmKind.MOE
                else None
            )
            x_ref, ties = quantize_input(case, x, rule)
            x_gpu = torch.from_numpy(x).to(device).to(torch.bfloat16)
            moe = layer.routing(topk_ids, device) if topk_ids is not None else None
            fn = layer.call(x_gpu, moe)
            began = watch.add("inputs", began)
            if draw == 0:
                with first_call_turn(case, plan, m, watch, hold):
                    fn()
                    torch.cuda.synchronize()
            if hold is not None:
                hold.take()
            with watch.turn(lock, "gpu_check", exclusive=False, m=m):
                out = fn().contiguous()
                torch.cuda.synchronize()
                same = 0
                for _ in range(DETERMINISM_RUNS):
                    again = fn().contiguous()
                    torch.cuda.synchronize()
                    same += int(torch.equal(again.view(torch.uint8), out.view(torch.uint8)))
                del again
                xr = torch.from_numpy(x_ref).to(device)
                plain_x = torch.from_numpy(x).to(device) if case.activation.quantized else None
                ties_x = None if ties is None else torch.from_numpy(ties).to(device)
                got = _references(checkpoint, xr, plain_x, ties_x, topk_ids)
                ref = got["ref"]
                units = bound_units(
                    out.float(),
                    ref,
                    got["natural"],
                    got["abs"],
                    case.shape_k,
                    topk_ids,
                    got.get("ties"),
                )
                if "plain" in got:  # against the unquantised activations: the kernel's, the model's
                    vs_plain = (_rel_err(out.float(), got["plain"]), _rel_err(ref, got["plain"]))
                del got, xr, plain_x, ties_x
                ref_np = ref.cpu().numpy()
                del ref
                out_np = out.float().cpu().numpy()
                raw = out.view(torch.uint8).cpu().numpy().tobytes()
                torch.cuda.empty_cache()  # between turns a worker holds only its layer
            began = time.perf_counter()
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
            if case.activation.quantized:
                batch["rel_err_vs_unquantized"].append(vs_plain[0])
                batch["quant_err"].append(vs_plain[1])
            watch.add("host_check", began)
            if draw:
                continue
            batch["bound"] = BOUND if ties is None else BOUND_WITH_TIES
            batch["worst_row"] = metrics.worst_row
            batch["floor"] = metrics.floor
            batch["sha256"] = metrics.sha256
            batch["input_sha256"] = digest(x, *([topk_ids] if topk_ids is not None else []))
            if moe is not None:
                batch["moe_block"] = moe.block
            batch["kernel_config"] = layer.kernel_config(moe, m * case.top_k)
            flop, moved = _work(case, m, topk_ids)
            timer = _Timing(fn, m <= GRAPH_MAX_M, flop, moved)
    except Exception as exc:
        batch["error"] = describe(exc)
        batch["traceback"] = traceback.format_exc(limit=-4)
        timer = None
        with suppress(Exception):  # a poisoned context raises here too; the worker then exits
            torch.cuda.synchronize()
    batch["seconds"] = {stage: round(t, 3) for stage, t in watch.seconds.items()}
    return batch, timer


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

            with gpu_turn(plan.get("gpu_lock"), waiting=CaseSignals(events, None).waiting):
                ceilings = measure_ceilings()
            events.emit("ceilings", **ceilings)
        cases = [KernelCase.from_json(c) for c in plan["cases"]]
        queue = CaseQueue(Path(plan["queue"]), len(cases))
        while (index := queue.claim()) is not None:
            events.emit("start", index=index, case=cases[index].name)
            result = run_case(cases[index], plan, events, index)
            events.emit("case", index=index, result=result)
            if result.get("state") == "error" or any("error" in b for b in result["batches"]):
                # A CUDA error can poison this process's context: the next case gets a fresh one.
                return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
