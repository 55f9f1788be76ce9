"""Plain text for a terminal or a CI log: what `compare` prints on stdout."""

from __future__ import annotations

from humming_matrix.judge.compare import FLIPS_SHOWN, Comparison, ConfigComparison, points
from humming_matrix.judge.compare_lm_eval import (
    LmEvalComparison,
    LmEvalConfigComparison,
    MetricComparison,
    backstop_failed,
    backstop_text,
)
from humming_matrix.report.markdown import plural, short


def _block(c: ConfigComparison) -> list[str]:
    t = c.table
    conf = int(100 * c.settings.confidence)
    lines = [
        f"{c.config}: {c.verdict.value.upper()}" + ("  [GATE FAILED]" if c.gate_failed else ""),
        f"  baseline   {c.baseline.accuracy:.4f} [{c.baseline.interval.low:.4f}, "
        f"{c.baseline.interval.high:.4f}] ({c.baseline.correct}/{c.baseline.n})  "
        f"{c.baseline.cell.label}  run {c.baseline.run_id}",
        f"  candidate  {c.candidate.accuracy:.4f} [{c.candidate.interval.low:.4f}, "
        f"{c.candidate.interval.high:.4f}] ({c.candidate.correct}/{c.candidate.n})  "
        f"{c.candidate.cell.label}  run {c.candidate.run_id}",
        f"  difference {points(c.difference)} points, {conf}% paired CI "
        f"[{points(c.difference_interval.low)}, {points(c.difference_interval.high)}]",
        f"  flips      b={t.right_to_wrong} right->wrong, c={t.wrong_to_right} wrong->right; "
        f"one-sided mid-p {c.p_regression:.3g} (worse), {c.p_improvement:.3g} (better)",
        f"  gated p    {c.test.p_regression_family:.3g} (worse), "
        f"{c.test.p_improvement_family:.3g} (better): exact, Holm over "
        f"{c.test.family_size}",
        "  could miss "
        + (
            "any drop: none reaches 80% power with these questions"
            if c.mde is None
            else f"a drop of {100 * c.mde:.2f} points (the verdict's 80% power at "
            f"{100 * c.test.noise_rate:.2g}% discordance)"
        ),
        f"  threshold  {c.candidate.record_accuracy:.4f} vs {c.candidate.threshold:g} - "
        f"{c.candidate.tolerance:g}: {'pass' if c.candidate.passed_threshold else 'FAIL'}",
    ]
    if c.noise is not None:
        cal, noise = c.noise.calibration, c.noise
        ratio = (
            "A/A agreed on every question"
            if noise.discordance_ratio is None
            else f"{noise.discordance_ratio:.1f}x the A/A discordance"
        )
        lines.append(
            f"  noise      A/A {cal.discordant}/{cal.n} discordant; {ratio}; noise predicts "
            f"{noise.expected_right_to_wrong:.1f} right->wrong (P of {t.right_to_wrong} or more "
            f"{noise.p_beyond_noise:.3g})"
        )
    if c.excluded_errors:
        lines.append(f"  left out   {c.excluded_errors} questions with a request error")
    if c.flips:
        shown = ", ".join(
            f"{f.index} ({f.baseline_prediction}->{f.candidate_prediction}, label {f.label})"
            for f in c.flips[:FLIPS_SHOWN]
        )
        more = f" and {len(c.flips) - FLIPS_SHOWN} more" if len(c.flips) > FLIPS_SHOWN else ""
        lines.append(f"  flipped    {shown}{more}")
    return lines


def comparison_text(comparison: Comparison) -> str:
    lines: list[str] = []
    for c in comparison.configs:
        lines += [*_block(c), ""]
    failed = sum(c.gate_failed for c in comparison.configs)
    lines.append(
        f"gate failed for {failed} of {plural(len(comparison.configs), 'config')}"
        if failed
        else f"no regression in {plural(len(comparison.configs), 'config')}"
    )
    return "\n".join(lines) + "\n"


def _metric_block(m: MetricComparison) -> list[str]:
    t = m.table
    conf = int(100 * m.settings.confidence)
    lines = [
        f"  {m.task} {m.key}: {m.verdict.value.upper()}"
        + ("  [GATE FAILED]" if m.gate_failed else ""),
        f"    baseline   {m.baseline.accuracy:.4f} [{m.baseline.interval.low:.4f}, "
        f"{m.baseline.interval.high:.4f}] ({m.baseline.correct}/{m.baseline.n})",
        f"    candidate  {m.candidate.accuracy:.4f} [{m.candidate.interval.low:.4f}, "
        f"{m.candidate.interval.high:.4f}] ({m.candidate.correct}/{m.candidate.n})",
        f"    difference {points(m.difference)} points, {conf}% paired CI "
        f"[{points(m.difference_interval.low)}, {points(m.difference_interval.high)}]",
        f"    flips      b={t.right_to_wrong} right->wrong, c={t.wrong_to_right} wrong->right; "
        f"one-sided mid-p {m.p_regression:.3g} (worse), {m.p_improvement:.3g} (better)",
        f"    gated p    {m.test.p_regression_family:.3g} (worse), "
        f"{m.test.p_improvement_family:.3g} (better): exact, Holm over "
        f"{m.test.family_size}",
        "    could miss "
        + (
            "any drop: none reaches 80% power with these documents"
            if m.mde is None
            else f"a drop of {100 * m.mde:.2f} points (the verdict's 80% power at "
            f"{100 * m.test.noise_rate:.2g}% discordance)"
        ),
        "    backstop   "
        + (
            "not gated: the config names no such metric"
            if m.backstop is None
            else backstop_text(m.backstop)
        ),
    ]
    if m.flips:
        shown = ", ".join(
            f"{f.doc_id} ({short(f.baseline_prediction, 20)}->"
            f"{short(f.candidate_prediction, 20)}, target {short(f.target, 20)})"
            for f in m.flips[:FLIPS_SHOWN]
        )
        more = f" and {len(m.flips) - FLIPS_SHOWN} more" if len(m.flips) > FLIPS_SHOWN else ""
        lines.append(f"    flipped    {shown}{more}")
    return lines


def _lm_eval_block(c: LmEvalConfigComparison) -> list[str]:
    lines = [
        f"{c.config} (lm-eval)" + ("  [GATE FAILED]" if c.gate_failed else ""),
        f"  baseline   {c.baseline.cell.label}  run {c.baseline.run_id}",
        f"  candidate  {c.candidate.cell.label}  run {c.candidate.run_id}",
    ]
    for m in c.metrics:
        lines += _metric_block(m)
    for check in c.unpaired_checks:
        lines.append(
            f"  {check.task} {check.key}: backstop only (no 0/1 outcome per document): "
            + backstop_text(check)
            + ("  [GATE FAILED]" if backstop_failed(check) else "")
        )
    return lines


def lm_eval_comparison_text(comparison: LmEvalComparison) -> str:
    lines: list[str] = []
    for c in comparison.configs:
        lines += [*_lm_eval_block(c), ""]
    judged = plural(comparison.judged, "lm-eval metric")
    lines.append(
        f"gate failed for {comparison.failed} of {judged}"
        if comparison.failed
        else f"no regression in {judged}"
    )
    return "\n".join(lines) + "\n"
