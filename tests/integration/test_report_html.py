"""`report --html` rendered in a real headless Chromium, driven over WebDriver (chromedriver from
Debian's chromium-driver) with plain HTTP: the page is loaded from a file, the plots and tables
are measured as laid out, and a screenshot is kept in the test's tmp dir.

Records come from real runs (see test_compare_runs). Without chromium this test skips, except
under CI=true, where a missing browser is a broken CI image and fails.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from humming_matrix.server import free_port

from .runner_harness import cli
from .test_compare_runs import WRONG_BEFORE_0_1_10, WRONG_FROM_0_1_10, build_run_store

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
  flips: [...document.querySelectorAll('details.flips[open] tr[data-index]')].map(tr => ({
    index: Number(tr.dataset.index), height: tr.getBoundingClientRect().height})),
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
def html_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report-runs")
    store = build_run_store(root, ("0.1.6", "0.1.7", "0.1.10"))
    page = root / "report.html"
    done = cli("report", store, "--html", page)
    assert done.returncode == 0, done.stderr
    return page


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
        ("double", "0.1.7", "no change"),
        ("double", "0.1.6", "baseline"),
    ]
    assert all(r["height"] > 0 for r in rows)
    assert rows[0]["cells"][3] == "72.50 [57.17, 83.89]"
    assert rows[0]["cells"][5] == "8 / 1"
    assert [f["index"] for f in seen["flips"]] == sorted(WRONG_FROM_0_1_10 + WRONG_BEFORE_0_1_10)
    assert all(f["height"] > 0 for f in seen["flips"])

    png = screenshot.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 20_000
