"""`report` over a store of every kind of record: GSM8K records from real runs (see
test_compare_runs), lm-eval records from real lm-eval runs (the planted outcomes of
test_compare_lm_eval), and real H200 kernel records (results/h200). The Markdown and JUnit of the
lm-eval section are checked row by row; the HTML page is rendered in a real headless Chromium,
driven over WebDriver (chromedriver from Debian's chromium-driver) with plain HTTP: the page is
loaded from a file, the plots and tables are measured as laid out, and a screenshot is kept in
the test's tmp dir.

Without chromium the browser test skips, except under CI=true, where a missing browser is a
broken CI image and fails.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from humming_matrix.judge.compare import Settings
from humming_matrix.report.build import RowStatus, build_report
from humming_matrix.report.html import store_html
from humming_matrix.store.results import write_record
from humming_matrix.suite.server import free_port
from tests.unit.test_compare import make_record

from .runner_harness import cli
from .test_compare_lm_eval import STRICT_FLIPS
from .test_compare_runs import WRONG_BEFORE_0_1_10, WRONG_FROM_0_1_10
from .test_lm_eval import FLEXIBLE, STRICT

H200 = Path(__file__).resolve().parents[2] / "results" / "h200" / "gen1"
KERNEL_VERSIONS = ("0.1.0", "0.1.8", "0.1.12")

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,1800",
]

MEASURE = """
const box = e => { const b = e.getBoundingClientRect(); return [b.x, b.y, b.width, b.height]; };
return {
  title: document.title,
  fetched: performance.getEntriesByType('resource').map(e => e.name),
  plots: [...document.querySelectorAll('svg.plot')].map(s => ({
    kind: s.classList[1], config: s.dataset.config, box: box(s),
    points: [...s.querySelectorAll('g.mark')].map(g => ({
      label: g.dataset.label, point: box(g.querySelector('circle.point')),
      bar: box(g.querySelector('line.errorbar'))})),
  })),
  rows: [...document.querySelectorAll('#results tbody tr')].map(tr => ({
    height: tr.getBoundingClientRect().height, cells: [...tr.cells].map(td => td.innerText)})),
  open: document.querySelectorAll('details[open]').length,
  flips: [...document.querySelectorAll('details.flips tr[data-index]')].map(tr => ({
    index: Number(tr.dataset.index), height: tr.getBoundingClientRect().height})),
  tables: Object.fromEntries(['kernel-results', 'kernel-versions', 'lm-eval-results'].map(id => [
    id, [...document.querySelectorAll(`#${id} tbody tr`)].map(tr => ({
      height: tr.getBoundingClientRect().height, cells: [...tr.cells].map(td => td.innerText)}))])),
};
"""


@pytest.fixture(scope="module")
def browser() -> tuple[str, str]:
    """(chromium, chromedriver), looked up before any run is spent on the page."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    reason = (
        "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must install them (.ci/run)")
    pytest.skip(reason)


@contextmanager
def webdriver_session(
    chromium: str, driver: str, profile: Path
) -> Iterator[tuple[httpx.Client, str]]:
    """chromedriver on a free local port and one browser session; both always torn down."""
    port = free_port()
    proc = subprocess.Popen(
        [driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if http.get("/status").json()["value"]["ready"]:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError("chromedriver did not become ready in 30 s")
                time.sleep(0.1)
            options = {"binary": chromium, "args": [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]}
            created = http.post(
                "/session",
                json={
                    "capabilities": {
                        "alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}
                    }
                },
            )
            assert created.status_code == 200, created.text
            session = created.json()["value"]["sessionId"]
            try:
                yield http, f"/session/{session}"
            finally:
                http.delete(f"/session/{session}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def call(http: httpx.Client, path: str, body: dict[str, Any] | None = None) -> Any:
    response = http.post(path, json=body or {}) if body is not None else http.get(path)
    assert response.status_code == 200, response.text
    return response.json()["value"]


@pytest.fixture(scope="module")
def store(gsm8k_runs: Path, lm_eval_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GSM8K runs of 0.1.6 (twice), 0.1.7 and 0.1.10; lm-eval runs of 0.1.6 and 0.1.10; the H200
    kernel records of 0.1.0, 0.1.8 and 0.1.12. Each kind is judged against its own oldest. The
    runs are the session's real ones that `compare`'s tests read (conftest), copied."""
    store = tmp_path_factory.mktemp("report-runs") / "store"
    for version in ("0.1.6", "0.1.7", "0.1.10"):
        shutil.copytree(gsm8k_runs / f"v{version}", store / f"v{version}")
    for version in ("0.1.6", "0.1.10"):
        shutil.copytree(lm_eval_runs / "store" / f"v{version}", store / f"lm-eval-{version}")
    (store / "kernels").mkdir()
    for version in KERNEL_VERSIONS:
        [record] = H200.glob(f"kernels__suite__{version}__*.json")
        shutil.copy(record, store / "kernels")
    return store


@pytest.fixture(scope="module")
def rendered(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    done = cli(
        "report",
        store,
        "--html",
        out / "report.html",
        "--markdown",
        out / "report.md",
        "--junit",
        out / "report.xml",
    )
    assert (done.returncode, done.stderr) == (0, "")
    return out


@pytest.fixture(scope="module")
def html_page(rendered: Path) -> Path:
    return rendered / "report.html"


def markdown_table(text: str, heading: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    start = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


STRICT_BACKSTOP_FAIL = "FAIL (0.3500 vs 0.9 * (1 - 0.08) = 0.8280)"
# One row per (version, config, task, metric): worst first, then by metric.
LM_EVAL_ROWS = [
    [
        "❌",
        "Model-FP8",
        "gsm8k",
        STRICT,
        "0.1.10",
        "humming-0.1.10",
        "35.00 [18.12, 56.71]",
        "-50.00 [-71.73, -15.81]",
        "12 / 2",
        "0.00369",
        "53.36",
        STRICT_BACKSTOP_FAIL,
        "regression",
    ],
    [
        "⚠️",
        "Model-FP8",
        "gsm8k",
        FLEXIBLE,
        "0.1.10",
        "humming-0.1.10",
        "95.00 [76.39, 99.11]",
        "+5.00 [-12.79, +24.25]",
        "0 / 1",
        "0.25",
        "36.65",
        "pass (0.9500 vs 0.9 * (1 - 0.08) = 0.8280)",
        "inconclusive",
    ],
    [
        "✅",
        "Model-FP8",
        "gsm8k",
        FLEXIBLE,
        "0.1.6",
        "humming-0.1.6",
        "90.00 [69.90, 97.21]",
        "",
        "",
        "",
        "",
        "pass (0.9000 vs 0.9 * (1 - 0.08) = 0.8280)",
        "baseline",
    ],
    [
        "✅",
        "Model-FP8",
        "gsm8k",
        STRICT,
        "0.1.6",
        "humming-0.1.6",
        "85.00 [63.96, 94.76]",
        "",
        "",
        "",
        "",
        "pass (0.8500 vs 0.9 * (1 - 0.08) = 0.8280)",
        "baseline",
    ],
]


def test_every_kind_has_its_section_failures_first(rendered: Path) -> None:
    text = (rendered / "report.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## humming-matrix")]
    assert headings == [
        "## humming-matrix report: GSM8K across humming-kernels versions",
        "## humming-matrix report: kernel tier across humming-kernels versions",
        "## humming-matrix report: lm-eval across humming-kernels versions",
    ]
    assert markdown_table(text, "## humming-matrix report: lm-eval") == LM_EVAL_ROWS
    assert (
        "**1 failing** of 4 results (1 config x 2 environments). Baseline: humming-kernels 0.1.6"
    ) in text
    assert "Baseline: humming-kernels 0.1.0, torch 2.11.0 (CUDA 13.0), NVIDIA H200." in text
    kernel_rows = markdown_table(text, "## humming-matrix report: kernel tier")
    assert [(r[1], r[2], r[5]) for r in kernel_rows[:6]] == [
        ("mxfp4-bf16-qkv-gpt-oss-20b", "0.1.8 (partial)", "newly-broken"),
        ("moe-mxfp4-bf16-qwen3-30b-a3b", "0.1.8 (partial)", "newly-broken"),
        ("moe-mxfp4-fp8-qwen3-30b-a3b", "0.1.8 (partial)", "newly-broken"),
        ("moe-mxfp4-bf16-gpt-oss-20b", "0.1.8 (partial)", "newly-broken"),
        ("moe-mxfp4-fp8-gpt-oss-20b", "0.1.8 (partial)", "newly-broken"),
        ("gptq-int4-g128-bf16-gate-up-qwen3-8b", "0.1.8 (partial)", "missing"),
    ]
    assert (
        "### Model-FP8 gsm8k exact_match,strict-match on humming-kernels 0.1.10: regression"
    ) in text
    flipped = ", ".join(f"{doc} ({direction})" for doc, direction in STRICT_FLIPS)
    assert f"- flipped documents: {flipped}" in text


def test_junit_has_a_testcase_per_lm_eval_metric_and_kernel_case(rendered: Path) -> None:
    [suite] = ET.parse(rendered / "report.xml").getroot()
    cases = suite.findall("testcase")
    names = [(c.get("classname"), c.get("name")) for c in cases]
    assert len(names) == 3 + 3 * 7 + 4  # GSM8K (cell, config); kernel (cell, case); lm-eval
    assert names[-4:] == [
        ("humming-0.1.10", f"Model-FP8 gsm8k {STRICT}"),
        ("humming-0.1.10", f"Model-FP8 gsm8k {FLEXIBLE}"),
        ("humming-0.1.6", f"Model-FP8 gsm8k {FLEXIBLE}"),
        ("humming-0.1.6", f"Model-FP8 gsm8k {STRICT}"),
    ]
    assert names[3] == ("kernels-0.1.8", "mxfp4-bf16-qkv-gpt-oss-20b")
    regression = cases[-4]
    failure = regression.find("failure")
    assert failure is not None
    assert failure.get("message", "").startswith(
        f"Model-FP8 gsm8k {STRICT}: regression: 0.8500 -> 0.3500 (-50.00 points, 95% CI "
        "[-71.73, -15.81]) on 20 paired documents; b=12 c=2; mid-p(worse) 0.00369, gated p "
        "(Holm over 2) 0.0129 vs alpha 0.05; "
    )
    assert failure.get("message", "").endswith(f"; backstop {STRICT_BACKSTOP_FAIL}")
    assert "\n  12: '13' -> '[invalid]'" in (failure.text or "")
    props = {p.get("name"): p.get("value") for p in regression.iter("property")}
    assert (props["kind"], props["b_right_to_wrong"], props["c_wrong_to_right"]) == (
        "lm-eval",
        "12",
        "2",
    )
    assert (props["accuracy"], props["measured"], props["passed_threshold"]) == (
        "0.35",
        "0.35",
        "false",
    )
    assert props["flipped_documents"] == " ".join(str(d) for d, _ in STRICT_FLIPS)
    assert [c.find("failure") is None and c.find("error") is None for c in cases[-3:]] == [
        True,
        True,
        True,
    ]


def inside(inner: list[float], outer: list[float]) -> bool:
    x, y, w, h = inner
    ox, oy, ow, oh = outer
    return ox <= x and oy <= y and x + w <= ox + ow and y + h <= oy + oh


def test_report_renders_in_chromium(
    browser: tuple[str, str], html_page: Path, tmp_path: Path
) -> None:
    chromium, driver = browser
    screenshot = tmp_path / "report.png"
    with webdriver_session(chromium, driver, tmp_path / "profile") as (http, session):
        call(http, f"{session}/url", {"url": html_page.as_uri()})
        seen = call(http, f"{session}/execute/sync", {"script": MEASURE, "args": []})
        screenshot.write_bytes(base64.b64decode(call(http, f"{session}/screenshot")))

    assert seen["title"] == "humming-matrix report"
    assert seen["fetched"] == []  # nothing loaded from anywhere, not even a file

    assert [(p["kind"], p["config"]) for p in seen["plots"]] == [
        ("accuracy", "double"),
        ("delta", "double"),
    ]
    accuracy, delta = seen["plots"]
    assert [m["label"] for m in accuracy["points"]] == ["0.1.6", "0.1.7", "0.1.10"]
    assert [m["label"] for m in delta["points"]] == ["0.1.7", "0.1.10"]
    for plot in seen["plots"]:
        assert plot["box"][2] > 300
        assert plot["box"][3] > 200
        for mark in plot["points"]:
            assert inside(mark["point"], plot["box"]), mark
            assert inside(mark["bar"], plot["box"]), mark
            assert mark["bar"][3] > 10  # an interval, drawn with a height
    # Screen y grows downwards: 0.1.10 lost 7 questions, so its point sits lower.
    base_y, same_y, worse_y = (m["point"][1] for m in accuracy["points"])
    assert base_y == same_y < worse_y
    assert delta["points"][0]["point"][1] < delta["points"][1]["point"][1]

    rows = seen["rows"]
    assert [(r["cells"][0], r["cells"][1], r["cells"][-1]) for r in rows] == [
        ("double", "0.1.10", "regression"),
        ("double", "0.1.7", "no change detected"),
        ("double", "0.1.6", "baseline"),
    ]
    assert all(r["height"] > 0 for r in rows)
    assert rows[0]["cells"][3] == "72.50 [57.17, 83.89]"
    assert rows[0]["cells"][5] == "8 / 1"
    assert [f["index"] for f in seen["flips"]] == sorted(WRONG_FROM_0_1_10 + WRONG_BEFORE_0_1_10)
    # Collapsed until asked for, failures too (the rows are in the page, behind a summary).
    assert seen["open"] == 0

    tables = seen["tables"]
    kernels = tables["kernel-results"]
    assert len(kernels) == 3 * 7
    assert all(r["height"] > 0 for r in kernels)
    assert kernels[0]["cells"][:5] == [
        "mxfp4-bf16-qkv-gpt-oss-20b",
        "0.1.8 (partial)",
        "kernels-0.1.8",
        "nonfinite 0.104 ms",
        "newly-broken",
    ]
    assert [r["cells"][0] for r in tables["kernel-versions"]] == [
        "0.1.0",
        "0.1.8 (partial)",
        "0.1.12 (partial)",
    ]
    assert tables["kernel-versions"][1]["cells"][-1] == "-"  # 0.1.8 never reached GPTQ
    lm_eval = tables["lm-eval-results"]
    assert [r["cells"] for r in lm_eval] == [row[1:] for row in LM_EVAL_ROWS]
    assert all(r["height"] > 0 for r in lm_eval)

    png = screenshot.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 20_000


def test_lm_eval_rows_that_cannot_be_judged(store: Path, tmp_path: Path) -> None:
    """An incomplete run and a run of a changed config are named, not judged or dropped."""
    [base] = (store / "lm-eval-0.1.6").glob("lm-eval__*.json")
    [cand] = (store / "lm-eval-0.1.10").glob("lm-eval__*.json")
    shutil.copy(base, tmp_path)
    for version, edit in (("0.1.10", {"complete": False}), ("0.1.12", {})):
        data = json.loads(cand.read_text())
        data.update(edit)
        data["environment"]["humming_kernels"] = version
        data["environment"]["session"] = f"humming-{version}"
        if version == "0.1.12":
            data["config"]["sha256"] = "f" * 64
        (tmp_path / f"lm-eval__Model-FP8__{version}__x.json").write_text(json.dumps(data))
    section = build_report(tmp_path, Settings()).lm_eval
    assert section is not None
    rows = [(r.cell.humming, r.key, r.status, r.note) for r in section.rows]
    run_id = json.loads(cand.read_text())["run_id"]
    sha = json.loads(base.read_text())["config"]["sha256"]
    assert rows[:4] == [
        ("0.1.10", FLEXIBLE, RowStatus.INCOMPLETE, f"run {run_id} stopped early"),
        ("0.1.10", STRICT, RowStatus.INCOMPLETE, f"run {run_id} stopped early"),
        *(
            (
                "0.1.12",
                key,
                RowStatus.NOT_COMPARED,
                f"config Model-FP8 differs from the baseline's (ffffffffffff vs {sha[:12]} in "
                f"{tmp_path / base.name}): different configs cannot be paired",
            )
            for key in (FLEXIBLE, STRICT)
        ),
    ]
    assert [r.status for r in section.rows[4:]] == [RowStatus.BASELINE, RowStatus.BASELINE]


LONG_CONFIG = "Qwen3-30B-A3B-FP8-dynamic-humming-moe-w4a16-gsm8k-long-config-name"
LAYOUT = """
const svgs = [...document.querySelectorAll('svg.plot')];
return {
  inner: window.innerWidth,
  scroll: document.documentElement.scrollWidth,
  height: document.documentElement.scrollHeight,
  open: document.querySelectorAll('details[open]').length,
  details: document.querySelectorAll('details.flips').length,
  plots: svgs.map(s => ({
    kind: s.classList[1], config: s.dataset.config,
    width: s.getBoundingClientRect().width,
    title: (s.querySelector('text.title') || s.querySelector('text')).getBBox(),
    legend: [...s.querySelectorAll('g.legend g.legend-item')].map(g => g.textContent),
    clipped: [...s.querySelectorAll('text.clipped')].map(t => t.textContent),
    frame: s.querySelector('rect.frame').getBBox().height,
    bars: [...s.querySelectorAll('g.mark')].map(g => ({
      label: g.dataset.label, height: g.querySelector('line.errorbar').getBBox().height})),
  })),
};
"""


def layout_store(directory: Path) -> Path:
    """Records made directly (no run needed to lay out a page): 16 versions of two configs, one
    with a long name; 0.1.12 of it lost 80 of 200 questions (an outlier), the others moved by a
    question or two; 0.1.6, the baseline, has an A/A pair."""
    versions = [f"0.1.{v}" for v in range(6, 22)]
    for config in ("alpha", LONG_CONFIG):
        write_record(directory, make_record(wrong=[0, 1], n=200, config=config, version="0.1.6"))
        for i, version in enumerate(versions):
            wrong = (
                [0, 1, *range(20, 100)]
                if (config, version) == (LONG_CONFIG, "0.1.12")
                else [0, 1, *range(30, 30 + i % 3)]
            )
            write_record(directory, make_record(wrong=wrong, n=200, config=config, version=version))
    return directory


def test_layout_at_1280_and_1920(browser: tuple[str, str], tmp_path: Path) -> None:
    """The page at the two common screen widths: no horizontal scrolling, whole plot titles, a
    legend on every plot, an outlier that does not flatten the other deltas, flip lists
    collapsed; the two full-page screenshots are kept (HUMMING_MATRIX_SCREENSHOTS names a folder,
    as docs/ has them) and compared: the wide page is no taller and exactly as wide as asked."""
    chromium, driver = browser
    page = tmp_path / "layout.html"
    page.write_text(store_html(build_report(layout_store(tmp_path / "store"), Settings())))
    keep = os.environ.get("HUMMING_MATRIX_SCREENSHOTS")
    seen: dict[int, Any] = {}
    shots: dict[int, bytes] = {}
    with webdriver_session(chromium, driver, tmp_path / "profile") as (http, session):
        for width in (1280, 1920):
            call(http, f"{session}/window/rect", {"width": width, "height": 1000})
            call(http, f"{session}/url", {"url": page.as_uri()})
            seen[width] = call(http, f"{session}/execute/sync", {"script": LAYOUT, "args": []})
            call(http, f"{session}/window/rect", {"width": width, "height": seen[width]["height"]})
            shots[width] = base64.b64decode(call(http, f"{session}/screenshot"))
            if keep:
                (Path(keep) / f"report-{width}.png").write_bytes(shots[width])

    for width, layout in seen.items():
        assert layout["inner"] == width
        assert layout["scroll"] <= layout["inner"], width  # nothing to scroll sideways
        # a list per comparison with flips: 10 versions of alpha, 11 of the other (the outlier)
        assert (layout["details"], layout["open"]) == (21, 0)
        assert [(p["kind"], p["config"]) for p in layout["plots"]] == [
            ("accuracy", LONG_CONFIG),
            ("delta", LONG_CONFIG),
            ("accuracy", "alpha"),
            ("delta", "alpha"),
        ]
        for plot in layout["plots"]:
            title = plot["title"]
            assert title["x"] + title["width"] <= plot["width"], plot["config"]
            assert plot["legend"], plot["kind"]
        accuracy, delta = layout["plots"][:2]
        assert (
            accuracy["legend"][:2] == ["inconclusive", "regression"]
            or "regression" in (accuracy["legend"])
        )
        assert "within ±min effect" in delta["legend"]
        assert delta["clipped"] == ["▼ -40.0"]
        # The other deltas (0 to -1 points, intervals of about 2 points) keep a readable scale.
        others = [b for b in delta["bars"] if b["label"] != "0.1.12"]
        assert min(b["height"] for b in others) > 0.15 * delta["frame"]

    def png_size(data: bytes) -> tuple[int, int]:
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")

    (w1, h1), (w2, h2) = png_size(shots[1280]), png_size(shots[1920])
    assert (w1, w2) == (1280, 1920)
    assert h2 <= h1
    assert seen[1280]["height"] < 8000  # the page once grew to 23,000 px with open flip lists
