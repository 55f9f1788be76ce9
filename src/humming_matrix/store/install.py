"""A session's install record: what its environment holds, which stages ran, how it ended.

One JSON file per session environment, rewritten atomically as stages complete
(`matrix.installation` writes it and checks it against its sibling cells); `humming-matrix run`
copies it into every result record (`environment.install`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from humming_matrix.store.records import RecordType

SCHEMA_VERSION = 1
HUMMING_DIST = "humming-kernels"


class Stage(str, Enum):
    INSTALLED = "installed"
    VERIFIED = "verified"  # the installed humming-kernels is the one the session names
    PREFLIGHT = "preflight"
    RUN = "run"  # the GSM8K stage (or the kernels probe) started


class Outcome(str, Enum):
    IN_PROGRESS = "in_progress"
    INSTALL_FAILED = "install_failed"  # 125: the installer could not build the cell
    VERSION_MISMATCH = "version_mismatch"  # 125
    PREFLIGHT_FAILED = "preflight_failed"  # 125
    PREFLIGHT_ONLY = "preflight_only"  # only the preflight ran (asked for, or no GPU)
    ERROR = "error"  # a usage, config or infrastructure error stopped the session
    RAN = "ran"  # the run (or kernels) command finished with `exit_code`


@dataclass(frozen=True)
class InstallRecord:
    session: str
    cell: Mapping[str, Any]
    python: str
    executable: str
    packages: Mapping[str, str]  # canonical name -> version
    humming_requirements: tuple[str, ...]  # canonical names humming-kernels itself requires
    created: str
    stages: tuple[Stage, ...] = ()
    outcome: Outcome = Outcome.IN_PROGRESS
    message: str = ""
    preflight: Mapping[str, Any] | None = None
    single_variable: tuple[Mapping[str, Any], ...] = ()
    exit_code: int | None = None  # the session command's own exit code, once it is known
    # Seconds the noxfile's install step took (None: not measured, e.g. outside nox).
    install_seconds: float | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def humming(self) -> str | None:
        return self.packages.get(HUMMING_DIST)

    def advance(self, stage: Stage, **changes: Any) -> InstallRecord:
        return replace(self, stages=(*self.stages, stage), **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "session": self.session,
            "cell": dict(self.cell),
            "humming_kernels": self.humming,
            "python": self.python,
            "executable": self.executable,
            "created": self.created,
            "stages": [s.value for s in self.stages],
            "outcome": self.outcome.value,
            "message": self.message,
            "preflight": self.preflight,
            "single_variable": list(self.single_variable),
            "exit_code": self.exit_code,
            "install_seconds": self.install_seconds,
            "humming_requirements": list(self.humming_requirements),
            "packages": dict(self.packages),
        }


INSTALL_RECORD = RecordType(
    "install", InstallRecord, None, SCHEMA_VERSION, "humming-matrix install record"
)
