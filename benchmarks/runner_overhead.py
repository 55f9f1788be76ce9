"""How much time `humming-matrix run` adds on top of the requests themselves.

Against one local server that answers at once (the test double in tests/doubles, started once),
each repeat times, back to back:
  floor    a bare aiohttp loop, as vLLM's gsm8k_eval.py does it, that posts the same 1319 prompts
           at the same concurrency (100) and does nothing else: the HTTP traffic itself;
  httpx    the same bare loop on httpx.AsyncClient, the other async client we considered;
  harness  `humming-matrix run --endpoint URL` as a fresh process: interpreter start, imports,
           config validation, GSM8K sha256 checks, prompt building, environment capture, the
           client, scoring, progress, and the atomic record write.
The harness's overhead is harness - floor (wall clock), and the CPU seconds each side spent in its
own process (the server's are not counted in either). Usage:
  HUMMING_MATRIX_GSM8K_DIR=../shared/gsm8k python benchmarks/runner_overhead.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx

from humming_matrix.suite import gsm8k
from humming_matrix.suite.config import load_config
from humming_matrix.suite.evaluate import request_params
from humming_matrix.suite.server import free_port

REPO = Path(__file__).resolve().parents[1]
DOUBLE = REPO / "tests" / "doubles" / "vllm_double.py"
CONFIG = """model_name: "bench/model"
accuracy_threshold: 0.5
num_questions: 1319
num_fewshot: 5
"""


async def _floor(url: str, prompts: list[str], params: dict[str, object]) -> None:
    connector = aiohttp.TCPConnector(limit=100)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def one(prompt: str) -> None:
            async with http.post(
                f"{url}/v1/completions", json={"prompt": prompt, **params}
            ) as response:
                response.raise_for_status()
                await response.json()

        await asyncio.gather(*(one(p) for p in prompts))


async def _httpx(url: str, prompts: list[str], params: dict[str, object]) -> None:
    gate = asyncio.Semaphore(100)
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:

        async def one(prompt: str) -> None:
            async with gate:
                response = await http.post(
                    f"{url}/v1/completions", json={"prompt": prompt, **params}
                )
                response.raise_for_status()

        await asyncio.gather(*(one(p) for p in prompts))


def _wait_healthy(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit("the double never became healthy")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp) / "bench.yaml"
        config_path.write_text(CONFIG)
        config = load_config(config_path)
        params = {k: v for k, v in request_params(config).items() if v is not None}
        prompts = [p.text for p in gsm8k.build_prompts(1319, 5)]
        server = subprocess.Popen(
            [sys.executable, str(DOUBLE), "serve", "bench/model", "--port", str(port)],
            stdout=subprocess.DEVNULL,
        )
        try:
            _wait_healthy(url)
            floors, harnesses, floor_cpu, harness_cpu = [], [], [], []
            httpx_wall, httpx_cpu = [], []
            for i in range(args.repeats):
                started, cpu = time.perf_counter(), time.process_time()
                asyncio.run(_httpx(url, prompts, params))
                httpx_wall.append(time.perf_counter() - started)
                httpx_cpu.append(time.process_time() - cpu)
                started, cpu = time.perf_counter(), time.process_time()
                asyncio.run(_floor(url, prompts, params))
                floors.append(time.perf_counter() - started)
                floor_cpu.append(time.process_time() - cpu)
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "humming_matrix",
                        "run",
                        "--config",
                        str(config_path),
                        "--endpoint",
                        url,
                        "--results",
                        str(Path(tmp) / f"store{i}"),
                    ],
                    capture_output=True,
                    text=True,
                    env={**os.environ},
                    check=False,
                )
                harnesses.append(time.perf_counter() - started)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                harness_cpu.append(
                    after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                )
                if done.returncode != 0:
                    raise SystemExit(f"run failed ({done.returncode}): {done.stderr}")
        finally:
            server.terminate()
            server.wait(10)
    overhead = [h - f for h, f in zip(harnesses, floors, strict=True)]
    print(
        json.dumps(
            {
                "repeats": args.repeats,
                "floor_s": [round(x, 3) for x in floors],
                "harness_s": [round(x, 3) for x in harnesses],
                "median_floor_s": round(statistics.median(floors), 3),
                "median_harness_s": round(statistics.median(harnesses), 3),
                "median_overhead_s": round(statistics.median(overhead), 3),
                "ratio_harness_to_floor": round(
                    statistics.median(harnesses) / statistics.median(floors), 2
                ),
                "median_floor_cpu_s": round(statistics.median(floor_cpu), 3),
                "median_harness_cpu_s": round(statistics.median(harness_cpu), 3),
                "httpx_s": [round(x, 3) for x in httpx_wall],
                "median_httpx_s": round(statistics.median(httpx_wall), 3),
                "median_httpx_cpu_s": round(statistics.median(httpx_cpu), 3),
                "cpus": os.cpu_count(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
