"""The store report model and its Markdown, parsed back (no golden files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from humming_matrix.cli import main
from humming_matrix.errors import UsageError
from humming_matrix.judge.compare import Settings, Verdict
from humming_matrix.report.build import RowStatus, StoreReport, build_report
from humming_matrix.report.markdown import store_markdown
from humming_matrix.store.results import write_record

from .test_compare import make_record

REGRESSED = [*range(5), *range(100, 110)]


def build_store(directory: Path) -> Path:
    """Two configs over five humming versions, one of each row status.

    alpha: 0.1.6 twice (the baseline, and an A/A pair one question apart), 0.1.7 unchanged,
           0.1.10 ten questions worse (a regression), 0.1.12 stopped early.
    beta:  0.1.6 baseline, 0.1.7 one question worse and below the absolute threshold (0.9 with
           no tolerance), 0.1.10 with another config hash.
    """
    records = [
        make_record(wrong=[0, 1, 2, 3, 4], n=200, config="alpha", version="0.1.6"),
        make_record(wrong=[0, 1, 2, 3, 4, 7], n=200, config="alpha", version="0.1.6"),
        make_record(
            wrong=range(5), n=200, config="alpha", version="0.1.6", session="humming-0.1.6"
        ),
        make_record(wrong=range(5), n=200, config="alpha", version="0.1.7"),
        make_record(wrong=REGRESSED, n=200, config="alpha", version="0.1.10"),
        make_record(wrong=range(5), n=200, config="alpha", version="0.1.12", complete=False),
        make_record(config="beta", version="0.1.6", threshold=0.9, tolerance=0.0, wrong=range(4)),
        make_record(config="beta", version="0.1.7", threshold=0.9, tolerance=0.0, wrong=range(5)),
        make_record(config="beta", version="0.1.10", threshold=0.9, tolerance=0.0, sha="f" * 64),
    ]
    for r in records:
        write_record(directory, r)
    return directory


@pytest.fixture
def report(tmp_path: Path) -> StoreReport:
    return build_report(build_store(tmp_path / "store"), Settings())


def test_rows_are_judged_against_the_oldest_version_failures_first(report: StoreReport) -> None:
    assert report.baseline is not None
    assert report.baseline.humming == "0.1.6"
    assert [(r.config, r.cell.humming, r.status) for r in report.rows] == [
        ("alpha", "0.1.10", RowStatus.REGRESSION),
        ("beta", "0.1.7", RowStatus.BELOW_THRESHOLD),
        ("alpha", "0.1.12", RowStatus.INCOMPLETE),
        ("beta", "0.1.10", RowStatus.NOT_COMPARED),
        ("alpha", "0.1.7", RowStatus.NO_CHANGE),
        ("alpha", "0.1.6", RowStatus.BASELINE),
        ("beta", "0.1.6", RowStatus.BASELINE),
    ]
    regression = report.rows[0].comparison
    assert regression is not None
    assert regression.verdict is Verdict.REGRESSION
    assert [f.index for f in regression.flips] == list(range(100, 110))
    assert report.rows[0].runs == 1
    assert report.rows[5].runs == 3
    assert report.rows[5].session == "humming-0.1.6"
    assert report.rows[0].session == "humming-0.1.10"  # not recorded: derived from the version
    assert "config beta differs from the baseline's" in report.rows[3].note
    assert report.rows[2].note.endswith("stopped early (200 of 200 answered)")


def test_the_baseline_cells_a_a_pair_calibrates_every_row(report: StoreReport) -> None:
    calibration = report.rows[0].calibration
    assert calibration is not None
    assert calibration.cell.humming == "0.1.6"
    assert (calibration.discordant, calibration.n) == (1, 200)  # the two newest 0.1.6 runs
    comparison = report.rows[0].comparison
    assert comparison is not None
    assert comparison.noise is not None
    assert comparison.noise.discordance_ratio == pytest.approx((10 / 200) / (1 / 200))


def test_baseline_can_be_chosen(tmp_path: Path) -> None:
    report = build_report(build_store(tmp_path), Settings(), "0.1.7")
    assert report.baseline is not None
    assert report.baseline.humming == "0.1.7"
    with pytest.raises(
        UsageError,
        match=r"--baseline 9\.9: no records of that humming-kernels "
        r"version \(the store has 0\.1\.10, 0\.1\.12, 0\.1\.6, 0\.1\.7\)",
    ):
        build_report(tmp_path, Settings(), "9.9")


def main_table(markdown: str) -> list[list[str]]:
    """The first Markdown table, as rows of cell texts (header excluded)."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split(" | ")])
    return rows


def test_markdown_table_has_one_row_per_result_failures_first(report: StoreReport) -> None:
    text = store_markdown(report)
    rows = main_table(text)
    assert [(r[1], r[2], r[-1].split(":")[0]) for r in rows] == [
        (r.config, r.cell.humming, r.status.value) for r in report.rows
    ]
    regression = rows[0]
    assert regression[0] == "❌"
    assert regression[4] == "92.50 [88.00, 95.40]"  # scipy: [0.87996, 0.95403]
    assert regression[6] == "10 / 0"
    assert regression[7] == f"{0.5**11:.3g}"
    assert regression[9] == "10.0x A/A"
    assert rows[5][9] == "A/A 1/200 flips"
    assert text.startswith("## humming-matrix report")
    assert "**4 failing** of 7 results (2 configs x 4 environments)" in text
    assert "### alpha on humming-kernels 0.1.10, vllm 0.24.0, torch 2.11.0: regression" in text
    assert "| 100 | 110 | 110 | 111 | right->wrong |" in text
    assert "## Baseline runs" in text
    assert "| humming-kernels | 0.1.6 | 0.1.10 |" in text  # the package diff


def test_markdown_drops_detail_before_rows_to_fit(report: StoreReport) -> None:
    full = store_markdown(report)
    no_packages = store_markdown(report, max_bytes=len(full.encode()) - 1)
    assert "packages differ" not in no_packages
    assert "| 100 | 110 | 110 | 111 |" in no_packages
    assert main_table(no_packages) == main_table(full)
    tiny = store_markdown(report, max_bytes=1600)
    assert len(tiny.encode()) <= 1600
    kept = main_table(tiny)
    assert 0 < len(kept) < len(report.rows)
    assert kept == main_table(full)[: len(kept)]  # the worst rows survive
    assert f"{len(report.rows) - len(kept)} more rows" in tiny


def test_markdown_escapes_pipes_in_names(tmp_path: Path) -> None:
    write_record(tmp_path, make_record(config="a|b"))
    rows = main_table(store_markdown(build_report(tmp_path, Settings())))
    assert rows[0][1] == "a\\|b"


def test_report_command_writes_every_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = build_store(tmp_path / "store")
    out = tmp_path / "out"
    code = main(
        [
            "report",
            str(store),
            "--markdown",
            str(out / "r.md"),
            "--junit",
            str(out / "r.xml"),
            "--html",
            str(out / "r.html"),
        ]
    )
    assert code == 0
    assert capsys.readouterr().out == ""
    assert main_table((out / "r.md").read_text())[0][1:3] == ["alpha", "0.1.10"]
    assert (out / "r.xml").read_text().startswith("<?xml")
    assert (out / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["report", str(store)]) == 0  # no file named: Markdown on stdout
    assert main_table(capsys.readouterr().out)[0][1:3] == ["alpha", "0.1.10"]
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err == (
        f"humming-matrix: error: {tmp_path / 'missing'}: not a directory\n"
    )
    assert main(["report", str(out)]) == 2  # a directory without records
    assert capsys.readouterr().err == (
        f"humming-matrix: error: {out}: holds no record (GSM8K, kernels or lm-eval)\n"
    )


def test_the_a_a_floor_sets_the_verdict_mde_and_the_report_says_where_there_is_none(
    report: StoreReport,
) -> None:
    """alpha's baseline has an A/A pair (1 of 200 discordant): its rows' MDE assumes that noise,
    not the pair's own flips (10 of them, the regression itself); beta has no repeat."""
    regression = report.rows[0].comparison
    assert regression is not None
    assert (regression.test.noise_from_calibration, regression.test.noise_rate) == (True, 1 / 200)
    assert regression.test.family_size == 3  # the compared rows: alpha 0.1.7, 0.1.10, beta 0.1.7
    assert report.noise_floor_text() == (
        "Noise floor (A/A repeats of the baseline): alpha 1/200 questions discordant (0.50%). "
        "No A/A repeat of the baseline for beta: the MDE there assumes 2 min(b, c)/n of each "
        "pair; run the baseline cell twice into the store to measure the floor."
    )
    assert report.noise_floor_text() in store_markdown(report)
