"""The reference: exact dequantisation, the modelled FP8 quantizer, the error metrics."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from humming_matrix.kernels.assess import channel_bound
from humming_matrix.kernels.inputs import (
    AwqWeights,
    ChannelWeights,
    Fp8BlockWeights,
    GptqWeights,
    Mxfp4Weights,
    bf16_round,
    make_activations,
)
from humming_matrix.kernels.reference import (
    E4M3_MAX,
    Int8Rule,
    column_scale,
    dequantize,
    e4m3_round,
    measure,
    quantize_fp8_per_token,
    quantize_int8_per_token,
    reference_dense,
    reference_moe,
    rounding_ties,
)


def test_block_fp8_dequantisation_is_the_e4m3_value_times_its_blocks_scale() -> None:
    codes = np.zeros((256, 256), dtype=np.uint8)
    codes[0, :4] = [0x38, 0xB8, 0x7E, 0x01]  # 1, -1, 448, 2^-9
    codes[200, 130] = 0x40  # 2, in block (1, 1)
    scales = np.array([[0.5, 2.0], [4.0, 0.125]], dtype=np.float32)
    w = dequantize(Fp8BlockWeights(codes=codes, scales=scales))
    assert w[0, :4].tolist() == [0.5, -0.5, 224.0, 2.0**-10]
    assert w[200, 130] == 0.25
    assert w[0, 4] == 0.0


def test_per_channel_dequantisation_is_the_code_value_times_its_rows_scale() -> None:
    codes = np.array([[0x38, 0xB8], [0x7E, 0x00]], dtype=np.uint8)  # e4m3: 1, -1; 448, 0
    scales = np.array([0.5, 2.0**-8], dtype=np.float32)
    fp8 = dequantize(ChannelWeights(codes=codes, scales=scales, fp8=True))
    assert fp8.tolist() == [[0.5, -0.5], [1.75, 0.0]]
    ints = np.array([[127, -127], [1, -1]], dtype=np.int8).view(np.uint8)
    int8 = dequantize(ChannelWeights(codes=ints, scales=scales, fp8=False))
    assert int8.tolist() == [[63.5, -63.5], [2.0**-8, -(2.0**-8)]]


def test_awq_dequantisation_subtracts_the_groups_zero_then_scales() -> None:
    codes = np.zeros((1, 256), dtype=np.uint8)
    codes[0, :3] = [15, 0, 7]
    codes[0, 128] = 3  # second group
    zeros = np.array([[7, 2]], dtype=np.uint8)
    scales = np.array([[0.5, 4.0]], dtype=np.float32)
    w = dequantize(AwqWeights(codes=codes, zeros=zeros, scales=scales))
    assert w[0, :3].tolist() == [4.0, -3.5, 0.0]
    assert w[0, 128] == 4.0
    assert w[0, 129] == -8.0


def test_mxfp4_dequantisation_is_code_value_times_power_of_two() -> None:
    codes = np.zeros((1, 64), dtype=np.uint8)
    codes[0, :4] = [7, 15, 1, 9]  # 6, -6, 0.5, -0.5
    codes[0, 32] = 5  # 3, in the second group
    scales = np.array([[127 - 3, 127 + 2]], dtype=np.uint8)
    w = dequantize(Mxfp4Weights(codes=codes, scales=scales))
    assert w[0, :4].tolist() == [6 / 8, -6 / 8, 0.5 / 8, -0.5 / 8]
    assert w[0, 32] == 12.0
    assert w[0, 4] == 0.0


def test_gptq_dequantisation_subtracts_the_implicit_zero_of_eight() -> None:
    codes = np.full((2, 256), 8, dtype=np.uint8)
    codes[0, 0], codes[1, 255] = 15, 1
    scales = np.array([[0.5, 2.0], [0.25, 4.0]], dtype=np.float32)
    w = dequantize(GptqWeights(codes=codes, scales=scales))
    assert w[0, 0] == 3.5
    assert w[1, 255] == -28.0
    assert np.count_nonzero(w) == 2


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.1, 0.1015625),  # 1.625 * 2**-4
        (448.0, 448.0),
        (500.0, 448.0),  # saturates, no NaN
        (-1e6, -448.0),
        (2.0**-9, 2.0**-9),  # smallest subnormal
        (3 * 2.0**-10, 2.0**-8),  # tie between 2**-9 and 2 * 2**-9 rounds to even (2 * 2**-9)
        (1.0625, 1.0),  # tie between 1 and 1.125 rounds to even (1.0)
        (1.1875, 1.25),  # tie between 1.125 and 1.25 rounds to even (1.25)
        (0.0, 0.0),
    ],
)
def test_e4m3_rounding(value: float, expected: float) -> None:
    assert e4m3_round(np.array([value], dtype=np.float32))[0] == expected


def test_fp8_quantizer_maps_each_tokens_absmax_to_448_times_its_scale() -> None:
    x = np.array([[1.0, -3.0, 0.3], [100.0, 0.5, -2.0]], dtype=np.float32)
    q = quantize_fp8_per_token(x)
    assert q[0, 1] == pytest.approx(-3.0, rel=1e-6)
    assert q[1, 0] == pytest.approx(100.0, rel=1e-6)
    scale = np.float32(100.0) / np.float32(448.0)
    assert q[1, 1] == pytest.approx(float(e4m3_round(np.float32(0.5) / scale) * scale), rel=1e-6)
    # the quantisation error of a token is bounded by half an e4m3 ulp of its largest value
    assert np.abs(q - x).max() <= 100.0 * 2.0**-4


def test_moe_reference_routes_each_slot_through_its_expert() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    w = rng.standard_normal((4, 5, 8)).astype(np.float32)
    ids = np.array([[0, 3], [3, 1], [2, 0]], dtype=np.int32)
    out = reference_moe(x, w, ids)
    assert out.shape == (6, 5)
    for t in range(3):
        for j in range(2):
            np.testing.assert_allclose(out[t * 2 + j], w[ids[t, j]] @ x[t], rtol=1e-5)


def test_measure_reports_exact_relative_errors_nonfinite_counts_and_worst_channel() -> None:
    ref = np.array([[3.0, 4.0], [0.0, 1.0]], dtype=np.float32)
    out = ref.copy()
    out[1, 1] = 1.5  # channel 1: error 0.5 over norm sqrt(17)
    m = measure(out, ref)
    assert m.rel_err == pytest.approx(0.5 / math.sqrt(26))
    assert m.worst_row == 1
    assert m.worst_row_rel_err == pytest.approx(0.5 / math.sqrt(17))
    assert (m.nan, m.inf) == (0, 0)
    assert m.finite
    assert m.floor == 0.0  # every value is already a bf16 value
    bad = ref.copy()
    bad[0, 0], bad[1, 0] = np.nan, np.inf
    m2 = measure(bad, ref)
    assert (m2.nan, m2.inf) == (1, 1)
    assert not m2.finite
    assert math.isinf(m2.rel_err)


def test_measure_floor_is_the_bf16_rounding_error_of_the_reference() -> None:
    ref = np.full((1, 4), 1.0 + 2.0**-9, dtype=np.float32)  # rounds to 1.0 in bf16
    m = measure(bf16_round(ref), ref)
    assert m.floor == pytest.approx(2.0**-9 / (1.0 + 2.0**-9))
    assert m.rel_err == pytest.approx(m.floor)
    assert m.sha256 == measure(bf16_round(ref), ref).sha256


def test_column_scale_is_the_rms_magnitude_of_the_channel() -> None:
    x_sq = np.array([4.0, 16.0])  # two tokens
    w_sq = np.array([8.0, 2.0])  # two channels, K = 2
    assert column_scale(x_sq, w_sq, k=2).tolist() == [math.sqrt(20 * 8 / 2), math.sqrt(20 * 2 / 2)]
    # MoE: token 0 -> experts 0, 1; token 1 -> expert 1 twice is impossible, use 1 and 0
    ids = np.array([[0, 1], [1, 0]], dtype=np.int32)
    w_moe = np.array([[1.0, 0.0], [0.0, 3.0]])  # (E=2, N=2)
    scale = column_scale(x_sq, w_moe, k=1, topk_ids=ids)
    # each expert sees both tokens once: channel 0 only from expert 0, channel 1 from expert 1
    assert scale.tolist() == [math.sqrt(20 * 1.0), math.sqrt(20 * 3.0)]
    # with it, a channel whose reference cancels to ~0 is judged against its magnitude, not 0
    ref = np.array([[1e-9, 1.0]], dtype=np.float32)
    out = np.array([[1e-3, 1.0]], dtype=np.float32)
    relative_to_itself = measure(out, ref)
    relative_to_scale = measure(out, ref, col_scale=np.array([1.0, 1.0]))
    assert relative_to_itself.worst_row_rel_err > 1e5
    assert relative_to_scale.worst_row_rel_err == pytest.approx(1e-3 - 1e-9, rel=1e-3)


def test_dense_reference_matches_float64_product() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    w = rng.standard_normal((3, 16)).astype(np.float32)
    np.testing.assert_allclose(
        reference_dense(x, w), x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-6
    )


@pytest.mark.parametrize(
    ("version", "rule"),
    [
        ("0.1.0", Int8Rule.SIGNED_127_49),
        ("0.1.10", Int8Rule.SIGNED_127_49),
        ("0.1.11", Int8Rule.SIGNED_127_128),
        ("0.1.13", Int8Rule.SIGNED_127_128),
        ("0.1.14", Int8Rule.ABSMAX_127),
        ("0.1.20", Int8Rule.ABSMAX_127),
        (None, Int8Rule.ABSMAX_127),
    ],
)
def test_each_release_has_the_int8_scale_rule_its_source_uses(
    version: str | None, rule: Int8Rule
) -> None:
    assert Int8Rule.of(version) is rule


def test_int8_rules_scale_and_saturate_as_the_releases_do() -> None:
    x = np.array([[2.0, -4.0, 1.0]], dtype=np.float32)
    # max(2 / 127, 4 / 128) = 1/32: -4 is code -128, 2 is 64, 1 is 32, all exact.
    assert quantize_int8_per_token(x, Int8Rule.SIGNED_127_128).tolist() == [[2.0, -4.0, 1.0]]
    # absmax / 127: 2 / (4 / 127) = 63.5 rounds to even, 64.
    got = quantize_int8_per_token(x, Int8Rule.ABSMAX_127)
    scale = np.float32(4.0) / np.float32(127.0)
    assert got.tolist() == [[np.float32(64 * scale), np.float32(-127 * scale), 32 * scale]]
    # 127.49 / 128.49: 4 / 128.49 is the scale, 4 lands on -128.49 -> -128 (saturated).
    signed = quantize_int8_per_token(x, Int8Rule.SIGNED_127_49)
    assert signed[0, 1] == np.float32(-128 * (np.float32(4.0) / np.float32(128.49)))


def test_rounding_ties_are_the_values_on_a_rounding_midpoint() -> None:
    # absmax 448: scale 1. e4m3 codes near 1 are 1/8 apart: 1.0625 is their midpoint.
    x = np.array([[448.0, 1.0625, 1.03125, 3.0, -1.0625]], dtype=np.float32)
    assert rounding_ties(x, fp8=True).tolist() == [[0.0, 0.125, 0.0, 0.0, 0.125]]
    # int8, absmax / 127 with absmax 127: scale 1; 2.5 and -0.5 are midpoints.
    y = np.array([[127.0, 2.5, 2.4, -0.5]], dtype=np.float32)
    assert rounding_ties(y, fp8=False).tolist() == [[0.0, 1.0, 0.0, 1.0]]
    # Within 8 float32 ulps of the midpoint still counts, 9 does not.
    near = np.float32(1.0625) + 8 * np.spacing(np.float32(1.0625))
    far = np.float32(1.0625) + 9 * np.spacing(np.float32(1.0625))
    z = np.array([[448.0, near, far]], dtype=np.float32)
    assert rounding_ties(z, fp8=True).tolist() == [[0.0, 0.125, 0.0]]


def test_a_reciprocal_quantizer_fits_the_bound_with_ties_and_a_bad_channel_still_fails() -> None:
    """humming multiplies by 1 / scale; the model divides. On bf16 activations the two round 50
    of 46,080 values differently: within the bound once the ties are in it."""
    x = make_activations(16, 2880, 0)
    w = (np.random.default_rng(1).standard_normal((256, 2880)) * 0.05).astype(np.float32)
    absmax = np.max(np.abs(x), axis=1, keepdims=True).astype(np.float32)
    scale = absmax / np.float32(E4M3_MAX)
    kernel_x = e4m3_round((x * (np.float32(1.0) / scale)).astype(np.float32)) * scale
    model_x = quantize_fp8_per_token(x)
    assert int(np.sum(kernel_x != model_x)) == 50

    def product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(a.astype(np.float64) @ b.T.astype(np.float64))

    def norms(t: np.ndarray) -> np.ndarray:
        return np.asarray(np.sqrt((t**2).sum(0)))

    out, ref = product(kernel_x, w), product(model_x, w)
    natural = np.sqrt(product(model_x**2, w**2).sum(0))
    abs_ref = norms(product(np.abs(model_x), np.abs(w)))
    ties = norms(product(rounding_ties(x, fp8=True), np.abs(w)))
    per_channel: Any = channel_bound  # elementwise on arrays, as the probe uses it on tensors
    without = per_channel(norms(ref), natural, abs_ref, 2880)
    with_ties = per_channel(norms(ref), natural, abs_ref, 2880, ties)
    # Rounding ties alone use most of the bound that lacks them; with them, a third.
    assert np.max(norms(out - ref) / without) == pytest.approx(0.7617, abs=1e-4)
    assert np.max(norms(out - ref) / with_ties) == pytest.approx(0.3518, abs=1e-4)
    bad = out.copy()
    bad[:, 7] *= 1.05  # one channel 5 % off
    assert norms(bad - ref)[7] / with_ties[7] == pytest.approx(1.1154, abs=1e-4)
