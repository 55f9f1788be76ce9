"""Seeded inputs: exact formats, fixed bytes, the checkpoint-like structure the issue asks for."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from humming_matrix.errors import UsageError
from humming_matrix.kernels.cases import (
    GemmKind,
    KernelCase,
    WeightDist,
    WeightScheme,
    parse_batch_sizes,
    select_cases,
)
from humming_matrix.kernels.inputs import (
    E4M3FN_VALUES,
    E8M0_BIAS,
    AwqWeights,
    ChannelWeights,
    Fp8BlockWeights,
    GptqWeights,
    Mxfp4Weights,
    bf16_round,
    digest,
    gptq_qzeros,
    make_activations,
    make_routing,
    make_weights,
    moe_align,
    pack_awq,
    pack_gptq_qweight,
    pack_mxfp4,
)
from humming_matrix.kernels.models import SUITE

SMALL_DENSE = KernelCase(
    name="mxfp4-bf16-small",
    model="test",
    scheme=WeightScheme.MXFP4,
    activation=SUITE[0].activation,
    kind=GemmKind.DENSE,
    shape_n=384,
    shape_k=256,
    shards=(256, 64, 64),
)
SMALL_MOE = replace(
    SMALL_DENSE, name="moe-small", kind=GemmKind.MOE, shards=(192, 192), num_experts=8, top_k=2
)
SMALL_GPTQ = replace(
    SMALL_DENSE, name="gptq-small", scheme=WeightScheme.GPTQ_INT4_G128, shards=(192, 192)
)


def test_bf16_round_ties_to_even_and_keeps_bf16_values() -> None:
    one_plus_half_ulp = np.float32(1.0 + 2.0**-8)  # exactly between 1 and 1 + 2**-7
    three_halves_ulp = np.float32(1.0 + 3 * 2.0**-8)  # between 1 + 2**-7 and 1 + 2**-6
    x = np.array([1.0, one_plus_half_ulp, three_halves_ulp, -2.5, 1e-3], dtype=np.float32)
    out = bf16_round(x)
    assert out.tolist()[:4] == [1.0, 1.0, 1.0 + 2.0**-6, -2.5]
    assert np.array_equal(bf16_round(out), out)
    assert out.view(np.uint32)[4] & 0xFFFF == 0


def test_pack_mxfp4_puts_the_even_index_in_the_low_nibble() -> None:
    codes = np.array([[1, 2, 15, 0]], dtype=np.uint8)
    assert pack_mxfp4(codes).view(np.uint8).tolist() == [[0x21, 0x0F]]


def test_pack_gptq_qweight_packs_eight_codes_along_k_lowest_first() -> None:
    codes = np.tile(np.arange(8, dtype=np.uint8), (2, 2))  # N=2, K=16
    codes[1] = 15 - codes[1]
    packed = pack_gptq_qweight(codes).view(np.uint32)
    assert packed.shape == (2, 2)
    assert packed[0].tolist() == [0x76543210, 0x89ABCDEF]  # (K/8, N): word 0 of each column
    assert gptq_qzeros(16, 256, 128).view(np.uint32).tolist() == [[0x77777777] * 2] * 2


def test_weights_are_fixed_by_seed_and_differ_across_seeds() -> None:
    a, b = make_weights(SMALL_MOE, 0), make_weights(SMALL_MOE, 0)
    assert digest(a.codes, a.scales) == digest(b.codes, b.scales)
    c = make_weights(SMALL_MOE, 1)
    assert digest(a.codes, a.scales) != digest(c.codes, c.scales)


def test_mxfp4_weights_have_checkpoint_shapes_and_sharded_row_magnitudes() -> None:
    w = make_weights(SMALL_DENSE, 0)
    assert isinstance(w, Mxfp4Weights)
    assert w.codes.shape == (384, 256)
    assert w.scales.shape == (384, 8)
    assert w.codes.max() <= 15
    row = w.scales.astype(np.float64).mean(axis=1) - E8M0_BIAS
    q, k, v = row[:256].mean(), row[256:320].mean(), row[320:].mean()
    # q, k and v shards sit one binade apart (+-0.5 for the row spread)
    assert q - k == pytest.approx(1.0, abs=0.5)
    assert k - v == pytest.approx(1.0, abs=0.5)
    assert row.max() - row.min() >= 4.0  # rows differ widely, not one uniform scale
    moe = make_weights(SMALL_MOE, 0)
    assert moe.codes.shape == (8, 384, 256)
    assert moe.scales.shape == (8, 384, 8)


def test_gptq_weights_never_use_code_zero_and_have_bf16_scales() -> None:
    w = make_weights(SMALL_GPTQ, 0)
    assert isinstance(w, GptqWeights)
    assert w.codes.shape == (384, 256)
    assert w.scales.shape == (384, 2)
    assert w.codes.min() >= 1
    assert w.codes.max() <= 15
    assert np.array_equal(bf16_round(w.scales), w.scales)
    assert (w.scales > 0).all()


def test_e4m3fn_values_are_the_formats() -> None:
    assert E4M3FN_VALUES[0x38] == 1.0  # exponent 7 (bias 7), mantissa 0
    assert E4M3FN_VALUES[0xB8] == -1.0
    assert E4M3FN_VALUES[0x7E] == 448.0  # the largest finite value
    assert E4M3FN_VALUES[0x01] == 2.0**-9  # the smallest subnormal
    assert E4M3FN_VALUES[0x08] == 2.0**-6  # the smallest normal
    assert np.isnan(E4M3FN_VALUES[[0x7F, 0xFF]]).all()
    assert np.all(np.diff(E4M3FN_VALUES[:127]) > 0)  # bytes 0x00 .. 0x7E increase


SMALL_FP8 = replace(
    SMALL_DENSE, name="fp8-block-small", scheme=WeightScheme.FP8_BLOCK, shards=(256, 128)
)


def test_block_fp8_weights_are_e4m3_bytes_with_bf16_block_scales_and_full_blocks() -> None:
    w = make_weights(SMALL_FP8, 0)
    assert isinstance(w, Fp8BlockWeights)
    assert w.codes.shape == (384, 256)
    assert w.scales.shape == (3, 2)  # one per 128 x 128 block
    assert not np.isin(w.codes, [0x7F, 0xFF]).any()  # no NaN bytes
    assert np.array_equal(bf16_round(w.scales), w.scales)
    values = np.abs(E4M3FN_VALUES[w.codes])
    # Each block uses the top of the format's range; rows within a block still spread (70x).
    block_max = values.reshape(3, 128, 2, 128).max(axis=(1, 3))
    assert block_max.tolist() == [[320.0, 352.0], [320.0, 320.0], [352.0, 320.0]]
    rows = values.max(axis=1)
    assert (rows.min(), rows.max()) == (5.0, 352.0)
    wide = replace(
        SMALL_FP8,
        kind=GemmKind.MOE,
        num_experts=8,
        top_k=2,
        weights=WeightDist.WIDE_SCALES,
    )
    moe = make_weights(wide, 0)
    assert moe.codes.shape == (8, 384, 256)
    # Wide scales: the block scales' binades step across the whole 2^-30 .. 2^10 range.
    binades = np.floor(np.log2(moe.scales))
    assert (binades.min(), binades.max()) == (-30.0, 10.0)


@pytest.mark.parametrize(
    ("scheme", "top"), [(WeightScheme.FP8_CHANNEL, 448.0), (WeightScheme.INT8_CHANNEL, 127.0)]
)
def test_per_channel_weights_fill_each_row_and_carry_row_magnitudes_in_bf16_scales(
    scheme: WeightScheme, top: float
) -> None:
    w = make_weights(replace(SMALL_DENSE, name="channel-small", scheme=scheme), 0)
    assert isinstance(w, ChannelWeights)
    assert w.fp8 is (scheme is WeightScheme.FP8_CHANNEL)
    assert w.codes.shape == (384, 256)
    assert w.scales.shape == (384,)
    values = w.values()
    # Every row reaches the top of the format; no NaN byte, no int8 -128.
    assert np.abs(values).max(axis=1).tolist() == [top] * 384
    assert not np.isnan(values).any()
    assert values.min() >= -top
    assert np.array_equal(bf16_round(w.scales), w.scales)
    # The q, k and v shards' scales sit one binade apart (+-0.5 for the row spread).
    row = np.log2(w.scales)
    q, k, v = row[:256].mean(), row[256:320].mean(), row[320:].mean()
    assert q - k == pytest.approx(1.0, abs=0.5)
    assert k - v == pytest.approx(1.0, abs=0.5)


def test_pack_awq_puts_column_8j_plus_order_p_in_nibble_p() -> None:
    codes = np.zeros((16, 1), dtype=np.uint8)  # N = 16 columns, K = 1
    codes[:, 0] = np.arange(16) % 16
    words = pack_awq(codes).view(np.uint32)
    assert words.shape == (1, 2)
    # Word 0 holds columns 0, 2, 4, 6, 1, 3, 5, 7 from the lowest nibble up.
    assert hex(int(words[0, 0])) == "0x75316420"
    assert hex(int(words[0, 1])) == "0xfdb9eca8"


def test_awq_weights_spread_codes_around_each_groups_zero() -> None:
    w = make_weights(replace(SMALL_GPTQ, name="awq-small", scheme=WeightScheme.AWQ_INT4_G128), 0)
    assert isinstance(w, AwqWeights)
    assert (w.codes.shape, w.zeros.shape, w.scales.shape) == ((384, 256), (384, 2), (384, 2))
    assert (int(w.zeros.min()), int(w.zeros.max())) == (5, 10)
    assert (int(w.codes.min()), int(w.codes.max())) == (0, 15)
    assert np.array_equal(bf16_round(w.scales), w.scales)


def test_activations_are_bf16_with_outlier_channels() -> None:
    x = make_activations(64, 2048, seed=3)
    assert np.array_equal(bf16_round(x), x)
    assert np.array_equal(x, make_activations(64, 2048, seed=3))
    col_rms = np.sqrt((x.astype(np.float64) ** 2).mean(axis=0))
    median = np.median(col_rms)
    outliers = int((col_rms > 10 * median).sum())
    assert 2 <= outliers <= 30  # ~0.5 % of 2048 channels, 30x larger


def test_routing_gives_distinct_skewed_experts_per_token() -> None:
    ids = make_routing(512, 16, 4, seed=0).topk_ids
    assert ids.shape == (512, 4)
    assert ids.dtype == np.int32
    assert all(len(set(row)) == 4 for row in ids.tolist())
    counts = np.bincount(ids.reshape(-1), minlength=16)
    assert counts.max() > 2 * counts.min()  # Zipf-like, not uniform


def test_moe_align_pads_each_expert_to_the_block_and_covers_every_slot_once() -> None:
    ids = np.array([[0, 2], [2, 1], [0, 2]], dtype=np.int32)
    sorted_ids, expert_ids, padded = moe_align(ids, num_experts=4, block=4)
    pad = ids.size
    assert sorted_ids.tolist() == [0, 4, pad, pad, 3, pad, pad, pad, 1, 2, 5, pad]
    assert expert_ids.tolist() == [0, 1, 2]
    assert padded == 12


def test_select_cases_and_batch_sizes() -> None:
    names = [c.name for c in select_cases(["moe-gate-up-mxfp4-fp8-*"], SUITE)]
    assert names == [
        "moe-gate-up-mxfp4-fp8-e4m3-5760x2880-e32k4",
        "moe-gate-up-mxfp4-fp8-e4m3-5760x2880-e32k4-wide-scales",
        "moe-gate-up-mxfp4-fp8-e4m3-1536x2048-e128k8",
        "moe-gate-up-mxfp4-fp8-e4m3-1536x2048-e128k8-wide-scales",
    ]
    assert len(select_cases(None, SUITE)) == 84
    with pytest.raises(UsageError) as no_case:
        select_cases(["nothing*"], SUITE)
    assert str(no_case.value) == (
        "--cases 'nothing*' matches no case; cases: " + ", ".join(c.name for c in SUITE)
    )
    assert parse_batch_sizes(["1,2048", "64", "1"]) == (1, 64, 2048)
    with pytest.raises(UsageError, match=r"^--batch-sizes: '0' is not a positive integer$"):
        parse_batch_sizes(["0"])


def test_suite_shapes_are_the_models() -> None:
    by_name = {c.name: c for c in SUITE}
    qwen = by_name["moe-gate-up-mxfp4-bf16-1536x2048-e128k8"]
    assert (qwen.shape_k, qwen.shape_n, qwen.num_experts, qwen.top_k) == (2048, 1536, 128, 8)
    oss = by_name["moe-gate-up-mxfp4-fp8-e4m3-5760x2880-e32k4"]
    assert (oss.shape_k, oss.shape_n, oss.num_experts, oss.top_k) == (2880, 5760, 32, 4)
    assert KernelCase.from_json(oss.to_json()) == oss
