"""A workspace for end-to-end bisect and pre-merge tests: a matrix that installs only real
humming-kernels wheels (--no-deps, from the package index, through uv), a GSM8K config, the
`vllm` double on PATH, and a find-links listing of the versions a bisect may meet."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "vllm_double.py"

TEST_MATRIX = """\
[matrix]
schema_version = 1

[recipe.humming_only]
description = "humming-kernels alone (--no-deps); a test double serves"
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 0
preflight = false

[variant.cpu]
description = "no CUDA"

[[pairing]]
humming = ">=0.1.0,<0.2"
versions = ["0.1.2"]
variants = ["cpu"]
"""
CONFIG = """\
model_name: "double/model"
accuracy_threshold: 0.5
num_questions: 1319
num_fewshot: 5
startup_max_wait_seconds: 60
"""
# 0.1.4.post1 was never released: listed, it cannot be installed (the planted untestable one).
LISTED = ("0.1.2", "0.1.3", "0.1.4", "0.1.4.post1", "0.1.5", "0.1.6", "0.1.7", "0.1.8")
FIRST_BAD = "0.1.6"
WRONG = list(range(10))
LIMIT = 30


@dataclass(frozen=True)
class Workspace:
    root: Path
    env: dict[str, str]

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def config(self) -> Path:
        return self.root / "double.yaml"

    def common_args(self) -> list[str]:
        return [
            "--config",
            str(self.config),
            "--limit",
            str(LIMIT),
            "--results",
            str(self.store),
            "--noxfile",
            str(REPO / "noxfile.py"),
            "--envdir",
            str(self.root / "envs"),
        ]

    def index_args(self) -> list[str]:
        return ["--find-links", str(self.root / "links"), "--index-cache", str(self.root / "ic")]

    def cli(self, *args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "humming_matrix", *map(str, args)],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
            cwd=self.root,
        )

    def record_files(self) -> set[str]:
        return {p.name for p in self.store.glob("gsm8k__*.json")}


def gsm8k_dir() -> Path:
    configured = os.environ.get("HUMMING_MATRIX_GSM8K_DIR")
    return Path(configured).resolve() if configured else REPO.parent / "shared" / "gsm8k"


def make_workspace(root: Path) -> Workspace:
    bin_dir = root / "double-bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "vllm").symlink_to(DOUBLE)
    links = root / "links"
    links.mkdir()
    for version in LISTED:
        (links / f"humming_kernels-{version}-py3-none-any.whl").touch()
    (root / "matrix.toml").write_text(TEST_MATRIX)
    (root / "double.yaml").write_text(CONFIG)
    wrong = ",".join(str(i) for i in WRONG)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HUMMING_MATRIX_FILE": str(root / "matrix.toml"),
        "HUMMING_MATRIX_GSM8K_DIR": str(gsm8k_dir()),
        "HUMMING_DOUBLE_POLICY": f'{{"wrong_if_humming": {{">={FIRST_BAD}": [{wrong}]}}}}',
    }
    return Workspace(root, env)
