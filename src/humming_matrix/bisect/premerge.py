"""The pre-merge gate: what changed among the guarded pins, which cells that makes, the verdict.

    requirements/cuda.txt at merge-base(BASE, HEAD) and at HEAD  (git, includes followed)
      -> changes among humming-kernels, torch, vllm
      -> old cell and new cell (the matrix's pairing of each side's humming-kernels pin)
      -> both probed (stored runs reused), compared paired -> pass / regression / infrastructure

Nothing guarded changed: pass at once, saying so. A side the matrix cannot reproduce (its
vLLM/torch pins differ from what the matrix pairs with its humming version), a pin that cannot be
installed, or a run that never produced records is an infrastructure failure with the reason,
never a pass.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePosixPath
from typing import Protocol

from packaging.version import InvalidVersion, Version

from humming_matrix.bisect.driver import judge_crash
from humming_matrix.bisect.paired_judge import Judgement, PairedJudge, judge_failed_start, stack
from humming_matrix.bisect.search import Verdict
from humming_matrix.bisect.version_runner import ProbeResult, ProbeStatus
from humming_matrix.errors import InfrastructureError, RequirementsError, UsageError
from humming_matrix.matrix.cells import Cell, Matrix
from humming_matrix.matrix.requirements_file import Pin, parse_requirements

GUARDED = ("humming-kernels", "torch", "vllm")
HUMMING = "humming-kernels"


class GateStatus(str, Enum):
    NOTHING_TO_CHECK = "nothing to check"
    PASS = "pass"
    REGRESSION = "regression"
    INFRASTRUCTURE = "infrastructure failure"


@dataclass(frozen=True)
class PinChange:
    name: str
    old: tuple[Pin, ...]
    new: tuple[Pin, ...]

    def describe(self) -> str:
        def side(pins: tuple[Pin, ...]) -> str:
            return " + ".join(p.text for p in pins) or "(absent)"

        return f"{side(self.old)} -> {side(self.new)}"


def diff_pins(
    old: Sequence[Pin], new: Sequence[Pin], guarded: Sequence[str] = GUARDED
) -> tuple[PinChange, ...]:
    """The guarded names whose requirement lines install something different."""
    changes = []
    for name in guarded:
        before = tuple(p for p in old if p.name == name)
        after = tuple(p for p in new if p.name == name)
        if sorted(p.key for p in before) != sorted(p.key for p in after):
            changes.append(PinChange(name, before, after))
    return tuple(changes)


# git seam: argv after `git -C REPO` -> stdout; raises GitError with git's message.
class GitError(Exception):
    pass


GitRunner = Callable[[Sequence[str]], str]


def git_runner(repo: Path) -> GitRunner:
    def run(args: Sequence[str]) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(repo), *args],
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
        except FileNotFoundError:
            raise UsageError("git is not installed") from None
        if done.returncode != 0:
            raise GitError(
                done.stderr.strip().splitlines()[-1]
                if done.stderr.strip()
                else f"git {' '.join(args)} exited {done.returncode}"
            )
        return done.stdout

    return run


@dataclass(frozen=True)
class Revisions:
    base: str  # the merge base's commit
    head: str


def resolve_revisions(git: GitRunner, base: str, head: str) -> Revisions:
    try:
        head_sha = git(["rev-parse", "--verify", f"{head}^{{commit}}"]).strip()
    except GitError as exc:
        raise UsageError(f"--head {head}: {exc}") from None
    try:
        git(["rev-parse", "--verify", f"{base}^{{commit}}"])
        merge_base = git(["merge-base", base, head_sha]).strip()
    except GitError as exc:
        raise UsageError(f"--base {base}: {exc}") from None
    return Revisions(merge_base, head_sha)


def pins_at(git: GitRunner, revision: str, path: PurePosixPath) -> tuple[Pin, ...]:
    def read(file: PurePosixPath) -> str:
        try:
            return git(["show", f"{revision}:{file}"])
        except GitError:
            raise FileNotFoundError(str(file)) from None

    try:
        return parse_requirements(path, read)
    except RequirementsError as exc:
        raise RequirementsError(f"{revision[:12]}:{exc.path}", exc.key, exc.detail) from None


def humming_version(pins: Sequence[Pin], where: str) -> Version:
    found = [p for p in pins if p.name == HUMMING]
    versions = {p.exact_version for p in found}
    if not found:
        raise InfrastructureError(f"{where}: no {HUMMING} pin, nothing to compare with")
    if None in versions or len(versions) != 1:
        lines = ", ".join(f"{p.source} ({p.text})" for p in found)
        raise RequirementsError(where, HUMMING, f"needs exactly one `==` version to gate: {lines}")
    text = versions.pop()
    assert text is not None
    try:
        return Version(text)
    except InvalidVersion:
        raise RequirementsError(where, HUMMING, f"not a version: {text!r}") from None


def _mismatches(cell: Cell, pins: Sequence[Pin]) -> list[str]:
    """Where a side's vllm/torch pins differ from what the matrix pairs with its humming."""
    out = []
    for name, paired in (("vllm", cell.vllm), ("torch", cell.torch)):
        exact = {p.exact_version for p in pins if p.name == name} - {None}
        if paired is None or not exact:
            continue
        pinned = {Version(v).public for v in exact if v is not None}
        if pinned != {paired.public}:
            out.append(
                f"{name} is pinned to {', '.join(sorted(pinned))} but the matrix pairs "
                f"{HUMMING} {cell.humming} with {name} {paired}"
            )
    return out


@dataclass(frozen=True)
class Cells:
    old: Cell
    new: Cell


def cells_for(
    matrix: Matrix, old: Sequence[Pin], new: Sequence[Pin], variant: str | None, file: str
) -> Cells:
    old_cell = matrix.cell_for(humming_version(old, f"{file} at the merge base"), variant)
    new_cell = matrix.cell_for(humming_version(new, f"{file} at HEAD"), variant)
    problems = [f"old side: {m}" for m in _mismatches(old_cell, old)]
    problems += [f"new side: {m}" for m in _mismatches(new_cell, new)]
    if problems:
        raise InfrastructureError(
            f"the matrix ({matrix.path}) cannot build these cells: {'; '.join(problems)}; "
            "add a pairing for them (docs/matrix.md)"
        )
    if old_cell.session == new_cell.session:
        raise InfrastructureError(
            f"the change maps old and new to the same matrix cell {old_cell.session}: the "
            "matrix varies humming-kernels only, so this change cannot be tested by it"
        )
    return Cells(old_cell, new_cell)


@dataclass(frozen=True)
class GateResult:
    status: GateStatus
    file: str
    revisions: Revisions
    changes: tuple[PinChange, ...]
    reason: str
    cells: Cells | None = None
    old_probe: ProbeResult | None = None
    new_probe: ProbeResult | None = None
    judgement: Judgement | None = None


class ProbesCells(Protocol):
    """What the gate needs of a prober (`probe.Prober`)."""

    def probe_many(self, cells: Sequence[Cell]) -> list[ProbeResult]: ...


def run_gate(
    cells: Cells, prober: ProbesCells, judge: PairedJudge
) -> tuple[ProbeResult, ProbeResult, Judgement]:
    """Probe the old cell (usually a stored baseline) and the new one, and judge them. A new pin
    whose server never becomes ready where the old one started in the same environment is bad
    (the bisect's rule, `judge_failed_start`)."""
    old_probe, new_probe = prober.probe_many([cells.old, cells.new])
    if new_probe.status is ProbeStatus.START_FAILED and old_probe.testable:
        neighbour = str(cells.old.humming) if stack(cells.old) == stack(cells.new) else None
        judgement = judge_failed_start(new_probe, cells.new, neighbour)
        if judgement.verdict is Verdict.BAD:
            return old_probe, new_probe, judgement
    if new_probe.status is ProbeStatus.CRASHED and old_probe.testable:
        return old_probe, new_probe, judge_crash(new_probe)
    for label, probe, cell in (("old", old_probe, cells.old), ("new", new_probe, cells.new)):
        if not probe.testable:
            raise InfrastructureError(
                f"the {label} pin {HUMMING}=={cell.humming} could not be tested: {probe.reason}"
            )
    return old_probe, new_probe, judge(old_probe.records, new_probe.records)


def markdown(result: GateResult) -> str:
    title = {
        GateStatus.NOTHING_TO_CHECK: "nothing to check",
        GateStatus.PASS: "pass",
        GateStatus.REGRESSION: "REGRESSION",
        GateStatus.INFRASTRUCTURE: "infrastructure failure (not a pass)",
    }[result.status]
    out = [f"## humming-kernels pre-merge gate: {title}", ""]
    out.append(
        f"`{result.file}` at merge base `{result.revisions.base[:12]}` vs HEAD "
        f"`{result.revisions.head[:12]}`."
    )
    out.append("")
    if result.changes:
        out += ["| pin | change |", "| --- | --- |"]
        out += [f"| {c.name} | {c.describe()} |" for c in result.changes]
        out.append("")
    out += [result.reason, ""]
    if result.cells and result.old_probe and result.new_probe:
        out += ["| side | session | records |", "| --- | --- | --- |"]
        for label, probe in (("old", result.old_probe), ("new", result.new_probe)):
            how = "stored (reused)" if probe.status is ProbeStatus.REUSED else "ran now"
            out.append(f"| {label} | `{probe.session}` | {how} |")
        out.append("")
    if result.judgement is not None:
        out += ["| config | verdict | comparison |", "| --- | --- | --- |"]
        for c in result.judgement.comparisons:
            line = c.line().replace("|", "\\|")
            out.append(f"| {c.config} | {c.verdict.value} | {line} |")
        out.append("")
    return "\n".join(out)
