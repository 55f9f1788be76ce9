"""From two probes' records to one verdict: the paired comparison (humming_matrix.judge.compare) per
config, folded into good / bad for bisect and pre-merge.

A candidate is bad when any config fails the gate as `compare` defines it: a significant drop of
at least the minimum effect, or the config's absolute threshold missed (vLLM's own check, kept as
a backstop). "Inconclusive" is not bad: bisect must not blame a version on noise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from humming_matrix.bisect.search import Verdict
from humming_matrix.bisect.version_runner import (
    DIVERGENCE_REPEAT_SUFFIX,
    KERNELS_RECORD,
    ProbeResult,
    kernel_runs,
)
from humming_matrix.divergence.judge import (
    ConfigDivergence,
    Loaded,
    Metric,
    adjust_family,
    compare_config,
    divergences,
)
from humming_matrix.divergence.record import load_divergence_record
from humming_matrix.errors import RecordError
from humming_matrix.judge.compare import (
    Comparison,
    ConfigComparison,
    LoadedRecord,
    Settings,
    compare_records,
    points,
)
from humming_matrix.kernels.judge import (
    CaseState,
    CaseVerdict,
    TimeVerdict,
    compare_kernel_records,
)
from humming_matrix.kernels.record import load_kernel_record
from humming_matrix.matrix.cells import Cell
from humming_matrix.store.results import load_gsm8k_record
from humming_matrix.suite.server_log import StartupPhase


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    summary: str  # one line for the progress output and the tables
    evidence: Mapping[str, Any] = field(default_factory=dict)  # JSON-ready, per config
    comparisons: tuple[ConfigComparison, ...] = ()


def _load(records: Mapping[str, Path]) -> dict[str, LoadedRecord]:
    return {name: LoadedRecord(path, load_gsm8k_record(path)) for name, path in records.items()}


def short_line(c: ConfigComparison) -> str:
    """The evidence a person reads first: delta, its interval, mid-p, flips."""
    interval = c.difference_interval
    text = (
        f"{c.config}: {c.test.verdict_text()}, {points(c.difference)} points "
        f"[{points(interval.low)}, {points(interval.high)}], mid-p {c.p_regression:.3g}, "
        f"b={c.table.right_to_wrong} c={c.table.wrong_to_right}"
    )
    if not c.candidate.passed_threshold:
        text += f", below threshold ({c.candidate.record_accuracy:.4f})"
    return text


@dataclass(frozen=True)
class PairedJudge:
    settings: Settings = field(default_factory=Settings)

    def __call__(self, baseline: Mapping[str, Path], candidate: Mapping[str, Path]) -> Judgement:
        base, cand = _load(baseline), _load(candidate)
        missing = sorted(set(base) - set(cand))
        if missing:
            raise RecordError(
                next(iter(candidate.values()), Path("?")),
                f"config {missing[0]}",
                "the candidate has no record of this config",
            )
        comparisons = (
            Comparison(
                self.settings,
                tuple(
                    compare_records(base[name], cand[name], self.settings) for name in sorted(base)
                ),
            )
            .in_family()
            .configs
        )
        failed = [c for c in comparisons if c.gate_failed]
        verdict = Verdict.BAD if failed else Verdict.GOOD
        shown = failed or list(comparisons)
        return Judgement(
            verdict=verdict,
            summary="; ".join(short_line(c) for c in shown),
            evidence={c.config: c.to_json() for c in comparisons},
            comparisons=comparisons,
        )

    def alone(self, records: Mapping[str, Path]) -> Judgement:
        """The baseline has nothing to be compared with: it must pass its own thresholds."""
        loaded = _load(records)
        below = [
            f"{name}: accuracy {r.record.metrics.accuracy:.4f} below its threshold "
            f"{r.record.metrics.threshold:g} - {r.record.metrics.tolerance:g}"
            for name, r in sorted(loaded.items())
            if not r.record.metrics.passed
        ]
        if below:
            return Judgement(Verdict.BAD, "; ".join(below))
        summary = ", ".join(
            f"{name}: accuracy {r.record.metrics.accuracy:.4f} on "
            f"{r.record.metrics.num_questions} questions"
            for name, r in sorted(loaded.items())
        )
        return Judgement(Verdict.GOOD, f"baseline, {summary}")


def stack(cell: Cell) -> tuple[str | None, str | None, str]:
    """What must match for two releases to share an environment: vLLM, torch, CUDA variant."""
    vllm = None if cell.vllm is None else str(cell.vllm)
    torch = None if cell.torch is None else str(cell.torch)
    return (vllm, torch, cell.variant.name)


def describe_stack(cell: Cell) -> str:
    vllm, torch, variant = stack(cell)
    return ", ".join(
        p for p in (f"vLLM {vllm}" if vllm else "", f"torch {torch}" if torch else "", variant) if p
    )


def judge_failed_start(failed: ProbeResult, cell: Cell, neighbour: str | None) -> Judgement:
    """A release whose server never became ready (docs/bisect.md, "A server that never
    starts"): bad when the server got past loading the weights, so humming's code was running,
    and `neighbour`, another release in the same environment (same vLLM, torch and CUDA
    variant, same machine), started; untestable otherwise, as a failed install is."""
    phases = {name: load_gsm8k_record(path).startup_phase for name, path in failed.records.items()}
    evidence = {
        name: {"record": str(failed.records[name]), "startup_phase": phase}
        for name, phase in sorted(phases.items())
    }
    early = sorted(name for name, phase in phases.items() if phase == StartupPhase.LAUNCHED.value)
    if early:
        return Judgement(
            Verdict.SKIP,
            f"untestable: {failed.reason} (it failed before loading the weights, so before "
            "any humming kernel ran)",
            evidence,
        )
    if neighbour is None:
        return Judgement(
            Verdict.SKIP,
            f"untestable: {failed.reason} (no other release of the same environment, "
            f"{describe_stack(cell)}, has started here to tell a bad release from a bad "
            "machine)",
            evidence,
        )
    return Judgement(
        Verdict.BAD,
        f"{failed.reason}; humming-kernels {neighbour} started in the same environment "
        f"({describe_stack(cell)})",
        evidence,
    )


def _ungated_slowdowns(verdicts: tuple[CaseVerdict, ...]) -> str:
    """With one run a side (records from a probe that ran once), the spread misses what changes
    between processes, so `slower` does not count; asked to count slowdowns, say so rather than
    let the flag pass for a check (gen7's 0.1.12 -> 0.1.13, 1.84x on the FP8-block MoE)."""
    ungated = [v for v in verdicts if v.time is TimeVerdict.SLOWER and not v.time_runs_measured]
    if not ungated:
        return ""
    worst = max(ungated, key=lambda v: v.time_ratio or 0.0)
    return (
        f"; {len(ungated)} slower with one run a side, not counted (a slowdown counts only "
        f"beyond the spread of two or more runs a side), the most {_kernel_line(worst)}"
    )


def _kernel_line(v: CaseVerdict) -> str:
    batch = "" if v.m is None else f" m={v.m}"
    delta = "" if v.delta_rel_err is None else f" (rel. error {v.delta_rel_err:+.3g})"
    # A gated slowdown's numbers are often `same`: the line must say what made it bad.
    slower = (
        f", slower {v.time_ratio:.2f}x"
        if v.time is TimeVerdict.SLOWER and v.time_ratio is not None
        else ""
    )
    return f"{v.case}{batch} {v.verdict.value}{delta}{slower}"


@dataclass(frozen=True)
class KernelJudge:
    """The kernel tier: the GEMM probe's records compared by humming_matrix.kernels.judge. A
    candidate is bad when a case regressed or broke (or, if asked, got slower)."""

    fail_on_slowdown: bool = False

    def __call__(self, baseline: Mapping[str, Path], candidate: Mapping[str, Path]) -> Judgement:
        comparison = compare_kernel_records(
            kernel_runs(baseline), kernel_runs(candidate), self.fail_on_slowdown
        )
        bad = comparison.regressions
        total = len(comparison.verdicts)
        if bad:
            shown = ", ".join(_kernel_line(v) for v in bad[:5])
            more = f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""
            noun = "worse or slower" if self.fail_on_slowdown else "worse"
            summary = f"kernels: {len(bad)} of {total} case/batch results {noun}: {shown}{more}"
        else:
            summary = f"kernels: no regression in {total} case/batch results"
        if self.fail_on_slowdown:
            summary += _ungated_slowdowns(comparison.verdicts)
        return Judgement(
            Verdict.BAD if bad else Verdict.GOOD, summary, {KERNELS_RECORD: comparison.to_json()}
        )

    def alone(self, records: Mapping[str, Path]) -> Judgement:
        """The baseline must give numbers to compare with; its own failures are listed, not held
        against it. Every release on the index has cases out of tolerance or not bit-identical on
        relaunch (results/h200/README.md), so demanding a clean baseline would refuse every real
        bisect; against the baseline a case already failing is `still-broken` unless it gets
        worse."""
        record = load_kernel_record(records[KERNELS_RECORD])
        counts = Counter(CaseState(c["state"]) for c in record["cases"])
        shown = ", ".join(
            f"{n} {state.value}" for state, n in sorted(counts.items(), key=lambda i: i[0].severity)
        )
        if not any(state.produced_numbers for state in counts):
            return Judgement(Verdict.BAD, f"baseline kernels: no case gave numbers ({shown})")
        return Judgement(Verdict.GOOD, f"baseline kernels: {shown}")


def _divergence_evidence(c: ConfigDivergence) -> dict[str, Any]:
    """What the log keeps of a config's divergence: the tests and the records, not the
    per-question values (the records hold those)."""
    data = c.to_json()
    del data["candidate_kl"], data["floor_kl"]
    return {"kind": "divergence", **data}


def divergence_line(c: ConfigDivergence) -> str:
    kl, top1 = c.test(Metric.KL), c.test(Metric.TOP1)
    worst = min(t.adjusted_p for t in c.tests)
    return (
        f"{c.config}: {c.verdict.value}, mean token KL {kl.candidate_mean:.3g} (floor "
        f"{kl.floor_mean:.3g}) nats, top-1 disagreement {top1.candidate_mean:.3g} (floor "
        f"{top1.floor_mean:.3g}), above the floor on {kl.above} of {kl.above + kl.below} "
        f"untied questions, Holm p {worst:.3g}"
    )


@dataclass(frozen=True)
class DivergenceJudge:
    """The divergence tier (docs/divergence.md): each config's candidate record against the
    good version's, with the good version's A/A repeat as the floor; one Holm family over every
    config and metric. Diverged is bad, same is good."""

    alpha: float = 0.05

    @staticmethod
    def _loaded(records: Mapping[str, Path], key: str) -> Loaded:
        return Loaded(records[key], load_divergence_record(records[key]))

    def __call__(self, baseline: Mapping[str, Path], candidate: Mapping[str, Path]) -> Judgement:
        configs = sorted(k for k in baseline if not k.endswith(DIVERGENCE_REPEAT_SUFFIX))
        results = []
        for name in configs:
            if name not in candidate:
                raise RecordError(
                    next(iter(candidate.values()), Path("?")),
                    f"config {name}",
                    "the candidate has no divergence record of this config",
                )
            results.append(
                compare_config(
                    self._loaded(baseline, name),
                    self._loaded(baseline, name + DIVERGENCE_REPEAT_SUFFIX),
                    self._loaded(candidate, name),
                    self.alpha,
                )
            )
        compared = adjust_family(results)
        diverged = [c for c in compared if c.verdict.value == "diverged"]
        return Judgement(
            Verdict.BAD if diverged else Verdict.GOOD,
            "; ".join(divergence_line(c) for c in (diverged or compared)),
            {c.config: _divergence_evidence(c) for c in compared},
        )

    def alone(self, records: Mapping[str, Path]) -> Judgement:
        """The good version is the baseline: its A/A pair must be comparable (same prompts and
        tokens, complete); the summary gives its floor."""
        parts = []
        for name in sorted(k for k in records if not k.endswith(DIVERGENCE_REPEAT_SUFFIX)):
            floor = divergences(
                self._loaded(records, name), self._loaded(records, name + DIVERGENCE_REPEAT_SUFFIX)
            )
            kl = [q.kl for q in floor.values()]
            mean = sum(kl) / len(kl) if kl else 0.0
            parts.append(f"{name}: A/A floor mean token KL {mean:.3g} nats on {len(kl)} questions")
        return Judgement(Verdict.GOOD, f"baseline, {', '.join(parts)}")
