"""Judging kernel results: a candidate's verdicts against a baseline (one run's states are
`kernels.assess`; re-exported here).

Two sets of runs (`compare_kernel_records`), every batch re-assessed by the current tolerance.
Per case and batch size, on identical input bytes (else `incomparable`):

* `newly-broken`: the baseline produced finite numbers and the candidate does not (NaN, Inf,
  hang, crash, error, build failure or unsupported); `still-broken` when neither did;
* `worse`: the mean relative error rose by more than the noise, where noise = 3 x the standard
  error of the difference of means over the input draws (several records per side pool their
  draws; a draw that several runs saw, the same seed and index, counts once, at the mean of its
  runs), and by more than the case's bf16 floor, or on every draw both sides saw by more than
  the floor (the draws are paired: the same inputs on both sides); also when the candidate is
  out of tolerance or not bit-identical on relaunch and the baseline was neither, however
  erratic its draws;
  `improved` the other way. Between two sides neither within tolerance and bit-identical the
  note names both states, and a flip between out of tolerance and not bit-identical that the
  numbers call `same` is `changed` (a nondeterministic layer near the bound flips either way);
* `fixed`: out of tolerance (or nondeterministic, or broken) before, within tolerance now;
* `same` / `changed`: where both sides are bit-identical on relaunch, identical output bytes are
  `same` and different ones `changed`, with the size of the change and whether it moved toward
  or away from the reference; without usable hashes, a worst channel that moved beyond noise
  and floor is `changed`. Never failing: a retiled kernel changes bytes, not quality. Broken
  before and within tolerance but not bit-identical on relaunch now is `changed` too, both
  states named (out of tolerance now stays `still-broken`);
* a changed kernel configuration (the MoE GEMM's tuning: block shape, stages) is named;
* timing: `slower` / `faster` when |ln(ratio of medians)| exceeds 3 x the combined relative
  spread (1.4826 x MAD / median of each side's samples, and the spread of per-run medians when
  a side has several runs); `unknown` when the two sides (or the runs of one side) were timed
  on different GPU models (an H100 and an H200 differ in memory bandwidth, not in the kernel).
  A `slower` fails a gate (`fail_on_slowdown`) only when both sides have several runs: one
  run's spread misses what changes between processes.

Nothing here is a constant picked per case: the noise comes from the records.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from humming_matrix.errors import ExitCode, RecordError
from humming_matrix.kernels.assess import (
    REL_TOLERANCE,
    WORST_ROW_TOLERANCE,
    CaseState,
    assess_batch,
    assess_case,
    num,
)
from humming_matrix.kernels.cases import CompiledKernels
from humming_matrix.kernels.record import (
    case_reason,
    check_kernel_record,
    gpu_name,
    hung_only_beside_others,
    load_kernel_record,
)

__all__ = [
    "REL_TOLERANCE",
    "WORST_ROW_TOLERANCE",
    "CaseState",
    "CaseVerdict",
    "KernelComparison",
    "TimeVerdict",
    "Verdict",
    "assess_batch",
    "assess_case",
    "compare_kernel_records",
]

NOISE_SIGMAS = 3.0
MAD_TO_SD = 1.4826
_num = num


class Verdict(str, Enum):
    SAME = "same"  # bit-identical output on identical inputs (or, without hashes, no change)
    # A different output on identical inputs whose error did not move beyond noise and floor:
    # shown with the size of the change and its direction, never failing (a retiled kernel).
    CHANGED = "changed"
    WORSE = "worse"  # error up beyond noise and floor, or out of tolerance now and not before
    IMPROVED = "improved"
    NEWLY_BROKEN = "newly-broken"
    FIXED = "fixed"  # broken (or out of tolerance) before, within tolerance now
    STILL_BROKEN = "still-broken"
    NEW = "new"  # no baseline for this case or batch size
    MISSING = "missing"  # the candidate did not run it
    INCOMPARABLE = "incomparable"  # the two sides saw different input bytes


class TimeVerdict(str, Enum):
    SAME = "same"
    SLOWER = "slower"
    FASTER = "faster"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Side:
    """One side's pooled numbers for a case at one batch size."""

    state: CaseState
    rel_err: tuple[float, ...] = ()  # one a distinct input draw: the mean of its runs
    worst_row: tuple[float, ...] = ()
    floor: float = 0.0
    draws: tuple[tuple[Any, int], ...] = ()  # (seed, draw index) of each `rel_err`
    medians_ms: tuple[float, ...] = ()
    rel_spreads: tuple[float, ...] = ()  # 1.4826 x MAD / median of each run's samples
    input_sha256: frozenset[str] = frozenset()
    reason: str | None = None
    output_sha256: frozenset[str] = frozenset()  # draw 0's output bytes, per run
    deterministic: bool = True  # every relaunch of every run bit-identical
    kernel_config: str | None = None  # what the release picked (tile, stages), when recorded
    # A run's timing was not queued ahead of the GPU (`time.queued_ahead` false): its times may
    # be the host's launch gaps, so they judge no speed.
    host_gaps: bool = False
    gpus: frozenset[str] = frozenset()  # the GPU model of each run that timed it
    runs: int = 1  # the runs pooled here
    broken: tuple[CaseState, ...] = ()  # the state of each of them that gave no usable numbers
    # Of them, those whose case hung beside other workers and went through rerun alone
    # (`first_attempt` in the record): their numbers are the rerun's.
    hung_beside_others: int = 0

    @property
    def intermittent(self) -> str:
        """ "hang in 2, nonfinite in 3 of 6 runs" where only some runs broke (kernels that hang
        now and then: 0.1.2 - 0.1.5's FP8-channel GEMMs), else ""."""
        if not 0 < len(self.broken) < self.runs:
            return ""
        counts = Counter(self.broken)
        states = sorted(counts, key=lambda st: -st.severity)
        return ", ".join(f"{st.value} in {counts[st]}" for st in states) + f" of {self.runs} runs"

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.medians_ms) if self.medians_ms else None


@dataclass(frozen=True)
class CaseVerdict:
    case: str
    m: int | None  # None: the case as a whole (it produced no batches)
    verdict: Verdict
    time: TimeVerdict
    baseline: Side | None
    candidate: Side | None
    delta_rel_err: float | None = None
    noise_rel_err: float | None = None
    time_ratio: float | None = None
    time_noise: float | None = None  # as a bound on |ln ratio|
    note: str = ""

    @property
    def time_runs_measured(self) -> bool:
        """Both sides have several runs, so the between-run spread is in the noise. With one run
        a side, the noise is the within-run spread only, which misses what changes between
        processes (clocks, neighbours, CPU contention on launch-bound sizes): such a `slower` is
        reported but never fails a gate."""
        b = len(self.baseline.medians_ms) if self.baseline else 0
        c = len(self.candidate.medians_ms) if self.candidate else 0
        return min(b, c) >= 2

    def to_json(self) -> dict[str, Any]:
        def side(s: Side | None) -> dict[str, Any] | None:
            if s is None:
                return None
            return {
                "state": s.state.value,
                "rel_err_mean": statistics.fmean(s.rel_err) if s.rel_err else None,
                "worst_row_rel_err_max": max(s.worst_row) if s.worst_row else None,
                "draws": len(s.rel_err),
                "floor": s.floor,
                "median_ms": s.median_ms,
                "reason": s.reason,
            }

        return {
            "case": self.case,
            "m": self.m,
            "verdict": self.verdict.value,
            "time": self.time.value,
            "baseline": side(self.baseline),
            "candidate": side(self.candidate),
            "delta_rel_err": self.delta_rel_err,
            "noise_rel_err": self.noise_rel_err,
            "time_ratio": self.time_ratio,
            "time_noise": self.time_noise,
            "time_runs_measured": self.time_runs_measured,
            "note": self.note,
        }


@dataclass(frozen=True)
class KernelComparison:
    baseline_versions: tuple[str, ...]
    candidate_versions: tuple[str, ...]
    verdicts: tuple[CaseVerdict, ...]
    fail_on_slowdown: bool = False
    warnings: tuple[str, ...] = field(default=())

    @property
    def regressions(self) -> tuple[CaseVerdict, ...]:
        bad = {Verdict.WORSE, Verdict.NEWLY_BROKEN}
        return tuple(
            v
            for v in self.verdicts
            if v.verdict in bad
            or (self.fail_on_slowdown and v.time is TimeVerdict.SLOWER and v.time_runs_measured)
        )

    @property
    def exit_code(self) -> int:
        return int(ExitCode.FAILED if self.regressions else ExitCode.OK)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "kernels",
            "baseline_versions": list(self.baseline_versions),
            "candidate_versions": list(self.candidate_versions),
            "regression": bool(self.regressions),
            "exit_code": self.exit_code,
            "fail_on_slowdown": self.fail_on_slowdown,
            "warnings": list(self.warnings),
            "verdicts": [v.to_json() for v in self.verdicts],
        }

    def to_markdown(self) -> str:
        base = ", ".join(self.baseline_versions) or "?"
        cand = ", ".join(self.candidate_versions) or "?"
        head = "REGRESSION" if self.regressions else "no regression"
        lines = [
            f"## Kernel tier: humming {cand} vs {base}: {head}",
            "",
            "| case | batch | verdict | rel. error base -> cand | worst channel base -> cand "
            "| time base -> cand (ms) | time | note |",
            "| --- | ---: | --- | --- | --- | --- | --- | --- |",
        ]
        for v in self.verdicts:
            # The note is what a `changed` or `worse` rests on (the size and direction of the
            # change, both states, the kernel config): without it a `changed` row between equal
            # errors says nothing.
            lines.append(
                f"| {v.case} | {'' if v.m is None else v.m} | {v.verdict.value} "
                f"| {_fmt_err(v.baseline, 'rel')} -> {_fmt_err(v.candidate, 'rel')} "
                f"| {_fmt_err(v.baseline, 'worst')} -> {_fmt_err(v.candidate, 'worst')} "
                f"| {_fmt_ms(v.baseline)} -> {_fmt_ms(v.candidate)} "
                f"| {v.time.value}{_fmt_ratio(v)} | {v.note.replace('|', '/')} |"
            )
        for w in self.warnings:
            lines.append(f"\n> {w}")
        return "\n".join(lines) + "\n"


def _fmt_err(side: Side | None, which: str) -> str:
    if side is None:
        return "-"
    if not side.state.produced_numbers:
        return side.state.value
    values = side.rel_err if which == "rel" else side.worst_row
    if not values:
        return "-"
    return f"{(statistics.fmean(values) if which == 'rel' else max(values)):.2e}"


def _fmt_ms(side: Side | None) -> str:
    return "-" if side is None or side.median_ms is None else f"{side.median_ms:.4g}"


def _fmt_ratio(v: CaseVerdict) -> str:
    if v.time_ratio is None:
        return ""
    single = "" if v.time_runs_measured else ", one run a side"
    if v.time is TimeVerdict.UNKNOWN and v.baseline and v.candidate:
        if _mixed_gpus(v.baseline, v.candidate):
            gpus = sorted(v.baseline.gpus | v.candidate.gpus)
            single += f", timed on different GPUs ({' and '.join(gpus)})"
        else:
            single += ", launches not queued ahead of the GPU"
    return f" ({v.time_ratio:.3f}x the time{single})"


def _mixed_gpus(b: Side, c: Side) -> bool:
    """The timings were taken on more than one GPU model (records name theirs; older test
    records without a name count as the same model)."""
    return len(b.gpus | c.gpus) > 1


def speed_change(v: CaseVerdict) -> str:
    """ "slower 1.90x" / "faster 9.09x": the factor a reader expects after the word (a time
    ratio of 0.11 is 9.09x faster, never "faster 0.11x"); "" when the time did not change."""
    if v.time_ratio is None or v.time_ratio <= 0:
        return ""
    if v.time is TimeVerdict.SLOWER:
        return f"slower {v.time_ratio:.2f}x"
    if v.time is TimeVerdict.FASTER:
        return f"faster {1 / v.time_ratio:.2f}x"
    return ""


RecordLike = Path | Mapping[str, Any]


def _load(item: RecordLike) -> Mapping[str, Any]:
    if isinstance(item, Path):
        return load_kernel_record(item)
    check_kernel_record(item, str(item.get("run_id", "<record>")))
    return item


def _pool(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int | None], Side]:
    """Per (case, batch size), the numbers of every record of one side, pooled."""
    acc: dict[tuple[str, int | None], dict[str, Any]] = {}
    for record in records:
        gpu = gpu_name(record)
        settings = record.get("settings")
        seed = settings.get("seed") if isinstance(settings, Mapping) else None
        for case in record["cases"]:
            name = str(case["name"])
            state = CaseState(case["state"])
            batches = case.get("batches") or []
            beside = int(hung_only_beside_others(case))
            key: tuple[str, int | None]
            if not batches:
                key = (name, None)
                slot = acc.setdefault(key, {"states": [], "reason": None, "beside": 0})
                slot["states"].append(state)
                slot["reason"] = case_reason(case)
                slot["beside"] += beside
                continue
            for batch in batches:
                key = (name, int(batch["m"]))
                slot = acc.setdefault(
                    key,
                    {
                        "states": [],
                        "rel": {},
                        "worst": {},
                        "floor": [],
                        "med": [],
                        "spread": [],
                        "inputs": set(),
                        "outputs": set(),
                        "reason": None,
                        "config": None,
                        "deterministic": True,
                        "host_gaps": False,
                        "gpus": set(),
                        "beside": 0,
                    },
                )
                slot["beside"] += beside
                # Batches with numbers are re-judged by the current tolerance, whatever state the
                # record was written with; a state the numbers cannot show (crash, hang) stays.
                stored = batch.get("state")
                b_state = (
                    assess_batch(batch) if batch.get("rel_err") or not stored else CaseState(stored)
                )
                slot["states"].append(b_state)
                if batch.get("error"):
                    slot["reason"] = batch["error"]
                if b_state.produced_numbers:
                    # Draw i of a seed is the same input bytes in every run: a rerun repeats the
                    # draw, it does not add one (two more runs of 0.1.14 made gen6's 0.1.13 ->
                    # 0.1.14 `worse` from the same two draws counted three times).
                    for which, field_name in (("rel", "rel_err"), ("worst", "worst_row_rel_err")):
                        for i, e in enumerate(batch.get(field_name, [])):
                            slot[which].setdefault((seed, i), []).append(_num(e))
                    slot["floor"].append(_num(batch.get("floor", 0.0)))
                t = batch.get("time")
                if isinstance(t, dict) and _num(t.get("median_ms", 0)) > 0:
                    med = _num(t["median_ms"])
                    slot["med"].append(med)
                    slot["spread"].append(MAD_TO_SD * _num(t.get("mad_ms", 0.0)) / med)
                    if t.get("queued_ahead") is False:
                        slot["host_gaps"] = True
                    if gpu:
                        slot["gpus"].add(gpu)
                if batch.get("input_sha256"):
                    slot["inputs"].add(str(batch["input_sha256"]))
                if batch.get("sha256") and b_state.produced_numbers:
                    slot["outputs"].add(str(batch["sha256"]))
                same = batch.get("deterministic", True)
                if same is False or (isinstance(same, list) and not all(same)):
                    slot["deterministic"] = False
                if batch.get("kernel_config") is not None:
                    slot["config"] = json.dumps(batch["kernel_config"], sort_keys=True)
    pooled: dict[tuple[str, int | None], Side] = {}
    for key, slot in acc.items():
        state = max(slot["states"], key=lambda s: s.severity)
        pooled[key] = Side(
            state=state,
            rel_err=_per_draw(slot.get("rel", {}), statistics.fmean),
            # The worst a draw's worst row was in any run: the "max" a report shows stays a max.
            worst_row=_per_draw(slot.get("worst", {}), max),
            draws=tuple(slot.get("rel", {})),
            floor=statistics.fmean(slot["floor"]) if slot.get("floor") else 0.0,
            medians_ms=tuple(slot.get("med", ())),
            rel_spreads=tuple(slot.get("spread", ())),
            input_sha256=frozenset(slot.get("inputs", ())),
            reason=slot.get("reason"),
            output_sha256=frozenset(slot.get("outputs", ())),
            kernel_config=slot.get("config"),
            deterministic=bool(slot.get("deterministic", True)),
            host_gaps=bool(slot.get("host_gaps", False)),
            gpus=frozenset(slot.get("gpus", ())),
            runs=len(slot["states"]),
            broken=tuple(st for st in slot["states"] if not st.produced_numbers),
            hung_beside_others=slot["beside"],
        )
    return pooled


def _paired(b: Side, c: Side) -> list[float]:
    """Per input draw both sides saw (the same seed and index: the same bytes, where the input
    hashes agree), the candidate's relative error minus the baseline's."""
    before = dict(zip(b.draws, b.rel_err, strict=True))
    return [e - before[key] for key, e in zip(c.draws, c.rel_err, strict=True) if key in before]


def _per_draw(
    draws: Mapping[tuple[Any, int], list[float]], over_runs: Callable[[list[float]], float]
) -> tuple[float, ...]:
    """One value per distinct input draw, over the runs that saw it (mean, or max)."""
    return tuple(over_runs(values) for values in draws.values())


def _sample_variance(values: Sequence[float]) -> float:
    """The sample variance in floats (two passes, fsum). statistics.variance computes it exactly
    in Fractions, which made a table of every release pair spend most of its time there."""
    mean = math.fsum(values) / len(values)
    return math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)


def _sem2(values: Sequence[float]) -> float:
    """Squared standard error of the mean; 0 when a single value gives no spread."""
    if len(values) < 2:
        return 0.0
    return _sample_variance(values) / len(values)


def _numeric_verdict(b: Side, c: Side) -> tuple[Verdict, float, float, str]:
    delta = statistics.fmean(c.rel_err) - statistics.fmean(b.rel_err)
    noise = NOISE_SIGMAS * math.sqrt(_sem2(b.rel_err) + _sem2(c.rel_err))
    bound = max(noise, b.floor)
    worst_delta = (max(c.worst_row) - max(b.worst_row)) if b.worst_row and c.worst_row else 0.0
    worst_noise = NOISE_SIGMAS * math.sqrt(_sem2(b.worst_row) + _sem2(c.worst_row))
    worst_bound = max(worst_noise, b.floor)
    paired = _paired(b, c)
    # Two draws cannot show 3 standard errors of anything erratic (0.1.8's errors of 1e30 and
    # 1e33): the same inputs on both sides, each moved beyond the floor, say it as well.
    if delta > bound or (paired and min(paired) > b.floor):
        return Verdict.WORSE, delta, bound, ""
    if -delta > bound or (paired and max(paired) < -b.floor):
        return Verdict.IMPROVED, delta, bound, ""
    direction = "away from" if delta > 0 else "toward"
    size = f"rel. error {delta:+.2g} ({direction} the reference), worst channel {worst_delta:+.2g}"
    # Output bytes say something only where relaunches are bit-identical on both sides.
    if b.output_sha256 and c.output_sha256 and b.deterministic and c.deterministic:
        if b.output_sha256 & c.output_sha256:
            return Verdict.SAME, delta, bound, ""
        return Verdict.CHANGED, delta, bound, f"output bytes differ: {size}"
    if worst_delta > worst_bound:
        return Verdict.CHANGED, delta, bound, f"worst channel moved: {size}"
    return Verdict.SAME, delta, bound, ""


def _time_verdict(b: Side, c: Side) -> tuple[TimeVerdict, float | None, float | None]:
    mb, mc = b.median_ms, c.median_ms
    if mb is None or mc is None or mb <= 0 or mc <= 0:
        return TimeVerdict.UNKNOWN, None, None

    def spread(side: Side) -> float:
        within = statistics.median(side.rel_spreads) if side.rel_spreads else 0.0
        if len(side.medians_ms) >= 2:
            logs = [math.log(m) for m in side.medians_ms]
            return max(within, math.sqrt(_sample_variance(logs)))
        return within

    ratio = mc / mb
    if b.host_gaps or c.host_gaps or _mixed_gpus(b, c):
        return TimeVerdict.UNKNOWN, ratio, None
    noise = NOISE_SIGMAS * math.sqrt(spread(b) ** 2 + spread(c) ** 2)
    if math.log(ratio) > noise:
        return TimeVerdict.SLOWER, ratio, noise
    if math.log(ratio) < -noise:
        return TimeVerdict.FASTER, ratio, noise
    return TimeVerdict.SAME, ratio, noise


def compare_kernel_records(
    baseline: Sequence[RecordLike],
    candidate: Sequence[RecordLike],
    fail_on_slowdown: bool = False,
) -> KernelComparison:
    """Compare kernel records: `baseline` and `candidate` are record paths or loaded record
    dicts (several per side pool their distinct draws and their timings). Returns a
    KernelComparison with one CaseVerdict per (case, batch size), `.exit_code` (0 no regression,
    1 regression: a `regressed` or `newly-broken` verdict, or with `fail_on_slowdown` a `slower`
    one),
    `.to_markdown()` and `.to_json()`. Raises RecordError for an unreadable or foreign record.
    """
    if not baseline or not candidate:
        raise RecordError("<kernels>", None, "comparison needs at least one record per side")
    base_records = [_load(r) for r in baseline]
    cand_records = [_load(r) for r in candidate]
    pooled_base, pooled_cand = _pool(base_records), _pool(cand_records)
    base = _spread_whole_cases(pooled_base, pooled_cand)
    cand = _spread_whole_cases(pooled_cand, pooled_base)
    warnings = []
    for side_name, records in (("baseline", base_records), ("candidate", cand_records)):
        versions = {str(r.get("environment", {}).get("humming_kernels")) for r in records}
        if len(versions) > 1:
            warnings.append(f"{side_name} pools several humming versions: {sorted(versions)}")
    compiled = [sorted({_compiled(r) for r in side}) for side in (base_records, cand_records)]
    if compiled[0] != compiled[1] or len(compiled[0]) > 1:
        # A dense table row that fails to build breaks every batch of a run that compiles it.
        warnings.append(
            f"the sides compiled different dense kernels (baseline: {'+'.join(compiled[0])}, "
            f"candidate: {'+'.join(compiled[1])}; `kernels --compile`): a dense case broken on "
            "one side alone may be a kernel the other never built"
        )
    verdicts = []
    keys = sorted(set(base) | set(cand), key=lambda k: (k[0], -1 if k[1] is None else k[1]))
    for key in keys:
        b, c = base.get(key), cand.get(key)
        name, m = key
        if b is None:
            verdict = CaseVerdict(name, m, Verdict.NEW, TimeVerdict.UNKNOWN, None, c)
        elif c is None:
            verdict = CaseVerdict(name, m, Verdict.MISSING, TimeVerdict.UNKNOWN, b, None)
        else:
            verdict = _verdict(name, m, b, c)
        verdicts.append(_with_reruns(verdict))
    return KernelComparison(
        baseline_versions=_versions(base_records),
        candidate_versions=_versions(cand_records),
        verdicts=tuple(verdicts),
        fail_on_slowdown=fail_on_slowdown,
        warnings=tuple(warnings),
    )


def _compiled(record: Mapping[str, Any]) -> str:
    """Which dense kernels the run compiled ("all" in records from before `--compile`)."""
    settings = record.get("settings")
    value = settings.get("compile") if isinstance(settings, Mapping) else None
    return str(value or CompiledKernels.ALL.value)


def _spread_whole_cases(
    side: dict[tuple[str, int | None], Side], other: dict[tuple[str, int | None], Side]
) -> dict[tuple[str, int | None], Side]:
    """A case that gave no batches on this side (crash, hang, cannot build) stands for each batch
    size of the case, so it is judged against each: `newly-broken` after the other side's
    numbers, `fixed` or `still-broken` before them, never a `missing` row beside a `new` one
    (which no gate fails). The sizes are those either side ran; where other runs of this side
    gave batches, the whole-case state counts as the worst of each."""
    out = dict(side)
    for (name, m), whole in side.items():
        if m is not None:
            continue
        sizes = sorted({k for k in (*side, *other) if k[0] == name and k[1] is not None})
        if not sizes:
            continue
        del out[(name, None)]
        for key in sizes:
            have = out.get(key)
            if have is None:
                out[key] = whole
                continue
            have = replace(
                have,
                runs=have.runs + whole.runs,
                broken=have.broken + whole.broken,
                hung_beside_others=have.hung_beside_others + whole.hung_beside_others,
            )
            if whole.state.severity > have.state.severity:
                have = replace(have, state=whole.state, reason=whole.reason)
            out[key] = have
    return out


def _verdict(name: str, m: int | None, b: Side, c: Side) -> CaseVerdict:
    b_ok, c_ok = b.state.produced_numbers, c.state.produced_numbers
    if not b_ok and not c_ok:
        return CaseVerdict(name, m, Verdict.STILL_BROKEN, TimeVerdict.UNKNOWN, b, c)
    if b_ok and not c_ok:
        note = "; ".join(filter(None, (c.intermittent, c.reason))) or c.state.value
        return CaseVerdict(name, m, Verdict.NEWLY_BROKEN, TimeVerdict.UNKNOWN, b, c, note=note)
    if not b_ok:
        if c.state is CaseState.OK:
            # A fix of a failure that came now and then rests on how often the candidate ran.
            runs = f"{c.runs} of {c.runs} within tolerance now"
            note = f"{b.intermittent} before, {runs}" if b.intermittent else ""
            return CaseVerdict(name, m, Verdict.FIXED, TimeVerdict.UNKNOWN, b, c, note=note)
        if c.state is CaseState.NONDETERMINISTIC:
            # Within tolerance on every draw but not bit-identical on relaunch: no fix, yet not
            # broken either, so `changed` with both states, as a flip from out of tolerance is.
            # As `still-broken` it showed in no table: 0.1.9 -> 0.1.10's int8-activation GEMMs,
            # a compile error before, at 1 - 128 tokens.
            note = f"{b.intermittent or b.state.value} before, {c.state.value} now"
            return CaseVerdict(name, m, Verdict.CHANGED, TimeVerdict.UNKNOWN, b, c, note=note)
        return CaseVerdict(name, m, Verdict.STILL_BROKEN, TimeVerdict.UNKNOWN, b, c)
    if b.input_sha256 and c.input_sha256 and b.input_sha256 != c.input_sha256:
        return CaseVerdict(
            name,
            m,
            Verdict.INCOMPARABLE,
            TimeVerdict.UNKNOWN,
            b,
            c,
            note="the two sides ran on different input bytes (seed or generator differ)",
        )
    if not b.rel_err or not c.rel_err:
        return CaseVerdict(name, m, Verdict.SAME, TimeVerdict.UNKNOWN, b, c)
    verdict, delta, noise, note = _numeric_verdict(b, c)
    if b.state is CaseState.OK and c.state is not CaseState.OK:
        # An erratic candidate must not hide behind its own spread: out of tolerance (or not
        # bit-identical on relaunch) after a baseline within it is worse whatever the noise says.
        verdict = Verdict.WORSE
        note = (
            "out of tolerance; the baseline was within it"
            if c.state is CaseState.FAIL
            else f"{c.state.value}; the baseline was not"
        )
    elif b.state is not CaseState.OK and c.state is CaseState.OK:
        verdict, note = Verdict.FIXED, f"{b.state.value} before, within tolerance now"
    elif b.state is not CaseState.OK:
        # Neither side within tolerance and bit-identical: the numbers judge, and the note says
        # both states, since a table of verdicts shows none and `improved` reads as a repair.
        # A flip between out of tolerance and not bit-identical that the numbers call `same` is
        # `changed`, never failing: a nondeterministic layer near the bound flips either way
        # between runs (0.1.14 -> 0.1.15's FP8-channel down_proj at 1 token), and without it
        # 0.1.19 -> 0.1.20's MXFP4 MoE with FP8 activations, out of tolerance before and within
        # it but not bit-identical now, showed in no table.
        before, now = b.state.value, c.state.value
        if before != now and verdict is Verdict.SAME:
            verdict = Verdict.CHANGED
        if verdict in (Verdict.IMPROVED, Verdict.WORSE) or before != now:
            states = f"{now} on both sides" if before == now else f"{before} before, {now} now"
            note = f"{states}; {note}" if note else states
    if b.kernel_config and c.kernel_config and b.kernel_config != c.kernel_config:
        change = f"kernel config {b.kernel_config} -> {c.kernel_config}"
        note = f"{note}; {change}" if note else change
    tv, ratio, tnoise = _time_verdict(b, c)
    return CaseVerdict(name, m, verdict, tv, b, c, delta, noise, ratio, tnoise, note=note)


def _with_reruns(v: CaseVerdict) -> CaseVerdict:
    """The verdict, its note naming the runs of either side that hung beside other workers and
    went through alone: a kernel that hangs now and then, or one starved by another's hang."""
    notes = [
        f"{side} hung beside other workers in {s.hung_beside_others} of {s.runs} runs, "
        "not when rerun alone"
        for side, s in (("baseline", v.baseline), ("candidate", v.candidate))
        if s is not None and s.hung_beside_others
    ]
    return replace(v, note="; ".join(filter(None, (v.note, *notes)))) if notes else v


def _versions(records: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    seen: list[str] = []
    for r in records:
        env = r.get("environment", {})
        v = str(env.get("humming_kernels")) if isinstance(env, dict) else "None"
        if v not in seen:
            seen.append(v)
    return tuple(seen)


def dumps(comparison: KernelComparison) -> str:
    return json.dumps(comparison.to_json(), indent=1)
