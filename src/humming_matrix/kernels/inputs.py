"""Checkpoint-like inputs, fixed by seed: every humming version sees the same bytes.

Weights are generated directly in the checkpoint formats (MXFP4 codes and e8m0 scales; GPTQ int4
codes and bf16 scales), so the float32 reference uses exactly the values the kernel is given and
the measured error is the kernel's, not a quantiser's. They are not uniform noise:

* output rows come in shards (q/k/v, gate/up) whose magnitudes differ by 2x and 4x, rows within
  a shard spread by 0.7 binades (sd), 1 % of rows are outliers 8x larger, and group scales jitter
  by up to 4x: an expert's e8m0 scales span about 12 binades, which is what per-tensor scale
  tricks (such as the fused e8m0 path for FP8 activations) must survive;
* codes follow the histogram of a quantised Gaussian, not a uniform draw;
* activations are bf16, with 0.5 % outlier channels 30x larger and per-token magnitudes that vary
  by 4x, as in real hidden states;
* MoE routing is skewed (Zipf-like expert popularity) with distinct experts per token.

Everything is numpy; the GPU side converts to torch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from humming_matrix.kernels.cases import GemmKind, KernelCase, WeightDist, WeightScheme

F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]

# e2m1 value of each 4-bit code; bit 3 is the sign.
E2M1_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    dtype=np.float32,
)
E8M0_BIAS = 127
GPTQ_ZERO = 8
FP8_BLOCK = 128  # rows and columns per block scale of block FP8


def _e4m3fn_values() -> npt.NDArray[np.float32]:
    """The float8 e4m3fn value of every byte (bias 7, subnormals, 0x7F and 0xFF NaN)."""
    bits = np.arange(256)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exponent, mantissa = (bits >> 3) & 0xF, bits & 0x7
    normal = (1.0 + mantissa / 8.0) * np.exp2(exponent - 7.0)
    value = np.where(exponent == 0, mantissa / 8.0 * 2.0**-6, normal)
    value = np.where((bits & 0x7F) == 0x7F, np.nan, value)
    return (sign * value).astype(np.float32)


E4M3FN_VALUES = _e4m3fn_values()

# Frequencies of |code| 0..7 for a Gaussian quantised to e2m1 with the group maximum at 6.
_E2M1_MAGNITUDE_WEIGHTS = (10, 14, 14, 12, 10, 14, 8, 3)
# Offset-binary int4 codes 1..15 (-7..7 around zero 8): a bell shape; code 0 (-8) never occurs,
# as in symmetric GPTQ exports whose scale is max/7.
_GPTQ_CODE_WEIGHTS = (0, 1, 2, 4, 7, 10, 14, 16, 17, 16, 14, 10, 7, 4, 2, 1)
# Shard magnitude offsets in binades, by position: q (or gate) 0, k (or up) -1, v -2.
_SHARD_OFFSETS = (0, -1, -2)


@dataclass(frozen=True)
class Mxfp4Weights:
    """codes: (E?, N, K) uint8 in 0..15; scales: (E?, N, K/32) uint8 e8m0 exponents."""

    codes: U8
    scales: U8


@dataclass(frozen=True)
class GptqWeights:
    """codes: (E?, N, K) uint8 in 0..15 (value = code - 8); scales: (E?, N, K/128) float32
    (bf16 values)."""

    codes: U8
    scales: F32


@dataclass(frozen=True)
class Fp8BlockWeights:
    """codes: (E?, N, K) uint8 float8 e4m3fn bytes (no NaN); scales: (E?, N/128, K/128) float32
    (bf16 values: humming converts the block scales to bf16)."""

    codes: U8
    scales: F32


@dataclass(frozen=True)
class ChannelWeights:
    """codes: (E?, N, K) uint8: float8 e4m3fn bytes (`fp8`) or int8 two's complement bytes;
    scales: (E?, N) float32 (bf16 values), one per output channel."""

    codes: U8
    scales: F32
    fp8: bool

    def values(self) -> F32:
        """The codes' values (before the channel scale)."""
        if self.fp8:
            fp8_values: F32 = E4M3FN_VALUES[self.codes]
            return fp8_values
        ints: F32 = self.codes.view(np.int8).astype(np.float32)
        return ints


@dataclass(frozen=True)
class AwqWeights:
    """codes: (E?, N, K) uint8 in 0..15; zeros: (E?, N, K/128) uint8 in 0..15, the group's zero
    point; scales: (E?, N, K/128) float32 (bf16 values). Value = (code - zero) * scale."""

    codes: U8
    zeros: U8
    scales: F32


Weights = Mxfp4Weights | GptqWeights | Fp8BlockWeights | ChannelWeights | AwqWeights

# AutoAWQ's GEMM packing: nibble p (lowest first) of a qweight/qzeros word holds the column
# 8 j + AWQ_ORDER[p]; humming's awq schema undoes it with the inverse [0, 4, 1, 5, 2, 6, 3, 7].
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


@dataclass(frozen=True)
class Routing:
    """topk_ids: (M, top_k) int32, distinct experts per token."""

    topk_ids: I32


def bf16_round(x: npt.NDArray[np.floating]) -> F32:
    """Round float32 to the nearest bf16 value (ties to even), returned as float32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    rounded = (bits + rounding) & np.uint32(0xFFFF0000)
    out: F32 = rounded.view(np.float32)
    return out


def _lut(weights: tuple[int, ...]) -> U8:
    """A 256-entry table mapping a uniform byte to a code with the given relative frequencies."""
    total = sum(weights)
    counts = [w * 256 // total for w in weights]
    counts[int(np.argmax(weights))] += 256 - sum(counts)
    return np.repeat(np.arange(len(weights), dtype=np.uint8), counts)


def _row_exponents(case: KernelCase, rng: np.random.Generator, base: int) -> npt.NDArray[np.int32]:
    """Per output row (and expert): shard offset + row spread + a few outlier rows."""
    experts = max(case.num_experts, 1)
    offsets = np.concatenate(
        [np.full(w, _SHARD_OFFSETS[i % len(_SHARD_OFFSETS)]) for i, w in enumerate(case.shards)]
    )
    spread = np.rint(rng.normal(0.0, 0.7, size=(experts, case.shape_n)))
    outliers = np.where(rng.random((experts, case.shape_n)) < 0.01, 3, 0)
    return (base + offsets[None, :] + spread + outliers).astype(np.int32)


def _wide(
    rng: np.random.Generator, shape: tuple[int, ...], low: int, high: int
) -> npt.NDArray[np.int32]:
    """Scale exponents stepping across [low, high] within one tensor: each expert (or the dense
    tensor) gets a span that grows from a few binades to the whole range, 2 % of groups are
    outliers at the top, and 1/8 of the experts are near-dead (their scales at the bottom)."""
    experts = shape[0]
    span = np.linspace(4, high - low, experts).round().astype(np.int32)
    centre = (low + high) // 2
    out = centre + rng.integers(-1, 2, shape) * (span[:, None, None] // 2)
    out = out + rng.integers(-2, 3, shape)
    out = np.where(rng.random(shape) < 0.02, high, out)
    dead = rng.permutation(experts)[: max(experts // 8, 0)]
    out[dead] = low + rng.integers(0, 2, out[dead].shape)
    return np.clip(out, low, high).astype(np.int32)


def _fp8_block(case: KernelCase, rng: np.random.Generator) -> Fp8BlockWeights:
    """Block FP8 as a checkpoint writer makes it: each 128 x 128 block scaled so that its
    largest value is near 448, rows within a block still spread (shards, row spread, outlier
    rows, as the other schemes), codes the e4m3 rounding of a Gaussian."""
    experts = max(case.num_experts, 1)
    n, k, b = case.shape_n, case.shape_k, FP8_BLOCK
    rows = _row_exponents(case, rng, base=0).astype(np.float64)
    rows -= rows.reshape(experts, n // b, b).max(axis=-1).repeat(b, axis=-1)  # <= 0 in a block
    values = rng.standard_normal((experts, n, k)) * 110.0 * np.exp2(rows)[:, :, None]
    codes = _e4m3_bytes(values)
    shape = (experts, n // b, k // b)
    if case.weights is WeightDist.WIDE_SCALES:
        exps = _wide(rng, shape, -30, 10).astype(np.float64)
    else:
        block_rows = _row_exponents(case, rng, base=-12)[:, ::b].astype(np.float64)
        exps = block_rows[:, :, None] + rng.integers(-1, 2, shape)
    scales = bf16_round((1.0 + rng.random(shape)) * np.exp2(exps))
    if case.kind is GemmKind.DENSE:
        return Fp8BlockWeights(codes=codes[0], scales=scales[0])
    return Fp8BlockWeights(codes=codes, scales=scales)


def _e4m3_bytes(values: npt.NDArray[np.float64]) -> U8:
    """The nearest e4m3fn byte of each value (saturating at 448)."""
    positive = E4M3FN_VALUES[:127].astype(np.float64)  # increasing: bytes 0x00 .. 0x7E
    magnitude = np.minimum(np.abs(values), 448.0)
    upper = np.clip(np.searchsorted(positive, magnitude), 1, 126)
    nearer_lower = magnitude - positive[upper - 1] <= positive[upper] - magnitude
    code = np.where(nearer_lower, upper - 1, upper).astype(np.uint8)
    signed: U8 = (code | np.where(values < 0, 0x80, 0).astype(np.uint8)).astype(np.uint8)
    return signed


def _channel(case: KernelCase, rng: np.random.Generator) -> ChannelWeights:
    """Per-channel 8-bit weights as a checkpoint writer makes them: every row's largest value at
    the top of the format (448 or 127), the rows' magnitudes (shards, spread, outlier rows) in
    their bf16 scales."""
    experts = max(case.num_experts, 1)
    n, k = case.shape_n, case.shape_k
    fp8 = case.scheme is WeightScheme.FP8_CHANNEL
    top = 448.0 if fp8 else 127.0
    gauss = rng.standard_normal((experts, n, k))
    values = gauss * (top / np.abs(gauss).max(axis=-1, keepdims=True))
    codes = _e4m3_bytes(values) if fp8 else np.rint(values).astype(np.int8).view(np.uint8)
    if case.weights is WeightDist.WIDE_SCALES:
        exps = _wide(rng, (experts, n, 1), -30, 10)[..., 0].astype(np.float64)
    else:
        exps = _row_exponents(case, rng, base=-13 if fp8 else -10).astype(np.float64)
    scales = bf16_round((1.0 + rng.random((experts, n))) * np.exp2(exps))
    if case.kind is GemmKind.DENSE:
        return ChannelWeights(codes=codes[0], scales=scales[0], fp8=fp8)
    return ChannelWeights(codes=codes, scales=scales, fp8=fp8)


def _awq(case: KernelCase, rng: np.random.Generator) -> AwqWeights:
    """Asymmetric int4 as AutoAWQ writes it: per group a zero point (5 .. 10: groups whose values
    lean one way) and codes spread around it over the whole 0 .. 15, bf16 scales with the rows'
    magnitudes (shards, spread, outliers)."""
    experts = max(case.num_experts, 1)
    n, k, g = case.shape_n, case.shape_k, case.group_size
    zeros = rng.integers(5, 11, (experts, n, k // g)).astype(np.uint8)
    offsets = _lut(_GPTQ_CODE_WEIGHTS)[rng.integers(0, 256, (experts, n, k), np.uint8)]
    centred = offsets.astype(np.int16) - GPTQ_ZERO + np.repeat(zeros, g, axis=-1)
    codes = np.clip(centred, 0, 15).astype(np.uint8)
    mantissa = 1.0 + rng.random((experts, n, k // g))
    if case.weights is WeightDist.WIDE_SCALES:
        exps = _wide(rng, (experts, n, k // g), -30, 10).astype(np.float64)
    else:
        exps = _row_exponents(case, rng, base=-10)[:, :, None].astype(np.float64)
    scales = bf16_round((mantissa * np.exp2(exps)).astype(np.float32))
    if case.kind is GemmKind.DENSE:
        return AwqWeights(codes=codes[0], zeros=zeros[0], scales=scales[0])
    return AwqWeights(codes=codes, zeros=zeros, scales=scales)


def pack_awq(codes: U8) -> I32:
    """AutoAWQ `qweight` / `qzeros` words from (E?, N, X) 4-bit values: (E?, X, N/8) int32,
    eight output columns per word in `AWQ_ORDER`, lowest bits first."""
    if codes.ndim == 3:
        return np.stack([pack_awq(c) for c in codes])
    n, x = codes.shape
    by_n = codes.T.astype(np.uint32).reshape(x, n // 8, 8)[:, :, list(AWQ_ORDER)]
    shifts = (np.arange(8, dtype=np.uint32) * 4)[None, None, :]
    words = np.bitwise_or.reduce(by_n << shifts, axis=-1)
    out: I32 = words.astype(np.uint32).view(np.int32)
    return out


def make_weights(case: KernelCase, seed: int) -> Weights:
    rng = np.random.default_rng([seed, 0x57])
    if case.scheme is WeightScheme.AWQ_INT4_G128:
        return _awq(case, rng)
    if case.scheme is WeightScheme.FP8_BLOCK:
        return _fp8_block(case, rng)
    if case.scheme in (WeightScheme.FP8_CHANNEL, WeightScheme.INT8_CHANNEL):
        return _channel(case, rng)
    experts = max(case.num_experts, 1)
    n, k, g = case.shape_n, case.shape_k, case.group_size
    wide = case.weights is WeightDist.WIDE_SCALES
    if case.scheme is WeightScheme.MXFP4:
        magnitude = _lut(_E2M1_MAGNITUDE_WEIGHTS)[rng.integers(0, 256, (experts, n, k), np.uint8)]
        sign = rng.integers(0, 2, (experts, n, k), np.uint8) << np.uint8(3)
        codes = (magnitude | sign).astype(np.uint8)
        if wide:
            # e8m0 exponents whose values keep products finite in bf16/fp32: 2**-40 .. 2**20.
            scales = _wide(rng, (experts, n, k // g), E8M0_BIAS - 40, E8M0_BIAS + 20).astype(
                np.uint8
            )
        else:
            # Group max near 6 * 2**(e - 127) ~ 0.05 for a typical row: e ~ 120.
            rows = _row_exponents(case, rng, base=E8M0_BIAS - 7)
            jitter = rng.integers(-2, 1, (experts, n, k // g))
            scales = np.clip(rows[:, :, None] + jitter, 1, 254).astype(np.uint8)
        if case.kind is GemmKind.DENSE:
            codes, scales = codes[0], scales[0]
        return Mxfp4Weights(codes=codes, scales=scales)
    codes = _lut(_GPTQ_CODE_WEIGHTS)[rng.integers(0, 256, (experts, n, k), np.uint8)]
    mantissa = 1.0 + rng.random((experts, n, k // g))
    if wide:
        exps = _wide(rng, (experts, n, k // g), -30, 10).astype(np.float64)
    else:
        exps = _row_exponents(case, rng, base=-10)[:, :, None].astype(np.float64)
    group_scales = bf16_round((mantissa * np.exp2(exps)).astype(np.float32))
    gptq_codes = codes.astype(np.uint8)
    if case.kind is GemmKind.DENSE:
        gptq_codes, group_scales = gptq_codes[0], group_scales[0]
    return GptqWeights(codes=gptq_codes, scales=group_scales)


def make_activations(m: int, k: int, seed: int) -> F32:
    """(m, k) bf16 values as float32: Gaussian, outlier channels, per-token magnitude spread."""
    rng = np.random.default_rng([seed, 0xAC, m])
    x = rng.standard_normal((m, k), dtype=np.float32)
    channels = np.random.default_rng([seed, 0xC4]).random(k) < 0.005
    x[:, channels] *= 30.0
    x *= np.exp2(rng.uniform(-1.0, 1.0, size=(m, 1))).astype(np.float32)
    return bf16_round(x)


def make_routing(m: int, num_experts: int, top_k: int, seed: int) -> Routing:
    """Distinct top-k experts per token with Zipf-like popularity (Gumbel top-k sampling)."""
    rng = np.random.default_rng([seed, 0x70, m])
    popularity = 1.0 / np.arange(1, num_experts + 1) ** 0.8
    logits = np.log(popularity)[rng.permutation(num_experts)]
    keys = logits[None, :] + rng.gumbel(size=(m, num_experts))
    topk = np.argsort(-keys, axis=1, kind="stable")[:, :top_k]
    return Routing(topk_ids=topk.astype(np.int32))


def pack_mxfp4(codes: U8) -> npt.NDArray[np.int8]:
    """Checkpoint layout: two codes per byte along K, the even index in the low nibble."""
    packed = codes[..., 0::2] | (codes[..., 1::2] << np.uint8(4))
    out: npt.NDArray[np.int8] = packed.astype(np.uint8).view(np.int8)
    return out


def pack_gptq_qweight(codes: U8) -> I32:
    """GPTQ `qweight`: (K/8, N) int32, eight 4-bit codes along K per word, lowest bits first;
    (E, K/8, N) for experts."""
    if codes.ndim == 3:
        return np.stack([pack_gptq_qweight(c) for c in codes])
    n, k = codes.shape
    by_k = codes.T.astype(np.uint32).reshape(k // 8, 8, n)
    shifts = (np.arange(8, dtype=np.uint32) * 4)[None, :, None]
    words = np.bitwise_or.reduce(by_k << shifts, axis=1)
    out: I32 = words.astype(np.uint32).view(np.int32)
    return out


def gptq_qzeros(n: int, k: int, group_size: int) -> I32:
    """Symmetric GPTQ (v1 format) stores zero - 1 = 7 in every nibble; humming ignores it."""
    words = np.full((k // group_size, n // 8), 0x77777777, dtype=np.uint32)
    out: I32 = words.view(np.int32)
    return out


def moe_align(topk_ids: I32, num_experts: int, block: int) -> tuple[I32, I32, int]:
    """Token slots grouped by expert, each expert's run padded to a multiple of `block`.

    Returns (sorted_ids, expert_ids, num_padded): sorted_ids holds flat slot indices
    (token * top_k + j) with padding value M * top_k; expert_ids has one entry per block.
    """
    flat = topk_ids.reshape(-1)
    pad_value = flat.size
    parts: list[npt.NDArray[np.int64]] = []
    experts: list[int] = []
    for expert in range(num_experts):
        slots = np.flatnonzero(flat == expert)
        if slots.size == 0:
            continue
        blocks = -(-slots.size // block)
        parts.append(np.pad(slots, (0, blocks * block - slots.size), constant_values=pad_value))
        experts.extend([expert] * blocks)
    sorted_ids = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
    return sorted_ids, np.array(experts, dtype=np.int32), int(sorted_ids.size)


def digest(*arrays: npt.NDArray[np.generic]) -> str:
    """sha256 over the arrays' bytes and shapes: proves two runs saw the same inputs."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()
