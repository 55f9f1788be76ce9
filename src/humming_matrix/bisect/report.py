"""A finished bisect as text: the one-line conclusion and the Markdown for the nightly job's
annotation (Buildkite `annotate`, GitHub job summary)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from humming_matrix.bisect.driver import BisectResult, Plan
from humming_matrix.bisect.search import Conclusion
from humming_matrix.bisect.version_runner import ProbeStatus

DEFAULT_CHANGES_URL = "https://github.com/vllm-project/humming/compare/v{good}...v{bad}"
FLIPS_SHOWN = 20


def changes_link(template: str, good: str, bad: str) -> str:
    return template.format(good=good, bad=bad)


def headline(result: BisectResult) -> str:
    o = result.outcome
    if o.conclusion is Conclusion.FOUND:
        return f"first bad {o.first_bad}, last good {o.last_good}"
    if o.conclusion is Conclusion.AMBIGUOUS:
        return (
            f"first bad is one of {', '.join((*o.undecided, o.first_bad or '?'))} "
            f"(last good {o.last_good}; untestable: {', '.join(o.undecided)})"
        )
    if o.conclusion is Conclusion.NO_REGRESSION:
        return f"no regression: {o.reason}"
    return f"endpoints could not be verified: {o.reason}"


def evidence_lines(evidence: Mapping[str, Any]) -> list[str]:
    """Per config: delta with its interval, mid-p, the flipped questions."""
    lines = []
    for name, e in sorted(evidence.items()):
        if e.get("kind") == "kernels":
            worse = [
                f"{v['case']}{'' if v['m'] is None else ' m=' + str(v['m'])} {v['verdict']}"
                + (f", slower {v['time_ratio']:.2f}x" if v["time"] == "slower" else "")
                for v in e["verdicts"]
                if v["verdict"] in ("worse", "regressed", "newly-broken")
                # The slowdowns that counted: one run a side never does (kernels/judge.py).
                or (e["fail_on_slowdown"] and v["time"] == "slower" and v["time_runs_measured"])
            ]
            lines.append(
                f"kernels: {'regression' if e['regression'] else 'no regression'} "
                f"({e['baseline_versions']} -> {e['candidate_versions']}): "
                + (", ".join(worse) or "no case worse")
            )
            continue
        if e.get("kind") == "divergence":
            tests = ", ".join(
                f"{t['metric']} {t['candidate_mean']:.3g} (floor {t['floor_mean']:.3g}, above "
                f"{t['above']} below {t['below']}, Holm p {t['adjusted_p']:.3g})"
                for t in e["tests"]
            )
            lines.append(f"{name}: {e['verdict']} on {e['questions']} questions: {tests}")
            continue
        low, high = e["difference_interval"]
        flips = [f["index"] for f in e["flips"] if f["direction"] == "right->wrong"]
        more = f" (+{len(flips) - FLIPS_SHOWN} more)" if len(flips) > FLIPS_SHOWN else ""
        shown = ", ".join(str(i) for i in flips[:FLIPS_SHOWN]) or "none"
        lines.append(
            f"{name}: {e['verdict']}, accuracy {e['baseline']['accuracy']:.4f} -> "
            f"{e['candidate']['accuracy']:.4f}, delta {100 * e['difference']:+.2f} points "
            f"(95% CI [{100 * low:+.2f}, {100 * high:+.2f}]), mid-p {e['midp_regression']:.3g}, "
            f"b={e['b']} c={e['c']}; right->wrong questions: {shown}{more}"
        )
    return lines


def markdown(result: BisectResult, plan: Plan, changes_url: str) -> str:
    o = result.outcome
    out = [f"## humming-kernels bisect {plan.good}..{plan.bad}: {headline(result)}", ""]
    if o.first_bad and o.conclusion in (Conclusion.FOUND, Conclusion.AMBIGUOUS):
        entry = result.entries.get(o.first_bad)
        link = changes_link(changes_url, o.last_good, o.first_bad)
        out += [f"**First bad: {o.first_bad}** (last good {o.last_good}).", ""]
        if entry is not None and entry.evidence:
            out += ["Evidence:", ""]
            out += [f"- {line}" for line in evidence_lines(entry.evidence)]
            out.append("")
        out += [f"Changes between {o.last_good} and {o.first_bad}: <{link}>", ""]
    if o.contradictions:
        out += [
            f"Warning: {', '.join(o.contradictions)} tested good above a bad version; the "
            "regression may not be monotonic.",
            "",
        ]
    out += ["| version | session | verdict | source | summary |", "| --- | --- | --- | --- | --- |"]
    for version in plan.versions:
        entry = result.entries.get(version)
        if entry is None:
            out.append(f"| {version} | | not probed | | |")
            continue
        source = {
            ProbeStatus.REUSED: "stored",
            ProbeStatus.RAN: "ran",
            ProbeStatus.UNTESTABLE: "untestable",
            ProbeStatus.START_FAILED: "server never ready",
            ProbeStatus.CRASHED: "server crashed",
        }[entry.status]
        if version in result.resumed:
            source += " (log)"
        summary = entry.reason.replace("|", "\\|").replace("\n", " ")
        out.append(
            f"| {version} | `{entry.session}` | {entry.verdict.value} | {source} | {summary} |"
        )
    out.append("")
    return "\n".join(out)
