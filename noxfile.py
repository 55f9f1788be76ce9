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
