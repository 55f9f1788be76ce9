#!/usr/bin/env python3
"""Does every checkpoint the kernel tier writes fit each release's layer schema? No GPU needed.

    PYTHONPATH=<a humming-kernels site>:src python tools/h200-kernels/schema_check.py

For each (weight scheme, activation, GEMM kind) of the suite, at a small shape, it builds the
installed release's `HummingLayer` on the CPU and fits the adapter's checkpoint tensors to the
layer's state dict (`adapter.fit_tensors`, the check `adapter.build` makes before it loads them):
the tensor names, shapes and dtypes the release declares. Prints one line per combination, `ok`
or the reason it does not fit, and exits 1 if any does not. What it cannot check is everything
after loading (`transform`, the kernels): that needs the GPU.

The layer allocates one buffer on the GPU when it is made (a stream-K lock table); here
`torch.cuda.current_device` answers "cpu" so that it lands on the CPU.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import torch

from humming_matrix.kernels import adapter
from humming_matrix.kernels.cases import GemmKind, KernelCase
from humming_matrix.kernels.inputs import make_weights
from humming_matrix.kernels.models import SUITE


def small(case: KernelCase) -> KernelCase:
    moe = case.kind is GemmKind.MOE
    return replace(
        case,
        shape_n=256,
        shape_k=256,
        shards=(128, 128),
        num_experts=4 if moe else 0,
        top_k=2 if moe else 1,
    )


def main() -> int:
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value,unused-ignore]
    combos: dict[tuple[str, str, str], KernelCase] = {}
    for case in SUITE:
        combos.setdefault((case.scheme.value, case.activation.value, case.kind.value), case)
    failed = 0
    print(f"humming-kernels {adapter.humming_version()}")
    for (scheme, act, kind), case in sorted(combos.items()):
        probe = small(case)
        config, tensors = adapter.checkpoint_tensors(probe, make_weights(probe, 0))
        try:
            layer = adapter.new_layer(probe, config)
            adapter.fit_tensors(layer.state_dict(), tensors, config["quant_method"])
        except Exception as exc:  # a release's schema refusing the case is the finding
            failed += 1
            print(f"{scheme} {act} {kind}: {type(exc).__name__}: {exc}"[:300])
            continue
        print(f"{scheme} {act} {kind}: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
