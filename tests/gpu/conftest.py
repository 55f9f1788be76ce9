"""The GPU tests' shared fixture."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(autouse=True)
def torch() -> Any:
    """torch with a CUDA GPU, checked only when these tests are selected (`-m gpu`): at import
    time the check would show as a skip in every default run."""
    module = pytest.importorskip("torch")
    if not module.cuda.is_available():
        pytest.skip("no CUDA GPU")
    return module
