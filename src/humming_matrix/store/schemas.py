"""The records' published JSON Schemas (`docs/schema/<name>.schema.json`), made from the models.

Readers outside the tool (a dashboard, a CI step in another language) check a record against its
schema; `tools/record_schemas.py` writes them, and a test holds the committed files equal to what
the models make and every committed record valid against its schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from humming_matrix.store.atomic_files import replace_file
from humming_matrix.store.divergence import DIVERGENCE_RECORD
from humming_matrix.store.install import INSTALL_RECORD
from humming_matrix.store.kernels import KERNEL_RECORD
from humming_matrix.store.lm_eval import LM_EVAL_RECORD
from humming_matrix.store.records import RecordType
from humming_matrix.store.results import GSM8K_RECORD

RECORD_TYPES: tuple[RecordType[Any], ...] = (
    GSM8K_RECORD,
    LM_EVAL_RECORD,
    KERNEL_RECORD,
    DIVERGENCE_RECORD,
    INSTALL_RECORD,
)


def schema_name(record_type: RecordType[Any]) -> str:
    return f"{record_type.name}.schema.json"


def schema_text(record_type: RecordType[Any]) -> str:
    return json.dumps(record_type.json_schema(), indent=2, ensure_ascii=False) + "\n"


def write_schemas(directory: Path) -> list[Path]:
    """Write every kind's schema into `directory`, each file in one step."""
    return [_write(directory / schema_name(t), schema_text(t)) for t in RECORD_TYPES]


def _write(path: Path, text: str) -> Path:
    return replace_file(path, lambda fh: fh.write(text))
