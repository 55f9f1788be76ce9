"""Build the smoke model: a tiny Llama with random weights and a tokenizer trained on GSM8K.

`vllm serve` needs a real checkpoint and the smoke run may download nothing from a model hub, so
the checkpoint is made here, offline, in about 20 s: a byte-level BPE tokenizer (vocabulary 4096)
trained on GSM8K's train split, and a `LlamaForCausalLM` (hidden 128, 4 layers, 2 heads of 64,
1.90M parameters, float32) with weights drawn from a fixed seed. Every answer is wrong, but the
build is deterministic (two builds give byte-identical files) and so are the server's answers.

Runs in the environment that serves it: torch, transformers and tokenizers come with vLLM, and
humming-matrix supplies the verified GSM8K train split (`HUMMING_MATRIX_GSM8K_DIR`, or its
download cache). A directory already built by this same script from the same data is kept.

    python smoke/tiny_llama.py --out smoke/models/tiny-llama
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from humming_matrix.errors import HummingMatrixError
from humming_matrix.suite.gsm8k import data_file, read_jsonl

SEED = 0
VOCAB_SIZE = 4096
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
# GSM8K prompts with 5 shots are 614-703 tokens with this tokenizer; 4096 leaves room for any
# --max-model-len a config sets.
MAX_POSITIONS = 4096
STAMP = "smoke-build.json"


def build_stamp(train: Path) -> dict[str, str]:
    """What the checkpoint is a function of: this script and the training text."""
    return {
        "builder_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "train_sha256": hashlib.sha256(train.read_bytes()).hexdigest(),
    }


def is_current(out: Path, stamp: dict[str, str]) -> bool:
    try:
        found = json.loads((out / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(found == stamp and (out / "model.safetensors").is_file())


def train_tokenizer(train: Path) -> Any:
    # Imported here, by name: these live in the serving environment, not in humming-matrix's.
    tokenizers = importlib.import_module("tokenizers")
    texts = [f"Question: {ex.question}\nAnswer: {ex.answer}\n\n" for ex in read_jsonl(train)]
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=False,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def write_checkpoint(out: Path, train: Path) -> int:
    """Write the tokenizer and the model into `out`; returns the parameter count."""
    torch = importlib.import_module("torch")
    transformers = importlib.import_module("transformers")
    importlib.import_module("transformers.utils.logging").disable_progress_bar()  # a CI log
    torch.manual_seed(SEED)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(train),
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=MAX_POSITIONS,
    )
    config = transformers.LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        # head_dim 64: a size every vLLM attention backend accepts, the CPU one included.
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = transformers.LlamaForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return int(sum(p.numel() for p in model.parameters()))


def build(out: Path) -> str:
    """Build the checkpoint into `out` unless it is current; returns a line saying which."""
    train = data_file("train.jsonl")
    stamp = build_stamp(train)
    if is_current(out, stamp):
        return f"tiny-llama: {out} is up to date"
    # Built beside and moved into place, so an interrupted build never looks current.
    partial = out.with_name(f".{out.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    params = write_checkpoint(partial, train)
    (partial / STAMP).write_text(json.dumps(stamp, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return f"tiny-llama: wrote {out} ({params / 1e6:.2f}M parameters, vocabulary {VOCAB_SIZE})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the checkpoint directory")
    args = parser.parse_args(argv)
    try:
        print(build(args.out), flush=True)
    except HummingMatrixError as exc:  # GSM8K missing or corrupt: one line, no traceback
        print(f"tiny-llama: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
