"""A self-contained HTML page: the results table, plots as inline SVG (accuracy per version with
error bars, and paired deltas against the baseline, one panel per config), and the flip lists.

No script, no font, no stylesheet or image from elsewhere: the page is read from a CI artifact,
often offline, and must look the same in ten years. Plots are drawn here in SVG rather than with a
plotting library, which would be a heavy dependency beside vLLM and torch for a few dozen points.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from humming_matrix.judge.compare import ConfigComparison, points
from humming_matrix.report.build import Row, RowStatus, StoreReport
from humming_matrix.report.kernels import KernelRow, KernelSection
from humming_matrix.report.lm_eval import LmEvalRow, LmEvalSection
from humming_matrix.report.markdown import ENV_KEYS, plural
from humming_matrix.report.rows import (
    LM_EVAL_COLUMNS,
    PAIRED_COLUMNS,
    TIMING_COLUMNS,
    accuracy_cell,
    paired_cells,
    pct,
    version_key,
)

COLORS = {
    RowStatus.REGRESSION: "#c62828",
    RowStatus.BELOW_THRESHOLD: "#c62828",
    RowStatus.INCOMPLETE: "#6a1b9a",
    RowStatus.START_FAILED: "#6a1b9a",
    RowStatus.NOT_COMPARED: "#6a1b9a",
    RowStatus.INCONCLUSIVE: "#ef6c00",
    RowStatus.IMPROVEMENT: "#2e7d32",
    RowStatus.NO_CHANGE: "#455a64",
    RowStatus.THRESHOLD_ONLY: "#455a64",
    RowStatus.BASELINE: "#1565c0",
}

CSS = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 28px; } h3 { font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
td.num { white-space: nowrap; }
td.verdict { white-space: normal; min-width: 12em; }
td.wrap { white-space: normal; min-width: 20em; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.failed td { background: #fdecea; }
tr.inconclusive td { background: #fff4e5; }
.panels { display: flex; flex-wrap: wrap; gap: 16px; }
.panel { border: 1px solid #ddd; padding: 8px; }
.status { font-weight: 600; }
code { font-size: 12px; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
svg text.title { font-weight: 600; font-size: 12px; }
details.flips { margin: 4px 0; }
"""

MIN_WIDTH, HEIGHT = 520, 330
SLOT = 30  # horizontal pixels per version, so labels never overlap
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 28, 94
TITLE_CHAR = 8.0  # upper bound of one character's width in the 12px title, so it never clips
LEGEND_Y = HEIGHT - 12
# A delta further than this many spreads (median absolute deviation, at least the minimum effect)
# from the others is drawn at the axis edge with its value, so it does not flatten the rest.
OUTLIER_SPREADS = 6.0


@dataclass(frozen=True)
class Mark:
    """One point with its interval, in data units (percent or points)."""

    label: str
    value: float
    low: float
    high: float
    color: str
    title: str


def e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    span = hi - lo
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = min(
        (m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), default=10 * magnitude
    )
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def svg_plot(
    kind: str,
    config: str,
    title: str,
    marks: Sequence[Mark],
    y_label: str,
    refs: Sequence[tuple[float, str, str]] = (),  # (y, label, dash pattern)
    band: tuple[float, float] | None = None,
    legend: Sequence[tuple[str, str]] = (),  # (status, colour) of the marks
    robust: bool = False,  # clip outliers to the axis edge (the delta plot)
) -> str:
    inliers = _inliers(marks, band) if robust else list(marks)
    values = [m.low for m in inliers] + [m.high for m in inliers] + [y for y, _, _ in refs]
    if band:
        values += list(band)
    lo, hi = min(values), max(values)
    pad = max((hi - lo) * 0.08, 0.5)
    lo, hi = lo - pad, hi + pad
    width = max(
        MIN_WIDTH,
        LEFT + RIGHT + SLOT * len(marks),
        math.ceil(LEFT + RIGHT + TITLE_CHAR * len(title)),
    )
    plot_w, plot_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def y(v: float) -> float:
        return TOP + (hi - min(max(v, lo), hi)) / (hi - lo) * plot_h

    def x(i: int) -> float:
        return LEFT + (i + 0.5) * plot_w / max(1, len(marks))

    out = [
        f'<svg class="plot {e(kind)}" data-config="{e(config)}" width="{width}" '
        f'height="{HEIGHT}" viewBox="0 0 {width} {HEIGHT}" role="img" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{e(title)}</title>',
        f'<text class="title" x="{LEFT}" y="16">{e(title)}</text>',
        f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" '
        'fill="#fafafa" stroke="#bbb"/>',
    ]
    if band:
        out.append(
            f'<rect class="band" x="{LEFT}" y="{y(band[1]):.1f}" width="{plot_w}" '
            f'height="{y(band[0]) - y(band[1]):.1f}" fill="#e0e0e0"><title>within the minimum '
            "effect</title></rect>"
        )
    for t in _ticks(lo, hi):
        out.append(
            f'<line x1="{LEFT - 4}" x2="{LEFT}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#888"/>'
        )
        out.append(f'<text x="{LEFT - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    out.append(
        f'<text transform="translate(14 {TOP + plot_h / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{e(y_label)}</text>'
    )
    for value, label, dash in refs:
        out.append(
            f'<line class="ref" x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(value):.1f}" '
            f'y2="{y(value):.1f}" stroke="#777" stroke-dasharray="{dash}"/>'
        )
        out.append(f'<text x="{LEFT + 4}" y="{y(value) - 4:.1f}">{e(label)}</text>')
    for i, m in enumerate(marks):
        cx = x(i)
        if m.value < lo or m.value > hi:
            # An outlier: its point sits on the axis edge, with its value written beside it.
            below = m.value < lo
            text_y = y(m.value) + (12 if below else -4)
            out.append(
                f'<text class="clipped" x="{cx + 7:.1f}" y="{text_y:.1f}"'
                f' fill="{m.color}">{"▼" if below else "▲"} {m.value:+.1f}</text>'
            )
        out.append(
            f'<g class="mark" data-label="{e(m.label)}"><title>{e(m.title)}</title>'
            f'<line class="errorbar" x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(m.high):.1f}" '
            f'y2="{y(m.low):.1f}" stroke="{m.color}" stroke-width="2"/>'
            f'<line x1="{cx - 5:.1f}" x2="{cx + 5:.1f}" y1="{y(m.high):.1f}" y2="{y(m.high):.1f}" '
            f'stroke="{m.color}" stroke-width="2"/>'
            f'<line x1="{cx - 5:.1f}" x2="{cx + 5:.1f}" y1="{y(m.low):.1f}" y2="{y(m.low):.1f}" '
            f'stroke="{m.color}" stroke-width="2"/>'
            f'<circle class="point" cx="{cx:.1f}" cy="{y(m.value):.1f}" r="4.5" '
            f'fill="{m.color}"/></g>'
        )
        out.append(
            f'<text transform="translate({cx:.1f} {TOP + plot_h + 12}) rotate(55)">'
            f"{e(m.label)}</text>"
        )
    out.append(_legend(legend, refs, band))
    out.append("</svg>")
    return "".join(out)


def _inliers(marks: Sequence[Mark], band: tuple[float, float] | None) -> list[Mark]:
    """The marks whose value lies within OUTLIER_SPREADS spreads of the median value."""
    if len(marks) < 3:
        return list(marks)
    values = sorted(m.value for m in marks)
    median = values[len(values) // 2]
    mad = sorted(abs(v - median) for v in values)[len(values) // 2]
    floor = (band[1] - band[0]) / 2 if band else 0.5
    limit = OUTLIER_SPREADS * max(mad, floor)
    kept = [m for m in marks if abs(m.value - median) <= limit]
    return kept or list(marks)


def _legend(
    legend: Sequence[tuple[str, str]],
    refs: Sequence[tuple[float, str, str]],
    band: tuple[float, float] | None,
) -> str:
    """Every plot says what its colours, lines and band mean, along its bottom edge."""
    items = []
    x = LEFT
    for status, color in legend:
        items.append(
            f'<g class="legend-item"><circle cx="{x + 4}" cy="{LEGEND_Y - 4}" r="4" '
            f'fill="{color}"/><text x="{x + 12}" y="{LEGEND_Y}">{e(status)}</text></g>'
        )
        x += 20 + int(6.5 * len(status))
    for _, label, dash in refs:
        items.append(
            f'<g class="legend-item"><line x1="{x}" x2="{x + 18}" y1="{LEGEND_Y - 4}" '
            f'y2="{LEGEND_Y - 4}" stroke="#777" stroke-dasharray="{dash}"/>'
            f'<text x="{x + 22}" y="{LEGEND_Y}">{e(label)}</text></g>'
        )
        x += 30 + int(6.5 * len(label))
    if band:
        items.append(
            f'<g class="legend-item"><rect x="{x}" y="{LEGEND_Y - 9}" width="14" height="10" '
            f'fill="#e0e0e0"/><text x="{x + 18}" y="{LEGEND_Y}">within ±min effect</text></g>'
        )
    return f'<g class="legend">{"".join(items)}</g>'


def _statuses(rows: Sequence[Row]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for r in rows:
        seen.setdefault(r.status.value, COLORS[r.status])
    return list(seen.items())


def _accuracy_plot(report: StoreReport, config: str) -> str:
    rows = sorted(
        (r for r in report.rows if r.config == config), key=lambda r: report.cells.index(r.cell)
    )
    marks = [
        Mark(
            _short(r),
            100 * r.accuracy,
            100 * r.interval.low,
            100 * r.interval.high,
            COLORS[r.status],
            f"{r.cell.label}: {pct(r.accuracy)}% [{pct(r.interval.low)}, "
            f"{pct(r.interval.high)}], {r.status.value}",
        )
        for r in rows
    ]
    m = rows[0].record.record.metrics
    refs = [
        (100 * (m.threshold - m.tolerance), f"vLLM gate {m.threshold:g} - {m.tolerance:g}", "6 4")
    ]
    return svg_plot(
        "accuracy",
        config,
        f"{config}: accuracy per version (95% Wilson)",
        marks,
        "accuracy %",
        refs,
        legend=_statuses(rows),
    )


def _delta_plot(report: StoreReport, config: str) -> str:
    rows = sorted(
        (r for r in report.rows if r.config == config and r.comparison is not None),
        key=lambda r: report.cells.index(r.cell),
    )
    if not rows:
        return ""
    marks = []
    for r in rows:
        c = r.comparison
        assert c is not None  # filtered above; narrows the type
        marks.append(
            Mark(
                _short(r),
                100 * c.difference,
                100 * c.difference_interval.low,
                100 * c.difference_interval.high,
                COLORS[r.status],
                f"{r.cell.label}: {points(c.difference)} points "
                f"[{points(c.difference_interval.low)}, "
                f"{points(c.difference_interval.high)}], b={c.table.right_to_wrong} "
                f"c={c.table.wrong_to_right}, {c.verdict.value}",
            )
        )
    me = 100 * report.settings.min_effect
    return svg_plot(
        "delta",
        config,
        f"{config}: paired Δ vs baseline (95% Newcombe)",
        marks,
        "Δ accuracy points",
        [(0.0, "no difference", "2 2")],
        band=(-me, me),
        legend=_statuses(rows),
        robust=True,
    )


def _short(row: Row) -> str:
    return row.cell.humming or "?"


def _main_table(report: StoreReport) -> str:
    head = [
        "config",
        "humming-kernels",
        "session",
        "accuracy % (95% CI)",
        *PAIRED_COLUMNS,
        "vs A/A noise",
        "verdict",
    ]
    out = [
        '<table id="results"><thead><tr>',
        *(f"<th>{e(h)}</th>" for h in head),
        "</tr></thead><tbody>",
    ]
    for r in report.rows:
        c = r.comparison
        cls = "failed" if r.status.failed else r.status.name.lower()
        cells = [
            e(r.config),
            e(r.cell.humming or "?"),
            e(r.session),
            accuracy_cell(r.accuracy, r.interval),
            *paired_cells(c),
        ]
        if c is not None:
            cells.append(_noise_cell(c))
        else:
            cal = r.calibration
            cells.append("" if cal is None else f"A/A {cal.discordant}/{cal.n} flips")
        verdict = e(r.status.value) + (f": {e(r.note)}" if r.note else "")
        cells.append(f'<span class="status" style="color:{COLORS[r.status]}">{verdict}</span>')
        out.append(
            f'<tr class="{cls}">'
            + "".join(
                f'<td class="{_column_class(i, len(cells))}">{v}</td>' for i, v in enumerate(cells)
            )
            + "</tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _column_class(index: int, count: int) -> str:
    if index == count - 1:
        return "verdict"
    return "num" if 3 <= index <= 8 else "text"


def _noise_cell(c: ConfigComparison) -> str:
    if c.noise is None:
        return ""
    ratio = c.noise.discordance_ratio
    return "A/A: 0 flips" if ratio is None else f"{ratio:.1f}x"


def _flip_lists(report: StoreReport) -> str:
    out = []
    for r in report.rows:
        c = r.comparison
        if c is None or not c.flips:
            continue
        # Collapsed, failures too: a long list would make the page thousands of pixels tall.
        out.append(
            f'<details class="flips" data-config="{e(r.config)}" data-version="{e(_short(r))}"'
            f"><summary>{e(r.config)} on {e(r.cell.label)}: {len(c.flips)} flipped "
            f"({c.table.right_to_wrong} right→wrong, {c.table.wrong_to_right} wrong→right)"
            "</summary><table><thead><tr><th>question</th><th>label</th><th>baseline</th>"
            "<th>candidate</th><th>flip</th></tr></thead><tbody>"
        )
        for f in c.flips:
            out.append(
                f'<tr data-index="{f.index}"><td class="num">{f.index}</td>'
                f'<td class="num">{f.label}</td><td class="num">{_pred(f.baseline_prediction)}'
                f'</td><td class="num">{_pred(f.candidate_prediction)}</td>'
                f"<td>{e(f.direction.value)}</td></tr>"
            )
        out.append("</tbody></table></details>")
    return "".join(out) or "<p>No question flipped in any comparison.</p>"


def _pred(value: int | None) -> str:
    return "(no answer)" if value is None else str(value)


def _environments(report: StoreReport) -> str:
    out = [
        '<table id="environments"><thead><tr>',
        *(f"<th>{e(k)}</th>" for k in ENV_KEYS),
        "</tr></thead><tbody>",
    ]
    for cell in report.cells:
        env = report.environments[cell]
        out.append(
            "<tr>"
            + "".join(f"<td>{e('' if env.get(k) is None else env.get(k))}</td>" for k in ENV_KEYS)
            + "</tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _baselines(report: StoreReport) -> str:
    rows = []
    for name in report.configs:
        row = report.baseline_row(name)
        if row is not None:
            rec = row.record.record
            rows.append(
                f"<tr><td>{e(name)}</td><td><code>{e(rec.run_id)}</code></td>"
                f"<td>{e(rec.created)}</td><td>{e(row.session)}</td></tr>"
            )
    if not rows:
        return "<p>No baseline run.</p>"
    return (
        '<table id="baselines"><thead><tr><th>config</th><th>run</th><th>created</th>'
        "<th>session</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _timings(report: StoreReport) -> str:
    rows = sorted(report.rows, key=lambda r: (r.config, version_key(r.cell)))
    return _table(
        "timings", list(TIMING_COLUMNS), [("", [e(c) for c in r.timing_cells()]) for r in rows]
    )


def _table(table_id: str, head: list[str], rows: list[tuple[str, list[str]]]) -> str:
    """A table of (row class, cell HTML) rows."""
    out = [
        f'<table id="{table_id}"><thead><tr>',
        *(f"<th>{e(h)}</th>" for h in head),
        "</tr></thead><tbody>",
    ]
    for cls, cells in rows:
        # The last column (a verdict with its reasons) wraps; the rest stay one line each.
        tds = [f"<td>{c}</td>" for c in cells[:-1]]
        tds += [f'<td class="wrap">{c}</td>' for c in cells[-1:]]
        out.append(f'<tr class="{cls}">' + "".join(tds) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _kernel_color(row: KernelRow) -> str:
    if row.regression or row.broken:
        return COLORS[RowStatus.REGRESSION]
    if row.unjudged:
        return COLORS[RowStatus.INCOMPLETE]
    return COLORS[RowStatus.BASELINE if row.verdict is None else RowStatus.NO_CHANGE]


def _kernel_rows(section: KernelSection) -> str:
    rows = []
    for r in section.rows:
        cls = "failed" if r.failed else "inconclusive" if r.slower else "passed"
        color = _kernel_color(r)
        verdict = f'<span class="status" style="color:{color}">{e(r.verdict_text)}</span>'
        rows.append(
            (
                cls,
                [
                    e(r.case),
                    e(r.version.label),
                    e(r.version.newest.session),
                    e("not run" if r.cell is None else r.cell.text),
                    verdict,
                    e(r.detail()),
                ],
            )
        )
    return _table(
        "kernel-results",
        ["case", "humming-kernels", "session", "at the largest batch", "verdict", "detail"],
        rows,
    )


def _kernel_versions(section: KernelSection) -> str:
    rows = []
    for v in section.versions:
        cells = [e(v.label)] + [e(v.cells[c].text) if c in v.cells else "-" for c in section.cases]
        rows.append(("complete" if v.complete else "partial", cells))
    return _table("kernel-versions", ["humming-kernels", *section.cases], rows)


def _kernel_html(section: KernelSection) -> list[str]:
    return [
        "<h2>Kernel tier</h2>",
        f'<p id="kernel-summary"><strong>{len(section.failures)} failing</strong> of '
        f"{plural(len(section.rows), 'result')} ({plural(len(section.cases), 'case')} × "
        f"{plural(len(section.versions), 'environment')}), {len(section.regressions)} of them "
        f"regressions against the baseline, {e(section.baseline.cell.label)}. Verdicts of the "
        "kernel judge per case and batch size (m), the worst first; a case out of tolerance, "
        "NaN/Inf, raised, hung or crashed in its own run fails whatever the verdict. Time "
        "verdicts inform only.</p>",
        _kernel_rows(section),
        "<h3>Versions × cases: state and median time at the largest batch size</h3>",
        _kernel_versions(section),
    ]


def _lm_eval_rows(section: LmEvalSection) -> str:
    rows = []
    for r in section.rows:
        cls = "failed" if r.status.failed else r.status.name.lower()
        rows.append((cls, _lm_eval_cells(r)))
    return _table("lm-eval-results", list(LM_EVAL_COLUMNS), rows)


def _lm_eval_cells(r: LmEvalRow) -> list[str]:
    score = "" if r.score is None else accuracy_cell(r.score.accuracy, r.score.interval)
    verdict = e(r.status.value) + (f": {e(r.note)}" if r.note else "")
    return [
        e(r.config),
        e(r.task),
        e(r.key),
        e(r.cell.humming or "?"),
        e(r.session),
        score,
        *paired_cells(r.comparison),
        e(r.backstop),
        f'<span class="status" style="color:{COLORS[r.status]}">{verdict}</span>',
    ]


def _lm_eval_html(section: LmEvalSection) -> list[str]:
    s = section.settings
    return [
        "<h2>lm-eval</h2>",
        f'<p id="lm-eval-summary"><strong>{len(section.failures)} failing</strong> of '
        f"{plural(len(section.rows), 'result')} ({plural(len(section.configs), 'config')} × "
        f"{plural(len(section.cells), 'environment')}). Baseline: {e(section.baseline.label)}. "
        f"Regression: one-sided exact McNemar p (Holm) &lt; {s.alpha:g} and a drop of at least "
        f"{plural(100 * s.min_effect, 'point')}; below threshold: lm-eval's pass rule, measured "
        "&gt;= value × (1 - rtol).</p>",
        _lm_eval_rows(section),
    ]


def _gsm8k_html(report: StoreReport) -> list[str]:
    s = report.settings
    base = report.baseline.label if report.baseline else "none"
    panels = []
    for config in report.configs:
        panels.append(f'<div class="panel">{_accuracy_plot(report, config)}</div>')
        delta = _delta_plot(report, config)
        if delta:
            panels.append(f'<div class="panel">{delta}</div>')
    return [
        f'<p id="summary"><strong>{len(report.failures)} failing</strong> '
        f"of {plural(len(report.rows), 'result')} ({plural(len(report.configs), 'config')} × "
        f"{plural(len(report.cells), 'environment')}) in <code>{e(report.store)}</code>. "
        f"Baseline: {e(base)}. Regression: one-sided exact McNemar p (Holm) &lt; {s.alpha:g} and a "
        f"drop of at least {plural(100 * s.min_effect, 'point')}. "
        "Accuracy in %, Δ in points, 95% intervals (Wilson; Newcombe paired). MDE: the "
        "drop the verdict catches with 80% power.</p>",
        f'<p id="noise-floor">{e(report.noise_floor_text())}</p>',
        "<h2>Results</h2>",
        _main_table(report),
        '<h2>Plots</h2><div class="panels">',
        *panels,
        "</div>",
        "<h2>Flipped questions</h2>",
        _flip_lists(report),
        "<h2>Baseline runs</h2>",
        _baselines(report),
        "<h2>Run times</h2>",
        _timings(report),
        "<h2>Environments</h2>",
        _environments(report),
    ]


def store_html(report: StoreReport) -> str:
    kinds = [
        kind
        for kind, present in (
            ("GSM8K", bool(report.rows)),
            ("kernels", report.kernels is not None),
            ("lm-eval", report.lm_eval is not None),
        )
        if present
    ]
    body = [
        "<h1>humming-matrix report: " + " · ".join(kinds) + " across humming-kernels versions</h1>"
    ]
    if report.rows:
        body += _gsm8k_html(report)
    if report.kernels is not None:
        body += _kernel_html(report.kernels)
    if report.lm_eval is not None:
        body += _lm_eval_html(report.lm_eval)
    return "".join(
        [
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
            "<title>humming-matrix report</title>",
            f"<style>{CSS}</style></head><body>",
            *body,
            "</body></html>\n",
        ]
    )
