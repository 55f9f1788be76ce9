"""JUnit XML: one testcase per (cell, config), in the shape pytest writes with
`junit_family=xunit1` (the family that allows per-testcase properties, which Buildkite Test Engine,
GitLab and Jenkins all read). A regression or a missed threshold is a <failure>; a run that
cannot be judged (incomplete, not comparable) is an <error>, as pytest reports a broken fixture.
"""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from datetime import datetime, timezone

from humming_matrix.report import Row, RowStatus, StoreReport

FAILURES = (RowStatus.REGRESSION, RowStatus.BELOW_THRESHOLD)
ERRORS = (RowStatus.INCOMPLETE, RowStatus.NOT_COMPARED)


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


def store_junit(report: StoreReport, now: datetime | None = None, host: str | None = None) -> str:
    failures = sum(r.status in FAILURES for r in report.rows)
    errors = sum(r.status in ERRORS for r in report.rows)
    total_time = sum(r.record.record.metrics.duration for r in report.rows)
    root = ET.Element("testsuites", name="humming-matrix")
    suite = ET.SubElement(
        root,
        "testsuite",
        name="humming-matrix",
        errors=str(errors),
        failures=str(failures),
        skipped="0",
        tests=str(len(report.rows)),
        time=f"{total_time:.3f}",
        timestamp=(now or datetime.now(timezone.utc)).isoformat(),
        hostname=host or socket.gethostname(),
    )
    for row in report.rows:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=row.session,
            name=row.config,
            time=f"{row.record.record.metrics.duration:.3f}",
        )
        props = ET.SubElement(case, "properties")
        for name, value in _properties(row):
            ET.SubElement(props, "property", name=name, value=value)
        if row.status in FAILURES or row.status in ERRORS:
            tag = "failure" if row.status in FAILURES else "error"
            message = _message(row)
            body = message
            if row.comparison is not None and row.comparison.flips:
                body += "\nflipped questions (index: baseline -> candidate, label):\n" + "\n".join(
                    f"  {f.index}: {f.baseline_prediction} -> {f.candidate_prediction} "
                    f"(label {f.label})"
                    for f in row.comparison.flips
                )
            ET.SubElement(case, tag, message=message).text = body
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
