"""What the current environment is: package versions, torch's CUDA, the GPU, the nox session.

Nothing here imports torch, vLLM or humming (importing them costs seconds and can initialise
CUDA); versions come from installed metadata and torch's CUDA from its generated version file.
"""

from __future__ import annotations

import importlib.metadata as metadata
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


def installed_packages() -> dict[str, str]:
    packages: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            packages[_canonical(name)] = dist.version
    return dict(sorted(packages.items()))


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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
            match = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]",
                              version_file.read_text(encoding="utf-8"), re.M)
            return match.group(1) if match else None
    return None


def gpus(run: Runner = _run) -> list[dict[str, str]]:
    out = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
               "--format=csv,noheader"])
    if not out:
        return []
    rows = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2:
            rows.append({"name": parts[0], "driver": parts[1],
                         "memory": parts[2] if len(parts) > 2 else ""})
    return rows


def _install_record(environ: Mapping[str, str]) -> Any:
    path = environ.get(ENV_INSTALL_RECORD)
    if not path:
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {"error": f"cannot read {path}: {exc}"}


def capture(environ: Mapping[str, str] | None = None, run: Runner = _run) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    packages = installed_packages()
    gpu_list = gpus(run)
    return {
        "humming_kernels": packages.get("humming-kernels"),
        "vllm": packages.get("vllm"),
        "torch": packages.get("torch"),
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
