"""One run's states: is a batch within tolerance, and what state does a case take.

The tolerance comes from the numerics, not from a constant picked per case. The reference is
float32 on the exact dequantised weights and on the activations as the modelled input quantizer
leaves them, so a correct kernel differs from it only by

* the rounding of its output to bf16: at most u = 2**-8 of each value (round to nearest, 8
  significant bits). A kernel may round twice (a bf16 epilogue after a bf16 reduction): 2u |ref|;
* partial sums rounded on the way (split-K partials kept in bf16, FP8 tensor-core accumulators
  that keep about 14 bits until promoted: DeepSeek-V3 technical report, section 3.3.2): each
  partial is off by up to u of itself, and the partials of a dot product of random-sign terms
  have, together, the mean square N = sum_k x_k^2 w_k^2. Four standard deviations: 4u sqrt(N).
  This is what dominates where the output cancels (one token, one channel: |ref| << sqrt(N));
* float32 accumulation: about sqrt(K) x 2**-24 x sum_k |x_k w_k|; three standard deviations.

So for every output channel n (over the batch's tokens): ||out_n - ref_n|| <= 2u ||ref_n|| +
4u sqrt(N_n) + 3 sqrt(K) 2**-24 ||abs_n||, with abs = |x| @ |w|^T. With quantized activations, the
kernel's quantizer is not bit-identical to the modelled one: humming multiplies by a fast-math
reciprocal of the scale, the model divides, and a bf16 activation often sits exactly on a rounding
midpoint. Such an activation may round to either neighbouring code (S: their distance where
x / scale is within `reference.TIE_ULPS` of the midpoint, else 0), which moves the output by at
most S @ |w|^T: its channel norm is added (`BOUND_WITH_TIES`). The probe records, per draw, the
largest ratio of a channel's error to its bound (`worst_channel_units`; for MoE also per expert
and channel: `worst_expert_units`) and the same for the whole output (`err_units`). A batch is
`fail` as soon as one ratio exceeds 1: a single bad channel, or a single bad expert's channel, is
caught however clean the rest is (a channel about 3 % off for a typical channel), not only
wholesale garbage. `BOUND` names this bound in the record; units written under another bound (the
first device trial's) are not judged by it.

For quantized activations the probe also records `rel_err_vs_unquantized` and the error the
modelled quantizer itself makes on these inputs (`quant_err`): the kernel must not be more than
twice as far from the unquantized product as the quantizer alone is (plus 2u).

Records without bound units are judged by the floor rule they were written under: mean relative
error over 16 x the bf16 floor, or worst channel over 64 x the floor.

Determinism: every draw at every batch size is launched again; an output that is not bit-identical
to the first is `nondeterministic`, a failure of its own.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from enum import Enum
from typing import Any

# The pre-bound rule, for records written before the bound fields existed.
REL_TOLERANCE = 16.0  # x floor, for the whole output
WORST_ROW_TOLERANCE = 64.0  # x floor, for the worst of N channels

BF16_UNIT = 2.0**-8
OUTPUT_ROUNDINGS = 2.0
PARTIAL_SIGMAS = 4.0
FP32_UNIT = 2.0**-24
ACCUMULATION_SIGMAS = 3.0
BOUND = "2u|ref| + 4u sqrt(sum x^2 w^2) + 3 sqrt(K) 2^-24 sum|x w|, u = 2^-8"
# Quantized activations: plus what the activations that sit on a rounding midpoint can move the
# output if the kernel rounds them the other way (reference.rounding_ties: S @ |w|^T).
BOUND_WITH_TIES = BOUND + " + ||S|w|||, S the activation rounding ties"
BOUNDS = (BOUND, BOUND_WITH_TIES)
QUANTIZED_ACTIVATION_FACTOR = 2.0  # x the modelled quantizer's own error


class CaseState(str, Enum):
    OK = "ok"
    FAIL = "fail"  # numbers out of tolerance
    NONDETERMINISTIC = "nondeterministic"  # within tolerance, but not bit-identical on relaunch
    NONFINITE = "nonfinite"
    UNSUPPORTED = "unsupported"  # this release cannot build the case
    ERROR = "error"  # raised while building or running
    HANG = "hang"
    CRASH = "crash"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]

    @property
    def produced_numbers(self) -> bool:
        return self in (CaseState.OK, CaseState.FAIL, CaseState.NONDETERMINISTIC)


# Out of tolerance outranks not bit-identical on relaunch: a case, a run or a judged side with
# both is `fail` (wrong numbers are the worse news; ranked the other way, a failing run pooled
# with a nondeterministic one hid the failure, and 0.1.19 -> 0.1.20's MXFP4 MoE read `same`).
_SEVERITY = {
    CaseState.OK: 0,
    CaseState.UNSUPPORTED: 1,
    CaseState.NONDETERMINISTIC: 2,
    CaseState.FAIL: 3,
    CaseState.NONFINITE: 4,
    CaseState.ERROR: 5,
    CaseState.CRASH: 6,
    CaseState.HANG: 7,
}


def num(value: Any) -> float:
    """A record's number; "inf"/"nan" strings (JSON has no such floats) read back as floats."""
    if isinstance(value, bool):
        raise TypeError("a boolean is not a measurement")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return float(value)
    raise TypeError(f"not a number: {value!r}")


def channel_bound(
    ref_norm: float, natural_norm: float, abs_norm: float, k: int, ties_norm: float = 0.0
) -> float:
    """The largest error a correct kernel makes on a channel (or the whole output) whose reference
    has norm `ref_norm`, whose sum_k x_k^2 w_k^2 sums to `natural_norm`**2, whose |x| @ |w|^T
    has norm `abs_norm` and whose S @ |w|^T (quantized activations' rounding ties) `ties_norm`."""
    return (
        OUTPUT_ROUNDINGS * BF16_UNIT * ref_norm
        + PARTIAL_SIGMAS * BF16_UNIT * natural_norm
        + ACCUMULATION_SIGMAS * math.sqrt(k) * FP32_UNIT * abs_norm
        + ties_norm
    )


def _numbers(batch: Mapping[str, Any], key: str) -> list[float]:
    return [num(e) for e in batch.get(key, []) or []]


def out_of_tolerance(batch: Mapping[str, Any]) -> str | None:
    """Why this batch's numbers are out of tolerance, or None."""
    units = {
        key: _numbers(batch, key)
        for key in ("err_units", "worst_channel_units", "worst_expert_units")
    }
    if any(units.values()) and batch.get("bound") in BOUNDS:
        for key, values in units.items():
            if values and max(values) > 1.0:
                return f"{key} {max(values):.3g} > 1 (the rounding and accumulation bound)"
        vs_plain = _numbers(batch, "rel_err_vs_unquantized")
        quant = _numbers(batch, "quant_err")
        if vs_plain and quant:
            for got, q in zip(vs_plain, quant, strict=False):
                limit = QUANTIZED_ACTIVATION_FACTOR * q + OUTPUT_ROUNDINGS * BF16_UNIT
                if got > limit:
                    return (
                        f"rel_err_vs_unquantized {got:.3g} > {limit:.3g} "
                        f"(2 x the modelled quantizer's {q:.3g} + 2u)"
                    )
        return None
    errs = _numbers(batch, "rel_err")
    worst = _numbers(batch, "worst_row_rel_err")
    floor = num(batch.get("floor", 0.0))
    if errs and statistics.fmean(errs) > REL_TOLERANCE * floor:
        return f"mean rel_err {statistics.fmean(errs):.3g} > {REL_TOLERANCE:g} x floor"
    if worst and max(worst) > WORST_ROW_TOLERANCE * floor:
        return f"worst channel {max(worst):.3g} > {WORST_ROW_TOLERANCE:g} x floor"
    return None


def assess_batch(batch: Mapping[str, Any]) -> CaseState:
    if batch.get("error"):
        return CaseState.ERROR
    if int(batch.get("nan", 0)) or int(batch.get("inf", 0)):
        return CaseState.NONFINITE
    errs = _numbers(batch, "rel_err")
    if not errs:
        return CaseState.ERROR
    every = errs + _numbers(batch, "worst_row_rel_err") + _numbers(batch, "worst_channel_units")
    if any(math.isnan(e) for e in every):
        return CaseState.NONFINITE
    if out_of_tolerance(batch):
        return CaseState.FAIL
    deterministic = batch.get("deterministic")
    if deterministic is False or (
        isinstance(deterministic, list) and not all(bool(d) for d in deterministic)
    ):
        return CaseState.NONDETERMINISTIC
    return CaseState.OK


def assess_case(result: Mapping[str, Any]) -> tuple[CaseState, list[dict[str, Any]]]:
    """The case's state and its batches, each with its own `state` added."""
    given = result.get("state")
    batches = [dict(b, state=assess_batch(b).value) for b in result.get("batches", [])]
    if given is not None:
        return CaseState(given), batches
    if not batches:
        return CaseState.ERROR, batches
    worst = max((CaseState(b["state"]) for b in batches), key=lambda s: s.severity)
    return worst, batches
