"""Environment creation for matrix cells: nox's uv backend against its default virtualenv+pip.

For each backend, over the same cells of a bench matrix (humming-kernels from the package index,
--no-deps, plus humming-matrix and its dependencies, as the test matrix installs them):

  one cell, cold    fresh installer cache, fresh environment
  one cell, warm    warm cache, fresh environment
  five cells, warm  five sessions in a row, warm cache, fresh environments

Each figure is the median wall time of `nox --install-only` over --repeats runs, and the ratio is
pip's median over uv's, both measured in the same invocation.

With --full, it instead times one real serving cell (vLLM 0.33.0, torch 2.14.0 from PyPI,
humming-kernels 0.1.19, about 9 GB installed) with the installers' usual caches (~/.cache),
after one untimed run of each backend to warm them.

    python benchmarks/envs.py --repeats 3 [--markdown FILE]
    python benchmarks/envs.py --full --repeats 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERSIONS = ("0.1.5", "0.1.6", "0.1.17", "0.1.19", "0.1.20")
BACKENDS = ("uv", "virtualenv")
SCENARIOS = ["one cell, cold", "one cell, warm", "five cells, warm", "vLLM 0.33.0 cell, warm"]
MATRIX = """
[recipe.bare]
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 0
preflight = false

[variant.cpu]

[[pairing]]
humming = ">=0.1.0,<0.2"
versions = [VERSIONS]
variants = ["cpu"]
""".replace("VERSIONS", ", ".join(f'"{v}"' for v in VERSIONS))


FULL_MATRIX = """
[recipe.vllm]
requirements = ["vllm=={vllm}", "torch=={torch}", "humming-kernels=={humming}"]

[variant.pypi]

[[pairing]]
humming = ">=0.1.7,<0.2"
versions = ["0.1.19"]
vllm = "0.33.0"
torch = "2.14.0"
variants = ["pypi"]
"""


def _nox(
    backend: str, sessions: list[str], envdir: Path, cache: Path | None, matrix: Path
) -> float:
    env = dict(os.environ, HUMMING_MATRIX_FILE=str(matrix))
    if cache is not None:
        env.update(UV_CACHE_DIR=str(cache / "uv"), PIP_CACHE_DIR=str(cache / "pip"))
    argv = [
        sys.executable,
        "-m",
        "nox",
        "-f",
        str(REPO / "noxfile.py"),
        "--envdir",
        str(envdir),
        "--install-only",
        "--force-venv-backend",
        backend,
        "--no-reuse-existing-virtualenvs",
        "-s",
        *sessions,
    ]
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"nox failed ({backend}, {sessions}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return elapsed


def measure(repeats: int, work: Path) -> dict[tuple[str, str], list[float]]:
    matrix = work / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    one = [f"humming-{VERSIONS[3]}"]
    five = [f"humming-{v}" for v in VERSIONS]
    times: dict[tuple[str, str], list[float]] = {}
    for i in range(repeats):
        for backend in BACKENDS:  # interleaved, so drift in the machine hits both alike
            cache = work / f"cache-{backend}-{i}"
            runs = (("one cell, cold", one), ("one cell, warm", one), ("five cells, warm", five))
            for scenario, sessions in runs:
                envdir = Path(tempfile.mkdtemp(dir=work, prefix="envs-"))
                seconds = _nox(backend, sessions, envdir, cache, matrix)
                times.setdefault((scenario, backend), []).append(seconds)
                shutil.rmtree(envdir)
                print(f"{scenario:18} {backend:10} run {i + 1}: {seconds:6.2f} s", flush=True)
            shutil.rmtree(cache, ignore_errors=True)  # pip may never create it (see README)
    return times


def measure_full(repeats: int, work: Path) -> dict[tuple[str, str], list[float]]:
    matrix = work / "matrix.toml"
    matrix.write_text(FULL_MATRIX, encoding="utf-8")
    times: dict[tuple[str, str], list[float]] = {}
    for i in range(repeats + 1):
        for backend in BACKENDS:
            envdir = Path(tempfile.mkdtemp(dir=work, prefix="envs-"))
            seconds = _nox(backend, ["humming-0.1.19"], envdir, None, matrix)
            shutil.rmtree(envdir)
            label = "warm-up (untimed)" if i == 0 else f"run {i}"
            print(f"vLLM cell, warm    {backend:10} {label}: {seconds:6.2f} s", flush=True)
            if i:
                times.setdefault(("vLLM 0.33.0 cell, warm", backend), []).append(seconds)
    return times


def table(times: dict[tuple[str, str], list[float]], repeats: int) -> str:
    lines = [
        f"| scenario | uv (median of {repeats}) | virtualenv+pip (median of {repeats}) "
        "| pip / uv |",
        "| --- | ---: | ---: | ---: |",
    ]
    for scenario in sorted({s for s, _ in times}, key=SCENARIOS.index):
        uv = statistics.median(times[(scenario, "uv")])
        pip = statistics.median(times[(scenario, "virtualenv")])
        lines.append(f"| {scenario} | {uv:.2f} s | {pip:.2f} s | {pip / uv:.1f}x |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--full", action="store_true", help="time a real vLLM cell instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-envs-") as tmp:
        run = measure_full if args.full else measure
        times = run(args.repeats, Path(tmp))
    text = table(times, args.repeats)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
