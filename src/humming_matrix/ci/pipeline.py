"""The matrix as CI jobs: which cells to run, and what each job needs (GPUs, command, artifacts).

CI is the distributed engine; this module only decides the jobs. `buildkite.py` and
`github_actions.py` render them in each service's format. One job per cell: it runs the cell's
nox session with the selected configs (through `ci_job`, so the job exits with the cell's own
status) and writes records under `<results>/<session>/`; record file names are unique per run
and host (`results.py`), so the artifacts of all jobs merge into one folder by plain copying and
`humming-matrix report` reads that folder like one machine's store.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from packaging.version import InvalidVersion, Version

from humming_matrix.errors import UsageError
from humming_matrix.matrix.cells import EXTRA_VERSIONS_ENV, Cell, Matrix
from humming_matrix.suite.config import EvalConfig, load_configs

DEFAULT_CONFIG_LIST = Path("configs/gsm8k/humming/config.txt")
DEFAULT_RESULTS = "results/ci"
# ci_job, not plain nox: nox exits 1 for every failure, and CI must see 3 to retry.
DEFAULT_COMMAND = "PYTHONPATH=src python3 -m humming_matrix.ci.ci_job {session} -- {run_args}"
# A job's exit status that means "the machine failed us" (DESIGN.md): the only one retried.
INFRASTRUCTURE_EXIT = 3


class Format(str, Enum):
    BUILDKITE = "buildkite"
    GITHUB = "github"


@dataclass(frozen=True)
class Selection:
    """Which cells to run. Empty means no filter; a cell must pass every non-empty filter, and
    any one of the tags (as `nox -t` does)."""

    versions: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobSettings:
    """What every job shares."""

    configs: tuple[Path, ...] = ()
    config_lists: tuple[Path, ...] = ()
    results: str = DEFAULT_RESULTS
    command: str = DEFAULT_COMMAND  # placeholders: {session}, {run_args}, {results}
    optional: tuple[str, ...] = ()  # session names or tags whose failure must not fail CI
    extra_run_args: tuple[str, ...] = ()  # e.g. ("--limit", "100")

    def config_args(self) -> tuple[str, ...]:
        args: list[str] = []
        for path in self.configs:
            args += ["--config", str(path)]
        for path in self.config_lists:
            args += ["--config-list", str(path)]
        return tuple(args)


@dataclass(frozen=True)
class Job:
    """One CI job: one matrix cell with the selected configs."""

    session: str
    key: str  # a step key / artifact name: letters, digits, `-` and `_` only
    humming: str
    vllm: str | None
    torch: str | None
    variant: str
    gpus: int  # 0: needs no GPU (a recipe that serves from a test double)
    optional: bool
    command: str
    results: str  # where this job writes its records (relative to the checkout)
    configs: tuple[str, ...] = field(default=())

    @property
    def label(self) -> str:
        gpu = f"{self.gpus} GPU" if self.gpus else "CPU"
        return f"{self.session} ({gpu})"


def step_key(session: str) -> str:
    """Buildkite step keys allow no dots: `humming-0.1.6` -> `humming-0_1_6`."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", session)


def distinct_cells(matrix: Matrix) -> tuple[Cell, ...]:
    """Every environment once: `Matrix.cells()` also lists `humming-<v>-<default variant>`, an
    alias of `humming-<v>` (the same environment), which would run the same work twice."""
    return tuple(
        cell
        for cell in matrix.cells()
        if cell.is_default_variant or cell.variant.name != cell.default_variant_name
    )


def select_cells(matrix: Matrix, selection: Selection) -> tuple[Cell, ...]:
    cells = distinct_cells(matrix)
    known_variants = {c.variant.name for c in cells}
    for name in selection.variants:
        if name not in known_variants:
            raise UsageError(
                f"--variant {name}: no such variant in {matrix.path}"
                f" (known: {', '.join(sorted(known_variants))})"
            )
    known_tags = {t for c in cells for t in c.tags}
    for tag in selection.tags:
        if tag not in known_tags:
            raise UsageError(f"--tag {tag}: no cell in {matrix.path} has this tag")

    chosen: list[Cell] = []
    for cell in cells:
        if selection.variants and cell.variant.name not in selection.variants:
            continue
        if selection.tags and not set(selection.tags) & set(cell.tags):
            continue
        chosen.append(cell)
    if selection.versions:
        wanted = [_version(v) for v in selection.versions]
        listed = {c.humming for c in cells}
        chosen = [c for c in chosen if c.humming in wanted]
        # A release no list names still has a stack by its pairing's range (as a bisect meets
        # it); asking for it by name runs it under the default variant or the named ones.
        for version in wanted:
            if version in listed:
                continue
            if selection.variants:
                chosen.extend(matrix.cell_for(version, v) for v in selection.variants)
            else:
                chosen.append(matrix.cell_for(version))
    if not chosen:
        raise UsageError(f"the selection matches no cell of {matrix.path}")
    return tuple(chosen)


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise UsageError(f"--version {text}: not a version") from None


def gpus_for(cell: Cell, configs: Sequence[EvalConfig]) -> int:
    """The configs' largest tensor parallel size; none where the recipe needs no GPU at all."""
    if cell.gpus == 0:
        return 0
    return max([cell.gpus, *(c.tensor_parallel_size for c in configs)])


def is_optional(cell: Cell, marks: Iterable[str]) -> bool:
    """Marked optional in the matrix data, or by `--optional` (session name or tag)."""
    names = set(marks)
    return cell.optional or cell.session in names or bool(names & set(cell.tags))


def plan_jobs(cells: Sequence[Cell], settings: JobSettings) -> tuple[Job, ...]:
    lists = settings.config_lists or (() if settings.configs else (DEFAULT_CONFIG_LIST,))
    settings = JobSettings(
        configs=settings.configs,
        config_lists=lists,
        results=settings.results,
        command=settings.command,
        optional=settings.optional,
        extra_run_args=settings.extra_run_args,
    )
    configs = load_configs(list(settings.configs), list(settings.config_lists))
    known_marks = {c.session for c in cells} | {t for c in cells for t in c.tags}
    for mark in settings.optional:
        if mark not in known_marks:
            raise UsageError(f"--optional {mark}: no selected cell has this session name or tag")
    jobs: list[Job] = []
    keys: dict[str, str] = {}
    for cell in cells:
        key = step_key(cell.session)
        if key in keys:
            raise UsageError(f"sessions {keys[key]} and {cell.session} map to one step key {key}")
        keys[key] = cell.session
        results = f"{settings.results.rstrip('/')}/{cell.session}"
        run_args = (*settings.config_args(), "--results", results, *settings.extra_run_args)
        command = _command(
            settings.command,
            session=shlex.quote(cell.session),
            run_args=shlex.join(run_args),
            results=shlex.quote(results),
        )
        if not cell.listed:
            # The noxfile generates sessions for unlisted releases only when asked to.
            command = f"export {EXTRA_VERSIONS_ENV}={shlex.quote(str(cell.humming))}; {command}"
        jobs.append(
            Job(
                session=cell.session,
                key=key,
                humming=str(cell.humming),
                vllm=str(cell.vllm) if cell.vllm else None,
                torch=str(cell.torch) if cell.torch else None,
                variant=cell.variant.name,
                gpus=gpus_for(cell, configs),
                optional=is_optional(cell, settings.optional),
                command=command,
                results=results,
                configs=tuple(c.name for c in configs),
            )
        )
    return tuple(jobs)


def _command(template: str, **values: str) -> str:
    try:
        return template.format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        raise UsageError(
            f"--command {template!r}: bad placeholder {exc} (known: {', '.join(values)};"
            " write other braces doubled)"
        ) from None


def parse_env(pairs: Sequence[str]) -> Mapping[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UsageError(f"--env {pair}: expected NAME=VALUE")
        env[name] = value
    return env
