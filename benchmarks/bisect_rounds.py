"""Bisect cost: rounds to an answer (binary vs N-ary), and the store scan each probe does.

    python benchmarks/bisect_rounds.py --records 200 --repeats 5

Rounds: every first-bad position over humming-kernels 0.1.0..0.1.20 (19 versions between the
endpoints), endpoints verified (one extra round, two with one job), no untestable version. A
round costs one probe's wall time (an hour on a GPU for the full suite), so rounds are the figure.

Store scan: before running a session a probe reads every GSM8K record in the store to find a
reusable one. Timed on a store of full-size records (1319 questions each) for a version that is
not there (the full scan), against a bare json.load of the same files.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from humming_matrix.bisect.search import Bisection, Verdict, search
from humming_matrix.bisect.version_runner import Prober, Suite
from humming_matrix.matrix.cells import load_matrix
from humming_matrix.store.results import (
    ConfigInfo,
    Gsm8kRecord,
    Metrics,
    QuestionOutcome,
    iter_gsm8k_records,
    new_run_id,
    utc_now_iso,
    write_record,
)
from humming_matrix.suite.config import load_config

RELEASES = tuple(f"0.1.{i}" for i in range(21))
MATRIX = """\
[matrix]
schema_version = 1
[recipe.r]
requirements = ["humming-kernels=={humming}"]
gpus = 0
preflight = false
[variant.cpu]
[[pairing]]
humming = ">=0.1.0,<0.2"
versions = ["0.1.0"]
variants = ["cpu"]
"""


def rounds(jobs: int) -> list[int]:
    out = []
    for first_bad in range(1, len(RELEASES)):
        count = 0

        def oracle(probes: Sequence[str], fb: int = first_bad) -> Mapping[str, Verdict]:
            nonlocal count
            count += 1
            return {v: Verdict.GOOD if RELEASES.index(v) < fb else Verdict.BAD for v in probes}

        search(Bisection(RELEASES), oracle, jobs)
        out.append(count)
    return out


class _NoRun:
    def __call__(
        self, session: str, posargs: Sequence[str], env: Mapping[str, str], log: Path
    ) -> int:
        raise AssertionError("the benchmark never runs a session")

    def stop_all(self) -> None:
        pass


def store_scan(records: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per lookup: the probe's (file names first), reading every record (what the
    first version did), and a bare json.load of every file."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "m.toml").write_text(MATRIX)
        (root / "c.yaml").write_text(
            'model_name: "m"\naccuracy_threshold: 0.5\nnum_questions: 1319\nnum_fewshot: 5\n'
        )
        config = load_config(root / "c.yaml")
        store = root / "store"
        questions = tuple(
            QuestionOutcome(i, i % 7 != 0, i, i, None, " So 42.") for i in range(1319)
        )
        for i in range(records):
            version = RELEASES[i % 20]
            write_record(
                store,
                Gsm8kRecord(
                    new_run_id(),
                    utc_now_iso(),
                    True,
                    ConfigInfo(config.name, str(config.path), config.sha256, {}),
                    {"humming_kernels": version, "session": f"humming-{version}", "gpu": None},
                    Metrics(0.86, 0.0, 0, 1319, 0.5, 0.08, True, 1.0),
                    questions,
                ),
            )
        prober = Prober(Suite((config,), (), store, None), _NoRun(), log_dir=root / "logs")
        cell = load_matrix(root / "m.toml").cell_for("0.1.7")  # records/20 of them match
        times: dict[str, list[float]] = {
            "probe lookup": [],
            "read every record": [],
            "bare json.load of every file": [],
        }
        for _ in range(repeats):
            start = time.perf_counter()
            assert prober.stored(cell) is not None
            times["probe lookup"].append(time.perf_counter() - start)
            start = time.perf_counter()
            for _path, _record in iter_gsm8k_records(store):
                pass
            times["read every record"].append(time.perf_counter() - start)
            start = time.perf_counter()
            for path in sorted(store.glob("*.json")):
                json.loads(path.read_text())
            times["bare json.load of every file"].append(time.perf_counter() - start)
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("| jobs | worst rounds | mean rounds | worst vs 1 job |")
    print("| --- | --- | --- | --- |")
    binary = max(rounds(1))
    for jobs in (1, 2, 4, 8):
        r = rounds(jobs)
        print(f"| {jobs} | {max(r)} | {statistics.fmean(r):.2f} | {max(r) / binary:.2f} |")
    times = store_scan(args.records, args.repeats)
    base = statistics.median(times["read every record"])
    print()
    print(f"store of {args.records} records (1319 questions each):")
    print()
    print("| lookup | median (s) | vs reading every record | runs (s) |")
    print("| --- | --- | --- | --- |")
    for name, runs in times.items():
        median = statistics.median(runs)
        listed = " ".join(f"{x:.3f}" for x in runs)
        print(f"| {name} | {median:.3f} | {median / base:.3f} | {listed} |")


if __name__ == "__main__":
    main()
