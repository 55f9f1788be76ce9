"""A divergence comparison as text (the terminal), Markdown (a CI annotation), JUnit XML (one
testcase per config) and HTML (with the per-question KL distribution of the candidate and of
the floor, plotted as empirical CDFs in inline SVG)."""

from __future__ import annotations

import html
import math
import xml.etree.ElementTree as ET

from humming_matrix.divergence.judge import ConfigDivergence, DivergenceComparison, MetricTest


def _num(value: float) -> str:
    return f"{value:.3g}" if value and abs(value) < 1e-3 else f"{value:.4f}"


def _test_line(t: MetricTest) -> str:
    return (
        f"  {t.metric.label}: candidate {_num(t.candidate_mean)}, floor "
        f"{_num(t.floor_mean)} (excess {_num(t.excess)}); above floor {t.above}, below "
        f"{t.below}, tied {t.ties}; sign-test p {t.p_value:.3g}, Holm {t.adjusted_p:.3g}"
    )


def comparison_text(comparison: DivergenceComparison) -> str:
    lines = []
    for c in comparison.configs:
        lines.append(f"{c.config}: {c.verdict.value.upper()}")
        lines.append(f"  baseline   {c.baseline.cell.label}  run {c.baseline.record.run_id}")
        lines.append(f"  floor      run {c.replicate.record.run_id} (the baseline's A/A)")
        lines.append(f"  candidate  {c.candidate.cell.label}  run {c.candidate.record.run_id}")
        lines.append(f"  {c.questions} questions answered in all three passes")
        lines.extend(_test_line(t) for t in c.tests)
    n = len(comparison.configs)
    diverged = sum(c.verdict.value == "diverged" for c in comparison.configs)
    lines.append(
        f"{diverged} of {n} config{'s' if n != 1 else ''} diverged "
        f"(family-wise alpha {comparison.alpha:g}, Holm)"
    )
    return "\n".join(lines) + "\n"


def comparison_markdown(comparison: DivergenceComparison) -> str:
    out = [
        "## Divergence (teacher-forced logprobs against the A/A floor)",
        "",
        f"Family-wise alpha {comparison.alpha:g} (Holm over every config and metric); "
        "one-sided exact sign test per question against the baseline's replicate; logprobs "
        f"within {comparison.rounding_ulps} float32 ulps of the baseline's count as equal.",
        "",
        "| verdict | config | questions | mean KL (floor) | top-1 disagreement (floor) | "
        "abs NLL change (floor) | Holm p (KL, top-1, NLL) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in comparison.configs:
        cells = [f"{_num(t.candidate_mean)} ({_num(t.floor_mean)})" for t in c.tests]
        ps = ", ".join(f"{t.adjusted_p:.3g}" for t in c.tests)
        mark = "❌" if c.verdict.value == "diverged" else "✅"
        out.append(
            f"| {mark} {c.verdict.value} | {c.config} | {c.questions} | "
            f"{' | '.join(cells)} | {ps} |"
        )
    if not comparison.configs:
        out.append(
            "| | no environment besides the baseline's holds a divergence record | | | | | |"
        )
    out.append("")
    return "\n".join(out) + "\n"


def comparison_junit(comparison: DivergenceComparison) -> str:
    failures = sum(c.verdict.value == "diverged" for c in comparison.configs)
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="humming-matrix divergence",
        tests=str(len(comparison.configs)),
        failures=str(failures),
        errors="0",
    )
    for c in comparison.configs:
        case = ET.SubElement(suite, "testcase", classname="divergence", name=c.config)
        props = ET.SubElement(case, "properties")
        for name, value in (
            ("verdict", c.verdict.value),
            ("baseline_run", c.baseline.record.run_id),
            ("floor_run", c.replicate.record.run_id),
            ("candidate_run", c.candidate.record.run_id),
        ):
            ET.SubElement(props, "property", name=name, value=value)
        if c.verdict.value == "diverged":
            failure = ET.SubElement(case, "failure", message=f"{c.config}: diverged")
            failure.text = "\n".join(_test_line(t) for t in c.tests)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, "unicode") + "\n"


def _log_scale(value: float) -> float:
    return math.log10(max(value, 1e-12))


def kl_plot_svg(c: ConfigDivergence, width: int = 480, height: int = 200) -> str:
    """ECDFs of per-question mean KL (log10 axis, floored at 1e-12): candidate and floor."""
    series = {"candidate": c.candidate_kl, "floor (A/A)": c.floor_kl}
    logs = [_log_scale(v) for vs in series.values() for v in vs]
    lo, hi = min(logs), max(logs)
    span = (hi - lo) or 1.0
    colours = {"candidate": "#c0392b", "floor (A/A)": "#2c7fb8"}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 30}" '
        f'role="img" aria-label="per-question KL of {html.escape(c.config)}">',
        f'<rect width="{width}" height="{height}" fill="none" stroke="#999"/>',
    ]
    for label, values in series.items():
        points = sorted(values)
        n = len(points)
        coords = " ".join(
            f"{width * (_log_scale(v) - lo) / span:.2f},{height * (1 - (i + 1) / n):.2f}"
            for i, v in enumerate(points)
        )
        parts.append(
            f'<polyline fill="none" stroke="{colours[label]}" stroke-width="2" '
            f'points="{coords}"><title>{html.escape(label)}</title></polyline>'
        )
    parts.append(f'<text x="0" y="{height + 20}" font-size="12">log10 KL {lo:.1f}</text>')
    parts.append(f'<text x="{width - 90}" y="{height + 20}" font-size="12">{hi:.1f}</text>')
    legend = ", ".join(f'<tspan fill="{colours[k]}">{html.escape(k)}</tspan>' for k in series)
    parts.append(f'<text x="120" y="{height + 20}" font-size="12">{legend}</text></svg>')
    return "".join(parts)


def comparison_html(comparison: DivergenceComparison) -> str:
    body = [f"<h1>Divergence</h1><p>Family-wise alpha {comparison.alpha:g} (Holm).</p>"]
    for c in comparison.configs:
        body.append(f"<h2>{html.escape(c.config)}: {c.verdict.value}</h2>")
        body.append("<pre>" + html.escape("\n".join(_test_line(t) for t in c.tests)) + "</pre>")
        body.append("<p>Per-question mean token KL, empirical CDF:</p>" + kl_plot_svg(c))
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>humming-matrix '
        "divergence</title></head><body>" + "".join(body) + "</body></html>\n"
    )
