"""Markdown: a `compare` summary, and a store report sized for a Buildkite annotation or a GitHub
job summary (both cap the text at 1 MiB; we stay under it by dropping detail, never rows first)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from humming_matrix.judge.compare import (
    FLIPS_SHOWN,
    Comparison,
    ConfigComparison,
    Flip,
    NoiseFloor,
)
from humming_matrix.judge.compare_lm_eval import (
    DocFlip,
    LmEvalComparison,
    MetricComparison,
    backstop_text,
)
from humming_matrix.report.rows import (
    LM_EVAL_COLUMNS,
    PAIRED_COLUMNS,
    TIMING_COLUMNS,
    RowStatus,
    accuracy_cell,
    paired_cells,
    pct,
    version_key,
)

if TYPE_CHECKING:
    # Types only: the report model imports the renderers' helpers (plural, table).
    from humming_matrix.report.build import Row, StoreReport
    from humming_matrix.report.kernels import KernelRow, KernelSection
    from humming_matrix.report.lm_eval import LmEvalRow, LmEvalSection

MAX_BYTES = 1024 * 1024
TARGET_SHOWN = 40  # characters of a target in text and Markdown (GSM8K's is a whole solution)
ICONS = {
    RowStatus.REGRESSION: "❌",
    RowStatus.BELOW_THRESHOLD: "❌",
    RowStatus.START_FAILED: "❌",
    RowStatus.INCOMPLETE: "❌",
    RowStatus.NOT_COMPARED: "❌",
    RowStatus.INCONCLUSIVE: "⚠️",
    RowStatus.IMPROVEMENT: "✅",
    RowStatus.NO_CHANGE: "✅",
    RowStatus.THRESHOLD_ONLY: "✅",
    RowStatus.BASELINE: "✅",
}
ENV_KEYS = (
    "humming_kernels",
    "vllm",
    "torch",
    "torch_cuda",
    "python",
    "gpu",
    "gpu_driver",
    "platform",
    "session",
)


def cell(text: object) -> str:
    """Table-cell text: a pipe or a newline would break the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines


def plural(count: float, noun: str) -> str:
    return f"{count:g} {noun}" + ("" if count == 1 else "s")


def _noise_text(noise: NoiseFloor | None) -> str:
    if noise is None:
        return "no A/A pair"
    cal = noise.calibration
    ratio = (
        "A/A runs agreed on every question"
        if noise.discordance_ratio is None
        else f"{noise.discordance_ratio:.1f}x the A/A discordance"
    )
    return (
        f"A/A floor {cal.discordant}/{cal.n} discordant ({pct(cal.rate)}%); {ratio}; "
        f"noise predicts {noise.expected_right_to_wrong:.1f} right->wrong, "
        f"P(as many by noise) {noise.p_beyond_noise:.3g}"
    )


def flips_table(flips: Sequence[Flip], limit: int | None = FLIPS_SHOWN) -> list[str]:
    shown = list(flips if limit is None else flips[:limit])
    lines = table(
        ["question", "label", "baseline", "candidate", "flip"],
        [
            [
                f.index,
                f.label,
                _pred(f.baseline_prediction),
                _pred(f.candidate_prediction),
                f.direction.value,
            ]
            for f in shown
        ],
    )
    if len(shown) < len(flips):
        lines.append(f"\n{len(flips) - len(shown)} more flips in the JSON and HTML reports.")
    return lines


def _pred(value: int | None) -> str:
    return "(no answer)" if value is None else str(value)


def _config_details(c: ConfigComparison) -> list[str]:
    lines = [
        f"### {cell(c.config)}: {c.verdict.value}",
        "",
        f"`{c.line()}`",
        "",
        f"- baseline: {c.baseline.cell.label}; run `{c.baseline.run_id}` ({c.baseline.created})",
        f"- candidate: {c.candidate.cell.label}; run `{c.candidate.run_id}` "
        f"({c.candidate.created})",
        f"- noise: {_noise_text(c.noise)}",
    ]
    if c.excluded_errors:
        lines.append(f"- {c.excluded_errors} questions left out: a request failed in one run")
    if c.flips:
        lines += ["", *flips_table(c.flips)]
    return lines


def comparison_markdown(comparison: Comparison) -> str:
    s = comparison.settings
    failed = sum(c.gate_failed for c in comparison.configs)
    lines = [
        "## humming-matrix compare",
        "",
        f"**{'FAIL' if failed else 'PASS'}**: the gate fails for {failed} of "
        f"{plural(len(comparison.configs), 'config')} (regression: one-sided "
        f"exact McNemar p (Holm) < {s.alpha:g} and a drop of at least "
        f"{plural(100 * s.min_effect, 'point')}"
        "; or below the config's absolute threshold).",
        "",
        *table(
            [
                "config",
                "baseline % (95% CI)",
                "candidate % (95% CI)",
                "Δ points (95% CI)",
                "b / c",
                "mid-p",
                "MDE",
                "threshold",
                "verdict",
            ],
            [_compare_row(c) for c in comparison.configs],
        ),
    ]
    for c in comparison.configs:
        lines += ["", *_config_details(c)]
    return "\n".join(lines) + "\n"


def _compare_row(c: ConfigComparison) -> list[object]:
    gate = (
        f"{'pass' if c.candidate.passed_threshold else 'FAIL'} "
        f"({c.candidate.threshold:g} - {c.candidate.tolerance:g})"
    )
    return [
        c.config,
        accuracy_cell(c.baseline.accuracy, c.baseline.interval),
        accuracy_cell(c.candidate.accuracy, c.candidate.interval),
        *paired_cells(c),
        gate,
        c.verdict.value,
    ]


# --- the store report ------------------------------------------------------------------------


def _row_cells(row: Row) -> list[object]:
    c = row.comparison
    noise = ""
    if c is not None:
        if c.noise is not None:
            ratio = c.noise.discordance_ratio
            noise = "A/A 0 flips" if ratio is None else f"{ratio:.1f}x A/A"
    elif row.calibration is not None:
        cal = row.calibration
        noise = f"A/A {cal.discordant}/{cal.n} flips"
    verdict = row.status.value + (f": {row.note}" if row.note else "")
    return [
        ICONS[row.status],
        row.config,
        row.cell.humming or "?",
        row.session,
        accuracy_cell(row.accuracy, row.interval),
        *paired_cells(c),
        noise,
        verdict,
    ]


def _summary(report: StoreReport) -> list[str]:
    s = report.settings
    failing = len(report.failures)
    base = report.baseline.label if report.baseline else "none"
    return [
        "## humming-matrix report: GSM8K across humming-kernels versions",
        "",
        f"**{failing} failing** of {plural(len(report.rows), 'result')} "
        f"({plural(len(report.configs), 'config')} x "
        f"{plural(len(report.cells), 'environment')}) in `{report.store}`. Baseline: {base}. "
        f"Regression: one-sided exact McNemar p (Holm) < {s.alpha:g} and a drop of at least "
        f"{plural(100 * s.min_effect, 'point')}; accuracy in %, Δ in points, 95% intervals "
        "(Wilson; Newcombe paired); MDE: the drop the verdict catches with 80% power.",
        "",
        report.noise_floor_text(),
    ]


def _main_table(rows: Sequence[Row]) -> list[str]:
    return table(
        [
            "",
            "config",
            "humming-kernels",
            "session",
            "accuracy % (95% CI)",
            *PAIRED_COLUMNS,
            "noise",
            "verdict",
        ],
        [_row_cells(r) for r in rows],
    )


def _details(report: StoreReport, with_flips: bool) -> list[str]:
    lines: list[str] = []
    for row in report.rows:
        c = row.comparison
        if c is None or row.status in (RowStatus.NO_CHANGE, RowStatus.BASELINE):
            continue
        lines += [
            "",
            f"### {cell(row.config)} on {cell(row.cell.label)}: {row.status.value}",
            "",
            f"`{c.line()}`",
            "",
            f"- noise: {_noise_text(c.noise)}",
        ]
        if with_flips and c.flips:
            lines += ["", *flips_table(c.flips)]
    return ["", "## Details", *lines] if lines else []


def _baselines(report: StoreReport) -> list[str]:
    rows = []
    for name in report.configs:
        row = report.baseline_row(name)
        if row is not None:
            rec = row.record.record
            rows.append([name, rec.run_id, rec.created, row.session, row.record.path.name])
    if not rows:
        return []
    return [
        "",
        "## Baseline runs",
        "",
        *table(["config", "run", "created", "session", "file"], rows),
    ]


def _timings(report: StoreReport) -> list[str]:
    rows = sorted(report.rows, key=lambda r: (r.config, version_key(r.cell)))
    return ["", "## Run times", "", *table(list(TIMING_COLUMNS), [r.timing_cells() for r in rows])]


def _environments(report: StoreReport, with_packages: bool) -> list[str]:
    lines = ["", "## Environments", ""]
    lines += table(
        ["humming-kernels", *ENV_KEYS[1:]],
        [[_env(report.environments[c], k) for k in ENV_KEYS] for c in report.cells],
    )
    if not with_packages or report.baseline is None:
        return lines
    base_packages = _packages(report.environments[report.baseline])
    for c in report.cells:
        if c == report.baseline:
            continue
        diff = _package_diff(base_packages, _packages(report.environments[c]))
        if diff:
            lines += [
                "",
                f"<details><summary>{cell(c.label)}: {len(diff)} packages differ from "
                "the baseline</summary>",
                "",
                *table(["package", "baseline", "here"], diff),
                "",
                "</details>",
            ]
    return lines


def _env(env: Mapping[str, Any], key: str) -> str:
    value = env.get(key)
    return "" if value is None else str(value)


def _packages(env: Mapping[str, Any]) -> Mapping[str, str]:
    packages = env.get("packages")
    return {str(k): str(v) for k, v in packages.items()} if isinstance(packages, dict) else {}


def _package_diff(base: Mapping[str, str], here: Mapping[str, str]) -> list[list[object]]:
    names = sorted(set(base) | set(here))
    return [[n, base.get(n, "-"), here.get(n, "-")] for n in names if base.get(n) != here.get(n)]


def _capped(lines: list[str], cap: int | None) -> list[str]:
    """A table (header, rule, rows) cut to its first `cap` rows, saying how many were left out."""
    if cap is None or len(lines) - 2 <= cap:
        return lines
    dropped = len(lines) - 2 - cap
    return [
        *lines[: 2 + cap],
        "",
        f"{dropped} more rows (all passing or less severe) left out to stay under 1 MiB.",
    ]


# --- the kernel section ----------------------------------------------------------------------


def _kernel_icon(row: KernelRow) -> str:
    if row.failed:
        return "❌"
    return "⚠️" if row.slower else "✅"


def _kernel_summary(section: KernelSection) -> list[str]:
    base = section.baseline
    return [
        "## humming-matrix report: kernel tier across humming-kernels versions",
        "",
        f"**{len(section.failures)} failing** of {plural(len(section.rows), 'result')} "
        f"({plural(len(section.cases), 'case')} x {plural(len(section.versions), 'environment')})"
        f", {len(section.regressions)} of them regressions (`newly-broken` or `regressed` "
        f"against the baseline). Baseline: {base.cell.label}. Verdicts of the kernel judge per "
        "case and batch size (m), the worst first; a case out of tolerance, NaN/Inf, raised, hung "
        "or crashed in its own run fails whatever the verdict; `missing`: not run. Time verdicts "
        "inform only.",
    ]


def _kernel_table(rows: Sequence[KernelRow]) -> list[str]:
    return table(
        ["", "case", "humming-kernels", "session", "at the largest batch", "verdict", "detail"],
        [
            [
                _kernel_icon(r),
                r.case,
                r.version.label,
                r.version.newest.session,
                "not run" if r.cell is None else r.cell.text,
                r.verdict_text,
                r.detail(),
            ]
            for r in rows
        ],
    )


def _kernel_versions(section: KernelSection) -> list[str]:
    rows = []
    for version in section.versions:
        cells = version.cells
        rows.append(
            [version.label] + [cells[case].text if case in cells else "-" for case in section.cases]
        )
    return [
        "",
        "### Versions x cases: state and median time at the largest batch size",
        "",
        *table(["humming-kernels", *section.cases], rows),
    ]


def _kernel_section(section: KernelSection, details: bool, cap: int | None) -> list[str]:
    lines = ["", *_kernel_summary(section), "", *_capped(_kernel_table(section.rows), cap)]
    if details:
        lines += _kernel_versions(section)
    return lines


# --- the lm-eval section ---------------------------------------------------------------------


def _lm_eval_summary(section: LmEvalSection) -> list[str]:
    s = section.settings
    return [
        "## humming-matrix report: lm-eval across humming-kernels versions",
        "",
        f"**{len(section.failures)} failing** of {plural(len(section.rows), 'result')} "
        f"({plural(len(section.configs), 'config')} x "
        f"{plural(len(section.cells), 'environment')}). Baseline: {section.baseline.label}. "
        f"Regression: one-sided exact McNemar p (Holm) < {s.alpha:g} and a drop of at least "
        f"{plural(100 * s.min_effect, 'point')}; below threshold: lm-eval's pass rule, measured "
        ">= value * (1 - rtol). Accuracy: full credit on the paired documents, in %, 95% "
        "intervals (Wilson; Newcombe paired).",
    ]


def _lm_eval_cells(row: LmEvalRow) -> list[object]:
    accuracy = "" if row.score is None else accuracy_cell(row.score.accuracy, row.score.interval)
    verdict = row.status.value + (f": {row.note}" if row.note else "")
    return [
        ICONS[row.status],
        row.config,
        row.task,
        row.key,
        row.cell.humming or "?",
        row.session,
        accuracy,
        *paired_cells(row.comparison),
        row.backstop,
        verdict,
    ]


def _lm_eval_table(rows: Sequence[LmEvalRow]) -> list[str]:
    return table(["", *LM_EVAL_COLUMNS], [_lm_eval_cells(r) for r in rows])


def _lm_eval_details(section: LmEvalSection) -> list[str]:
    lines: list[str] = []
    for row in section.rows:
        m = row.comparison
        if m is None or row.status is RowStatus.NO_CHANGE:
            continue
        lines += [
            "",
            f"### {cell(row.name)} on {cell(row.cell.label)}: {row.status.value}",
            "",
            f"`{m.line()}`",
        ]
        if m.flips:
            docs = ", ".join(f"{f.doc_id} ({f.direction.value})" for f in m.flips[:FLIPS_SHOWN])
            more = f" and {len(m.flips) - FLIPS_SHOWN} more" if len(m.flips) > FLIPS_SHOWN else ""
            lines += ["", f"- flipped documents: {docs}{more}"]
    return lines


def _lm_eval_section(section: LmEvalSection, details: bool, cap: int | None) -> list[str]:
    lines = ["", *_lm_eval_summary(section), "", *_capped(_lm_eval_table(section.rows), cap)]
    if details:
        lines += _lm_eval_details(section)
    return lines


# --- the whole store -------------------------------------------------------------------------


def _compose(
    report: StoreReport, details: bool, flips: bool, packages: bool, cap: int | None = None
) -> str:
    """Every section; `cap` limits each table's rows and leaves out all else but the summaries."""
    lines: list[str] = []
    if report.rows:
        lines += [*_summary(report), "", *_capped(_main_table(report.rows), cap)]
        if details:
            lines += _details(report, flips)
        if cap is None:
            lines += [*_baselines(report), *_timings(report), *_environments(report, packages)]
    if report.kernels is not None:
        lines += _kernel_section(report.kernels, details, cap)
    if report.lm_eval is not None:
        lines += _lm_eval_section(report.lm_eval, details, cap)
    return "\n".join(lines).lstrip("\n") + "\n"


def store_markdown(report: StoreReport, max_bytes: int = MAX_BYTES) -> str:
    """The store report, cut down to `max_bytes` of UTF-8 by dropping, in order: package diffs,
    flip tables, the details sections (and the kernel versions x cases table), then rows from the
    bottom of each table (the passing ones)."""
    for details, flips, packages in ((1, 1, 1), (1, 1, 0), (1, 0, 0), (0, 0, 0)):
        text = _compose(report, bool(details), bool(flips), bool(packages))
        if len(text.encode()) <= max_bytes:
            return text
    # The most rows per table that fit: bisect on the cap (the size grows with it).
    sizes = [len(report.rows)]
    sizes += [len(report.kernels.rows)] if report.kernels else []
    sizes += [len(report.lm_eval.rows)] if report.lm_eval else []
    low, high = 0, max(sizes)
    while low < high:
        mid = (low + high + 1) // 2
        if len(_compose(report, False, False, False, mid).encode()) <= max_bytes:
            low = mid
        else:
            high = mid - 1
    return _compose(report, False, False, False, low)


# --- compare: lm-eval ---------------------------------------------------------------------


def short(text: str, limit: int = TARGET_SHOWN) -> str:
    """One line, at most `limit` characters, keeping the end (where GSM8K's `#### n` sits)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else "…" + flat[-(limit - 1) :]


def _row(m: MetricComparison) -> list[object]:
    return [
        m.config,
        m.task,
        m.key,
        accuracy_cell(m.baseline.accuracy, m.baseline.interval),
        accuracy_cell(m.candidate.accuracy, m.candidate.interval),
        *paired_cells(m),
        "not gated" if m.backstop is None else backstop_text(m.backstop),
        m.verdict.value,
    ]


def _flips_table(flips: Sequence[DocFlip]) -> list[str]:
    shown = flips[:FLIPS_SHOWN]
    lines = table(
        ["document", "target", "baseline", "candidate", "flip"],
        [
            [
                f.doc_id,
                short(f.target),
                short(f.baseline_prediction),
                short(f.candidate_prediction),
                f.direction.value,
            ]
            for f in shown
        ],
    )
    if len(shown) < len(flips):
        lines.append(f"\n{len(flips) - len(shown)} more flips in the JSON report.")
    return lines


def lm_eval_comparison_markdown(comparison: LmEvalComparison) -> str:
    s = comparison.settings
    metrics = comparison.metrics
    lines = [
        "## humming-matrix compare: lm-eval",
        "",
        f"**{'FAIL' if comparison.gate_failed else 'PASS'}**: the gate fails for "
        f"{comparison.failed} of {plural(comparison.judged, 'metric')} (regression: one-sided "
        f"exact McNemar p (Holm) < {s.alpha:g} and a drop of at least "
        f"{plural(100 * s.min_effect, 'point')}; or the candidate misses lm-eval's pass rule, "
        "measured >= value * (1 - rtol)).",
        "",
        *table(
            [
                "config",
                "task",
                "metric,filter",
                "baseline % (95% CI)",
                "candidate % (95% CI)",
                "Δ points (95% CI)",
                "b / c",
                "mid-p",
                "MDE",
                "backstop",
                "verdict",
            ],
            [_row(m) for m in metrics],
        ),
    ]
    unpaired = [(cfg.config, c) for cfg in comparison.configs for c in cfg.unpaired_checks]
    if unpaired:
        lines += [
            "",
            "Checked by the backstop only (no 0/1 outcome per document to pair):",
            "",
            *table(
                ["config", "task", "metric,filter", "backstop"],
                [[name, c.task, c.key, backstop_text(c)] for name, c in unpaired],
            ),
        ]
    for cfg in comparison.configs:
        for m in cfg.metrics:
            lines += [
                "",
                f"### {cell(m.name)}: {m.verdict.value}",
                "",
                f"`{m.line()}`",
                "",
                f"- baseline: {cfg.baseline.cell.label}; run `{cfg.baseline.run_id}` "
                f"({cfg.baseline.created})",
                f"- candidate: {cfg.candidate.cell.label}; run `{cfg.candidate.run_id}` "
                f"({cfg.candidate.created})",
            ]
            if m.flips:
                lines += ["", *_flips_table(m.flips)]
    return "\n".join(lines) + "\n"
