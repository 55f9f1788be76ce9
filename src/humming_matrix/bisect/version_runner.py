"""Test one humming-kernels version: its matrix session through nox, or its records already stored.

A probe answers "what did this version score on the suite?" with the records of a complete run,
or says why there are none. It never judges: bisect and pre-merge compare what it returns.

The store is the interface (DESIGN.md): a probe first looks for complete records of every config
from the same session (cell), the same config file (sha256), the same question count and the same
GPU model, and runs nothing when it finds them. Otherwise it runs `nox -s <session> -- run-args`
and reads back what the session wrote. nox exits 1 whatever went wrong inside a session, so the
exit code says little: a probe that ends without a complete record for every config is
untestable (install failure, failed preflight, server never ready), with the tail of nox's output
as the reason, and never counts as bad.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from humming_matrix import environment, process_group
from humming_matrix.ci.slots import DEVICES_ENV, SLOT_DIR_ENV, SlotPool
from humming_matrix.divergence.passes import DIVERGENCE_ONLY_ENV
from humming_matrix.divergence.record import load_divergence_record
from humming_matrix.divergence.record import record_filename as divergence_record_filename
from humming_matrix.errors import RecordError, UsageError
from humming_matrix.kernels.record import RECORD_NAME as KERNEL_RECORD_NAME
from humming_matrix.kernels.record import load_kernel_record
from humming_matrix.matrix.cells import EXTRA_VERSIONS_ENV, Cell
from humming_matrix.store.results import (
    Gsm8kRecord,
    RecordKind,
    load_gsm8k_record,
    new_run_id,
    record_filename,
)
from humming_matrix.suite.config import EvalConfig
from humming_matrix.suite.server import log_tail

DEFAULT_PROBE_TIMEOUT_S = 4 * 3600.0


class ProbeStatus(str, Enum):
    RAN = "ran"
    REUSED = "reused"  # every record came from the store; nothing ran
    UNTESTABLE = "untestable"
    # The session ran, and the server of a config never became ready: `records` holds the
    # records of that failed start. Bad or untestable depends on its neighbours (the judge).
    START_FAILED = "start_failed"
    # The server became ready, served, and died with a CUDA error in its log (`server.crash` in
    # the record, `records` holds it): evidence against the kernel, judged bad.
    CRASHED = "crashed"


class Tier(str, Enum):
    GSM8K = "gsm8k"  # `humming-<version>` sessions: the GSM8K config suite through vllm serve
    KERNELS = "kernels"  # `kernels-<version>` sessions: the GEMM numerics probe, no vLLM
    # `humming-<version>` sessions with only their divergence stage: an A/A pair of divergence
    # records per config (docs/divergence.md)
    DIVERGENCE = "divergence"


KERNELS_RECORD = "kernels"  # the name a kernel record goes by in a probe's records
# The other runs of a kernel probe that times each release several times (`Suite.kernel_runs`):
# "kernels (run 2)", ... beside the newest, KERNELS_RECORD.
KERNELS_RUN_SUFFIX = " (run {})"


def kernel_runs(records: Mapping[str, Path]) -> list[Path]:
    """A kernel probe's records (it holds no other): the newest run, then the others."""
    return list(records.values())


# A divergence probe's records: config name -> its newest record, and config name + this suffix
# -> the other pass of the same session (the A/A repeat the good version's floor comes from).
DIVERGENCE_REPEAT_SUFFIX = " (repeat)"


@dataclass(frozen=True)
class Suite:
    """What every probe runs: the configs, the run arguments that select them, the store."""

    configs: tuple[EvalConfig, ...]
    run_args: tuple[str, ...]  # `--config-list FILE` / `--config FILE`, as `run` takes them
    store: Path
    limit: int | None = None
    tier: Tier = Tier.GSM8K
    # Kernel tier: runs of the GEMM probe a version needs. Two give the between-run spread that
    # a `slower` must exceed to count (bisect --fail-on-slowdown); one run's spread misses it.
    kernel_runs: int = 1

    def session(self, cell: Cell) -> str:
        return cell.kernels_session if self.tier is Tier.KERNELS else cell.session

    def question_count(self, config: EvalConfig) -> int:
        return min(config.num_questions, self.limit) if self.limit else config.num_questions


@dataclass(frozen=True)
class ProbeResult:
    version: str
    session: str
    status: ProbeStatus
    # config name -> the record's path, for every config of the suite (empty when untestable)
    records: Mapping[str, Path] = field(default_factory=dict)
    reason: str = ""
    log: Path | None = None
    duration: float = 0.0

    @property
    def testable(self) -> bool:
        """It has answers to judge."""
        return self.status in (ProbeStatus.RAN, ProbeStatus.REUSED)


class SessionRunner(Protocol):
    """Runs one nox session; returns its exit code. Output goes to `log`."""

    def __call__(
        self, session: str, posargs: Sequence[str], env: Mapping[str, str], log: Path
    ) -> int: ...

    def stop_all(self) -> None:
        """Ask every session still running to stop (called from another thread)."""
        ...


class ProbeTimeoutError(Exception):
    """The session ran past its time limit (and was killed)."""


@dataclass(frozen=True)
class NoxRunner:
    """`nox -f NOXFILE -s SESSION -- POSARGS` in its own process group, killed whole on
    timeout or interruption, so no `vllm serve` outlives its probe."""

    noxfile: Path
    timeout: float = DEFAULT_PROBE_TIMEOUT_S
    envdir: Path | None = None  # nox's --envdir (default: .nox beside the noxfile)
    nox: tuple[str, ...] = field(default_factory=lambda: default_nox_command())
    grace: float = 30.0  # seconds between SIGTERM and SIGKILL when stopping the session
    _active: set[subprocess.Popen[bytes]] = field(default_factory=set, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    def stop_all(self) -> None:
        with self._lock:
            running = list(self._active)
        for process in running:
            # The thread waiting on it escalates to SIGKILL after the grace period.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)

    def __call__(
        self, session: str, posargs: Sequence[str], env: Mapping[str, str], log: Path
    ) -> int:
        argv = [*self.nox, "-f", str(self.noxfile), "-s", session]
        if self.envdir is not None:
            argv += ["--envdir", str(self.envdir)]
        argv += ["--", *posargs]
        log.parent.mkdir(parents=True, exist_ok=True)
        # Stopped whole also when nox itself is gone: a session's server may outlive it.
        with (
            log.open("w", encoding="utf-8") as out,
            process_group.group(
                argv,
                grace=self.grace,
                env=env,
                cwd=self.noxfile.parent,
                stdout=out,
                stderr=subprocess.STDOUT,
            ) as process,
        ):
            with self._lock:
                self._active.add(process)
            try:
                return process.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                raise ProbeTimeoutError(f"{session} ran past {self.timeout:g} s") from None
            finally:
                with self._lock:
                    self._active.discard(process)


def default_nox_command() -> tuple[str, ...]:
    """This interpreter's nox, else the first `nox` on PATH: inside the `bisect` nox session
    the session's venv has no nox, but the nox that started it is on PATH."""
    if importlib.util.find_spec("nox") is not None:
        return (sys.executable, "-m", "nox")
    found = shutil.which("nox")
    if found is None:
        raise UsageError("nox is not installed here (pip install nox)")
    return (found,)


def _reason_from(tail: str) -> str:
    """What went wrong, from nox's output: the session's own error line (`humming-matrix:
    error: ...`) and the last other error (an installer's, with uv's `cause:` line)."""
    lines = [
        line.strip()
        for line in tail.splitlines()
        # nox's own summary says only that the session failed, never why.
        if line.strip() and not re.match(r"nox > (Session .* (failed|was successful)|Ran )", line)
    ]
    ours = next((line for line in reversed(lines) if "humming-matrix: error:" in line), "")
    other = ""
    for marker in ("error:", "No solution found", "failed with exit"):
        for i in range(len(lines) - 1, -1, -1):
            if marker in lines[i] and "humming-matrix: error:" not in lines[i]:
                after = lines[i + 1] if i + 1 < len(lines) else ""
                other = f"{lines[i]}: {after}" if after.startswith("cause:") else lines[i]
                break
        if other:
            break
    found = [part for part in (ours.split("humming-matrix: error: ", 1)[-1], other) if part]
    return " | ".join(found) or (lines[-1] if lines else "no output")


class Prober:
    """Probes versions of one suite; `probe_many` runs several at once, one GPU slot each."""

    def __init__(
        self,
        suite: Suite,
        runner: SessionRunner,
        *,
        log_dir: Path,
        hardware: str | None = None,
        slots: SlotPool | None = None,
        base_env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.suite = suite
        self.runner = runner
        self.log_dir = log_dir
        self.hardware = hardware
        self.slots = slots
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.clock = clock
        self.sessions_run: list[str] = []  # what actually ran, in order (for the report)
        self._lock = threading.Lock()

    @classmethod
    def current_hardware(cls) -> str | None:
        found = environment.gpus()
        return found[0]["name"] if found else None

    def stored(self, cell: Cell) -> dict[str, Path] | None:
        """The newest complete record of each config from this cell, or None if one is missing."""
        if not self.suite.store.is_dir():
            return None
        if self.suite.tier is Tier.KERNELS:
            return self._stored_kernels(cell)
        if self.suite.tier is Tier.DIVERGENCE:
            return self._stored_divergence(cell)
        best: dict[str, tuple[str, Path]] = {}
        for config in self.suite.configs:
            # Record file names carry kind, config and version (results.record_filename): read
            # only the candidates, not every record in a store that grows with every run.
            pattern = record_filename(RecordKind.GSM8K, config.name, str(cell.humming), "*")
            for path, record in _readable_records(self.suite.store, pattern):
                if record.config.name != config.name or not self._reusable(record, config, cell):
                    continue
                if config.name not in best or record.run_id > best[config.name][0]:
                    best[config.name] = (record.run_id, path)
        if len(best) != len(self.suite.configs):
            return None
        return {name: path for name, (_, path) in best.items()}

    def _record_paths(self, cell: Cell) -> list[Path]:
        if self.suite.tier is not Tier.GSM8K or not self.suite.store.is_dir():
            return []
        return [
            path
            for config in self.suite.configs
            for path in self.suite.store.rglob(
                record_filename(RecordKind.GSM8K, config.name, str(cell.humming), "*")
            )
        ]

    def _written(self, cell: Cell, before: set[Path]) -> Iterator[tuple[str, Path, Gsm8kRecord]]:
        """(config, path, record) of each record this session wrote of a config of the suite,
        for this version; unreadable files are left out."""
        configs = {c.name: c for c in self.suite.configs}
        for path in sorted(set(self._record_paths(cell)) - before):
            try:
                record = load_gsm8k_record(path)
            except RecordError:
                continue
            config = configs.get(record.config.name)
            if (
                config is not None
                and record.humming_version == str(cell.humming)
                and record.config.sha256 == config.sha256
            ):
                yield config.name, path, record

    def _failed_starts(self, cell: Cell, before: set[Path]) -> dict[str, Path]:
        """Records this session wrote of servers that never became ready, per config."""
        out: dict[str, Path] = {}
        for name, path, record in self._written(cell, before):
            if record.start_failed:
                out.setdefault(name, path)
        return out

    def _crashes(self, cell: Cell, before: set[Path]) -> dict[str, Path]:
        """Records this session wrote of servers that crashed with a CUDA error, per config."""
        out: dict[str, Path] = {}
        for name, path, record in self._written(cell, before):
            crash = record.server.get("crash")
            if isinstance(crash, dict) and crash.get("cuda_error"):
                out.setdefault(name, path)
        return out

    def _stored_kernels(self, cell: Cell) -> dict[str, Path] | None:
        return self._newest_kernel_runs(self._usable_kernel_records(cell))

    def _newest_kernel_runs(self, usable: list[tuple[str, Path]]) -> dict[str, Path] | None:
        """The `kernel_runs` newest of these (run id, path) records, newest first."""
        if len(usable) < self.suite.kernel_runs:
            return None
        newest = sorted(usable, reverse=True)[: self.suite.kernel_runs]
        return {
            KERNELS_RECORD if i == 0 else KERNELS_RECORD + KERNELS_RUN_SUFFIX.format(i + 1): path
            for i, (_, path) in enumerate(newest)
        }

    def _stored_and_kernel_runs(self, cell: Cell) -> tuple[dict[str, Path] | None, int]:
        """`stored`, and how many usable kernel records it read (0 outside the kernel tier): one
        read of the store after each run of a probe."""
        if self.suite.tier is not Tier.KERNELS:
            return self.stored(cell), 0
        usable = self._usable_kernel_records(cell)
        return self._newest_kernel_runs(usable), len(usable)

    def _usable_kernel_records(self, cell: Cell) -> list[tuple[str, Path]]:
        """(run id, path) of each complete kernel record of this cell's version, session and GPU;
        none outside the kernel tier or without a store."""
        if self.suite.tier is not Tier.KERNELS or not self.suite.store.is_dir():
            return []
        found: list[tuple[str, Path]] = []
        pattern = record_filename(RecordKind.KERNELS, KERNEL_RECORD_NAME, str(cell.humming), "*")
        for path in sorted(self.suite.store.rglob(pattern)):
            try:
                data = load_kernel_record(path)
            except RecordError:
                continue
            env = data["environment"]
            usable = (
                data.get("complete") is True
                and data.get("import_error") is None  # humming could not even be imported
                and env.get("humming_kernels") == str(cell.humming)
                and env.get("session") == cell.kernels_session
                and env.get("gpu") == self.hardware
            )
            if usable:
                found.append((str(data["run_id"]), path))
        return found

    def _stored_divergence(self, cell: Cell) -> dict[str, Path] | None:
        """The two newest complete divergence records of each config from this cell (the
        divergence stage of a session runs an A/A pair of passes, `passes.STAGE_REPEAT`)."""
        out: dict[str, Path] = {}
        for config in self.suite.configs:
            found: list[tuple[str, Path]] = []
            pattern = divergence_record_filename(config.name, str(cell.humming), "*")
            for path in sorted(self.suite.store.rglob(pattern)):
                if path.name.startswith(".tmp-"):
                    continue
                try:
                    record = load_divergence_record(path)
                except RecordError:
                    continue
                env = record.environment
                if (
                    record.complete
                    and record.config.name == config.name
                    and record.humming_version == str(cell.humming)
                    and env.get("session") == cell.session
                    and record.config.sha256 == config.sha256
                    and len(record.questions) == self.suite.question_count(config)
                    and env.get("gpu") == self.hardware
                ):
                    found.append((record.run_id, path))
            if len(found) < 2:
                return None
            (_, newest), (_, repeat) = sorted(found, reverse=True)[:2]
            out[config.name] = newest
            out[config.name + DIVERGENCE_REPEAT_SUFFIX] = repeat
        return out

    def _reusable(self, record: Gsm8kRecord, config: EvalConfig, cell: Cell) -> bool:
        env = record.environment
        return (
            record.complete
            and record.humming_version == str(cell.humming)
            and env.get("session") == cell.session
            and record.config.sha256 == config.sha256
            and len(record.questions) == self.suite.question_count(config)
            and env.get("gpu") == self.hardware
        )

    def probe(self, cell: Cell) -> ProbeResult:
        version, session = str(cell.humming), self.suite.session(cell)
        start = self.clock()
        found = self.stored(cell)
        if found is not None:
            return ProbeResult(version, session, ProbeStatus.REUSED, found)
        if self.slots is not None and cell.gpus > 0:
            with self.slots.acquire(cell.gpus, owner=f"probe {session}") as lease:
                # The session may take its GPUs from a slot pool itself (`humming-matrix
                # slots`); give it a private pool of exactly the devices leased here, or it
                # would wait for ever on the locks this probe holds.
                private = {
                    **lease.environ(),
                    DEVICES_ENV: lease.cuda_visible_devices,
                    SLOT_DIR_ENV: str(self.log_dir / f"slots-{session}"),
                }
                return self._run(cell, private, start)
        return self._run(cell, {}, start)

    def _run(self, cell: Cell, extra_env: Mapping[str, str], start: float) -> ProbeResult:
        version, session = str(cell.humming), self.suite.session(cell)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**self.base_env, **extra_env}
        listed = [v for v in env.get(EXTRA_VERSIONS_ENV, "").split(",") if v]
        env[EXTRA_VERSIONS_ENV] = ",".join(dict.fromkeys([*listed, version]))
        posargs = [*self.suite.run_args, "--results", str(self.suite.store.resolve())]
        if self.suite.limit and self.suite.tier is not Tier.KERNELS:
            posargs += ["--limit", str(self.suite.limit)]
        if self.suite.tier is Tier.DIVERGENCE:
            env[DIVERGENCE_ONLY_ENV] = "1"
        else:
            # Left over in the caller's environment it would make a GSM8K probe run no GSM8K.
            env.pop(DIVERGENCE_ONLY_ENV, None)
        before = set(self._record_paths(cell))
        runs = len(self._usable_kernel_records(cell))
        try:
            while True:
                # A log per run: a second run of the session must not overwrite the first's.
                log = self.log_dir / f"{session}.{new_run_id()}.log"
                with self._lock:
                    self.sessions_run.append(session)
                code = self.runner(session, posargs, env, log)
                found, now = self._stored_and_kernel_runs(cell)
                # Kernel tier: another run of the GEMM probe until the version has the runs it
                # needs; a run that added no usable record ends it (untestable below).
                if found is not None or now <= runs:
                    break
                runs = now
        except ProbeTimeoutError as exc:
            return ProbeResult(
                version, session, ProbeStatus.UNTESTABLE, {}, str(exc), log, self.clock() - start
            )
        duration = self.clock() - start
        failed = self._failed_starts(cell, before) if found is None else {}
        if failed:
            name, path = next(iter(failed.items()))
            summary = load_gsm8k_record(path).startup_summary()
            reason = f"the server of config {name} never became ready: {summary}"
            return ProbeResult(
                version, session, ProbeStatus.START_FAILED, failed, reason, log, duration
            )
        crashed = self._crashes(cell, before) if found is None else {}
        if crashed:
            name, path = next(iter(crashed.items()))
            crash = load_gsm8k_record(path).server.get("crash") or {}
            reason = (
                f"the server of config {name} crashed while serving with a CUDA error: "
                f"{crash.get('reason', '')}"
            )
            return ProbeResult(
                version, session, ProbeStatus.CRASHED, crashed, reason, log, duration
            )
        if found is None:
            what = {
                Tier.KERNELS: "a complete kernel record",
                Tier.DIVERGENCE: "two complete divergence records of every config",
            }.get(self.suite.tier, "a complete record of every config")
            reason = (
                f"nox session {session} exited {code} without {what}: {_reason_from(log_tail(log))}"
            )
            return ProbeResult(version, session, ProbeStatus.UNTESTABLE, {}, reason, log, duration)
        return ProbeResult(version, session, ProbeStatus.RAN, found, "", log, duration)

    def probe_many(self, cells: Sequence[Cell]) -> list[ProbeResult]:
        """Probes in parallel (one thread each; the slot pool keeps their GPUs apart)."""
        if len(cells) <= 1:
            return [self.probe(c) for c in cells]
        pool = ThreadPoolExecutor(max_workers=len(cells))
        try:
            futures = [pool.submit(self.probe, c) for c in cells]
            return [f.result() for f in futures]
        except BaseException:
            # Ctrl-C or SIGTERM reaches this (main) thread only: stop the sessions the worker
            # threads wait on, or they would run to the end with nobody to read them.
            self.runner.stop_all()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _readable_records(store: Path, pattern: str) -> Iterator[tuple[Path, Gsm8kRecord]]:
    """The GSM8K records whose file names match `pattern`. An unreadable file is skipped here:
    compare and report refuse it loudly, and it must not stop a bisect that does not need it."""
    for path in sorted(store.rglob(pattern)):
        if path.name.startswith(".tmp-"):
            continue
        try:
            yield path, load_gsm8k_record(path)
        except RecordError:
            continue
