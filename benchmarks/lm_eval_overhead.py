"""What one lm-eval config costs besides the model, and what skipping lm-eval's task index saves.

Against one local server that answers at once (the test double in tests/doubles, lm-eval mode,
started once), each repeat times, back to back, a GSM8K lm-eval config of `--limit` documents:
  indexed  the lm-eval worker as a fresh process with lm-eval's built-in task index loaded
           (`include_defaults=True`: what lm-eval's own CLI always does);
  local    the same worker with only the local task file indexed (`include_defaults=False`: what
           the suite does when every task of a config has a local source);
  tool     `humming-matrix lm-eval --endpoint URL` as a fresh process: config validation,
           environment capture, task file, the worker (local), record building and writing.
Usage (needs the lm-eval extra):
  HUMMING_MATRIX_GSM8K_DIR=../shared/gsm8k python benchmarks/lm_eval_overhead.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from humming_matrix.lmeval.config import load_lm_eval_config
from humming_matrix.lmeval.suite import WORKER_MODULE, model_args
from humming_matrix.lmeval.tasks import write_task_dir
from humming_matrix.suite.server import free_port

REPO = Path(__file__).resolve().parents[1]
DOUBLE = REPO / "tests" / "doubles" / "vllm_double.py"
CONFIG = """model_name: "bench/model"
tasks:
- name: "gsm8k"
  metrics:
  - name: "exact_match,strict-match"
    value: 0.5
limit: {limit}
num_fewshot: 5
"""


def _wait_healthy(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("the double never became healthy")


def _timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=250)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HUMMING_DOUBLE_POLICY": json.dumps({"lm_eval": True})}
    server = subprocess.Popen(
        [sys.executable, str(DOUBLE), "serve", "bench/model", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    legs: dict[str, list[float]] = {"indexed": [], "local": [], "tool": []}
    try:
        _wait_healthy(url)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            config_path = work / "bench.yaml"
            config_path.write_text(CONFIG.format(limit=args.limit), encoding="utf-8")
            config = load_lm_eval_config(config_path)
            write_task_dir(work / "tasks", ["gsm8k"])
            worker_env = {
                **env,
                "HF_DATASETS_CACHE": str(work / "hf"),
                "HF_HUB_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1",
            }
            requests = {}
            for leg, include_defaults in (("indexed", True), ("local", False)):
                request = {
                    "model": config.lm_eval_model,
                    "model_args": model_args(config, url),
                    "tasks": ["gsm8k"],
                    "num_fewshot": 5,
                    "limit": args.limit,
                    "gen_kwargs": None,
                    "apply_chat_template": False,
                    "fewshot_as_multiturn": False,
                    "include_path": str(work / "tasks"),
                    "include_defaults": include_defaults,
                }
                requests[leg] = work / f"{leg}.json"
                requests[leg].write_text(json.dumps(request), encoding="utf-8")
            for _ in range(args.repeats):
                for leg in ("indexed", "local"):
                    legs[leg].append(
                        _timed(
                            [
                                sys.executable,
                                "-m",
                                WORKER_MODULE,
                                str(requests[leg]),
                                str(work / "out.json"),
                            ],
                            worker_env,
                        )
                    )
                legs["tool"].append(
                    _timed(
                        [
                            sys.executable,
                            "-m",
                            "humming_matrix",
                            "lm-eval",
                            "--endpoint",
                            url,
                            "--config",
                            str(config_path),
                            "--results",
                            str(work / "store"),
                        ],
                        env,
                    )
                )
    finally:
        server.terminate()
        server.wait(timeout=10)
    medians = {leg: statistics.median(times) for leg, times in legs.items()}
    print(f"{args.limit} documents, {args.repeats} repeats")
    for leg, times in legs.items():
        runs = " ".join(f"{t:.2f}" for t in times)
        print(f"{leg:8s} median {medians[leg]:6.2f} s   runs {runs}")
    print(
        f"index cost (indexed - local): {medians['indexed'] - medians['local']:.2f} s, "
        f"ratio {medians['indexed'] / medians['local']:.2f}"
    )
    print(f"tool over its worker (tool - local): {medians['tool'] - medians['local']:.2f} s")


if __name__ == "__main__":
    main()
