"""Local task files, so lm-eval's GSM8K task runs offline from the verified jsonl copy.

lm-eval's `gsm8k` task reads `openai/gsm8k` from the Hugging Face hub. That dataset is built from
the same `train.jsonl`/`test.jsonl` of openai/grade-school-math that `humming_matrix.suite.gsm8k`
keeps (sha256-checked; `HUMMING_MATRIX_GSM8K_DIR` names a local copy). The task file written here
*includes* the installed lm-eval's own `gsm8k.yaml`, so prompts, filters and metrics stay exactly
lm-eval's, and only swaps the data source for the json loader on those files. Tasks without a local
source are left to lm-eval (and need the hub).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from humming_matrix.errors import DataError, UsageError
from humming_matrix.suite import gsm8k

# task name -> its YAML inside the installed lm_eval package, and the GSM8K files it reads.
LOCAL_TASKS: Mapping[str, str] = {"gsm8k": "tasks/gsm8k/gsm8k.yaml"}

DataFile = Callable[[str], Path]


@dataclass(frozen=True)
class TaskDir:
    """A folder of task files for lm-eval's `include_path`, and which tasks it serves."""

    path: Path
    local: tuple[str, ...]
    remote: tuple[str, ...]

    @property
    def offline(self) -> bool:
        return not self.remote


def lm_eval_package_dir() -> Path:
    """Where lm-eval is installed, found without importing it (the import takes seconds)."""
    try:
        spec = importlib.util.find_spec("lm_eval")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(
            "lm-eval is not installed here; install the extra: "
            "pip install 'humming-matrix[lm-eval]'"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def write_task_dir(
    directory: Path,
    task_names: Iterable[str],
    *,
    package_dir: Path | None = None,
    data_file: DataFile = gsm8k.data_file,
) -> TaskDir:
    """Write one task file per task that has a local source; the rest stay lm-eval's."""
    names = list(task_names)
    local = [n for n in names if n in LOCAL_TASKS]
    remote = [n for n in names if n not in LOCAL_TASKS]
    directory.mkdir(parents=True, exist_ok=True)
    if local:
        base = package_dir or lm_eval_package_dir()
        files = {split: str(data_file(f"{split}.jsonl")) for split in ("train", "test")}
        for name in local:
            builtin = base / LOCAL_TASKS[name]
            if not builtin.is_file():
                raise DataError(
                    f"{builtin}: lm-eval's own {name} task file is missing; is this lm-eval 0.4.x?"
                )
            task = {
                "include": str(builtin),
                "task": name,
                "dataset_path": "json",
                "dataset_name": None,
                "dataset_kwargs": {"data_files": files},
            }
            (directory / f"{name}.yaml").write_text(
                yaml.safe_dump(task, sort_keys=False), encoding="utf-8"
            )
    return TaskDir(directory, tuple(local), tuple(remote))
