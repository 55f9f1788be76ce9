"""humming-matrix installed the way users and CI jobs install it: `pip install .` into a fresh
venv (a built wheel, not editable), with no HUMMING_MATRIX_FILE and no PYTHONPATH.

The README's Quickstart block runs verbatim in a copy of this checkout. The copy differs from a
clone in two files only, because CI has no GPU and no real vLLM: its `configs/matrix.toml`
installs humming-kernels alone (real wheels from the package index, --no-deps) and its default
config list names one config served by the `vllm` test double, which is first on PATH. Every
other command then runs through that venv, from the copy and from a folder outside any checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from humming_matrix import __version__
from humming_matrix.ci.ci_job import nox_environment

REPO = Path(__file__).resolve().parents[2]
DOUBLE = REPO / "tests" / "doubles" / "vllm_double.py"
# What a clone holds that the commands read (tests, docs and stored results play no part).
CLONE_PARTS = (
    "pyproject.toml",
    "README.md",
    ".gitignore",
    "noxfile.py",
    "src",
    "configs",
    "requirements",
)
TIMEOUT = 420

MATRIX = """\
[matrix]
recipe = "bare"

[recipe.bare]
description = "humming-kernels alone; the vLLM test double serves"
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 0
preflight = false

[variant.cpu]

# The stack requirements/cuda.txt pins, so premerge can map its pins to cells.
[[pairing]]
humming = ">=0.1.6,<0.2"
versions = ["0.1.19"]
vllm = "0.33.0"
torch = "2.14.0"
variants = ["cpu"]
"""
CONFIG = {
    "model_name": "double/gsm8k",
    "accuracy_threshold": 0.5,
    "num_questions": 3,
    "num_fewshot": 2,
    "startup_max_wait_seconds": 60,
}
# The lines of the README's Quickstart block, and which of them this test runs.
QUICKSTART = (
    "python3 -m venv .venv && . .venv/bin/activate",
    "python -m pip install . nox uv",
    "nox -s smoke",
    "nox -s humming-0.1.19",
)
RUN_HERE = (QUICKSTART[0], QUICKSTART[1], QUICKSTART[3])
BUMP = "humming-kernels: humming-kernels[cu13]==0.1.19 -> humming-kernels[cu13]==0.1.20"
NO_MATRIX = (
    "humming-matrix: error: no matrix file: --matrix not given, $HUMMING_MATRIX_FILE not set, "
    "and no configs/matrix.toml in {where} or any folder above it; run from a humming-matrix "
    "checkout, or pass --matrix FILE, or set HUMMING_MATRIX_FILE=FILE\n"
)


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """nox logs on stderr, the commands it runs write to stdout."""
        return self.stdout + self.stderr


@dataclass(frozen=True)
class Checkout:
    root: Path  # the copy of the checkout: the README's commands run here
    elsewhere: Path  # a folder outside any checkout
    env: Mapping[str, str]  # a user's shell: no HUMMING_MATRIX_FILE, no PYTHONPATH

    def shell(self, line: str, cwd: Path | None = None) -> Done:
        """One command line in a shell where the README's venv is active once it exists."""
        activate = ". .venv/bin/activate && " if (self.root / ".venv").is_dir() else ""
        script = f"cd {self.root} && {activate}cd {cwd or self.root} && {line}"
        done = subprocess.run(
            ["bash", "-c", script],
            env=dict(self.env),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        return Done(done.returncode, done.stdout, done.stderr)

    def records(self, store: str) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted((self.root / store).glob("*.json"))]

    def sessions(self, store: str) -> list[str]:
        """The session (and so the humming-kernels) of each record in the store."""
        return sorted(
            f"{r['environment']['session']}={r['environment']['humming_kernels']}"
            for r in self.records(store)
        )

    def install_record(self, venv: str) -> dict[str, Any]:
        return dict(json.loads((self.root / ".nox" / venv / "humming-install.json").read_text()))


def _gsm8k_dir() -> str:
    return os.environ.get("HUMMING_MATRIX_GSM8K_DIR") or str(REPO.parent / "shared" / "gsm8k")


def _user_env(bin_dir: Path) -> dict[str, str]:
    """The test's environment as a fresh shell has it: none of this suite's settings, and not
    this suite's venv on PATH (its humming-matrix is the editable one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUMMING_", "NOX"))}
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(name, None)
    ours = Path(sys.executable).parent
    path = [p for p in env["PATH"].split(os.pathsep) if p and Path(p) != ours]
    env["PATH"] = os.pathsep.join([str(bin_dir), *path])
    env["HUMMING_MATRIX_GSM8K_DIR"] = _gsm8k_dir()  # the documented offline data folder
    return env


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root,
        check=True,
        capture_output=True,
        timeout=60,
    )


def quickstart_block() -> tuple[str, ...]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    lines = (re.sub(r"\s+#\s.*$", "", line).strip() for line in block.splitlines())
    return tuple(line for line in lines if line and not line.startswith("#"))


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Checkout:
    base = tmp_path_factory.mktemp("installed")
    root = base / "humming-matrix"
    root.mkdir()
    for part in CLONE_PARTS:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(
                source, root / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            shutil.copy2(source, root / part)
    (root / "configs" / "matrix.toml").write_text(MATRIX, encoding="utf-8")
    humming = root / "configs" / "gsm8k" / "humming"
    (humming / "double.yaml").write_text(json.dumps(CONFIG), encoding="utf-8")
    (humming / "config.txt").write_text("double.yaml\n", encoding="utf-8")
    # A git history whose last commit bumps the guarded humming-kernels pin, for premerge.
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "base")
    pins = root / "requirements" / "cuda.txt"
    pins.write_text(
        pins.read_text().replace("humming-kernels[cu13]==0.1.19", "humming-kernels[cu13]==0.1.20")
    )
    _git(root, "commit", "-q", "-am", "bump humming-kernels to 0.1.20")
    bin_dir = base / "double-bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").symlink_to(DOUBLE)
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return Checkout(root, elsewhere, _user_env(bin_dir))


@pytest.fixture(scope="module")
def installed(checkout: Checkout) -> Checkout:
    """The README's first two lines, verbatim: a fresh venv holding humming-matrix, nox, uv."""
    for line in RUN_HERE[:2]:
        done = checkout.shell(line)
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return checkout


@pytest.fixture(scope="module")
def headline(installed: Checkout) -> Done:
    """The README's `nox -s humming-0.1.19`, verbatim, from the copy's root."""
    return installed.shell(RUN_HERE[2])


def test_quickstart_block_is_what_this_test_runs() -> None:
    # `nox -s smoke` is run by the smoke session's own test; this one runs the rest.
    assert quickstart_block() == QUICKSTART


def test_pip_install_dot_installs_a_wheel_not_the_checkout(installed: Checkout) -> None:
    done = installed.shell(
        "python -c 'import humming_matrix, sys; print(humming_matrix.__file__, sys.prefix)'",
        cwd=installed.elsewhere,
    )
    assert done.returncode == 0, done.stderr
    module, prefix = done.stdout.split()
    assert Path(prefix) == installed.root / ".venv"
    site = Path(module).parents[1]
    assert (site.name, Path(module).relative_to(site)) == (
        "site-packages",
        Path("humming_matrix/__init__.py"),
    )
    assert Path(prefix) in Path(module).parents
    # The package ships no matrix or configs: nothing in it can be picked up silently.
    assert sorted((site / "humming_matrix").glob("**/*.toml")) == []
    assert sorted((site / "humming_matrix").glob("**/*.yaml")) == []


def test_headline_cell_runs_with_the_checkouts_matrix_and_default_configs(
    installed: Checkout, headline: Done
) -> None:
    assert headline.returncode == 0, headline.output[-6000:]
    assert "nox > Session humming-0.1.19 was successful" in headline.output
    [record] = [
        r
        for r in installed.records("results/local")
        if r["environment"]["session"] == "humming-0.1.19"
    ]
    assert record["config"]["path"] == str(
        installed.root / "configs" / "gsm8k" / "humming" / "double.yaml"
    )
    assert (record["environment"]["session"], record["environment"]["humming_kernels"]) == (
        "humming-0.1.19",
        "0.1.19",
    )
    assert (record["metrics"]["num_questions"], record["metrics"]["passed"]) == (3, True)
    install = installed.install_record("humming-0-1-19")
    assert (install["outcome"], install["exit_code"], install["stages"]) == (
        "ran",
        0,
        ["installed", "verified", "run"],
    )
    assert install["packages"]["humming-matrix"] == __version__


def test_unlisted_release_gets_a_session_and_a_failed_install_is_untestable(
    installed: Checkout, headline: Done
) -> None:
    # 0.1.99 is inside the pairing's range, listed nowhere, and has no wheel on the index.
    done = installed.shell("nox -s humming-0.1.99")
    assert done.returncode == 1
    assert "Sessions not found" not in done.output
    # The installer's own error is shown.
    assert "Because there is no version of humming-kernels==0.1.99" in done.output
    assert (
        "humming-matrix: error: humming-0.1.99: installing the cell failed (the installer's "
        "error is above); untestable (install record: "
        f"{installed.root / '.nox' / 'humming-0-1-99' / 'humming-install.json'})"
    ) in done.output
    assert re.search(
        r"--install-failed --install-seconds \d+\.\d{3} humming-0\.1\.99 -- failed with exit "
        r"code 125",
        done.output,
    ), done.output
    record = installed.install_record("humming-0-1-99")
    assert (record["session"], record["outcome"], record["exit_code"]) == (
        "humming-0.1.99",
        "install_failed",
        125,
    )
    # A release outside every range gets no session, and nox is told why.
    outside = installed.shell("nox -s humming-0.1.2")
    assert outside.returncode == 3
    assert outside.stderr.startswith(
        "nox: note: humming-0.1.2: no pairing's humming range in "
        f"{installed.root / 'configs' / 'matrix.toml'} covers 0.1.2\n"
    )
    assert "nox > Sessions not found: humming-0.1.2" in outside.stderr
    # The same, from outside any checkout, given the matrix: exit 125 and the record.
    path = installed.elsewhere / "record.json"
    matrix = installed.root / "configs" / "matrix.toml"
    alone = installed.shell(
        f"humming-matrix session --matrix {matrix} --record {path} --install-failed humming-0.1.99",
        cwd=installed.elsewhere,
    )
    assert alone.returncode == 125
    assert alone.stderr == (
        "humming-matrix: error: humming-0.1.99: installing the cell failed (the installer's "
        f"error is above); untestable (install record: {path})\n"
    )
    assert json.loads(path.read_text())["outcome"] == "install_failed"


def test_ci_job_from_the_pipeline_runs_the_installed_cell(
    installed: Checkout, headline: Done
) -> None:
    """The bootstrap step's command (docs/scale-out.md), then the job it emits, as an agent runs
    it from the checkout's root."""
    plan = installed.shell("humming-matrix pipeline --format github")
    assert (plan.returncode, plan.stderr) == (0, "")
    command = (
        "PYTHONPATH=src python3 -m humming_matrix.ci.ci_job humming-0.1.19 -- "
        "--config-list configs/gsm8k/humming/config.txt --results results/ci/humming-0.1.19"
    )
    job: dict[str, object] = {
        "session": "humming-0.1.19",
        "key": "humming-0_1_19",
        "humming": "0.1.19",
        "vllm": "0.33.0",
        "torch": "2.14.0",
        "variant": "cpu",
        "gpus": 0,
        "runs_on": "ubuntu-latest",
        "optional": False,
        "retries": 2,
        "command": command,
        "results": "results/ci/humming-0.1.19",
        "artifact": "humming-records-humming-0_1_19",
    }
    assert json.loads(plan.stdout) == {"include": [job]}
    buildkite = installed.shell("humming-matrix pipeline --format buildkite --tag humming")
    assert (buildkite.returncode, buildkite.stderr) == (0, "")
    assert f"  command: {command}\n" in buildkite.stdout
    done = installed.shell(command)
    assert done.returncode == 0, done.output[-6000:]
    [record] = installed.records("results/ci/humming-0.1.19")
    assert (record["environment"]["session"], record["metrics"]["passed"]) == (
        "humming-0.1.19",
        True,
    )


def test_bisect_and_premerge_use_the_checkout(installed: Checkout, headline: Done) -> None:
    links = installed.elsewhere / "links"
    links.mkdir()
    for version in ("0.1.19", "0.1.20"):
        (links / f"humming_kernels-{version}-py3-none-any.whl").touch()
    # From a subfolder: the matrix, the default config list and the noxfile are found above it.
    bisect = installed.shell(
        f"humming-matrix bisect --good 0.1.19 --bad 0.1.20 --no-verify --find-links {links} "
        f"--index-cache {installed.elsewhere / 'ic'} --results {installed.root / 'results/local'}",
        cwd=installed.root / "configs" / "gsm8k",
    )
    assert bisect.returncode == 0, bisect.output
    log = installed.root / "results" / "local" / "bisect" / "0.1.19..0.1.20.jsonl"
    assert bisect.stdout.splitlines() == [
        "bisect: 2 versions 0.1.19..0.1.20; about 0 step(s) left",
        "bisect: 0.1.19: good (stored records) - baseline, double: accuracy 1.0000 on 3 questions",
        "bisect: first bad 0.1.20, last good 0.1.19",
        "bisect: changes: https://github.com/vllm-project/humming/compare/v0.1.19...v0.1.20",
        f"bisect: sessions run: none; log: {log}",
    ]
    # The last commit bumps 0.1.19 -> 0.1.20: the stored 0.1.19 run is reused and 0.1.20, a
    # release the matrix does not list, runs in its own nox session.
    premerge = installed.shell("humming-matrix premerge --base HEAD~1")
    assert premerge.returncode == 0, premerge.output
    assert premerge.stdout.splitlines() == [
        f"premerge: {BUMP}",
        "premerge: old cell humming-0.1.19, new cell humming-0.1.20",
        "premerge: humming-0.1.19: reused stored records",
        "premerge: humming-0.1.20: ran",
        "premerge: pass: humming-0.1.19 -> humming-0.1.20: double: no change detected (too "
        "few questions to detect any drop), +0.00 points "
        "[-56.15, +56.15], mid-p 0.5, b=0 c=0",
    ]
    assert installed.sessions("results/local") == ["humming-0.1.19=0.1.19", "humming-0.1.20=0.1.20"]


def test_outside_a_checkout_each_command_says_how_to_point_at_a_matrix(
    installed: Checkout,
) -> None:
    where = installed.elsewhere
    matrix = installed.root / "configs" / "matrix.toml"
    for line, stdout in (
        ("humming-matrix session humming-0.1.19", ""),
        ("humming-matrix pipeline --format buildkite", ""),
        ("humming-matrix bisect --good 0.1.19 --bad 0.1.20", ""),
        # premerge reads the matrix once a guarded pin has changed.
        (f"humming-matrix premerge --repo {installed.root} --base HEAD~1", f"premerge: {BUMP}\n"),
    ):
        done = installed.shell(line, cwd=where)
        assert (done.returncode, done.stdout, done.stderr) == (
            2,
            stdout,
            NO_MATRIX.format(where=where),
        ), line
    given = installed.shell(
        f"humming-matrix bisect --matrix {matrix} --good 0.1.19 --bad 0.1.20", cwd=where
    )
    assert (given.returncode, given.stderr) == (
        2,
        "humming-matrix: error: --configs not given and no humming-matrix checkout (a folder "
        f"holding configs/matrix.toml) at or above {where} to take the default "
        "configs/gsm8k/humming/config.txt from; pass --configs, or run from a checkout\n",
    )
    # The kernel probe reads no matrix: on this machine it stops for want of a GPU.
    kernels = installed.shell("humming-matrix kernels", cwd=where)
    assert (kernels.returncode, kernels.stderr) == (
        3,
        "humming-matrix: error: kernels needs a CUDA GPU: torch cannot be imported: "
        "ModuleNotFoundError: No module named 'torch'\n",
    )


def test_ci_job_runs_nox_without_its_own_sources_on_pythonpath(tmp_path: Path) -> None:
    sources = tmp_path / "src"
    sources.mkdir()
    env = {"PYTHONPATH": os.pathsep.join([str(sources), "/opt/extra"]), "HOME": "/root"}
    assert nox_environment(env, sources) == {"PYTHONPATH": "/opt/extra", "HOME": "/root"}
    assert nox_environment({"PYTHONPATH": str(sources)}, sources) == {}
    assert nox_environment({"HOME": "/root"}, sources) == {"HOME": "/root"}
