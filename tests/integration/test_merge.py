"""Records from many machines merge into one store that `report` reads like one machine's.

The jobs come from the real `humming-matrix pipeline --format github` over a test matrix; each job
runs its own command with the real `humming-matrix run` on its own "machine": a separate working
copy and a separate environment (a venv holding that cell's real humming-kernels wheel, from the
package index, and the stand-in `vllm` first on PATH, which answers wrong for planted questions
when humming-kernels >= 0.1.6). Each job's results folder is its artifact. The artifacts are then
merged the way Buildkite's `artifact download` lays them out (one folder per job) and the way
GitHub's `download-artifact` with `merge-multiple` does (all files in one folder), and `report`
over each merge must equal `report` over one store holding the same records.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from humming_matrix.judge.compare import Settings
from humming_matrix.report.build import RowStatus, build_report
from humming_matrix.store.results import iter_gsm8k_records

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "vllm_double.py"
LIMIT = 6
# Questions 1 and 3 go wrong from humming-kernels 0.1.6 on; question 5 is wrong everywhere.
POLICY = {"wrong_if_humming": {">=0.1.6": [1, 3]}, "wrong": [5]}

MATRIX = """\
[matrix]
schema_version = 1

[recipe.hk]
description = "humming-kernels only; the stand-in vllm serves"
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 0
preflight = false

[variant.cpu]
description = "no CUDA"

[[pairing]]
humming = ">=0.1.5,<0.1.7"
versions = ["0.1.5", "0.1.6"]
variants = ["cpu"]
"""


def _config(name: str) -> str:
    return (
        'model_name: "double/model"\n'
        "accuracy_threshold: 0.5\n"
        "num_questions: 1319\n"
        "num_fewshot: 2\n"
        "server_args: --enforce-eager\n"
        f"env:\n  HUMMING_DOUBLE_POLICY: '{json.dumps(POLICY)}'\n"
        f"# {name}\n"
    )


@dataclass(frozen=True)
class Job:
    entry: dict[str, object]
    machine: Path  # the job's working copy
    status: int

    @property
    def artifact(self) -> Path:
        return self.machine / str(self.entry["results"])


@dataclass(frozen=True)
class CiRun:
    root: Path
    jobs: tuple[Job, ...]
    repeat: Job  # the first cell run again on another machine


def _gsm8k_dir() -> str:
    return os.environ.get("HUMMING_MATRIX_GSM8K_DIR") or str(REPO.parent / "shared" / "gsm8k")


def _uv(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "uv", *args], check=True, capture_output=True)


def _environment(root: Path, version: str) -> Path:
    """A venv with this cell's humming-kernels that sees the test interpreter's packages
    (humming-matrix and its dependencies) through a site directory, as a nox venv would hold
    them installed."""
    venv = root / "venvs" / version
    _uv("venv", "--quiet", "--python", sys.executable, str(venv))
    _uv(
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--python",
        str(venv / "bin" / "python"),
        f"humming-kernels=={version}",
    )
    site = next((venv / "lib").glob("python3*/site-packages"))
    parents = [p for p in sys.path if p.endswith("site-packages")]
    (site / "parent-environment.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in parents)
    )
    return venv


def _run_job(root: Path, entry: dict[str, object], machine: str, venv: Path) -> Job:
    checkout = root / "machines" / machine
    shutil.copytree(root / "checkout", checkout)
    bin_dir = checkout / ".double-bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").symlink_to(DOUBLE)
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}{os.pathsep}{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HUMMING_MATRIX_GSM8K_DIR": _gsm8k_dir(),
        # What the cell's nox session sets for `run`.
        "HUMMING_MATRIX_SESSION": str(entry["session"]),
    }
    env.pop("HUMMING_DOUBLE_POLICY", None)
    done = subprocess.run(
        ["bash", "-c", str(entry["command"])],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return Job(entry=entry, machine=checkout, status=done.returncode)


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory: pytest.TempPathFactory) -> CiRun:
    root = tmp_path_factory.mktemp("ci")
    checkout = root / "checkout"
    (checkout / "configs").mkdir(parents=True)
    (checkout / "matrix.toml").write_text(MATRIX)
    for name in ("alpha", "beta"):
        (checkout / "configs" / f"{name}.yaml").write_text(_config(name))
    (checkout / "configs" / "list.txt").write_text("alpha.yaml\nbeta.yaml\n")
    plan = subprocess.run(
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "pipeline",
            "--format",
            "github",
            "--matrix",
            "matrix.toml",
            "--config-list",
            "configs/list.txt",
            "--limit",
            str(LIMIT),
            "--command",
            "python -m humming_matrix run {run_args}",
        ],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    )
    entries = json.loads(plan.stdout)["include"]
    assert [e["session"] for e in entries] == ["humming-0.1.5", "humming-0.1.6"]
    venvs = {e["humming"]: _environment(root, str(e["humming"])) for e in entries}
    jobs = tuple(
        _run_job(root, e, f"runner-{i}", venvs[str(e["humming"])]) for i, e in enumerate(entries)
    )
    repeat = _run_job(root, entries[0], "runner-repeat", venvs[str(entries[0]["humming"])])
    return CiRun(root=root, jobs=jobs, repeat=repeat)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def _copy_new(source: Path, target: Path) -> None:
    """Copy refusing to replace anything: a merge conflict fails the test instead of hiding."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with source.open("rb") as src, target.open("xb") as dst:
        shutil.copyfileobj(src, dst)


def _buildkite_merge(jobs: tuple[Job, ...], store: Path) -> None:
    """`buildkite-agent artifact download 'results/ci/*' .`: every file at its uploaded path."""
    for job in jobs:
        for path in _files(job.artifact):
            _copy_new(path, store / job.artifact.name / path.relative_to(job.artifact))


def _github_merge(jobs: tuple[Job, ...], store: Path) -> None:
    """`download-artifact` with `merge-multiple: true`: each artifact's files in one folder."""
    for job in jobs:
        for path in _files(job.artifact):
            _copy_new(path, store / path.relative_to(job.artifact))


def _single_store(jobs: tuple[Job, ...], store: Path) -> None:
    """One machine's store holding the same records (and nothing else)."""
    for job in jobs:
        for path in _files(job.artifact):
            if path.suffix == ".json":
                _copy_new(path, store / path.name)


def _report(cwd: Path, store: str) -> dict[str, str]:
    """Markdown, JUnit and HTML of `report`, run where `store` names the same relative path."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "report",
            store,
            "--markdown",
            "out/r.md",
            "--junit",
            "out/r.xml",
            "--html",
            "out/r.html",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    out = {name: (cwd / "out" / name).read_text() for name in ("r.md", "r.html")}
    out["r.xml"] = _junit_judgement(cwd / "out" / "r.xml")
    return out


def _junit_judgement(path: Path) -> str:
    """The JUnit file less what differs by design between two folders of the same records: when
    the report was made, and where in the folder each record lies (its name stays)."""
    tree = ET.parse(path)
    for suite in tree.iter("testsuite"):
        suite.attrib.pop("timestamp")
    for prop in tree.iter("property"):
        if prop.get("name") == "record":
            prop.set("value", Path(prop.get("value", "")).name)
    return ET.tostring(tree.getroot(), encoding="unicode")


def test_each_job_writes_only_its_own_uniquely_named_files(ci_run: CiRun) -> None:
    relative = [
        path.relative_to(job.machine)
        for job in (*ci_run.jobs, ci_run.repeat)
        for path in _files(job.artifact)
    ]
    # Nothing is written twice, not even by two runs of one cell on two machines.
    assert len({p.name for p in relative}) == len(relative)
    for job in ci_run.jobs:
        files = _files(job.artifact)
        assert all(p.parent == job.artifact for p in files)  # no shared index, no sub-store
        names = sorted(p.name.split("__")[1] for p in files if p.suffix == ".json")
        assert names == ["alpha", "beta"]
        assert all(f"__{job.entry['humming']}__" in p.name for p in files)
    repeat_records = sorted(p.name for p in _files(ci_run.repeat.artifact))
    first_records = sorted(p.name for p in _files(ci_run.jobs[0].artifact))
    assert len(repeat_records) == len(first_records) == 4  # 2 records, 2 server logs
    assert not set(repeat_records) & set(first_records)


def test_report_over_merged_artifacts_equals_report_over_one_store(ci_run: CiRun) -> None:
    root = ci_run.root
    _buildkite_merge(ci_run.jobs, root / "buildkite" / "results" / "ci")
    _github_merge(ci_run.jobs, root / "github" / "results" / "ci")
    _single_store(ci_run.jobs, root / "single" / "results" / "ci")
    single = _report(root / "single", "results/ci")
    assert _report(root / "buildkite", "results/ci") == single
    assert _report(root / "github", "results/ci") == single

    report = build_report(root / "buildkite" / "results" / "ci", Settings())
    assert [c.humming for c in report.cells] == ["0.1.5", "0.1.6"]
    assert report.configs == ("alpha", "beta")
    rows = {(r.cell.humming, r.config): r for r in report.rows}
    assert {key: (r.correct, r.n, r.runs) for key, r in rows.items()} == {
        ("0.1.5", "alpha"): (5, 6, 1),
        ("0.1.5", "beta"): (5, 6, 1),
        ("0.1.6", "alpha"): (3, 6, 1),
        ("0.1.6", "beta"): (3, 6, 1),
    }
    assert rows["0.1.5", "alpha"].status is RowStatus.BASELINE
    for config in ("alpha", "beta"):
        comparison = rows["0.1.6", config].comparison
        assert comparison is not None
        table = comparison.table
        assert (table.right_to_wrong, table.wrong_to_right) == (2, 0)
        assert [f.index for f in comparison.flips] == [1, 3]
    assert {r.session for r in report.rows} == {"humming-0.1.5", "humming-0.1.6"}


def test_a_rerun_merged_in_is_one_more_run_not_a_conflict(ci_run: CiRun) -> None:
    store = ci_run.root / "with-repeat" / "results" / "ci"
    _buildkite_merge(ci_run.jobs, store)
    for path in _files(ci_run.repeat.artifact):
        _copy_new(path, store / "repeat" / path.name)
    records = list(iter_gsm8k_records(store))
    assert len(records) == 6
    assert len({r.run_id for _, r in records}) == 6
    report = build_report(store, Settings())
    runs = {(r.cell.humming, r.config): r.runs for r in report.rows}
    assert runs == {
        ("0.1.5", "alpha"): 2,
        ("0.1.5", "beta"): 2,
        ("0.1.6", "alpha"): 1,
        ("0.1.6", "beta"): 1,
    }
