"""The kernel suite: which humming layers are built, with which shapes and batch sizes.

The cases mirror the quantisation schemes the GSM8K config suite exercises through vLLM:
MXFP4 weights (e2m1 values, e8m0 scales, group 32) with bf16 activations and with FP8 e4m3
activations quantised per token (as `VLLM_HUMMING_INPUT_QUANT_CONFIG='{"dtype":"float8e4m3"}'`
asks), the MoE GEMM of the suite's MXFP4 MoE models with both activation types, and one GPTQ int4
group-128 layer. Shapes are the models' own.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from humming_matrix.errors import UsageError


class WeightScheme(str, Enum):
    MXFP4 = "mxfp4"  # e2m1 values, e8m0 scale per 32 along K
    GPTQ_INT4_G128 = "gptq-int4-g128"  # uint4 with implicit zero 8, bf16 scale per 128 along K
    # e4m3 values, one float32 scale per 128 x 128 block (block FP8: "fp8" with
    # weight_block_size [128, 128]); humming keeps the scales in bf16.
    FP8_BLOCK = "fp8-block"
    # 8-bit values, one bf16 scale per output channel (compressed-tensors, strategy "channel"):
    # e4m3 ("float-quantized", FP8W8 checkpoints) or int8 ("int-quantized", w8a8 checkpoints).
    FP8_CHANNEL = "fp8-channel"
    INT8_CHANNEL = "int8-w8a8"
    # uint4 with a 4-bit zero point and a bf16 scale per 128 along K (AutoAWQ's GEMM layout).
    AWQ_INT4_G128 = "awq-int4"

    @property
    def group_size(self) -> int:
        """Weights per scale along K (per-channel schemes: the whole row, returned as 1)."""
        if self is WeightScheme.MXFP4:
            return 32
        grouped = (WeightScheme.GPTQ_INT4_G128, WeightScheme.AWQ_INT4_G128, WeightScheme.FP8_BLOCK)
        return 128 if self in grouped else 1


class Activation(str, Enum):
    BF16 = "bf16"
    FP8_E4M3 = "fp8-e4m3"  # dynamic, one scale per token (absmax / 448)
    INT8 = "int8"  # dynamic, one scale per token (absmax / 127)

    @property
    def quantized(self) -> bool:
        return self is not Activation.BF16


class WeightDist(str, Enum):
    """How the checkpoint's scales are drawn (see `inputs.make_weights`)."""

    CHECKPOINT = "checkpoint"  # like a real checkpoint's: rows and groups spread a few binades
    # Scales spread as far as the format lets them within one tensor: near-dead experts (and
    # rows) at the bottom of the range, outlier groups at the top.
    WIDE_SCALES = "wide-scales"


class GemmKind(str, Enum):
    DENSE = "dense"
    MOE = "moe"  # indexed (sorted-token) MoE GEMM, the first (gate/up) projection


@dataclass(frozen=True)
class KernelCase:
    """One layer to build. For MoE, `shape_n` is the fused gate/up width (2 x intermediate)."""

    name: str
    model: str
    scheme: WeightScheme
    activation: Activation
    kind: GemmKind
    shape_n: int
    shape_k: int
    # Output-row shards of different magnitude (q/k/v or gate/up), as widths that sum to shape_n.
    shards: tuple[int, ...]
    num_experts: int = 0
    top_k: int = 1
    layer: str = ""  # q/k/v, o_proj, gate/up, down: which of the model's layers this is
    weights: WeightDist = WeightDist.CHECKPOINT

    def __post_init__(self) -> None:
        if sum(self.shards) != self.shape_n:
            raise ValueError(f"{self.name}: shards {self.shards} do not sum to {self.shape_n}")
        if (self.kind is GemmKind.MOE) != (self.num_experts > 0):
            raise ValueError(f"{self.name}: MoE cases and only they have experts")

    @property
    def group_size(self) -> int:
        """Weights per scale along K (FP8 blocks also span 128 output rows)."""
        return self.scheme.group_size

    def weight_key(self) -> str:
        """Cases that differ only in activation type share the same weights."""
        key = f"{self.scheme.value}-{self.kind.value}-{self.model}-{self.shape_n}x{self.shape_k}"
        if self.weights is not WeightDist.CHECKPOINT:
            key += f"-{self.weights.value}"
        return key

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "scheme": self.scheme.value,
            "activation": self.activation.value,
            "kind": self.kind.value,
            "shape_n": self.shape_n,
            "shape_k": self.shape_k,
            "shards": list(self.shards),
            "num_experts": self.num_experts,
            "top_k": self.top_k,
            "layer": self.layer,
            "weights": self.weights.value,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelCase:
        return cls(
            name=str(data["name"]),
            model=str(data["model"]),
            scheme=WeightScheme(data["scheme"]),
            activation=Activation(data["activation"]),
            kind=GemmKind(data["kind"]),
            shape_n=int(data["shape_n"]),
            shape_k=int(data["shape_k"]),
            shards=tuple(int(s) for s in data["shards"]),
            num_experts=int(data["num_experts"]),
            top_k=int(data["top_k"]),
            layer=str(data.get("layer", "")),
            weights=WeightDist(data.get("weights", WeightDist.CHECKPOINT.value)),
        )


# Decode (1, 16: vLLM captures CUDA graphs there), mid (128) and prefill (2048); --full adds more.
DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 16, 128, 2048)
FULL_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


class CompiledKernels(Enum):
    """Which of a dense layer's kernels a run compiles.

    humming keeps, per dense layer, a table of heuristic kernels by token-count range, and a
    first call with no tuning config (vLLM's) compiles every row. The rows are the same kernels
    either way; compiling only the rows the run's batch sizes fall in skips compiles that the
    run never launches, but cannot see a row that fails to build (vLLM's first call would).
    """

    ALL = "all"  # every row, as vLLM's first call does (--full's default)
    USED = "used"  # only the rows the run's batch sizes dispatch to (the screen's default)


def select_cases(
    patterns: Sequence[str] | None, suite: Sequence[KernelCase]
) -> tuple[KernelCase, ...]:
    """Cases whose name matches any of the shell-style patterns (all cases when none given)."""
    if not patterns:
        return tuple(suite)
    chosen = tuple(c for c in suite if any(fnmatch.fnmatchcase(c.name, p) for p in patterns))
    if not chosen:
        names = ", ".join(c.name for c in suite)
        raise UsageError(f"--cases {' '.join(patterns)!r} matches no case; cases: {names}")
    return chosen


def parse_batch_sizes(values: Sequence[str]) -> tuple[int, ...]:
    """`--batch-sizes 1 64 2048` or `--batch-sizes 1,64,2048`: positive, de-duplicated, sorted."""
    sizes: set[int] = set()
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            if not part.isdigit() or int(part) < 1:
                raise UsageError(f"--batch-sizes: {part!r} is not a positive integer")
            sizes.add(int(part))
    if not sizes:
        raise UsageError("--batch-sizes: give at least one batch size")
    return tuple(sorted(sizes))
