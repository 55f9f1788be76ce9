#!/usr/bin/env python3
"""Every humming release's newest kernel evidence, across the generations under ROOT (generated,
never edited by hand):

    python tools/h200-kernels/releases.py results/h200 > results/h200/README.md

ROOT holds one folder per generation (`gen2`, `gen3`, ...), each with the records of its calls.
For each release and each case of the current suite, the evidence is the records of the newest
generation that ran that case for that release (its calls pooled); older generations' runs of the
case are superseded, and so is a hang cut short beside other workers and never rerun alone
(`record.cut_short`) wherever another run has the case. Every batch is re-judged by the
product's kernel judge. Tables:

1. coverage per release: the suite's cases with evidence, those run at least twice in one call
   (an A/A pair), which generations and GPUs the evidence comes from, and how many cases are out
   of tolerance, not bit-identical on relaunch, cannot build, or broke otherwise; and which cases
   (suite order, as `sweep.sh` tags take them) have no evidence yet or no A/A pair;
2. per release, every case out of tolerance or broken: the batch sizes and the worst units (or
   the error), from the newest evidence;
3. release to release: each release against the previous release that ran the case, every
   verdict other than `same` and `still-broken` (table 2 lists those), and `slower`/`faster`
   from runs of one call, which alone share a machine and its load: the evidence itself where
   it is one call's, else the newest call that ran both releases, of the evidence's generations
   or timed behind the GPU spin (named), else none (the records of one side may come from
   another generation than the other's: where their inputs differ the verdict says
   `incomparable`);
4. tables 2 and 3 again per release, a case an item: what a reviewer of one bump reads;
5. per release, every case out of tolerance or broken at a batch size in a superseded
   generation's runs (the same weights, inputs and bound; other output bytes), where the newest
   evidence at that size is not: a fault that does not fire every run (a race, a layer near
   the bound) stays on record.
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from packaging.version import Version
from table import gpu_label, worst_units  # this folder's per-generation tables

from humming_matrix.kernels.assess import CaseState, assess_batch, out_of_tolerance
from humming_matrix.kernels.judge import (
    CaseVerdict,
    TimeVerdict,
    Verdict,
    compare_kernel_records,
)
from humming_matrix.kernels.models import SUITE
from humming_matrix.kernels.record import (
    case_reason,
    cut_short,
    humming_version,
    hung_only_beside_others,
    load_kernel_record,
)

Record = Mapping[str, Any]
BROKEN = (CaseState.NONFINITE, CaseState.ERROR, CaseState.CRASH, CaseState.HANG)


class Run:
    """One record, where it lies: generation, call and run id."""

    def __init__(self, root: Path, path: Path) -> None:
        self.record: Record = load_kernel_record(path)
        parts = path.relative_to(root).parts
        self.generation = parts[0]
        self.call = parts[1] if len(parts) > 2 else ""
        self.version = str(humming_version(self.record))
        self.gpu = gpu_label(self.record)
        self.cases = {str(c["name"]): c for c in self.record["cases"]}
        # Every timing queued behind the GPU spin (a graph replay or an eager launch alike), so
        # that it measured the stream rather than the host's launch path.
        times = [
            b["time"] for c in self.cases.values() for b in c.get("batches") or [] if b.get("time")
        ]
        self.queued = bool(times) and all("queued_ahead" in t for t in times)


def _generation_order(name: str) -> int:
    found = re.fullmatch(r"gen(\d+)", name)
    return int(found.group(1)) if found else -1


Evidence = dict[tuple[str, str], list[Run]]


def evidence(runs: list[Run]) -> Evidence:
    """Per (release, case): the runs of the newest generation that ran it. A hang cut short
    beside other workers and never rerun alone (`cut_short`) counts only where no other run
    has the case: gen7 calls 19 - 20 cut 0.1.5's FP8-channel gate/up at 10 s, which would
    have replaced gen6's hang at 200 s here."""
    chosen: Evidence = {}
    for weak in (False, True):
        had = set(chosen)
        for run in sorted(runs, key=lambda r: _generation_order(r.generation)):
            for name, case in run.cases.items():
                key = (run.version, name)
                if cut_short(case) != weak or key in had:
                    continue
                current = chosen.get(key)
                if current and current[0].generation != run.generation:
                    current = None
                chosen[key] = [*(current or []), run]
    return chosen


def superseded(runs: list[Run], chosen: Evidence) -> Evidence:
    """Per (release, case): the runs not of its evidence's generation (older ones, or hangs cut
    short that its evidence outweighs)."""
    older: Evidence = defaultdict(list)
    for run in runs:
        for name in run.cases:
            key = (run.version, name)
            if run.generation != chosen[key][0].generation:
                older[key].append(run)
    return older


def _fmt(units: float) -> str:
    return f"{units:.2f}" if units < 1000 else f"{units:.3g}"


def _problems(name: str, runs: list[Run]) -> tuple[str, str, str, str] | None:
    """(state, how many runs it held in, batch sizes, detail) of a case out of tolerance or
    broken in any run; None if not."""
    states: list[CaseState] = []
    failing: set[int] = set()
    units: list[float] = []
    reasons: list[str] = []
    beside = 0  # runs whose case hung beside other workers, then went through alone
    for run in runs:
        case = run.cases[name]
        beside += hung_only_beside_others(case)
        batches = case.get("batches") or []
        if not batches:
            states.append(CaseState(case["state"]))
            reasons.append(case_reason(case) or str(case["state"]))
        for batch in batches:
            state = assess_batch(batch)
            states.append(state)
            if state is CaseState.FAIL or state in BROKEN:
                failing.add(int(batch["m"]))
                value = worst_units(batch)
                if state is CaseState.FAIL and value is not None:
                    units.append(value)
                else:
                    reasons.append(
                        str(batch.get("error") or out_of_tolerance(batch) or state.value)
                    )
    bad = [s for s in states if s is CaseState.FAIL or s in BROKEN or s is CaseState.UNSUPPORTED]
    # Rerun alone, a hang beside other workers may not come back (`kernels.watchdog`): listed
    # apart from the hangs that did, so neither is hidden nor taken for the other.
    again = f"hung beside other workers in {beside} of {len(runs)} runs, not when rerun alone"
    if not bad:
        return ("hang beside others", "", "", again) if beside else None
    worst = max(bad, key=lambda s: s.severity)
    detail = [again] if beside else []
    if units:
        top = max(units)
        detail.append(f"{_fmt(min(units))} - {_fmt(top)}u" if math.isfinite(top) else "inf u")
    detail += sorted(set(reasons))[:2]
    label = "cannot build" if worst is CaseState.UNSUPPORTED else worst.value
    per_run = Counter(CaseState(run.cases[name]["state"]) for run in runs)
    whole = per_run[worst]
    held = ""
    if worst in (CaseState.HANG, CaseState.CRASH) and whole < len(runs):
        # A hang that other runs of the release got past says so: an intermittent kernel hang
        # (0.1.2 - 0.1.5's FP8-channel GEMMs, gen6 calls 12 - 14) or, before the waiting pulse
        # (gen6 calls 9 - 11), perhaps a worker queued behind another's hung GPU turn. The other
        # runs' own whole-case breakage is named too: "hang in 4 of 5 runs" alone would read as
        # one run that went through, where gen7 call 26's fifth run crashed (SIGSEGV).
        others = sorted(
            ((s, n) for s, n in per_run.items() if s in BROKEN and s is not worst),
            key=lambda item: -item[0].severity,
        )
        held = f" in {whole} of {len(runs)} runs" + "".join(
            f", {s.value} in {n}" for s, n in others
        )
    return label, held, ", ".join(map(str, sorted(failing))), "; ".join(detail)[:160]


def _aa(runs: list[Run]) -> bool:
    calls: dict[tuple[str, str], int] = defaultdict(int)
    for run in runs:
        calls[(run.generation, run.call)] += 1
    return max(calls.values()) >= 2


def spans(indices: list[int]) -> str:
    """`[1, 2, 3, 7, 9, 10]` as `1-3, 7, 9-10`; `-` for none."""
    spans: list[list[int]] = []
    for i in indices:
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans) or "-"


Problems = dict[tuple[str, str], tuple[str, str, str, str]]


def problems_of(chosen: Evidence) -> Problems:
    """`_problems` of every (release, case) with evidence, once: tables 1, 2 and 4 read it."""
    return {key: found for key, runs in chosen.items() if (found := _problems(key[1], runs))}


def _coverage(versions: list[str], chosen: Evidence, problems: Problems) -> list[str]:
    suite = [c.name for c in SUITE]
    out = [
        "## 1. Coverage",
        "",
        f"Of the current suite's {len(suite)} cases (`humming_matrix.kernels.models.SUITE`): "
        "those with evidence, those run twice in one call (A/A), the generations and GPUs the "
        "evidence comes from, and the cases in each state of table 2; `not run` and `no A/A` "
        "name the cases (1-based, in suite order: what `sweep.sh`'s `VERSION@FIRST-LAST` tags "
        "take) still without evidence, or with runs of different calls only.",
        "",
        "| humming | cases | A/A | from | GPU | out of tolerance | not bit-identical | "
        "cannot build | broken | not run | no A/A |",
        "| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for version in versions:
        have = [n for n in suite if (version, n) in chosen]
        gens: dict[str, int] = defaultdict(int)
        gpus: set[str] = set()
        counts: dict[str, int] = defaultdict(int)
        nondet = 0
        for name in have:
            runs = chosen[(version, name)]
            gens[runs[0].generation] += 1
            gpus |= {r.gpu for r in runs}
            if (version, name) in problems:
                counts[problems[(version, name)][0]] += 1
            if any(
                assess_batch(b) is CaseState.NONDETERMINISTIC
                for r in runs
                for b in r.cases[name].get("batches") or []
            ):
                nondet += 1
        where = ", ".join(
            f"{g} {n}" for g, n in sorted(gens.items(), key=lambda kv: -_generation_order(kv[0]))
        )
        broken = sum(counts[s.value] for s in BROKEN)
        paired = [n for n in have if _aa(chosen[(version, n)])]
        missing = [i for i, n in enumerate(suite, 1) if n not in have]
        single = [i for i, n in enumerate(suite, 1) if n in have and n not in paired]
        out.append(
            f"| {version} | {len(have)} | {len(paired)} | "
            f"{where} | {', '.join(sorted(gpus))} | {counts[CaseState.FAIL.value]} | {nondet} | "
            f"{counts['cannot build']} | {broken} | {spans(missing)} | {spans(single)} |"
        )
    return [*out, ""]


def _in_suite_order(
    versions: list[str], found: Problems
) -> Iterator[tuple[str, str, tuple[str, str, str, str]]]:
    """(release, case, its entry) of every case `found` holds, by release, then suite order."""
    for version in versions:
        for case in SUITE:
            if (version, case.name) in found:
                yield version, case.name, found[(version, case.name)]


def _problem_table(versions: list[str], chosen: Evidence, problems: Problems) -> list[str]:
    out = [
        "## 2. Out of tolerance or broken, per release",
        "",
        "The state over every run of the newest evidence (the worst), the batch sizes where it "
        "holds, and the range of the failing batches' worst units (> 1 fails) or the reason.",
        "",
        "| humming | case | state | batches | detail | from |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for version, name, (state, held, batches, detail) in _in_suite_order(versions, problems):
        out.append(
            f"| {version} | {name} | {state}{held} | {batches} | {detail} | "
            f"{chosen[(version, name)][0].generation} |"
        )
    return [*out, ""]


def _bad(batch: Mapping[str, Any]) -> CaseState | None:
    state = assess_batch(batch)
    return state if state is CaseState.FAIL or state in BROKEN else None


def _comparable(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The same weights and inputs, judged under the same bound: gen3's FP8 cases had no
    allowance for the activations' rounding ties, and its fails there are the rule's."""
    return bool(old.get("input_sha256")) and all(
        old.get(key) == new.get(key) for key in ("weights_sha256", "input_sha256", "bound")
    )


def _other_bytes(old: Mapping[str, Any], newest: list[Mapping[str, Any]]) -> bool:
    """Did a draw give output bytes no newest run gave on it? The same bytes on the same
    inputs judged otherwise would be the record's stored error, not the kernel."""
    return any(
        digest not in {b["output_sha256"][i] for b in newest if i < len(b["output_sha256"])}
        for i, digest in enumerate(old.get("output_sha256") or [])
    )


def older_only(chosen: Evidence, older: Evidence) -> Problems:
    """(state, generations, batch sizes, detail) per (release, case) out of tolerance or broken
    in a superseded run at a batch size its evidence ran on the same weights and inputs and
    found neither."""
    found: Problems = {}
    for key, old_runs in older.items():
        newest: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
        for run in chosen[key]:
            case = run.cases[key[1]]
            for batch in case.get("batches") or []:
                newest[int(batch["m"])].append(
                    {**batch, "weights_sha256": case.get("weights_sha256")}
                )
        states: list[CaseState] = []
        gens: set[str] = set()
        sizes: set[int] = set()
        units: list[float] = []
        reasons: list[str] = []
        for run in old_runs:
            case = run.cases[key[1]]
            for batch in case.get("batches") or []:
                m = int(batch["m"])
                state = _bad(batch)
                there = newest.get(m, [])
                old = {**batch, "weights_sha256": case.get("weights_sha256")}
                if (
                    state is None
                    or not there
                    or not all(_comparable(old, b) for b in there)
                    or any(_bad(b) for b in there)
                    or not _other_bytes(batch, there)
                ):
                    continue
                states.append(state)
                gens.add(run.generation)
                sizes.add(m)
                value = worst_units(batch)
                if state is CaseState.FAIL and value is not None:
                    units.append(value)
                else:
                    reasons.append(str(batch.get("error") or state.value))
        if states:
            worst = max(states, key=lambda s: s.severity)
            detail = [f"{_fmt(min(units))} - {_fmt(max(units))}u"] if units else []
            detail += sorted(set(reasons))[:2]
            found[key] = (
                worst.value,
                ", ".join(sorted(gens, key=_generation_order, reverse=True)),
                ", ".join(map(str, sorted(sizes))),
                "; ".join(detail)[:160],
            )
    return found


def _older_table(versions: list[str], chosen: Evidence, older: Problems) -> list[str]:
    out = [
        "## 5. Out of tolerance or broken only in superseded evidence",
        "",
        "A case and batch size out of tolerance or broken in a superseded generation's runs, "
        "on the same weights and inputs, under the same bound and with other output bytes, and "
        "in none of its newest evidence's runs at that size (table 2 reads only those): a fault "
        "that does not fire every run, or a layer near the bound. The state is the worst over "
        "those runs; `was` names their generations, `now` the newest.",
        "",
        "| humming | case | state | batches | detail | was | now |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    rows = [
        f"| {version} | {name} | {state} | {batches} | {detail} | {gens} | "
        f"{chosen[(version, name)][0].generation} |"
        for version, name, (state, gens, batches, detail) in _in_suite_order(versions, older)
    ]
    return [*out, *(rows or ["| - | none | | | | | |"]), ""]


def _only(runs: list[Run], names: set[str]) -> list[Record]:
    return [
        {**run.record, "cases": [run.cases[n] for n in run.cases if n in names]} for run in runs
    ]


class Change:
    """One row of table 3: a (case, batch) of a release against the previous release."""

    def __init__(
        self,
        previous: str,
        version: str,
        verdict: CaseVerdict,
        shown: str,
        timed: CaseVerdict | None,
    ) -> None:
        self.previous, self.version, self.case, self.m = previous, version, verdict.case, verdict.m
        self.verdict: Verdict = verdict.verdict
        # `timed`: the verdict whose timing counts (this one, or one of a call both ran in).
        self.time: TimeVerdict | None = timed.time if timed else None
        self.ratio: float | None = timed.time_ratio if timed else None
        self.shown, self.note = shown, verdict.note

    def row(self) -> str:
        return (
            f"| {self.case} | {'' if self.m is None else self.m} | {self.previous} | "
            f"{self.version} | {self.verdict.value} | {self.shown} | {self.note[:120]} |"
        )


Calls = dict[tuple[str, str], Evidence]


def by_call(runs: list[Run]) -> Calls:
    """Per (release, case): its runs of every generation, by (generation, call)."""
    out: Calls = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for name in run.cases:
            out[(run.version, name)][(run.generation, run.call)].append(run)
    return out


def _call_order(key: tuple[str, str]) -> tuple[int, int]:
    number = re.search(r"\d+", key[1])
    return _generation_order(key[0]), int(number.group()) if number else 0


def _timed_in_one_call(
    previous: str, version: str, names: set[str], calls: Calls, generations: set[str]
) -> dict[tuple[str, int | None], tuple[CaseVerdict, str]]:
    """Per (case, batch): the verdict of the newest call in which both releases ran the case,
    and that call, for timing alone: where the newest evidence of the two comes from different
    calls, an older call that ran both still shares a machine and its load (gen5 call 2 ran
    0.1.16 and 0.1.17, and gen6 call 23 superseded 0.1.17's evidence). Only calls of the
    evidence's own `generations`, or of any generation whose timed launches were queued behind
    the GPU spin (`time.queued_ahead`, gen5 on): the first four's eager timings measured the
    host. Gen7's full sweeps run a release or two a call, so their neighbours' timing comes from
    gen5's and gen6's calls, at the batch sizes those ran."""
    shared: dict[tuple[str, str], set[str]] = defaultdict(set)
    for name in names:
        runs = calls[(previous, name)], calls[(version, name)]
        both = {
            key
            for key in runs[0].keys() & runs[1].keys()
            if key[0] in generations or all(r.queued for side in runs for r in side[key])
        }
        if both:
            shared[max(both, key=_call_order)].add(name)
    out: dict[tuple[str, int | None], tuple[CaseVerdict, str]] = {}
    for where, in_call in shared.items():
        before = list(dict.fromkeys(r for n in in_call for r in calls[(previous, n)][where]))
        after = list(dict.fromkeys(r for n in in_call for r in calls[(version, n)][where]))
        comparison = compare_kernel_records(_only(before, in_call), _only(after, in_call))
        for v in comparison.verdicts:
            out[(v.case, v.m)] = (v, " ".join(where))
    return out


def _changes(versions: list[str], chosen: Evidence, calls: Calls) -> list[Change]:
    # One comparison per pair of evidence sets: the cases of a release mostly share them.
    groups: dict[tuple[str, str, tuple[int, ...], tuple[int, ...]], set[str]] = defaultdict(set)
    sides: dict[tuple[int, ...], list[Run]] = {}
    last: dict[str, str] = {}
    for version in versions:
        for case in SUITE:
            if (version, case.name) not in chosen:
                continue
            previous = last.get(case.name)
            last[case.name] = version
            if previous is None:
                continue
            before, after = chosen[(previous, case.name)], chosen[(version, case.name)]
            b_key, a_key = tuple(map(id, before)), tuple(map(id, after))
            sides[b_key], sides[a_key] = before, after
            groups[(previous, version, b_key, a_key)].add(case.name)
    order = {c.name: i for i, c in enumerate(SUITE)}
    rows: list[tuple[int, int, int, Change]] = []
    for (previous, version, b_key, a_key), names in groups.items():
        before, after = sides[b_key], sides[a_key]
        # Only runs of one call share a machine and its load (the A/A spread is measured within a
        # call); the fourth generation's eager timings spread up to 12.9x across calls.
        one_call = len({(r.generation, r.call) for r in (*before, *after)}) == 1
        comparison = compare_kernel_records(_only(before, names), _only(after, names))
        generations = {r.generation for r in (*before, *after)}
        elsewhere = (
            {} if one_call else _timed_in_one_call(previous, version, names, calls, generations)
        )
        for v in comparison.verdicts:
            # Broken on both sides is table 2's, release by release.
            if v.verdict in (Verdict.MISSING, Verdict.NEW, Verdict.STILL_BROKEN):
                continue
            timed, where = (v, "") if one_call else elsewhere.get((v.case, v.m), (None, ""))
            speed = timed is not None and timed.time in (TimeVerdict.SLOWER, TimeVerdict.FASTER)
            if v.verdict is Verdict.SAME and not speed:
                continue
            if timed is None:
                shown = "not compared (different calls)"
            else:
                ratio = "" if timed.time_ratio is None else f" {timed.time_ratio:.2f}x"
                # The judge's own caveat: one run a side misses the between-run spread.
                caveat = " (one run a side)" if speed and not timed.time_runs_measured else ""
                shown = f"{timed.time.value}{ratio}{caveat}" + (f" ({where})" if where else "")
            change = Change(previous, version, v, shown, timed if speed else None)
            rows.append(
                (versions.index(version), order[v.case], -1 if v.m is None else v.m, change)
            )
    return [change for *_, change in sorted(rows, key=lambda row: row[:3])]


def _change_table(changes: list[Change]) -> list[str]:
    return [
        "## 3. Release to release",
        "",
        "Each release against the previous release that ran the case (the newest evidence of "
        "each): verdicts other than `same` and `still-broken`, and `slower`/`faster` from runs "
        "of one call: the evidence's own, else the newest call that ran both releases, of the "
        "evidence's generations or timed behind the GPU spin (gen5 on), named (times from "
        "different calls or GPU models judge no speed).",
        "",
        "| case | batch | from | to | verdict | time | note |",
        "| --- | ---: | --- | --- | --- | --- | --- |",
        *(change.row() for change in changes),
        "",
    ]


def _batches(ms: list[int | None]) -> str:
    return ", ".join("all" if m is None else str(m) for m in ms)


def _per_release(
    versions: list[str], problems: Problems, changes: list[Change], older: Problems
) -> list[str]:
    """Tables 2, 3 and 5 again, release by release, a case a line item: what a reviewer of one
    bump reads."""
    out = [
        "## 4. Per release",
        "",
        "Tables 2 and 3 by release: every case out of tolerance or broken (state, batch sizes), "
        "then against the previous release every case per verdict and every `slower`/`faster` "
        "one (batch sizes, ratios); last, where there are any, table 5's cases.",
        "",
    ]
    for version in versions:
        listed_problems = [
            f"`{name}` {state}{held}" + (f" ({batches})" if batches else "")
            for _, name, (state, held, batches, _) in _in_suite_order([version], problems)
        ]
        mine = [c for c in changes if c.version == version]
        out += [f"### {version}", ""]
        out.append(
            f"- out of tolerance or broken ({len(listed_problems)}): "
            + ("; ".join(listed_problems) or "none")
        )
        for previous in sorted({c.previous for c in mine}, key=Version):
            against = [c for c in mine if c.previous == previous]
            for verdict in Verdict:
                cases: dict[str, list[int | None]] = defaultdict(list)
                for c in against:
                    if c.verdict is verdict and verdict is not Verdict.SAME:
                        cases[c.case].append(c.m)
                if cases:
                    listed = "; ".join(f"`{n}` ({_batches(ms)})" for n, ms in cases.items())
                    out.append(f"- {verdict.value} from {previous} ({len(cases)}): {listed}")
            for time in (TimeVerdict.SLOWER, TimeVerdict.FASTER):
                timed: dict[str, list[str]] = defaultdict(list)
                for c in against:
                    if c.time is time:
                        timed[c.case].append(f"{c.m} {c.ratio:.2f}x" if c.ratio else str(c.m))
                if timed:
                    listed = "; ".join(f"`{n}` ({', '.join(r)})" for n, r in timed.items())
                    out.append(f"- {time.value} than {previous} ({len(timed)}): {listed}")
        earlier = [
            f"`{name}` {state} ({batches}, {gens})"
            for _, name, (state, gens, batches, _) in _in_suite_order([version], older)
        ]
        if earlier:
            out.append(
                f"- out of tolerance or broken only in superseded runs ({len(earlier)}): "
                + "; ".join(earlier)
            )
        out.append("")
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    runs = [
        Run(root, p)
        for p in sorted(root.rglob("kernels__*.json"))
        if _generation_order(p.relative_to(root).parts[0]) >= 0
    ]
    chosen = evidence(runs)
    versions = sorted({r.version for r in runs}, key=Version)
    changes = _changes(versions, chosen, by_call(runs))
    problems = problems_of(chosen)
    older = older_only(chosen, superseded(runs, chosen))
    out = [
        f"# Kernel tier: every release's newest evidence under {root.name}/",
        "",
        "Generated by `tools/h200-kernels/releases.py` from the records of every generation "
        "(each generation's own README is made by `table.py`); see docs/kernels.md for the "
        "cases, the bound and the calls.",
        "",
        *_coverage(versions, chosen, problems),
        *_problem_table(versions, chosen, problems),
        *_change_table(changes),
        *_per_release(versions, problems, changes, older),
        *_older_table(versions, chosen, older),
    ]
    print("\n".join(out).rstrip("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
