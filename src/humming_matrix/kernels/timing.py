"""Kernel time with CUDA events (warm-up, L2 flushed before every launch, median of repeats), and
the GPU's measured ceilings to hold achieved TFLOP/s and GB/s against.

torch is imported inside the functions that launch work, so the statistics (`summarize`) import
and test without it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# Larger than any GPU's L2 (H200: 60 MB), so zeroing it evicts the operands.
_FLUSH_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Timing:
    median_ms: float
    mad_ms: float  # median absolute deviation: the run-to-run spread the judge uses
    min_ms: float
    repeats: int

    def to_json(self) -> dict[str, Any]:
        return {
            "median_ms": self.median_ms,
            "mad_ms": self.mad_ms,
            "min_ms": self.min_ms,
            "repeats": self.repeats,
        }


def summarize(samples_ms: Sequence[float]) -> Timing:
    if not samples_ms:
        raise ValueError("no timing samples")
    med = statistics.median(samples_ms)
    mad = statistics.median(abs(s - med) for s in samples_ms)
    return Timing(median_ms=med, mad_ms=mad, min_ms=min(samples_ms), repeats=len(samples_ms))


def time_kernel(fn: Callable[[], Any], repeats: int, warmup: int = 3) -> Timing:
    import torch

    flush = torch.empty(_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    for start, end in zip(starts, ends, strict=True):
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return summarize([s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)])


def measure_ceilings(repeats: int = 10) -> dict[str, float]:
    """A bf16 8192^3 matrix product (TFLOP/s) and a 2 GiB device copy (GB/s, read + write)."""
    import torch

    n = 8192
    mats = [torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    mm = time_kernel(lambda: torch.mm(mats[0], mats[1]), repeats)
    mats.clear()
    bufs = [torch.randn(2**29, device="cuda", dtype=torch.float32) for _ in range(2)]  # 2 GiB each
    copy = time_kernel(lambda: bufs[1].copy_(bufs[0]), repeats)
    bufs.clear()
    torch.cuda.empty_cache()
    return {
        "bf16_tflops": 2 * n**3 / (mm.median_ms * 1e-3) / 1e12,
        "copy_gbps": 2 * 2**31 / (copy.median_ms * 1e-3) / 1e9,
    }
