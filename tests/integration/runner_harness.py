"""Helpers for tests that drive `humming-matrix run` as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from humming_matrix.store.results import Gsm8kRecord, iter_gsm8k_records

CONFIG = (
    'model_name: "double/model"\n'
    "accuracy_threshold: {threshold}\n"
    "num_questions: {questions}\n"
    "num_fewshot: 5\n"
    'server_args: "--enforce-eager --max-model-len 8192"\n'
    "startup_max_wait_seconds: {wait}\n"
)


def write_config(
    directory: Path,
    name: str = "double",
    *,
    threshold: float = 0.9,
    questions: int = 1319,
    wait: float = 60,
    env: dict[str, Any] | None = None,
    extra: str = "",
) -> Path:
    text = CONFIG.format(threshold=threshold, questions=questions, wait=wait) + extra
    if env:
        text += "env:\n" + "".join(f"  {k}: '{v}'\n" for k, v in env.items())
    path = directory / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def policy_env(policy: dict[str, Any]) -> dict[str, str]:
    return {"HUMMING_DOUBLE_POLICY": json.dumps(policy)}


def cli(
    *args: str | Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "humming_matrix", *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def records(store: Path) -> list[Gsm8kRecord]:
    return [r for _, r in iter_gsm8k_records(store)] if store.exists() else []


def alive(pid: int) -> bool:
    """True while `pid` runs; a zombie awaiting its reaper counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
