#!/usr/bin/env python3
"""The README of a folder of kernel records (results/h200/gen2, gen3), generated from the
records (never edited by hand).

    python tools/h200-kernels/table.py results/h200/gen3 > results/h200/gen3/README.md

Every record under DIR (any depth) is judged by the product's kernel judge
(`humming_matrix.kernels.judge`, which re-assesses every batch). Tables:

1. per release and case: the state, the worst bound units (the largest of the whole-output,
   worst-channel and worst-expert errors in units of the rounding bound; records written before
   the bound have none), `nondet` when a relaunch was not bit-identical; `cannot build: <reason>`
   when the release raised while building (or says unsupported), `not run` when the record has no
   such case (the call's deadline cut it);
2. release to release: each release against the previous release that ran the case, every
   verdict other than `same`, with the time verdict;
3. the A/A check: two runs of one release in one call, their time ratios (the spread a `slower`
   must exceed): per call and release the median and widest ratio, then every ratio of the
   first pair of each release;
0. first, a summary per run: how many cases in each state, and the per-stage seconds the
   records carry (where they carry them).
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version

from humming_matrix.kernels.assess import BOUNDS, CaseState, assess_batch, num
from humming_matrix.kernels.judge import (
    KernelComparison,
    TimeVerdict,
    Verdict,
    compare_kernel_records,
)
from humming_matrix.kernels.record import gpu_name, humming_version, load_kernel_record
from humming_matrix.kernels.watchdog import crash_cause


def gpu_label(record: Mapping[str, Any]) -> str:
    """The record's GPU model as the tables name it ("H200"; "?" where unrecorded)."""
    return (gpu_name(record) or "?").removeprefix("NVIDIA ")


def worst_units(batch: Mapping[str, Any]) -> float | None:
    """The worst unit error under the current bound (None for records under another rule)."""
    if batch.get("bound") not in BOUNDS:
        return None
    values: list[float] = []
    for key in ("err_units", "worst_channel_units", "worst_expert_units"):
        values += [num(v) for v in batch.get(key, []) or []]
    return max(values) if values else None


def _cell(case: dict[str, Any] | None) -> str:
    if case is None:
        return "not run"
    batches = case.get("batches") or []
    state = CaseState(case["state"])
    if not batches:
        if state in (CaseState.UNSUPPORTED, CaseState.ERROR):
            return f"cannot build: {str(case.get('reason', ''))[:60]}"
        cause = crash_cause(str(case.get("log_tail") or ""))
        return str(state.value) if cause is None else f"{state.value}: {cause[:80]}"
    states = [assess_batch(b) for b in batches]
    worst = max(states, key=lambda s: s.severity)
    units = [u for u in (worst_units(b) for b in batches if not b.get("error")) if u is not None]
    text = worst.value
    if units:
        top = max(units)
        text += f" {top:.2f}u" if math.isfinite(top) else " inf u"
    errors = [b["m"] for b in batches if b.get("error")]
    if errors:
        text += f" (error at m={','.join(map(str, errors))})"
    return text


STAGES = ("compile", "gpu_wait", "gpu_check", "host_check", "gpu_timing")


def _natural(path: Path) -> tuple[tuple[tuple[int, str], ...], str]:
    """By folder, call9 before call10 (the order the calls ran in), then by file name."""
    folder = str(path.parent)
    return tuple(
        (int(t), "") if t.isdigit() else (-1, t) for t in re.split(r"(\d+)", folder)
    ), path.name


def _summary(paths: list[Path], records: dict[Path, Any]) -> list[str]:
    """Per run: the cases in each state and where the worker time went."""
    states = [s.value for s in CaseState]
    out = [
        "## 0. Runs",
        "",
        "Cases per state; the seconds the run's workers spent per stage, summed over its cases "
        "(`build` and each batch's `seconds`; records before these fields show none).",
        "",
        f"| humming | run | complete | {' | '.join(states)} | build s | "
        f"{' | '.join(f'{s} s' for s in STAGES)} |",
        f"| --- | --- | --- |{' ---: |' * len(states)} ---: |{' ---: |' * len(STAGES)}",
    ]
    ordered = sorted(paths, key=lambda p: (Version(str(humming_version(records[p]))), _natural(p)))
    for path in ordered:
        record = records[path]
        counts = dict.fromkeys(states, 0)
        seconds = dict.fromkeys(STAGES, 0.0)
        build = 0.0
        for case in record["cases"]:
            counts[case["state"]] += 1
            build += num(case.get("build_seconds", 0.0))
            for batch in case.get("batches") or []:
                for stage, value in (batch.get("seconds") or {}).items():
                    if stage in seconds:
                        seconds[stage] += num(value)
        where = f"{path.parent.name}/{record['run_id'][-6:]}"
        out.append(
            f"| {humming_version(record)} | {where} | {'yes' if record['complete'] else 'no'} | "
            + " | ".join(str(counts[s]) for s in states)
            + f" | {build:.0f} | "
            + " | ".join(f"{seconds[s]:.0f}" for s in STAGES)
            + " |"
        )
    return [*out, ""]


def releases_records(folder: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every kernel record under `folder` (searched recursively, in path order), with the
    humming release it ran."""
    for path in sorted(folder.rglob("kernels__*.json")):
        record = load_kernel_record(path)
        yield str(humming_version(record)), record


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    paths = sorted(root.rglob("kernels__*.json"), key=_natural)
    by_version: dict[str, list[Path]] = defaultdict(list)
    records = {}
    for path in paths:
        record = load_kernel_record(path)
        records[path] = record
        by_version[str(humming_version(record))].append(path)
    versions = sorted(by_version, key=Version)
    cases: list[str] = []
    for path in paths:
        for case in records[path]["cases"]:
            if case["name"] not in cases:
                cases.append(case["name"])
    gpus = sorted({gpu_label(r) for r in records.values()})
    out = [
        f"# Kernel tier on the {' and the '.join(gpus)}: the records of {root.name}",
        "",
        "Generated by `tools/h200-kernels/table.py` from the records below this folder; "
        "see docs/kernels.md for the cases, the bound and the calls that made them.",
        "",
        *_summary(paths, records),
        "## 1. State per release and case",
        "",
        "`Nu`: the worst error in units of the rounding bound (> 1 fails); `nondeterministic`: "
        "a relaunch was not bit-identical; records under another bound (the first trial's) "
        "show no units and are judged by the floor rule.",
        "",
    ]
    for name in cases:
        out.append(f"### {name}")
        out.append("")
        out.append("| humming | run | state |")
        out.append("| --- | --- | --- |")
        for version in versions:
            for path in by_version[version]:
                by_name = {c["name"]: c for c in records[path]["cases"]}
                where = f"{path.parent.name}/{records[path]['run_id'][-6:]}"
                out.append(f"| {version} | {where} | {_cell(by_name.get(name))} |")
        out.append("")
    out += [
        "## 2. Release to release (each against the previous release that ran the case)",
        "",
        "Only verdicts other than `same`. Where one side's records carry units of another "
        "bound, that side is judged by the floor rule.",
        "",
        "| case | batch | from | to | verdict | time | note |",
        "| --- | ---: | --- | --- | --- | --- | --- |",
    ]
    last: dict[str, str] = {}
    # One comparison per pair of releases, read for each case whose previous run it is: the
    # cases of one release mostly share their previous release.
    comparisons: dict[tuple[str, str], KernelComparison] = {}
    for version in versions:
        ran = {c["name"] for p in by_version[version] for c in records[p]["cases"]}
        for name in cases:
            if name not in ran:
                continue
            previous = last.get(name)
            last[name] = version
            if previous is None:
                continue
            pair = (previous, version)
            if pair not in comparisons:
                comparisons[pair] = compare_kernel_records(
                    [records[p] for p in by_version[previous]],
                    [records[p] for p in by_version[version]],
                )
            for v in comparisons[pair].verdicts:
                if v.case != name or v.verdict in (Verdict.MISSING, Verdict.NEW):
                    continue
                if v.verdict is Verdict.SAME and v.time is not TimeVerdict.SLOWER:
                    continue
                shown = "" if v.time_ratio is None else f" {v.time_ratio:.2f}x"
                out.append(
                    f"| {name} | {'' if v.m is None else v.m} | {previous} | {version} | "
                    f"{v.verdict.value} | {v.time.value}{shown} | {v.note[:120]} |"
                )
    out += ["", *_aa_spread(versions, by_version, records)]
    out += [
        "| humming | case | batch | time ratio run 2 / run 1 |",
        "| --- | --- | ---: | ---: |",
    ]
    for version in versions:
        pairs = [runs for runs in _by_call(by_version[version]).values() if len(runs) >= 2]
        if not pairs:
            continue
        a, b = (records[p] for p in pairs[0][:2])
        times = timed_batches(a)
        for slot, ms in timed_batches(b).items():
            if slot in times:
                out.append(f"| {version} | {slot[0]} | {slot[1]} | {ms / times[slot]:.3f} |")
    print("\n".join(out))
    return 0


def _by_call(paths: list[Path]) -> dict[str, list[Path]]:
    """A release's runs per call (the folder they lie in: one machine, one load), calls in
    natural order."""
    calls: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(paths, key=_natural):
        calls[path.parent.name].append(path)
    return calls


def timed_batches(record: Mapping[str, Any]) -> dict[tuple[str, int], float]:
    """The median time (ms) of every timed (case, batch size) of a run."""
    return {
        (case["name"], batch["m"]): num(batch["time"]["median_ms"])
        for case in record["cases"]
        for batch in case.get("batches") or []
        if isinstance(batch.get("time"), dict)
    }


def _aa_spread(
    versions: list[str], by_version: Mapping[str, list[Path]], records: Mapping[Path, Any]
) -> list[str]:
    """Per call and release, the A/A spread: of the release's runs in that call, the two with
    the most timed batches in common (a probe of a few cases beside an A/A pair shares few),
    their time ratios' median and the widest (the larger of ratio and 1/ratio)."""
    out = [
        "## 3. A/A: two runs of one release in one call",
        "",
        "Per call and release, the two runs with the most timed batches in common: the median "
        "time ratio and the widest (the larger of the ratio and its inverse), the spread a "
        "`slower` must exceed. Then, for the first such pair of each release, every ratio.",
        "",
        "| humming | call | runs | timed batches | median ratio | widest |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for version in versions:
        for call, runs in _by_call(by_version[version]).items():
            timed = {run: timed_batches(records[run]) for run in runs}
            best: tuple[list[float], str] | None = None
            for i, first in enumerate(runs):
                for second in runs[i + 1 :]:
                    a, b = timed[first], timed[second]
                    ratios = [b[slot] / a[slot] for slot in a if slot in b]
                    names = " / ".join(records[p]["run_id"][-6:] for p in (first, second))
                    if best is None or len(ratios) > len(best[0]):
                        best = (ratios, names)
            if best is None or not best[0]:
                continue
            ratios, names = best
            out.append(f"| {version} | {call} | {names} | {spread_cells(ratios)} |")
    return [*out, ""]


def spread_cells(ratios: list[float]) -> str:
    """Table cells of a set of time ratios: how many, their median, the widest (the larger of a
    ratio and its inverse)."""
    widest = max(max(r, 1 / r) for r in ratios)
    return f"{len(ratios)} | {statistics.median(ratios):.3f} | {widest:.3f}x"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
