"""The kernel record's model: what `humming-matrix kernels` writes, one file per run.

The file is the JSON `kernels.record.build_record` makes; the judge and the report read it as
that JSON, so the model checks what they rely on (the settings, each case's name and state, each
batch's size) and names the rest loosely: a batch holds whatever numbers its case produced
(`kernels.runner`), which differ by case kind and release.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from humming_matrix.kernels.assess import CaseState
from humming_matrix.kernels.cases import CompiledKernels
from humming_matrix.store.records import RecordType
from humming_matrix.store.results import SCHEMA_VERSION, RecordKind


@dataclass(frozen=True)
class Settings:
    batch_sizes: tuple[int, ...]
    repeats: int
    draws: int
    seed: int
    timeout_s: float
    jobs: int = 1  # workers at once (records before `--jobs` ran one)
    # The limit inside a GPU turn (records before `--gpu-timeout` had `timeout_s` throughout).
    gpu_timeout_s: float | None = None
    # Which dense kernels were compiled (records before `--compile` compiled them all).
    compile: CompiledKernels = CompiledKernels.ALL

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_sizes": list(self.batch_sizes),
            "repeats": self.repeats,
            "draws": self.draws,
            "seed": self.seed,
            "timeout_s": self.timeout_s,
            "jobs": self.jobs,
            "gpu_timeout_s": self.gpu_timeout_s,
            "compile": self.compile.value,
        }


@dataclass(frozen=True)
class KernelBatch:
    """One batch size of one case (`m` rows); `state` is the batch's own (`assess_batch`),
    `time` the timing summary when the case produced numbers, `error` when it raised."""

    m: int
    state: CaseState | None = None
    time: Mapping[str, Any] | None = None
    error: str | None = None


@dataclass(frozen=True)
class FirstAttempt:
    """A case that hung beside other workers, as it went then; the case's own fields are its
    rerun alone (`kernels.watchdog`)."""

    state: CaseState
    reason: str


@dataclass(frozen=True)
class KernelCase:
    name: str
    state: CaseState
    batches: tuple[KernelBatch, ...]
    spec: Mapping[str, Any] = field(default_factory=dict)
    reason: str | None = None
    first_attempt: FirstAttempt | None = None
    alone: bool = False  # run with the GPU to itself (`kernels.watchdog`): its hang decides


@dataclass(frozen=True)
class KernelRecord:
    """One `kernels` run in one environment (`environment.worker`: what the worker saw)."""

    run_id: str
    environment: Mapping[str, Any]
    cases: tuple[KernelCase, ...]
    created: str = ""
    complete: bool = True
    settings: Settings | None = None
    ceilings: Mapping[str, Any] | None = None  # the GPU's measured bf16 TFLOP/s and copy GB/s
    import_error: str | None = None
    worker_launches: int | None = None
    summary: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    kind: RecordKind = RecordKind.KERNELS


KERNEL_RECORD = RecordType(
    "kernels",
    KernelRecord,
    RecordKind.KERNELS.value,
    SCHEMA_VERSION,
    "humming-matrix kernel record",
)
