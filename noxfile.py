"""humming-matrix sessions, generated from configs/matrix.toml (docs/matrix.md: names, variants,
adding a version). `nox -s humming-<version>[-<variant>] -- RUN_ARGS`; RUN_ARGS go to
`humming-matrix run`. nox exits 0/1; the session's own code (0/1/2/3/125) is in the log and in
`.nox/<session>/humming-install.json`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox
import nox.command

REPO = Path(__file__).resolve().parent
# The matrix module needs only the standard library and packaging, which nox itself brings.
sys.path.insert(0, str(REPO / "src"))

from humming_matrix.errors import MatrixError  # noqa: E402
from humming_matrix.installation import RECORD_NAME  # noqa: E402
from humming_matrix.matrix import EXTRA_VERSIONS_ENV, Cell, load_matrix  # noqa: E402

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"

RESULTS = REPO / "results" / "local"
DEFAULT_CONFIG_LIST = REPO / "configs" / "gsm8k" / "humming" / "config.txt"


def _install_cell(session: nox.Session, cell: Cell, name: str, *, kernels: bool) -> None:
    session.install(str(REPO))
    options = list(cell.install_options())
    overrides = cell.overrides()
    if overrides:
        # uv only: the tested humming-kernels must win over the version vLLM pins.
        path = Path(session.create_tmp()) / "overrides.txt"
        path.write_text("\n".join(overrides) + "\n", encoding="utf-8")
        options += ["--overrides", str(path)]
    try:
        session.install(*options, *cell.requirements(kernels=kernels))
    except nox.command.CommandFailed:
        # A cell that cannot be installed is untestable (125), which a bisect skips; say so in
        # the install record rather than only in nox's log.
        session.run(
            "humming-matrix", "session", "--install-failed", name, env=_session_env(session, name)
        )
        raise


def _session_env(session: nox.Session, name: str) -> dict[str, str]:
    location = Path(str(session.virtualenv.location))
    return {
        "HUMMING_MATRIX_SESSION": name,
        "HUMMING_MATRIX_INSTALL_RECORD": str(location / RECORD_NAME),
        "HUMMING_CACHE_DIR": str(location / "humming-cache"),
    }


def _cell_session(cell: Cell) -> None:
    def run_cell(session: nox.Session) -> None:
        _install_cell(session, cell, cell.session, kernels=False)
        session.run(
            "humming-matrix",
            "session",
            "--results",
            str(RESULTS),
            "--default-config-list",
            str(DEFAULT_CONFIG_LIST),
            cell.session,
            "--",
            *session.posargs,
            env=_session_env(session, cell.session),
        )

    run_cell.__doc__ = cell.description
    nox.session(name=cell.session, python=cell.python, tags=list(cell.tags))(run_cell)


def _kernels_session(cell: Cell) -> None:
    def run_kernels(session: nox.Session) -> None:
        _install_cell(session, cell, cell.kernels_session, kernels=True)
        args = list(session.posargs)
        if "--results" not in args:
            args += ["--results", str(RESULTS)]
        session.run(
            "humming-matrix",
            "session",
            "--kernels",
            cell.kernels_session,
            "--",
            *args,
            env=_session_env(session, cell.kernels_session),
        )

    run_kernels.__doc__ = cell.kernels_description
    nox.session(name=cell.kernels_session, python=cell.python, tags=["kernels"])(run_kernels)


try:
    _MATRIX = load_matrix()
except MatrixError as exc:
    # Bad matrix data is an input error: one line naming file and key, exit 2, no traceback.
    print(f"nox: error: {exc}", file=sys.stderr)
    raise SystemExit(2) from None
for _cell in _MATRIX.session_cells(os.environ.get(EXTRA_VERSIONS_ENV, "").split(",")):
    _cell_session(_cell)
    if _cell.tags:  # the `-<default variant>` alias gets no second kernels session
        _kernels_session(_cell)


def _cli(session: nox.Session, command: str) -> None:
    session.install(str(REPO))
    session.run("humming-matrix", command, *session.posargs)


@nox.session(tags=["store"])
def report(session: nox.Session) -> None:
    """Render the result store: humming-matrix report -- DIR [--markdown ...]."""
    _cli(session, "report")


@nox.session
def bisect(session: nox.Session) -> None:
    """Find the first regressing humming-kernels release: humming-matrix bisect -- --good V ..."""
    _cli(session, "bisect")


@nox.session
def premerge(session: nox.Session) -> None:
    """Gate a requirements/cuda.txt change: humming-matrix premerge -- --base REF."""
    _cli(session, "premerge")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (no GPU, no real vLLM): pytest with posargs."""
    session.install("-e", f"{REPO}[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy --strict."""
    session.install("-e", f"{REPO}[dev]")
    session.run("ruff", "check", "src", "tests", "noxfile.py", "benchmarks")
    session.run("mypy")


# --- smoke: the main job on any machine without a GPU (docs/smoke.md) --------------------------

SMOKE = REPO / "smoke"
SMOKE_CELL = "humming-0.1.19-cpu"
SMOKE_RESULTS = REPO / "results" / "smoke"
SMOKE_MODEL = SMOKE / "models" / "tiny-llama"


def _pip_find_links() -> list[Path]:
    """The directories pip is told to find wheels in (PIP_FIND_LINKS, pip's config files): uv
    does not look there by itself, and CPU machines may keep torch's CPU wheel in one."""
    import subprocess

    values = [os.environ.get("PIP_FIND_LINKS", "")]
    try:
        listed = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True, text=True, timeout=60, check=False,
        ).stdout
    except OSError:
        listed = ""
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".find-links"):
            values.append(value.strip().strip("'\""))
    dirs: list[Path] = []
    for value in values:
        for entry in value.split():
            path = Path(entry.removeprefix("file://"))
            if path.is_dir() and path not in dirs:
                dirs.append(path)
    return dirs


def _torch_source(torch: str, python_tag: str) -> list[str]:
    """uv options that make `torch==<torch>` (a CPU build, `+cpu`) resolvable: a local wheel
    for this interpreter if pip knows of one, else PyTorch's CPU index (uv's torch backend)."""
    for directory in _pip_find_links():
        if any(directory.glob(f"torch-{torch}-{python_tag}-*.whl")):
            return ["--find-links", str(directory)]
    return ["--torch-backend", "cpu"]


def _smoke_store(posargs: list[str]) -> Path:
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--results", type=Path, default=SMOKE_RESULTS)
    known, _ = parser.parse_known_args(posargs)
    return Path(known.results).resolve()


@nox.session(venv_backend="uv")
def smoke(session: nox.Session) -> None:
    """The main job with no GPU: vLLM's CPU build serves a tiny Llama built here (nothing from a
    model hub); install, preflight, GSM8K run and report. -- RUN_ARGS go to `humming-matrix run`
    (e.g. --results DIR; default results/smoke). docs/smoke.md."""
    cell = load_matrix(SMOKE / "matrix.toml").cell(SMOKE_CELL)
    store = _smoke_store(session.posargs)
    env = {**_session_env(session, cell.session), "HUMMING_MATRIX_FILE": str(SMOKE / "matrix.toml")}
    # uv keys a local project's build on its pyproject.toml, not its sources: rebuild it.
    session.install("--reinstall-package", "humming-matrix", str(REPO))
    tag = str(session.run(
        "python", "-c", "import sys; print('cp%d%d' % sys.version_info[:2])", silent=True
    )).strip()
    source = _torch_source(str(cell.torch), tag)
    session.log(f"torch {cell.torch} for {tag}: {' '.join(source)}")
    try:
        session.install(
            "--excludes", str(SMOKE / "excludes.txt"), *source, *cell.requirements()
        )
    except nox.command.CommandFailed:
        session.run("humming-matrix", "session", "--install-failed", cell.session, env=env)
        raise
    session.run("python", str(SMOKE / "vllm_shim.py"))
    session.run("python", str(SMOKE / "tiny_llama.py"), "--out", str(SMOKE_MODEL), env=env)
    before = set(store.glob("gsm8k__*.json"))
    session.run(
        "humming-matrix", "session", "--results", str(store),
        "--default-config-list", str(SMOKE / "config.txt"), cell.session, "--", *session.posargs,
        env=env,
    )
    reports = [store / "report.md", store / "junit.xml", store / "report.html"]
    session.run(
        "humming-matrix", "report", str(store), "--markdown", str(reports[0]),
        "--junit", str(reports[1]), "--html", str(reports[2]),
    )
    if store == SMOKE_RESULTS:
        # Reports sit beside the records (`report` reads only *.json); git ignores it all.
        (store / ".gitignore").write_text("*\n", encoding="utf-8")
    for record in sorted(set(store.glob("gsm8k__*.json")) - before):
        session.log(f"smoke: record {record}")
    session.log(f"smoke: install record {env['HUMMING_MATRIX_INSTALL_RECORD']}")
    session.log(f"smoke: report {' '.join(str(p) for p in reports)}")
