"""Builds humming layers through humming's public API, the way vLLM does, for any release.

Every release from 0.1.0 to 0.1.20 has `humming.layer.HummingLayer(shape_n, shape_k,
weight_config, input_config, num_experts, torch_dtype)` with `load_from_tensors`, `transform` and
`forward`; what moved between releases (the forward's argument names, where the layer's config
lives, the heuristics' first argument) is looked up here rather than assumed. Checkpoint tensors
go in the formats vLLM loads: `quant_method` "mxfp4" (packed e2m1 bytes, e8m0 scales) and "gptq"
(qweight/scales/qzeros/g_idx), "fp8" with `weight_block_size` [128, 128] (e4m3fn weight, float32
`weight_scale_inv`). FP8 activations are asked for exactly as
`VLLM_HUMMING_INPUT_QUANT_CONFIG='{"dtype":"float8e4m3"}'` does: `input_config={"dtype": ...}`.

A case that a release cannot build raises `Unsupported` with the reason; this module imports
torch and humming, so only the worker process (`probe`) imports it.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from humming_matrix.kernels.cases import Activation, GemmKind, KernelCase, WeightScheme
from humming_matrix.kernels.inputs import (
    FP8_BLOCK,
    AwqWeights,
    ChannelWeights,
    Fp8BlockWeights,
    GptqWeights,
    Mxfp4Weights,
    Weights,
    gptq_qzeros,
    moe_align,
    pack_awq,
    pack_gptq_qweight,
    pack_mxfp4,
)

PAD_N, PAD_K = 256, 128


class Unsupported(Exception):
    """This release cannot build the case; the message says why."""


# Exceptions that mean "this release lacks the feature", as opposed to a failure of a feature
# it has. A ValueError or assertion that says "unsupported"/"not supported" counts too.
_API_GAPS = (ImportError, AttributeError, NotImplementedError, TypeError, KeyError)


def is_api_gap(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, _API_GAPS) or "unsupported" in text or "not supported" in text


def humming_version() -> str | None:
    try:
        return importlib.metadata.version("humming-kernels")
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Moe:
    """Routing tensors for one batch on the GPU."""

    sorted_ids: torch.Tensor
    expert_ids: torch.Tensor
    num_tokens_padded: torch.Tensor
    block: int


def _json_safe(config: Any) -> dict[str, Any]:
    return {
        k: v if isinstance(v, int | float | str | bool | None) else str(v)
        for k, v in config.items()
    }


def _serves(row: Any, m: int) -> bool:
    """Whether a row [low, high, config] of humming's kernel table serves `m` tokens: humming's
    launcher picks the row with low < m <= high, a high of 0 or less meaning no bound."""
    low, high = int(row[0]), int(row[1])
    return low < m and (high <= 0 or m <= high)


class BuiltLayer:
    """A transformed humming layer and how to call it in this release.

    `used_by`: the batch sizes whose dense kernels alone are compiled (`CompiledKernels.USED`);
    None compiles the layer's whole table on its first call, as vLLM does.
    """

    def __init__(self, case: KernelCase, layer: Any, used_by: Sequence[int] | None = None) -> None:
        self.case = case
        self.layer = layer
        self._params = set(inspect.signature(layer.forward).parameters)
        self._tuning: dict[int, Any] = {}
        self._used_by = None if used_by is None else tuple(used_by)
        self._table: list[Any] | None = None
        self._dense_tuning: list[Any] | None = None

    def _name(self, *candidates: str) -> str:
        for name in candidates:
            if name in self._params:
                return name
        raise Unsupported(f"HummingLayer.forward takes none of {candidates}")

    def _config(self) -> Any:
        metas = getattr(self.layer, "humming_metas", None)
        if isinstance(metas, dict) and "" in metas:
            return metas[""]
        config = getattr(self.layer, "humming_config", None)
        if config is None:
            raise Unsupported("the layer exposes neither humming_metas nor humming_config")
        return config

    def moe_tuning(self, rows: int) -> tuple[Any, int]:
        """One heuristic kernel config for `rows` routed rows, and its block height.

        One config for the whole call keeps the token padding and the kernel's block in step,
        whatever a release's multi-config dispatch compares against.
        """
        if rows not in self._tuning:
            from humming.tune import get_heuristics_config

            config = get_heuristics_config(self._config(), shape_m=rows, gemm_type="indexed")
            if not isinstance(config, dict) or "block_shape" not in config:
                raise Unsupported(f"indexed-GEMM heuristics returned {type(config).__name__}")
            self._tuning[rows] = config
        config = self._tuning[rows]
        return config, int(config["block_shape"][0])

    def dense_table(self) -> list[Any]:
        """The layer's dense kernel table, [low, high, config] rows by token count, as humming
        makes it on a first call with no tuning config (vLLM's: the heuristics, no shape)."""
        if self._table is None:
            from humming.tune import get_heuristics_config

            table = get_heuristics_config(self._config())
            if not isinstance(table, list) or not table:
                raise Unsupported(f"dense heuristics returned {type(table).__name__}")
            self._table = table
        return self._table

    def _told_table(self) -> list[Any] | None:
        """The dense table, or None where the release does not say (for what the record
        reports about it, never a reason for a batch to fail: a run that compiles the whole
        table asks the heuristics only for the record)."""
        try:
            return self.dense_table()
        except Exception:
            return None

    def dense_tuning(self) -> list[Any] | None:
        """The rows of the table that the run's batch sizes dispatch to (each with its own token
        range, so humming's launcher picks the same row for them as from the whole table); None
        when the whole table is compiled."""
        if self._used_by is None:
            return None
        if self._dense_tuning is None:
            self._dense_tuning = [
                row for row in self.dense_table() if any(_serves(row, m) for m in self._used_by)
            ]
        return self._dense_tuning

    def table_rows(self) -> dict[str, int] | None:
        """How many rows the dense kernel table has and how many the run compiles (where the
        compile time went); None for the MoE GEMM, or where the release does not say."""
        table = None if self.case.kind is GemmKind.MOE else self._told_table()
        if table is None:
            return None
        used = self.dense_tuning()
        return {"table": len(table), "compiled": len(table if used is None else used)}

    def routing(self, topk_ids: np.ndarray[Any, Any], device: torch.device) -> Moe:
        rows = topk_ids.size
        _, block = self.moe_tuning(rows)
        sorted_ids, expert_ids, padded = moe_align(topk_ids, self.case.num_experts, block)
        return Moe(
            sorted_ids=torch.from_numpy(sorted_ids).to(device),
            expert_ids=torch.from_numpy(expert_ids).to(device),
            num_tokens_padded=torch.tensor(padded, dtype=torch.int32, device=device),
            block=block,
        )

    def kernel_config(self, moe: Moe | None, rows: int) -> Any:
        """What this release picked for the call (the tuning config: block shape, stages, ...),
        JSON-safe: the MoE GEMM's for `rows` routed rows, or the dense table's row for `rows`
        tokens. None where the release does not say."""
        if moe is None:
            table = self._told_table() or []
            row = next((r for r in table if _serves(r, rows)), None)
            return None if row is None else _json_safe(row[2])
        config, _ = self.moe_tuning(rows)
        return _json_safe(config)

    def call(self, x: torch.Tensor, moe: Moe | None) -> Callable[[], torch.Tensor]:
        """A no-argument function that runs the layer once on `x` (and the routing)."""
        n = self.case.shape_n
        if moe is None:
            tuning = self.dense_tuning()
            if tuning is None:
                return lambda: self.layer(inputs=x)[..., :n]
            return lambda: self.layer(inputs=x, tuning_config=tuning)[..., :n]
        rows = x.shape[0] * self.case.top_k
        config, _ = self.moe_tuning(rows)
        kwargs = {
            "inputs": x,
            self._name("sorted_ids", "sorted_token_ids"): moe.sorted_ids,
            self._name("expert_ids"): moe.expert_ids,
            self._name("num_tokens_padded", "num_tokens_post_padded"): moe.num_tokens_padded,
            "top_k": self.case.top_k,
            "compute_config": {"gemm_type": "indexed"},
            "tuning_config": config,
        }
        return lambda: self.layer(**kwargs)[..., :n]


def checkpoint_tensors(
    case: KernelCase, weights: Weights
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The weight config and tensors a checkpoint of this scheme carries."""
    if case.scheme is WeightScheme.MXFP4:
        assert isinstance(weights, Mxfp4Weights)
        return {"quant_method": "mxfp4"}, {
            "weight": torch.from_numpy(pack_mxfp4(weights.codes)),
            "weight_scale": torch.from_numpy(weights.scales).view(torch.float8_e8m0fnu),
        }
    if case.scheme is WeightScheme.FP8_BLOCK:
        assert isinstance(weights, Fp8BlockWeights)
        # The "fp8" schema of every release: float8_e4m3fn weight, float32 `weight_scale_inv`.
        return {"quant_method": "fp8", "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}, {
            "weight": torch.from_numpy(weights.codes).view(torch.float8_e4m3fn),
            "weight_scale_inv": torch.from_numpy(weights.scales),
        }
    if isinstance(weights, AwqWeights):
        g = case.group_size
        config = {"quant_method": "awq", "bits": 4, "group_size": g, "zero_point": True}
        scales = np.ascontiguousarray(np.swapaxes(weights.scales, -1, -2))
        return config, {
            "qweight": torch.from_numpy(pack_awq(weights.codes)),
            "scales": torch.from_numpy(scales).to(torch.bfloat16),
            "qzeros": torch.from_numpy(pack_awq(weights.zeros)),
        }
    if isinstance(weights, ChannelWeights):
        # compressed-tensors, strategy "channel": FP8W8 ("float-quantized") and w8a8
        # ("int-quantized") checkpoints; the bf16 scale is (N, 1).
        kind = "float" if weights.fp8 else "int"
        config = {
            "quant_method": "compressed-tensors",
            "format": f"{kind}-quantized",
            "type": kind,
            "num_bits": 8,
            "strategy": "channel",
            "symmetric": True,
        }
        codes = torch.from_numpy(weights.codes)
        return config, {
            "weight": codes.view(torch.float8_e4m3fn if weights.fp8 else torch.int8),
            "weight_scale": torch.from_numpy(weights.scales[..., None]).to(torch.bfloat16),
        }
    assert isinstance(weights, GptqWeights)
    n, k = weights.codes.shape[-2:]
    g = case.group_size
    config = {"quant_method": "gptq", "bits": 4, "group_size": g, "desc_act": False, "sym": True}
    scales = np.ascontiguousarray(np.swapaxes(weights.scales, -1, -2))
    qzeros = gptq_qzeros(n, k, g)
    g_idx = np.arange(k, dtype=np.int32) // g
    if weights.codes.ndim == 3:  # experts: the same tensors with a leading expert dimension
        e = weights.codes.shape[0]
        qzeros = np.broadcast_to(qzeros, (e, *qzeros.shape)).copy()
        g_idx = np.broadcast_to(g_idx, (e, k)).copy()
    return config, {
        "qweight": torch.from_numpy(pack_gptq_qweight(weights.codes)),
        "scales": torch.from_numpy(scales).to(torch.bfloat16),
        "qzeros": torch.from_numpy(qzeros),
        "g_idx": torch.from_numpy(g_idx),
    }


def new_layer(case: KernelCase, weight_config: dict[str, Any]) -> Any:
    """The release's HummingLayer for the case, as vLLM configures it (on the current device)."""
    try:
        from humming.layer import HummingLayer
    except ImportError as exc:
        raise Unsupported(f"humming.layer.HummingLayer: {exc}") from exc
    input_config = {
        Activation.FP8_E4M3: {"dtype": "float8e4m3"},
        Activation.INT8: {"dtype": "int8"},
    }.get(case.activation)
    return HummingLayer(
        shape_n=case.shape_n,
        shape_k=case.shape_k,
        weight_config=weight_config,
        input_config=input_config,
        num_experts=case.num_experts if case.kind is GemmKind.MOE else None,
        torch_dtype=torch.bfloat16,
        # As vLLM pads every humming layer (gpt-oss's 2880 fits no kernel block otherwise).
        pad_n_to_multiple=PAD_N,
        pad_k_to_multiple=PAD_K,
    )


def fit_tensors(
    expected: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor], quant_method: str
) -> dict[str, torch.Tensor]:
    """The checkpoint tensors as the layer declares them (`expected`: its state dict): the same
    names and shapes, bytes reinterpreted where only the dtype's name differs. Raises
    Unsupported where they do not fit (load_state_dict(strict=False) would skip a renamed or
    reshaped tensor silently)."""
    fitted = dict(tensors)
    for name, tensor in tensors.items():
        if name not in expected:
            raise Unsupported(f"{quant_method} layer has no tensor {name!r}")
        if tuple(expected[name].shape) != tuple(tensor.shape):
            raise Unsupported(
                f"tensor {name!r}: layer expects {tuple(expected[name].shape)}, "
                f"checkpoint has {tuple(tensor.shape)}"
            )
        want = expected[name].dtype
        if tensor.dtype != want:
            # Checkpoint bytes are bytes: e8m0 scales stored as uint8 are the same exponents.
            # load_state_dict would convert values instead (2**-7 -> 0 as uint8).
            if tensor.element_size() != torch.empty((), dtype=want).element_size():
                raise Unsupported(
                    f"tensor {name!r}: layer wants {want}, checkpoint is {tensor.dtype}"
                )
            fitted[name] = tensor.view(want)
    return fitted


def build(
    case: KernelCase, weights: Weights, device: torch.device, used_by: Sequence[int] | None = None
) -> BuiltLayer:
    """Build, load and transform the layer. Raises Unsupported, or whatever humming raises.
    `used_by`: see `BuiltLayer`."""
    weight_config, tensors = checkpoint_tensors(case, weights)
    with torch.cuda.device(device):
        layer = new_layer(case, weight_config)
        tensors = fit_tensors(layer.state_dict(), tensors, weight_config["quant_method"])
        layer.load_from_tensors(tensors)
        layer = layer.to(device)
        layer.transform()
    return BuiltLayer(case, layer, used_by)
