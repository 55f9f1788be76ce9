"""Progress: a line per stage and per tenth in a CI log; a bar on a terminal."""

from __future__ import annotations

import io

from humming_matrix.progress import Progress


def test_ci_log_gets_one_line_per_stage_and_per_tenth() -> None:
    out = io.StringIO()
    now = [0.0]
    progress = Progress(out, tty=False, clock=lambda: now[0])
    progress.stage("cfg: server ready")
    progress.start("cfg", total=20)
    for _ in range(20):
        now[0] += 0.5
        progress.advance()
    progress.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "[humming-matrix] cfg: server ready"
    assert lines[1:] == [
        f"[humming-matrix] cfg: {n}/20 questions, {n * 0.5:.1f} s" for n in range(2, 21, 2)
    ]


def test_resumed_progress_starts_where_the_record_left_off() -> None:
    out = io.StringIO()
    progress = Progress(out, tty=False, clock=lambda: 0.0)
    progress.start("cfg", total=10, done=7)
    for _ in range(3):
        progress.advance()
    assert out.getvalue().splitlines() == [
        "[humming-matrix] cfg: 8/10 questions, 0.0 s",
        "[humming-matrix] cfg: 9/10 questions, 0.0 s",
        "[humming-matrix] cfg: 10/10 questions, 0.0 s",
    ]


def test_terminal_gets_a_bar() -> None:
    out = io.StringIO()
    progress = Progress(out, tty=True)
    progress.start("cfg", total=4)
    progress.advance(4)
    progress.stage("done")
    progress.finish()
    text = out.getvalue()
    assert "cfg: 100%" in text
    assert "4/4" in text
    assert "[humming-matrix] done" in text
