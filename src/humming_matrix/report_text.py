"""Plain text for a terminal or a CI log: what `compare` prints on stdout."""

from __future__ import annotations

from humming_matrix.compare import FLIPS_SHOWN, Comparison, ConfigComparison, points
from humming_matrix.report_markdown import plural


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
        "  detectable "
        + (
            "no drop reaches 80% power with these questions"
            if c.mde is None
            else f"{100 * c.mde:.2f} points at 80% power (alpha {c.settings.alpha:g})"
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
