"""JUnit XML, parsed back and checked against the XML pytest itself writes (junit_family=xunit1):
every element we emit must sit where pytest puts it, with attributes pytest uses."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import pytest

from humming_matrix.judge.compare import Settings
from humming_matrix.report.build import build_report
from humming_matrix.report.junit import store_junit
from humming_matrix.store.results import write_record

from .test_compare import make_record
from .test_report import build_store

PYTEST_SAMPLE = """
import pytest

def test_pass(record_property):
    record_property("accuracy", 0.5)

def test_fail(record_property):
    record_property("b", 3)
    assert 0, "bad"

@pytest.fixture
def broken():
    raise RuntimeError("setup")

def test_error(broken):
    pass

def test_skip():
    pytest.skip("inconclusive")
"""

# Attributes pytest always writes, which consumers rely on; `file` and `line` point at test
# source and have no meaning for a measured result.
REQUIRED = {
    "testsuite": {
        "name",
        "errors",
        "failures",
        "skipped",
        "tests",
        "time",
        "timestamp",
        "hostname",
    },
    "testcase": {"classname", "name", "time"},
    "property": {"name", "value"},
    "failure": {"message"},
    "error": {"message"},
    "skipped": {"type", "message"},
}


def shape(root: ET.Element) -> dict[str, set[str]]:
    """Element path (tags from the root) -> the attribute names seen there."""
    seen: dict[str, set[str]] = defaultdict(set)

    def walk(element: ET.Element, prefix: str) -> None:
        path = f"{prefix}/{element.tag}"
        seen[path] |= set(element.attrib)
        for child in element:
            walk(child, path)

    walk(root, "")
    return seen


@pytest.fixture(scope="module")
def pytest_shape(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    work = tmp_path_factory.mktemp("pytest-junit")
    (work / "test_sample.py").write_text(PYTEST_SAMPLE)
    (work / "pytest.ini").write_text("[pytest]\n")
    out = work / "out.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "junit_family=xunit1",
            f"--junitxml={out}",
            "test_sample.py",
        ],
        cwd=work,
        capture_output=True,
        check=False,
        timeout=120,
    )
    return shape(ET.parse(out).getroot())


def build_store_with_inconclusive(directory: Path) -> Path:
    """The unit report store plus alpha on 0.1.9, three questions worse: 1.5 points, but an
    exact p of 1/8, so inconclusive."""
    build_store(directory)
    write_record(
        directory,
        make_record(wrong=[*range(5), 150, 151, 152], n=200, config="alpha", version="0.1.9"),
    )
    return directory


def junit_root(tmp_path: Path) -> ET.Element:
    report = build_report(build_store_with_inconclusive(tmp_path / "store"), Settings())
    text = store_junit(report, now=datetime(2026, 12, 2, tzinfo=timezone.utc), host="ci-1")
    return ET.fromstring(text)


def test_structure_matches_what_pytest_writes(
    tmp_path: Path, pytest_shape: dict[str, set[str]]
) -> None:
    ours = shape(junit_root(tmp_path))
    for path, attributes in ours.items():
        assert path in pytest_shape, f"pytest never writes {path}"
        assert attributes <= pytest_shape[path], (path, attributes - pytest_shape[path])
        tag = path.rsplit("/", 1)[1]
        assert REQUIRED.get(tag, set()) <= attributes, (path, REQUIRED[tag] - attributes)
    assert set(ours) == {
        "/testsuites",
        "/testsuites/testsuite",
        "/testsuites/testsuite/testcase",
        "/testsuites/testsuite/testcase/properties",
        "/testsuites/testsuite/testcase/properties/property",
        "/testsuites/testsuite/testcase/failure",
        "/testsuites/testsuite/testcase/error",
        "/testsuites/testsuite/testcase/skipped",
    }


def test_one_testcase_per_cell_and_config(tmp_path: Path) -> None:
    root = junit_root(tmp_path)
    [suite] = root
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("humming-0.1.10", "alpha"),
        ("humming-0.1.7", "beta"),
        ("humming-0.1.12", "alpha"),
        ("humming-0.1.10", "beta"),
        ("humming-0.1.9", "alpha"),
        ("humming-0.1.7", "alpha"),
        ("humming-0.1.6", "alpha"),
        ("humming-0.1.6", "beta"),
    ]
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == ("8", "2", "2", "1")
    assert (suite.get("timestamp"), suite.get("hostname")) == ("2026-12-02T00:00:00+00:00", "ci-1")
    assert [len(c.findall("failure")) for c in cases] == [1, 1, 0, 0, 0, 0, 0, 0]
    assert [len(c.findall("error")) for c in cases] == [0, 0, 1, 1, 0, 0, 0, 0]
    # Inconclusive is not a pass: skipped, with the verdict line as the reason.
    [skipped] = cases[4].findall("skipped")
    assert skipped.get("type") == "inconclusive"
    assert skipped.get("message", "").startswith("alpha: inconclusive (could miss a drop of ")
    assert "b=3 c=0" in skipped.get("message", "")
    assert [len(c.findall("skipped")) for c in cases] == [0, 0, 0, 0, 1, 0, 0, 0]


def test_properties_carry_the_measured_values(tmp_path: Path) -> None:
    report = build_report(build_store(tmp_path / "store"), Settings())
    [suite] = ET.fromstring(store_junit(report))
    regression = suite.findall("testcase")[0]
    props = {p.get("name"): p.get("value") for p in regression.iter("property")}
    comparison = report.rows[0].comparison
    assert comparison is not None
    assert float(props["accuracy"] or "") == 185 / 200
    assert float(props["difference"] or "") == -10 / 200
    assert float(props["difference_ci_low"] or "") == comparison.difference_interval.low
    assert (props["b_right_to_wrong"], props["c_wrong_to_right"]) == ("10", "0")
    assert float(props["midp_regression"] or "") == 0.5**11
    assert props["verdict"] == "regression"
    assert props["flipped_questions"] == " ".join(str(i) for i in range(100, 110))
    assert props["baseline_run_id"] == comparison.baseline.run_id
    failure = regression.find("failure")
    assert failure is not None
    assert failure.get("message") == comparison.line()
    assert "  100: 110 -> 111 (label 110)" in (failure.text or "")
    incomplete = suite.findall("testcase")[2].find("error")
    assert incomplete is not None
    assert incomplete.get("message", "").startswith("alpha: incomplete: run ")
