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
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from humming_matrix.errors import UsageError


class WeightScheme(str, Enum):
    MXFP4 = "mxfp4"  # e2m1 values, e8m0 scale per 32 along K
    GPTQ_INT4_G128 = "gptq-int4-g128"  # uint4 with implicit zero 8, bf16 scale per 128 along K


class Activation(str, Enum):
    BF16 = "bf16"
    FP8_E4M3 = "fp8-e4m3"  # dynamic, one scale per token (absmax / 448)


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

    def __post_init__(self) -> None:
        if sum(self.shards) != self.shape_n:
            raise ValueError(f"{self.name}: shards {self.shards} do not sum to {self.shape_n}")
        if (self.kind is GemmKind.MOE) != (self.num_experts > 0):
            raise ValueError(f"{self.name}: MoE cases and only they have experts")

    @property
    def group_size(self) -> int:
        return 32 if self.scheme is WeightScheme.MXFP4 else 128

    def weight_key(self) -> str:
        """Cases that differ only in activation type share the same weights."""
        return f"{self.scheme.value}-{self.kind.value}-{self.model}-{self.shape_n}x{self.shape_k}"

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
        )


def _both_activations(case: KernelCase) -> tuple[KernelCase, KernelCase]:
    return case, replace(
        case, name=case.name.replace("-bf16-", "-fp8-"), activation=Activation.FP8_E4M3
    )


# gpt-oss-20b attention: hidden 2880, 64 query heads and 8 KV heads of 64 -> fused q/k/v 5120.
_QKV = KernelCase(
    name="mxfp4-bf16-qkv-gpt-oss-20b",
    model="gpt-oss-20b",
    scheme=WeightScheme.MXFP4,
    activation=Activation.BF16,
    kind=GemmKind.DENSE,
    shape_n=5120,
    shape_k=2880,
    shards=(4096, 512, 512),
)
# Qwen3-30B-A3B experts: hidden 2048, expert intermediate 768 (gate/up fused: 1536), 128, top 8.
_MOE_QWEN = KernelCase(
    name="moe-mxfp4-bf16-qwen3-30b-a3b",
    model="qwen3-30b-a3b",
    scheme=WeightScheme.MXFP4,
    activation=Activation.BF16,
    kind=GemmKind.MOE,
    shape_n=1536,
    shape_k=2048,
    shards=(768, 768),
    num_experts=128,
    top_k=8,
)
# gpt-oss-20b experts: hidden 2880, intermediate 2880 (gate/up fused: 5760), 32 experts, top 4.
_MOE_GPT_OSS = KernelCase(
    name="moe-mxfp4-bf16-gpt-oss-20b",
    model="gpt-oss-20b",
    scheme=WeightScheme.MXFP4,
    activation=Activation.BF16,
    kind=GemmKind.MOE,
    shape_n=5760,
    shape_k=2880,
    shards=(2880, 2880),
    num_experts=32,
    top_k=4,
)
# A GPTQ int4 group-128 dense layer: Qwen3-8B's fused gate/up (hidden 4096, intermediate 12288).
_GPTQ = KernelCase(
    name="gptq-int4-g128-bf16-gate-up-qwen3-8b",
    model="qwen3-8b",
    scheme=WeightScheme.GPTQ_INT4_G128,
    activation=Activation.BF16,
    kind=GemmKind.DENSE,
    shape_n=24576,
    shape_k=4096,
    shards=(12288, 12288),
)

SUITE: tuple[KernelCase, ...] = (
    *_both_activations(_QKV),
    *_both_activations(_MOE_QWEN),
    *_both_activations(_MOE_GPT_OSS),
    _GPTQ,
)

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 64, 2048)


def select_cases(
    patterns: Sequence[str] | None, suite: Sequence[KernelCase] = SUITE
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
