"""tools/h200-kernels/ingest.sh: one device call's tarball into its call folder, as gen7 calls
3 - 5 were ingested (a warm machine's tarball repeats the earlier calls' records and load)."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

from tests.unit.test_h200_kernels_table import REPO

INGEST = REPO / "tools" / "h200-kernels" / "ingest.sh"


def _tarball(tmp_path: Path, files: dict[str, str]) -> Path:
    staged = tmp_path / "staged"
    for name, text in files.items():
        (staged / name).parent.mkdir(parents=True, exist_ok=True)
        (staged / name).write_text(text)
    path = tmp_path / "kernels-sweep.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name in files:
            tar.add(staged / name, arcname=name)
    return path


def _ingest(*args: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(INGEST), *map(str, args)], capture_output=True, text=True, timeout=60
    )


def test_a_later_calls_tarball_adds_only_its_own_records_and_load_and_logs_its_events(
    tmp_path: Path,
) -> None:
    generation = tmp_path / "results" / "gen9"
    (generation / "call3").mkdir(parents=True)
    (generation / "call3" / "kernels__suite__0.1.19__cut.json").write_text("earlier")
    tarball = _tarball(
        tmp_path,
        {
            "records/kernels__suite__0.1.19__cut.json": "earlier",
            "records/kernels__suite__0.1.19__rest.json": "this call",
            # Seconds since each call's start: call 3's samples, then call 4's.
            "load.txt": "5 0 1.0 10\n545 9 2.0 20\n5 1 3.0 30\n10 2 4.0 40\n",
            "done.txt": "inputs\n0.1.19\n",
            "cli-0.1.19.log": "record: ...\n",
            "work-0.1.19@2-5!7/events-1.jsonl": '{"t": 1}\n',
            "work-0.1.19@2-5!7/alone/events-2.jsonl": '{"t": 2}\n',
        },
    )
    done = _ingest(tarball, generation / "call4", tmp_path / "logs")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{generation / 'call4'}: 1 new records; done: inputs 0.1.19 \n"
    assert sorted(p.name for p in (generation / "call4").iterdir()) == [
        "kernels__suite__0.1.19__rest.json",
        "load.txt",
    ]
    assert (generation / "call4" / "load.txt").read_text() == "5 1 3.0 30\n10 2 4.0 40\n"
    logs = tmp_path / "logs"
    assert (logs / "cli-0.1.19.log").read_text() == "record: ...\n"
    assert (logs / "work-0.1.19@2-5!7" / "events-1.jsonl").read_text() == '{"t": 1}\n'
    assert (logs / "work-0.1.19@2-5!7" / "alone" / "events-2.jsonl").read_text() == '{"t": 2}\n'


def test_a_first_calls_load_is_kept_whole_and_a_missing_tarball_fails(tmp_path: Path) -> None:
    tarball = _tarball(tmp_path, {"records/a.json": "{}", "load.txt": "5 0\n10 1\n"})
    done = _ingest(tarball, tmp_path / "gen9" / "call1")
    assert done.returncode == 0
    assert (tmp_path / "gen9" / "call1" / "load.txt").read_text() == "5 0\n10 1\n"
    assert (tmp_path / "gen9" / "call1" / "a.json").read_text() == "{}"
    missing = _ingest(tmp_path / "nothing.tar.gz", tmp_path / "gen9" / "call2")
    assert missing.returncode != 0
    assert not (tmp_path / "gen9" / "call2").exists()
