"""JUnit XML: one testcase per (cell, GSM8K config), per (cell, kernel case) and per (cell,
lm-eval config/task/metric), in the shape pytest writes with `junit_family=xunit1` (the family that
allows per-testcase properties, which Buildkite Test Engine, GitLab and Jenkins all read), all in
one testsuite. A regression, a missed threshold or a kernel case broken in its own run is a
<failure>; a result that cannot be judged (incomplete, not comparable, a kernel case not run) is
an <error>, as pytest reports a broken fixture; an inconclusive comparison (a change big enough to
matter that the questions cannot tell from noise) is <skipped> with the verdict line as its
reason, so a test dashboard (Buildkite Test Engine) never counts it as a pass. The failure
message is the verdict line.
"""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime, timezone

from humming_matrix.report.build import Row, RowStatus, StoreReport
from humming_matrix.report.kernels import KernelRow
from humming_matrix.report.lm_eval import LmEvalRow
from humming_matrix.store.lm_eval import CheckState

FAILURES = (RowStatus.REGRESSION, RowStatus.BELOW_THRESHOLD)
# A server that never became ready says something about the release only next to a neighbour
# that started in the same environment (a bisect's judgement); alone it cannot be judged.
ERRORS = (RowStatus.START_FAILED, RowStatus.INCOMPLETE, RowStatus.NOT_COMPARED)
SKIPPED = (RowStatus.INCONCLUSIVE,)


def _outcome(status: RowStatus) -> str | None:
    if status in FAILURES:
        return "failure"
    if status in ERRORS:
        return "error"
    return "skipped" if status in SKIPPED else None


def _properties(row: Row) -> list[tuple[str, str]]:
    rec = row.record.record
    props = [
        ("config", row.config),
        ("environment", row.cell.label),
        ("humming_kernels", row.cell.humming or ""),
        ("vllm", row.cell.vllm or ""),
        ("torch", row.cell.torch or ""),
        ("run_id", rec.run_id),
        ("created", rec.created),
        ("record", str(row.record.path)),
        ("status", row.status.value),
        ("accuracy", repr(row.accuracy)),
        ("accuracy_ci_low", repr(row.interval.low)),
        ("accuracy_ci_high", repr(row.interval.high)),
        ("questions", str(row.n)),
        ("threshold", repr(rec.metrics.threshold)),
        ("tolerance", repr(rec.metrics.tolerance)),
        ("passed_threshold", str(rec.metrics.passed).lower()),
    ]
    c = row.comparison
    if c is not None:
        props += [
            ("baseline_run_id", c.baseline.run_id),
            ("difference", repr(c.difference)),
            ("difference_ci_low", repr(c.difference_interval.low)),
            ("difference_ci_high", repr(c.difference_interval.high)),
            ("b_right_to_wrong", str(c.table.right_to_wrong)),
            ("c_wrong_to_right", str(c.table.wrong_to_right)),
            ("midp_regression", repr(c.p_regression)),
            ("midp_improvement", repr(c.p_improvement)),
            ("minimum_detectable_effect", "" if c.mde is None else repr(c.mde)),
            ("verdict", c.verdict.value),
            ("flipped_questions", " ".join(str(f.index) for f in c.flips)),
        ]
        if c.noise is not None:
            props += [
                ("aa_discordant", str(c.noise.calibration.discordant)),
                ("aa_questions", str(c.noise.calibration.n)),
                ("p_beyond_noise", repr(c.noise.p_beyond_noise)),
            ]
    return props


def _message(row: Row) -> str:
    if row.comparison is not None:
        return row.comparison.line()
    if row.note:
        return f"{row.config}: {row.status.value}: {row.note}"
    m = row.record.record.metrics
    return (
        f"{row.config}: {row.status.value}: accuracy {m.accuracy:.4f} < "
        f"{m.threshold:g} - {m.tolerance:g}"
    )


def _kernel_properties(row: KernelRow) -> list[tuple[str, str]]:
    run = row.version.newest
    cell = row.cell
    props = [
        ("kind", "kernels"),
        ("case", row.case),
        ("environment", row.version.cell.label),
        ("humming_kernels", row.version.cell.humming or ""),
        ("torch", row.version.cell.torch or ""),
        ("run_id", str(run.record["run_id"])),
        ("created", str(run.record.get("created", ""))),
        ("record", str(run.path)),
        ("complete", str(row.version.complete).lower()),
        ("runs", str(len(row.version.runs))),
        ("state", "not run" if cell is None else cell.state.value),
        ("largest_batch", "" if cell is None or cell.m is None else str(cell.m)),
        ("median_ms", "" if cell is None or cell.median_ms is None else repr(cell.median_ms)),
        ("verdict", row.verdict_text),
        ("baseline", row.baseline),
    ]
    for v in row.verdicts:
        where = "case" if v.m is None else f"m{v.m}"
        props += [(f"{where}_verdict", v.verdict.value), (f"{where}_time", v.time.value)]
        if v.delta_rel_err is not None:
            props += [
                (f"{where}_delta_rel_err", repr(v.delta_rel_err)),
                (f"{where}_noise_rel_err", repr(v.noise_rel_err)),
            ]
        if v.time_ratio is not None:
            props.append((f"{where}_time_ratio", repr(v.time_ratio)))
    return props


def _lm_eval_properties(row: LmEvalRow) -> list[tuple[str, str]]:
    rec = row.record.record
    props = [
        ("kind", "lm-eval"),
        ("config", row.config),
        ("task", row.task),
        ("metric", row.key),
        ("environment", row.cell.label),
        ("humming_kernels", row.cell.humming or ""),
        ("run_id", rec.run_id),
        ("created", rec.created),
        ("record", str(row.record.path)),
        ("status", row.status.value),
    ]
    if row.score is not None:
        props += [
            ("accuracy", repr(row.score.accuracy)),
            ("accuracy_ci_low", repr(row.score.interval.low)),
            ("accuracy_ci_high", repr(row.score.interval.high)),
            ("documents", str(row.score.n)),
        ]
    if row.check is not None:
        props += [
            ("measured", "" if row.check.measured is None else repr(row.check.measured)),
            ("expected", repr(row.check.expected)),
            ("rtol", repr(row.check.rtol)),
            ("passed_threshold", str(row.check.verdict is CheckState.PASSED).lower()),
        ]
    m = row.comparison
    if m is not None:
        props += [
            ("baseline_run_id", row.baseline_run_id or ""),
            ("difference", repr(m.difference)),
            ("difference_ci_low", repr(m.difference_interval.low)),
            ("difference_ci_high", repr(m.difference_interval.high)),
            ("b_right_to_wrong", str(m.table.right_to_wrong)),
            ("c_wrong_to_right", str(m.table.wrong_to_right)),
            ("midp_regression", repr(m.p_regression)),
            ("midp_improvement", repr(m.p_improvement)),
            ("minimum_detectable_effect", "" if m.mde is None else repr(m.mde)),
            ("verdict", m.verdict.value),
            ("flipped_documents", " ".join(str(f.doc_id) for f in m.flips)),
        ]
    return props


@dataclass(frozen=True)
class _Case:
    """One testcase, whatever the kind of record behind it."""

    classname: str
    name: str
    time: float
    properties: list[tuple[str, str]]
    outcome: str | None  # "failure", "error", "skipped" or None (a pass)
    message: str
    body: str


def _gsm8k_case(row: Row) -> _Case:
    outcome = _outcome(row.status)
    message = _message(row)
    body = message
    if row.comparison is not None and row.comparison.flips:
        body += "\nflipped questions (index: baseline -> candidate, label):\n" + "\n".join(
            f"  {f.index}: {f.baseline_prediction} -> {f.candidate_prediction} (label {f.label})"
            for f in row.comparison.flips
        )
    return _Case(
        row.session,
        row.config,
        row.record.record.metrics.duration,
        _properties(row),
        outcome,
        message,
        body,
    )


def _kernel_case(row: KernelRow) -> _Case:
    outcome = "error" if row.unjudged else "failure" if row.failed else None
    message = row.line()
    return _Case(
        row.version.newest.session,
        row.case,
        0.0,
        _kernel_properties(row),
        outcome,
        message,
        message,
    )


def _lm_eval_case(row: LmEvalRow) -> _Case:
    outcome = _outcome(row.status)
    message = row.line()
    body = message
    m = row.comparison
    if m is not None and m.flips:
        body += "\nflipped documents (doc_id: baseline -> candidate):\n" + "\n".join(
            f"  {f.doc_id}: {f.baseline_prediction!r} -> {f.candidate_prediction!r}"
            for f in m.flips
        )
    return _Case(row.session, row.name, 0.0, _lm_eval_properties(row), outcome, message, body)


def store_junit(report: StoreReport, now: datetime | None = None, host: str | None = None) -> str:
    cases = [_gsm8k_case(r) for r in report.rows]
    if report.kernels is not None:
        cases += [_kernel_case(r) for r in report.kernels.rows]
    if report.lm_eval is not None:
        cases += [_lm_eval_case(r) for r in report.lm_eval.rows]
    root = ET.Element("testsuites", name="humming-matrix")
    suite = ET.SubElement(
        root,
        "testsuite",
        name="humming-matrix",
        errors=str(sum(c.outcome == "error" for c in cases)),
        failures=str(sum(c.outcome == "failure" for c in cases)),
        skipped=str(sum(c.outcome == "skipped" for c in cases)),
        tests=str(len(cases)),
        time=f"{sum(c.time for c in cases):.3f}",
        timestamp=(now or datetime.now(timezone.utc)).isoformat(),
        hostname=host or socket.gethostname(),
    )
    for c in cases:
        case = ET.SubElement(
            suite, "testcase", classname=c.classname, name=c.name, time=f"{c.time:.3f}"
        )
        props = ET.SubElement(case, "properties")
        for name, value in c.properties:
            ET.SubElement(props, "property", name=name, value=value)
        if c.outcome == "skipped":
            ET.SubElement(case, "skipped", type="inconclusive", message=c.message).text = c.body
        elif c.outcome is not None:
            ET.SubElement(case, c.outcome, message=c.message).text = c.body
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
