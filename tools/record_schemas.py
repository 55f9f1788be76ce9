#!/usr/bin/env python3
"""Write the records' JSON Schemas into docs/schema/ from the models (store/schemas.py).

    python tools/record_schemas.py [DIR]      default: docs/schema beside this tools/ folder

Run it after changing a record model; tests/unit/test_record_schemas.py fails until the
committed schemas are what the models make.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from humming_matrix.store.schemas import write_schemas

DEFAULT_DIR = Path(__file__).resolve().parent.parent / "docs" / "schema"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", nargs="?", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    for path in write_schemas(args.directory):
        print(path)


if __name__ == "__main__":
    main()
