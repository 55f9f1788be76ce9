#!/usr/bin/env python3
"""The pins the H200 payload must carry: vLLM's resolved requirements minus what the device
image already has, minus what a dense bf16 model served with humming on Hopper never imports,
plus what the payload's own steps need.

    missing_reqs.py RESOLVED.txt IMAGE_PACKAGES.txt > deps.txt

RESOLVED.txt is `uv pip compile` output (`name==version` lines); IMAGE_PACKAGES.txt holds names,
whitespace-separated, `#` comments allowed. Errors: one line on stderr, exit 2.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

# Never imported by `vllm serve` of a dense bf16 Llama with --quantization humming on Hopper
# (the trial's server started and answered without them; each group says why it is not needed).
NOT_NEEDED: dict[str, str] = {
    # FlashInfer: attention/sampling backend; FA3 serves attention on Hopper and
    # VLLM_USE_FLASHINFER_SAMPLER=0 keeps the sampler off it. The rest come in through it.
    "flashinfer-python": "FlashInfer",
    "flashinfer-cubin": "FlashInfer",
    "cuda-tile": "FlashInfer",
    "nvidia-cudnn-frontend": "FlashInfer",
    "nvidia-cuda-tileiras": "FlashInfer (cuda-tile)",
    # CuTe-DSL kernels (quack, FlashInfer's CuTe paths) and TileLang (DeepSeek-style kernels).
    "nvidia-cutlass-dsl": "CuTe DSL",
    "nvidia-cutlass-dsl-libs-base": "CuTe DSL",
    "nvidia-cutlass-dsl-libs-cu13": "CuTe DSL",
    "cuda-python": "CuTe DSL",
    "quack-kernels": "CuTe DSL",
    "tilelang": "TileLang",
    "z3-solver": "TileLang",
    "torch-c-dlpack-ext": "quack / TileLang",
    "tokenspeed-mla": "MLA kernels (DeepSeek)",
    "tokenspeed-triton": "MLA kernels (DeepSeek)",
    # The CUDA compiler wheels (humming-kernels' and cuda-tile's): the image has CUDA 13.0's nvcc.
    "nvidia-cuda-nvcc": "the image's nvcc",
    "nvidia-cuda-crt": "the image's nvcc",
    "nvidia-nvvm": "the image's nvcc",
    "nvidia-cuda-cccl": "the image's CUDA toolkit",
    # Optional loaders and tokenizers: the safetensors loader is the default, the tokenizer is HF's.
    "fastsafetensors": "--load-format fastsafetensors only",
    "mistral-common": "--tokenizer-mode mistral only",
    "pycountry": "mistral-common / pydantic-extra-types country types",
    # `fastapi[standard]` CLI extras: vLLM serves with its own uvicorn launcher.
    "fastapi-cli": "FastAPI's CLI",
    "fastapi-cloud-cli": "FastAPI's CLI",
    "rich-toolkit": "FastAPI's CLI",
    "rignore": "FastAPI's CLI",
    "fastar": "FastAPI's CLI",
    "detect-installer": "FastAPI's CLI",
    "sentry-sdk": "FastAPI's CLI",
    # pyjwt's crypto backend: JWT signing is not used by the OpenAI server.
    "cryptography": "pyjwt[crypto]",
    "cffi": "cryptography",
    "pycparser": "cryptography",
    # Carried in their own places, not in the shared site directory.
    "vllm": "its own stripped wheel",
    "humming-kernels": "one --target directory per release",
}

# Needed by the payload's own steps, whatever vLLM pins.
EXTRA = (
    "pyelftools==0.33",  # humming-kernels <= 0.1.11 requires it; the image lacks it
    "gguf==0.19.0",  # convert_smollm2.py reads the GGUF with transformers + gguf
    # humming-matrix's build backend and what the image lacks of its needs: device.sh builds the
    # product from the checkout each call carries, so the payload never holds a stale copy.
    "hatchling==1.33.0",
    "tomlkit==0.15.2",
    "trove-classifiers==2026.9.21.13",
)


class InputError(Exception):
    pass


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_names(path: Path) -> set[str]:
    text = _read(path)
    words = (w for line in text.splitlines() for w in line.split("#", 1)[0].split())
    return {canonical(w) for w in words}


def pins(path: Path) -> list[tuple[str, str]]:
    out = []
    for number, raw in enumerate(_read(path).splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise InputError(f"{path}:{number}: expected name==version, got {raw.strip()!r}")
        out.append((name.strip(), version.strip()))
    return out


def missing(resolved: Iterable[tuple[str, str]], image: set[str]) -> list[str]:
    chosen = {}
    for name, version in resolved:
        key = canonical(name)
        if key not in image and key not in NOT_NEEDED:
            chosen[key] = f"{key}=={version}"
    for line in EXTRA:
        chosen[canonical(line.partition("==")[0])] = line  # one version of each: pip needs that
    return [chosen[k] for k in sorted(chosen)]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: missing_reqs.py RESOLVED.txt IMAGE_PACKAGES.txt", file=sys.stderr)
        return 2
    try:
        lines = missing(pins(Path(args[0])), image_names(Path(args[1])))
    except InputError as exc:
        print(f"missing_reqs: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
