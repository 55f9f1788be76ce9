"""humming-matrix sessions, generated from configs/matrix.toml (docs/matrix.md: names, variants,
adding a version). `nox -s humming-<version>[-<variant>] -- RUN_ARGS`; RUN_ARGS go to
`humming-matrix run`. nox exits 0/1; the session's own code (0/1/2/3/125) is in the log and in
`.nox/<session>/humming-install.json`."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nox
import nox.command

REPO = Path(__file__).resolve().parent
# The matrix module needs only the standard library and packaging, which nox itself brings.
sys.path.insert(0, str(REPO / "src"))

from humming_matrix.errors import HummingMatrixError  # noqa: E402
from humming_matrix.matrix.cells import (  # noqa: E402
    CHECKOUT_CONFIG_LIST,
    CHECKOUT_MATRIX,
    CHECKOUT_NOXFILE,
    EXTRA_VERSIONS_ENV,
    Cell,
    load_matrix,
    matrix_path,
    sessions_requested,
)
from humming_matrix.matrix.installation import RECORD_NAME  # noqa: E402

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"

RESULTS = REPO / "results" / "local"
DEFAULT_CONFIG_LIST = REPO / CHECKOUT_CONFIG_LIST


def _install_cell(session: nox.Session, cell: Cell, name: str, *, kernels: bool) -> list[str]:
    """Install the cell; returns the session options that say how long it took."""
    started = time.monotonic()
    # The kernel tier's own extra (numpy); a GSM8K cell needs only the core package.
    session.install(f"{REPO}[kernels]" if kernels else str(REPO))
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
        _run_session(session, name, ["--install-failed", *_took(started)])
        raise
    return _took(started)


def _took(started: float) -> list[str]:
    return ["--install-seconds", f"{time.monotonic() - started:.3f}"]


def _run_session(
    session: nox.Session, name: str, options: list[str], run_args: list[str] | None = None
) -> None:
    """`humming-matrix session` with this noxfile's matrix named explicitly: the session installs
    humming-matrix from this checkout, not editable, so the installed command has no checkout
    around it to find the matrix (or the default config list) in."""
    session.run(
        "humming-matrix",
        "session",
        "--matrix",
        str(MATRIX_FILE),
        *options,
        name,
        "--",
        *(run_args or []),
        env=_session_env(session, name),
    )


def _session_env(session: nox.Session, name: str) -> dict[str, str]:
    location = Path(str(session.virtualenv.location))
    return {
        "HUMMING_MATRIX_SESSION": name,
        "HUMMING_MATRIX_INSTALL_RECORD": str(location / RECORD_NAME),
        "HUMMING_CACHE_DIR": str(location / "humming-cache"),
    }


def _cell_session(cell: Cell) -> None:
    def run_cell(session: nox.Session) -> None:
        took = _install_cell(session, cell, cell.session, kernels=False)
        _run_session(
            session,
            cell.session,
            [*took, "--results", str(RESULTS), "--default-config-list", str(DEFAULT_CONFIG_LIST)],
            session.posargs,
        )

    run_cell.__doc__ = cell.description
    nox.session(name=cell.session, python=cell.python, tags=list(cell.tags))(run_cell)


def _kernels_session(cell: Cell) -> None:
    def run_kernels(session: nox.Session) -> None:
        took = _install_cell(session, cell, cell.kernels_session, kernels=True)
        args = list(session.posargs)
        if "--results" not in args:
            args += ["--results", str(RESULTS)]
        _run_session(session, cell.kernels_session, [*took, "--kernels"], args)

    run_kernels.__doc__ = cell.kernels_description
    nox.session(name=cell.kernels_session, python=cell.python, tags=["kernels"])(run_kernels)


try:
    # $HUMMING_MATRIX_FILE, else this checkout's matrix (never one found from elsewhere).
    _MATRIX = load_matrix(matrix_path(default=REPO / CHECKOUT_MATRIX))
except HummingMatrixError as exc:
    # Bad matrix data is an input error: one line naming file and key, exit 2, no traceback.
    print(f"nox: error: {exc}", file=sys.stderr)
    raise SystemExit(2) from None
MATRIX_FILE = _MATRIX.path.resolve()
# `nox -s humming-<v>` for a release a range covers but no list names gets its sessions too.
_REQUESTED = sessions_requested(sys.argv[1:], os.environ)
for _note in _MATRIX.uncovered(_REQUESTED):
    print(f"nox: note: {_note}", file=sys.stderr)
try:
    _CELLS = _MATRIX.session_cells(os.environ.get(EXTRA_VERSIONS_ENV, "").split(","), _REQUESTED)
except HummingMatrixError as exc:
    print(f"nox: error: {exc}", file=sys.stderr)
    raise SystemExit(2) from None
for _cell in _CELLS:
    _cell_session(_cell)
    if _cell.tags:  # the `-<default variant>` alias gets no second kernels session
        _kernels_session(_cell)


def _cli(session: nox.Session, command: str, *defaults: str) -> None:
    session.install(str(REPO))
    # The defaults come first, so the same option in posargs wins.
    session.run("humming-matrix", command, *defaults, *session.posargs)


@nox.session(tags=["store"])
def report(session: nox.Session) -> None:
    """Render the result store: humming-matrix report -- DIR [--markdown ...]."""
    _cli(session, "report")


@nox.session
def bisect(session: nox.Session) -> None:
    """Find the first regressing humming-kernels release: humming-matrix bisect -- --good V ..."""
    _cli(session, "bisect", "--matrix", str(MATRIX_FILE), "--noxfile", str(REPO / CHECKOUT_NOXFILE))


@nox.session
def premerge(session: nox.Session) -> None:
    """Gate a requirements/cuda.txt change: humming-matrix premerge -- --base REF."""
    _cli(
        session, "premerge", "--matrix", str(MATRIX_FILE), "--noxfile", str(REPO / CHECKOUT_NOXFILE)
    )


@nox.session(name="preflight-real-vllm", tags=["vllm"])
def preflight_real_vllm(session: nox.Session) -> None:
    """Opt-in, heavy: the CPU preflight against real vLLM CUDA wheels (0.24.0 + torch 2.11.0,
    0.33.0 + torch 2.14.0) installed by matrix sessions; several GB of wheels, not for every CI
    run (8-12 min on 2 cores with a warm uv cache; docs/preflight.md)."""
    session.install("-e", f"{REPO}[test]")
    session.run(
        "pytest",
        "-m",
        "vllm",
        "-p",
        "no:cacheprovider",
        str(REPO / "tests" / "integration" / "test_nox_real_vllm.py"),
        *session.posargs,
    )


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
SMOKE_MATRIX = SMOKE / "matrix.toml"
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
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
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
    cell = load_matrix(SMOKE_MATRIX).cell(SMOKE_CELL)
    store = _smoke_store(session.posargs)
    env = _session_env(session, cell.session)
    started = time.monotonic()
    # uv keys a local project's build on its pyproject.toml, not its sources: rebuild it.
    session.install("--reinstall-package", "humming-matrix", str(REPO))
    tag = str(
        session.run(
            "python", "-c", "import sys; print('cp%d%d' % sys.version_info[:2])", silent=True
        )
    ).strip()
    source = _torch_source(str(cell.torch), tag)
    session.log(f"torch {cell.torch} for {tag}: {' '.join(source)}")
    try:
        session.install("--excludes", str(SMOKE / "excludes.txt"), *source, *cell.requirements())
    except nox.command.CommandFailed:
        session.run(
            "humming-matrix",
            "session",
            "--matrix",
            str(SMOKE_MATRIX),
            "--install-failed",
            "--install-seconds",
            f"{time.monotonic() - started:.3f}",
            cell.session,
            env=env,
        )
        raise
    session.run("python", str(SMOKE / "vllm_shim.py"))
    took = f"{time.monotonic() - started:.3f}"
    session.run("python", str(SMOKE / "tiny_llama.py"), "--out", str(SMOKE_MODEL), env=env)
    before = set(store.glob("gsm8k__*.json"))
    session.run(
        "humming-matrix",
        "session",
        "--matrix",
        str(SMOKE_MATRIX),
        "--install-seconds",
        took,
        "--results",
        str(store),
        "--default-config-list",
        str(SMOKE / "config.txt"),
        cell.session,
        "--",
        *session.posargs,
        env=env,
    )
    reports = [store / "report.md", store / "junit.xml", store / "report.html"]
    session.run(
        "humming-matrix",
        "report",
        str(store),
        "--markdown",
        str(reports[0]),
        "--junit",
        str(reports[1]),
        "--html",
        str(reports[2]),
    )
    if store == SMOKE_RESULTS:
        # Reports sit beside the records (`report` reads only *.json); git ignores it all.
        (store / ".gitignore").write_text("*\n", encoding="utf-8")
    for record in sorted(set(store.glob("gsm8k__*.json")) - before):
        session.log(f"smoke: record {record}")
    session.log(f"smoke: install record {env['HUMMING_MATRIX_INSTALL_RECORD']}")
    session.log(f"smoke: report {' '.join(str(p) for p in reports)}")
