"""The float32 reference and the error metrics, in numpy.

The reference multiplies the activations by the *exactly* dequantised checkpoint weights in float32
(float64 accumulation in numpy; the GPU side uses float32 with TF32 off). For FP8-activation cases
it first applies the input quantizer that humming documents and vLLM asks for: one scale per token,
`absmax / 448`, values rounded to the nearest e4m3 (ties to even) with saturation at 448
(`FP8_QUANTIZER`). Against that reference a correct kernel differs only by accumulation order and
the final bf16 rounding, whose size each case measures (`Metrics.floor`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt
from packaging.version import Version

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
    bf16_round,
)

F32 = npt.NDArray[np.float32]

FP8_QUANTIZER = (
    "fp8-e4m3 dynamic per-token: scale = absmax(token) / 448 in float32, "
    "q = round-to-nearest-even(x / scale) saturated to +-448, x_hat = q * scale"
)
E4M3_MAX = 448.0


def dequantize(weights: Weights) -> F32:
    """Float32 weights (E?, N, K) from checkpoint codes and scales, exactly."""
    if isinstance(weights, Mxfp4Weights):
        values = E2M1_VALUES[weights.codes]
        group = values.shape[-1] // weights.scales.shape[-1]
        scale = np.exp2(weights.scales.astype(np.float32) - E8M0_BIAS)
        out: F32 = (values * np.repeat(scale, group, axis=-1)).astype(np.float32)
        return out
    if isinstance(weights, AwqWeights):
        group = weights.codes.shape[-1] // weights.scales.shape[-1]
        zeros = np.repeat(weights.zeros.astype(np.float32), group, axis=-1)
        shifted = weights.codes.astype(np.float32) - zeros
        awq: F32 = (shifted * np.repeat(weights.scales, group, axis=-1)).astype(np.float32)
        return awq
    if isinstance(weights, ChannelWeights):
        per_channel: F32 = (weights.values() * weights.scales[..., None]).astype(np.float32)
        return per_channel
    if isinstance(weights, Fp8BlockWeights):
        scale = np.repeat(np.repeat(weights.scales, FP8_BLOCK, axis=-2), FP8_BLOCK, axis=-1)
        blocks: F32 = (E4M3FN_VALUES[weights.codes] * scale).astype(np.float32)
        return blocks
    assert isinstance(weights, GptqWeights)
    group = weights.codes.shape[-1] // weights.scales.shape[-1]
    ints = weights.codes.astype(np.float32) - GPTQ_ZERO
    grouped: F32 = (ints * np.repeat(weights.scales, group, axis=-1)).astype(np.float32)
    return grouped


def e4m3_round(v: F32) -> F32:
    """Nearest float8 e4m3fn value (ties to even), saturating at +-448."""
    a = np.abs(v).astype(np.float32)
    _, exponent = np.frexp(a)  # a = m * 2**exponent with m in [0.5, 1)
    e = np.maximum(exponent.astype(np.int32) - 1, -6)  # subnormals share the 2**-6 binade
    step = np.exp2((e - 3).astype(np.float32))
    q = np.minimum(np.round(a / step) * step, E4M3_MAX)
    out: F32 = (np.sign(v) * q).astype(np.float32)
    return out


def quantize_fp8_per_token(x: F32) -> F32:
    """The modelled humming input quantizer (`FP8_QUANTIZER`): returns the dequantised values."""
    absmax = np.max(np.abs(x), axis=1, keepdims=True).astype(np.float32)
    scale = np.maximum(absmax, np.float32(1e-30)) / np.float32(E4M3_MAX)
    out: F32 = (e4m3_round((x / scale).astype(np.float32)) * scale).astype(np.float32)
    return out


class Int8Rule(str, Enum):
    """How a humming release picks the per-token int8 scale (read from each release's source:
    `humming/ops/input.py`, a Triton kernel, up to 0.1.13; the CUDA `process_input` kernel's
    `target_maximum`, from 0.1.14). Values then round to nearest even and saturate."""

    ABSMAX_127 = "absmax / 127"  # >= 0.1.14: q in [-127, 127]
    SIGNED_127_128 = "max(max / 127, -min / 128)"  # 0.1.11 - 0.1.13: q in [-128, 127]
    SIGNED_127_49 = "max(max / 127.49, -min / 128.49)"  # <= 0.1.10: q in [-128, 127]

    @classmethod
    def of(cls, version: str | None) -> Int8Rule:
        """The rule of an installed release (the newest rule when the version is unknown)."""
        if version is None:
            return cls.ABSMAX_127
        release = Version(version).release
        if release < (0, 1, 11):
            return cls.SIGNED_127_49
        if release < (0, 1, 14):
            return cls.SIGNED_127_128
        return cls.ABSMAX_127


def int8_quantizer(rule: Int8Rule) -> str:
    return (
        f"int8 dynamic per-token: scale = {rule.value} of the token in float32, "
        "q = round-to-nearest-even(x / scale) saturated, x_hat = q * scale"
    )


def _int8_scale(x: F32, rule: Int8Rule) -> F32:
    if rule is Int8Rule.ABSMAX_127:
        absmax = np.max(np.abs(x), axis=1, keepdims=True).astype(np.float32)
        symmetric: F32 = np.maximum(absmax, np.float32(1e-30)) / np.float32(127.0)
        return symmetric
    top, bottom = (127.0, 128.0) if rule is Int8Rule.SIGNED_127_128 else (127.49, 128.49)
    maxval = np.maximum(np.max(x, axis=1, keepdims=True), np.float32(1e-30))
    minval = np.minimum(np.min(x, axis=1, keepdims=True), np.float32(-1e-30))
    signed: F32 = np.maximum(maxval / np.float32(top), -minval / np.float32(bottom)).astype(
        np.float32
    )
    return signed


def quantize_int8_per_token(x: F32, rule: Int8Rule = Int8Rule.ABSMAX_127) -> F32:
    """The modelled int8 input quantizer (`int8_quantizer(rule)`): the dequantised values."""
    scale = _int8_scale(x, rule)
    low = -127 if rule is Int8Rule.ABSMAX_127 else -128
    q = np.clip(np.round((x / scale).astype(np.float32)), low, 127)
    out: F32 = (q * scale).astype(np.float32)
    return out


# How close (in float32 ulps of x / scale) to a rounding midpoint an activation may be and still
# round the other way in the kernel: humming multiplies by a reciprocal of the scale, built with
# --use_fast_math (an approximate reciprocal, 1 ulp; the scale's own division, 2), where the model
# divides. bf16 activations land on e4m3 midpoints often: 50 of the 46,080 values of a 16-token
# gpt-oss batch round differently under x * (1 / scale) than under x / scale.
TIE_ULPS = 8


def rounding_ties(x: F32, fp8: bool, rule: Int8Rule = Int8Rule.ABSMAX_127) -> F32:
    """Per activation, how far the kernel's quantized value may be from the modelled one: the
    distance between the two codes around it where x / scale lies within `TIE_ULPS` of their
    midpoint (either may come out), 0 elsewhere. `S @ |w|^T` bounds, channel by channel, what
    those roundings can move the output (`assess.channel_bound`'s `ties` term)."""
    if fp8:
        absmax = np.max(np.abs(x), axis=1, keepdims=True).astype(np.float32)
        scale = np.maximum(absmax, np.float32(1e-30)) / np.float32(E4M3_MAX)
    else:
        scale = _int8_scale(x, rule)
    v = np.abs((x / scale).astype(np.float32))
    if fp8:
        _, exponent = np.frexp(v)
        step = np.exp2((np.maximum(exponent.astype(np.int32) - 1, -6) - 3).astype(np.float32))
    else:
        step = np.ones_like(v)
    below = np.floor(v / step) * step
    near = np.abs(v - (below + step / 2)) <= TIE_ULPS * np.spacing(v)
    near &= below + step <= (E4M3_MAX if fp8 else 127.0)
    ties: F32 = np.where(near, step * scale, np.float32(0.0)).astype(np.float32)
    return ties


def reference_dense(x: F32, w: F32) -> F32:
    """x (M, K) @ w (N, K)^T, accumulated in float64."""
    out: F32 = (x.astype(np.float64) @ w.astype(np.float64).T).astype(np.float32)
    return out


def reference_moe(x: F32, w: F32, topk_ids: npt.NDArray[np.int32]) -> F32:
    """Row t * top_k + j is token t through its j-th expert: (M * top_k, N)."""
    m, top_k = topk_ids.shape
    out = np.zeros((m * top_k, w.shape[1]), dtype=np.float32)
    for expert in np.unique(topk_ids):
        tokens, slots = np.nonzero(topk_ids == expert)
        out[tokens * top_k + slots] = reference_dense(x[tokens], w[expert])
    return out


@dataclass(frozen=True)
class Metrics:
    """One output against its reference.

    rel_err: ||out - ref|| / ||ref|| over the whole output; worst_row_rel_err: the error of each
    output channel (column) over its magnitude, for the worst channel; floor: rel_err of the
    reference itself rounded to bf16, the least error any bf16-output kernel can have; nan/inf:
    counts; sha256: of the output bytes.
    """

    rel_err: float
    worst_row_rel_err: float
    worst_row: int
    floor: float
    nan: int
    inf: int
    sha256: str

    @property
    def finite(self) -> bool:
        return self.nan == 0 and self.inf == 0


def column_scale(
    x_sq: npt.NDArray[np.floating],
    w_sq: npt.NDArray[np.floating],
    k: int,
    topk_ids: npt.NDArray[np.int32] | None = None,
) -> npt.NDArray[np.float64]:
    """Each output channel's natural magnitude, free of cancellation: sqrt(sum over output rows of
    ||x_row||^2 * ||w_channel||^2 / K), the RMS a dot product of such vectors has.

    x_sq: (M,) squared norms of the activation rows; w_sq: (N,) or, for MoE, (E, N) squared norms
    of the weight rows. Dividing a channel's error by this (not by its own reference norm, which
    can cancel to nearly zero at batch 1) makes the worst-channel error meaningful at any batch.
    """
    x64 = x_sq.astype(np.float64)
    w64 = w_sq.astype(np.float64)
    if topk_ids is None:
        dense: npt.NDArray[np.float64] = np.sqrt(x64.sum() * w64 / k)
        return dense
    per_expert = np.zeros(w64.shape[0], dtype=np.float64)
    np.add.at(per_expert, topk_ids.reshape(-1), np.repeat(x64, topk_ids.shape[1]))
    out: npt.NDArray[np.float64] = np.sqrt(per_expert @ w64 / k)
    return out


def measure(
    out: F32,
    ref: F32,
    out_bytes: bytes | None = None,
    col_scale: npt.NDArray[np.floating] | None = None,
) -> Metrics:
    """Compare an output (as float32) with its reference. `out_bytes` are the raw output bytes to
    hash (the bf16 tensor as produced); by default the float32 array's. `col_scale` (see
    `column_scale`) normalises the per-channel errors; by default each channel's reference norm."""
    if out.shape != ref.shape:
        raise ValueError(f"output shape {out.shape} != reference shape {ref.shape}")
    nan = int(np.isnan(out).sum())
    inf = int(np.isinf(out).sum())
    ref64 = ref.astype(np.float64)
    diff = out.astype(np.float64) - ref64
    diff[~np.isfinite(diff)] = np.inf  # a NaN output is infinitely wrong, not "not a number"
    ref_norm = float(np.linalg.norm(ref64))
    with np.errstate(over="ignore", invalid="ignore"):
        rel = _ratio(float(np.linalg.norm(diff)), ref_norm)
        col_err = np.sqrt(np.sum(diff * diff, axis=0))
    col_ref = (
        np.sqrt(np.sum(ref64 * ref64, axis=0))
        if col_scale is None
        else np.asarray(col_scale, dtype=np.float64)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        col_rel = np.where(col_ref > 0, col_err / np.where(col_ref > 0, col_ref, 1.0), 0.0)
    col_rel = np.where((col_ref == 0) & (col_err > 0), np.inf, col_rel)
    worst = int(np.argmax(col_rel)) if col_rel.size else 0
    floor = _ratio(float(np.linalg.norm(bf16_round(ref).astype(np.float64) - ref64)), ref_norm)
    digest = hashlib.sha256(out_bytes if out_bytes is not None else out.tobytes()).hexdigest()
    return Metrics(
        rel_err=rel,
        worst_row_rel_err=float(col_rel[worst]) if col_rel.size else 0.0,
        worst_row=worst,
        floor=floor,
        nan=nan,
        inf=inf,
        sha256=digest,
    )


def _ratio(num: float, den: float) -> float:
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den
