"""The HTML page without a browser: self-contained, one plot per config and kind, the flip lists.
(tests/integration/test_report_store.py renders it in a real Chromium.)"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from humming_matrix.judge.compare import Settings
from humming_matrix.report.build import build_report
from humming_matrix.report.html import store_html

from .test_report import REGRESSED, build_store


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def having(self, tag: str, cls: str | None = None) -> list[dict[str, str | None]]:
        return [
            a
            for t, a in self.elements
            if t == tag and (cls is None or cls in (a.get("class") or "").split())
        ]


def parse(tmp_path: Path) -> Elements:
    page = Elements()
    page.feed(store_html(build_report(build_store(tmp_path), Settings())))
    return page


def test_page_needs_nothing_from_elsewhere(tmp_path: Path) -> None:
    page = parse(tmp_path)
    tags = {t for t, _ in page.elements}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}
    for _, attrs in page.elements:
        for name, value in attrs.items():
            if name in ("src", "href", "action"):
                raise AssertionError(f"{name}={value}")
    # The only URL is the SVG namespace, which is a name and never fetched.
    assert {a.get("xmlns") for a in page.having("svg")} == {"http://www.w3.org/2000/svg"}


def test_one_accuracy_plot_per_config_and_one_delta_plot_where_compared(tmp_path: Path) -> None:
    page = parse(tmp_path)
    plots = [(a["class"], a["data-config"]) for a in page.having("svg", "plot")]
    assert plots == [
        ("plot accuracy", "alpha"),
        ("plot delta", "alpha"),
        ("plot accuracy", "beta"),
        ("plot delta", "beta"),
    ]
    # alpha: four versions with points; compared: 0.1.7 and 0.1.10 (0.1.12 is incomplete).
    # beta: three versions; compared: 0.1.7 only.
    assert len(page.having("circle", "point")) == 4 + 2 + 3 + 1
    assert len(page.having("line", "errorbar")) == 4 + 2 + 3 + 1


def test_flip_lists(tmp_path: Path) -> None:
    page = parse(tmp_path)
    lists = [(a["data-config"], a["data-version"]) for a in page.having("details", "flips")]
    assert lists == [("alpha", "0.1.10"), ("beta", "0.1.7")]
    indices = [a["data-index"] for a in page.having("tr") if a.get("data-index")]
    assert indices == [str(i) for i in REGRESSED if i >= 5] + ["4"]


def test_a_kernel_store_has_its_two_tables_and_nothing_from_elsewhere() -> None:
    page = Elements()
    h200 = Path(__file__).resolve().parents[2] / "results" / "h200" / "gen1"
    page.feed(store_html(build_report(h200, Settings())))
    assert [a["id"] for a in page.having("table")] == ["kernel-results", "kernel-versions"]
    assert not page.having("svg")  # no plots for kernel records
    assert not {t for t, _ in page.elements} & {"script", "link", "img", "iframe", "object"}
    rows = [a.get("class") for t, a in page.elements if t == "tr" and a.get("class")]
    assert rows.count("failed") == 38  # 8 regressions, 10 unreached, 20 broken in their own run
    assert rows.count("complete") + rows.count("partial") == 21
    assert rows.count("partial") == 6  # 0.1.8 .. 0.1.13
