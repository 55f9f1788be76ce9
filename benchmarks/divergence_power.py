"""The smallest weight perturbation the divergence tier flags, next to what GSM8K accuracy says
about the same models (docs/divergence.md).

For the smoke model and copies of it with noise in one layer (smoke/perturb_weights.py, scales
given), each served in turn by vLLM (the product's launcher, one server at a time): a GSM8K
accuracy run and a divergence pass on the same server (the original model: two divergence passes,
the A/A floor). Then, for each perturbed copy, `divergence compare` and accuracy `compare` against
the original. Prints one line per scale. Runs in an environment with vLLM (the smoke one):

  HUMMING_MATRIX_GSM8K_DIR=../shared/gsm8k PATH=<smoke venv>/bin:$PATH \
      python benchmarks/divergence_power.py --model smoke/models/tiny-llama \
      --work /tmp/power --questions 100 --scales 1e-4 1e-3 1e-2 1e-1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from humming_matrix.suite import server

REPO = Path(__file__).resolve().parents[1]
CONFIG = """model_name: "{model}"
accuracy_threshold: 0.0
num_questions: {questions}
num_fewshot: 5
startup_max_wait_seconds: 900
server_args: "--dtype float32 --max-model-len 2048 --enforce-eager --max-num-seqs 32"
env:
  VLLM_CPU_KVCACHE_SPACE: 1
"""


def hm(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "humming_matrix", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def serve_and_ask(model: Path, label: str, work: Path, config: Path, passes: int) -> None:
    """Serve `model` and ask both passes with `config` (the original model's: the client sends
    no model name, and accuracy `compare` pairs only runs of one config file)."""
    directory = work / label
    if (directory / "divergence").is_dir():
        return  # done by an earlier invocation with the same --work
    directory.mkdir(parents=True, exist_ok=True)
    spec = server.ServerSpec(
        str(model.resolve()),
        (
            "--dtype",
            "float32",
            "--max-model-len",
            "2048",
            "--enforce-eager",
            "--max-num-seqs",
            "32",
        ),
        {"VLLM_CPU_KVCACHE_SPACE": "1"},
        900,
    )
    # `--endpoint` clients send no key: a launch without one.
    with server.launch(spec, directory / "server.log", identity=False) as running:
        for what, args in (
            ("accuracy", ["run"]),
            ("divergence", ["divergence", "run", "--repeat", str(passes)]),
        ):
            done = hm(
                *args, "--config", config, "--endpoint", running.url, "--results", directory / what
            )
            if done.returncode not in (0, 1):
                sys.exit(f"{label} {what}: exit {done.returncode}\n{done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--scales", nargs="+", required=True)
    args = parser.parse_args()
    config = args.work / "tiny.yaml"
    if not config.exists():
        args.work.mkdir(parents=True, exist_ok=True)
        config.write_text(
            CONFIG.format(model=args.model.resolve(), questions=args.questions), encoding="utf-8"
        )
    serve_and_ask(args.model, "original", args.work, config, passes=2)
    for scale in args.scales:
        copy = args.work / "models" / f"noise-{scale}"
        # The serving environment's python (first on PATH): it has torch and safetensors.
        subprocess.run(
            [
                "python",
                str(REPO / "smoke" / "perturb_weights.py"),
                "--model",
                str(args.model),
                "--out",
                str(copy),
                "--scale",
                scale,
            ],
            check=True,
            env=os.environ,
        )
        serve_and_ask(copy, f"noise-{scale}", args.work, config, passes=1)
        original, perturbed = args.work / "original", args.work / f"noise-{scale}"
        div = hm(
            "divergence",
            "compare",
            original / "divergence",
            perturbed / "divergence",
            "--json",
            perturbed / "divergence.json",
        )
        acc = hm("compare", original / "accuracy", perturbed / "accuracy")
        report = json.loads((perturbed / "divergence.json").read_text())["configs"][0]
        kl = report["tests"][0]
        print(
            f"scale {scale}: divergence {report['verdict']} (exit {div.returncode}; mean KL "
            f"{kl['candidate_mean']:.3g} vs floor {kl['floor_mean']:.3g}, above floor "
            f"{kl['above']}/{report['questions']}, Holm p {kl['adjusted_p']:.3g}); accuracy "
            f"compare exit {acc.returncode}: {(acc.stdout or acc.stderr).splitlines()[0]}",
            flush=True,
        )


if __name__ == "__main__":
    main()
