#!/usr/bin/env python3
"""Mirror vLLM's humming GSM8K configs and list files into configs/gsm8k/humming/vllm.

    python tools/refresh_vllm_humming_configs.py /path/to/vllm [--dest configs/gsm8k/humming/vllm]

Copies every *.yaml and *.txt of VLLM/tests/evals/gsm8k/configs/humming verbatim, removes mirrored
files vLLM no longer has, and writes SOURCE (the checkout's commit, when it is a git checkout).
Refuses (exit 2) when a list names a config that the checkout lacks. Afterwards run
`pytest tests/unit/test_kernels_models.py`: it says whether `kernels.models.USES` (the kernel
cases derived from the lists) and the shapes table still cover every listed config.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

SUBDIR = Path("tests/evals/gsm8k/configs/humming")
DEFAULT_DEST = Path(__file__).resolve().parents[1] / "configs" / "gsm8k" / "humming" / "vllm"


def refresh(vllm: Path, dest: Path) -> list[str]:
    src = vllm / SUBDIR
    if not src.is_dir():
        raise SystemExit(f"error: {src}: no such directory (is {vllm} a vLLM checkout?)")
    files = sorted(p for p in src.iterdir() if p.suffix in (".yaml", ".txt") and p.is_file())
    names = {p.name for p in files}
    for lst in (p for p in files if p.suffix == ".txt"):
        for line in lst.read_text(encoding="utf-8").splitlines():
            entry = line.strip()
            if entry and not entry.startswith("#") and entry not in names:
                print(f"error: {lst}: names {entry}, which {src} lacks", file=sys.stderr)
                raise SystemExit(2)
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.iterdir():
        if old.suffix in (".yaml", ".txt") and old.name not in names:
            old.unlink()
    for p in files:
        shutil.copyfile(p, dest / p.name)
    commit = subprocess.run(
        ["git", "-C", str(vllm), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    (dest / "SOURCE").write_text(
        f"vllm-project/vllm {SUBDIR} at {commit or 'unknown commit'}\n", encoding="utf-8"
    )
    return sorted(names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vllm", type=Path, help="a vLLM checkout")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    args = parser.parse_args(argv)
    names = refresh(args.vllm, args.dest)
    print(f"{len(names)} files mirrored into {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
