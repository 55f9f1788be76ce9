"""The worker's CPU-side parts: error text, the input cache, the work counts, the event stream."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from humming_matrix.kernels.cases import GemmKind, KernelCase, WeightScheme
from humming_matrix.kernels.inputs import Mxfp4Weights, digest, make_weights
from humming_matrix.kernels.models import SUITE
from humming_matrix.kernels.runner import (
    Events,
    _work,
    describe,
    first_call_only_launches,
    load_weights,
)

SMALL_MOE = KernelCase(
    name="moe-mxfp4-bf16-small",
    model="test",
    scheme=WeightScheme.MXFP4,
    activation=SUITE[0].activation,
    kind=GemmKind.MOE,
    shape_n=256,
    shape_k=128,
    shards=(128, 128),
    num_experts=4,
    top_k=2,
)


def test_a_bare_assert_is_described_by_its_line(tmp_path: Path) -> None:
    # A module pytest does not rewrite, like humming's own: `assert` raises with no message.
    source = tmp_path / "site" / "humming" / "kernel" / "humming.py"
    source.parent.mkdir(parents=True)
    source.write_text("def check_shape(k, block):\n    assert k % block == 0\n")
    namespace: dict[str, Any] = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    try:
        namespace["check_shape"](2944, 256)
    except AssertionError as exc:
        text = describe(exc)
    assert text == "AssertionError: at humming/kernel/humming.py:2: assert k % block == 0"
    assert describe(ValueError("unsupported dtype")) == "ValueError: unsupported dtype"


def test_weights_are_cached_once_and_read_back_byte_for_byte(tmp_path: Path) -> None:
    first = load_weights(SMALL_MOE, 7, tmp_path)
    (cached,) = tmp_path.iterdir()
    assert cached.name == "weights-mxfp4-moe-test-256x128-7.npz"
    stamp = cached.stat().st_mtime_ns
    again = load_weights(SMALL_MOE, 7, tmp_path)
    assert cached.stat().st_mtime_ns == stamp  # read, not rewritten
    assert isinstance(again, Mxfp4Weights)
    assert digest(again.codes, again.scales) == digest(first.codes, first.scales)
    fresh = make_weights(SMALL_MOE, 7)
    assert digest(fresh.codes, fresh.scales) == digest(first.codes, first.scales)
    # the bf16 and fp8 variants of a case share one weight file
    fp8 = replace(SMALL_MOE, name="moe-mxfp4-fp8-small", activation=SUITE[1].activation)
    load_weights(fp8, 7, tmp_path)
    assert len(list(tmp_path.iterdir())) == 1


def test_work_counts_flops_and_the_fewest_bytes() -> None:
    ids = np.array([[0, 1], [1, 3]], dtype=np.int32)  # experts 0, 1, 3 are hit
    flop, moved = _work(SMALL_MOE, 2, ids)
    assert flop == 2 * 4 * 256 * 128
    per_expert = 256 * 128 // 2 + 256 * 128 // 32
    assert moved == 3 * per_expert + 2 * 128 * 2 + 4 * 256 * 2
    gptq = next(c for c in SUITE if c.name == "qkv-gptq-int4-g128-bf16-5120x2048")
    flop, moved = _work(gptq, 64, None)
    assert flop == 2 * 64 * 5120 * 2048
    weights = 5120 * 2048 // 2 + 5120 * (2048 // 128) * 2
    assert moved == weights + 64 * 2048 * 2 + 64 * 5120 * 2


def test_events_are_one_json_object_a_line() -> None:
    stream = io.StringIO()
    events = Events(stream)
    events.emit("start", index=3, case="x")
    events.emit("progress", index=3, stage="built")
    lines = stream.getvalue().splitlines()
    parsed = [json.loads(line) for line in lines]
    assert [(p["event"], p["index"]) for p in parsed] == [("start", 3), ("progress", 3)]
    assert all(isinstance(p["time"], float) for p in parsed)


def test_a_first_call_only_launches_after_the_first_batch_size_of_a_whole_dense_table() -> None:
    # The whole table compiles on the case's first call (`--compile all`, and plans from before
    # `compile`); with `--compile used` each batch size's first call may compile its own kernel.
    dense = next(c for c in SUITE if c.kind is GemmKind.DENSE)
    moe = next(c for c in SUITE if c.kind is GemmKind.MOE)
    plan: dict[str, Any] = {"batch_sizes": [1, 1024, 2048], "compile": "all"}
    sizes = (1, 1024, 2048)
    assert [first_call_only_launches(dense, plan, m) for m in sizes] == [False, True, True]
    old = {"batch_sizes": [16, 1024]}
    assert [first_call_only_launches(dense, old, m) for m in (16, 1024)] == [False, True]
    used = {**plan, "compile": "used"}
    assert [first_call_only_launches(dense, used, m) for m in sizes] == [False] * 3
    # The table is the dense kernels': a MoE call compiles the config its row count picks.
    assert [first_call_only_launches(moe, plan, m) for m in sizes] == [False] * 3
