"""A copy of a checkpoint with Gaussian noise added to one weight tensor: a stand-in for a kernel
that computes one layer slightly wrong, for the divergence tier's proof (docs/divergence.md).

The noise has standard deviation `--scale` times that tensor's own standard deviation, drawn from
a fixed seed, so the copy is deterministic. Every other file (config, tokenizer) is copied as is.
Runs in the environment that serves the model (torch and safetensors come with vLLM).

    python smoke/perturb_weights.py --model smoke/models/tiny-llama \
        --out smoke/models/tiny-llama-noise-1e-2 --scale 1e-2
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
from pathlib import Path

# The first MLP's down projection: every later layer and the logits depend on it.
DEFAULT_TENSOR = "model.layers.0.mlp.down_proj.weight"
SEED = 1234
STAMP = "perturbation.json"


def perturb(model: Path, out: Path, scale: float, tensor: str = DEFAULT_TENSOR) -> float:
    """Write the perturbed copy; returns the noise's standard deviation."""
    torch = importlib.import_module("torch")
    safetensors = importlib.import_module("safetensors.torch")
    weights = safetensors.load_file(str(model / "model.safetensors"))
    if tensor not in weights:
        raise SystemExit(f"{model / 'model.safetensors'}: no tensor {tensor!r}")
    target = weights[tensor]
    generator = torch.Generator().manual_seed(SEED)
    sd = float(target.float().std()) * scale
    noise = torch.randn(target.shape, generator=generator, dtype=torch.float32) * sd
    weights[tensor] = (target.float() + noise).to(target.dtype)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(model, out, ignore=shutil.ignore_patterns("model.safetensors", STAMP))
    safetensors.save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / STAMP).write_text(
        json.dumps(
            {"source": str(model), "tensor": tensor, "scale": scale, "noise_sd": sd, "seed": SEED},
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    return sd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--scale", type=float, required=True, help="noise sd as a fraction of the tensor's own sd"
    )
    parser.add_argument("--tensor", default=DEFAULT_TENSOR)
    args = parser.parse_args()
    sd = perturb(args.model, args.out, args.scale, args.tensor)
    print(f"perturb: wrote {args.out} ({args.tensor} + N(0, {sd:.3g}^2), scale {args.scale:g})")


if __name__ == "__main__":
    main()
