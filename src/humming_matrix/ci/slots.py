"""GPU slots on one machine: a pool of file locks so concurrent sessions never share a GPU.

`nox -j N` runs each session in its own process, the bisect's `--jobs N` probes several versions
at once, and several Buildkite agents may share one host. Each of them asks the pool for as many
GPUs as its configs' tensor parallel size and runs its server with `CUDA_VISIBLE_DEVICES` set to
what it got. One lock file per device, held with `flock` for as long as the lease lives: the
kernel drops the lock when the holder dies, however it dies, so a crashed session never leaves a
GPU reserved.

A request takes all of its devices or none (under a short pool-wide lock), so two sessions that
each need two GPUs of four cannot each take one and wait for ever. There is no queue: a waiting
request polls. With mixed sizes a large request can wait while small ones keep the pool busy, but
a nox run has a finite list of sessions, so it gets its turn when they drain.

The locks are `flock`s taken here rather than through `filelock`, because the descriptors must
be handed on: a wrapper passes them to the process that uses the GPUs, so the GPUs stay reserved
for as long as that process lives even if the wrapper is killed first.

Processes share a pool when they use the same directory (`HUMMING_MATRIX_SLOT_DIR`, default
`<tmp>/humming-matrix-gpu-slots`) and name devices the same way (the entries of
`HUMMING_MATRIX_GPUS`, else of `CUDA_VISIBLE_DEVICES`, else nvidia-smi's indices).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from humming_matrix.errors import InfrastructureError, NoGPUError, UsageError
from humming_matrix.store.atomic_files import replace_file

SLOT_DIR_ENV = "HUMMING_MATRIX_SLOT_DIR"
POOL_DIR_MODE = 0o1777
DEVICES_ENV = "HUMMING_MATRIX_GPUS"
CUDA_ENV = "CUDA_VISIBLE_DEVICES"
DEFAULT_POLL_INTERVAL = 0.5


class SlotTimeoutError(InfrastructureError):
    """The requested GPUs did not come free within the time allowed."""


@dataclass(frozen=True)
class Holder:
    """Who holds one device, as the holder wrote it down when it took the lease."""

    device: str
    pid: int | None
    host: str
    owner: str
    since: str

    def describe(self) -> str:
        who = f"pid {self.pid}" if self.pid is not None else "unknown process"
        if self.host:
            who += f" on {self.host}"
        if self.owner:
            who += f" ({self.owner})"
        return f"GPU {self.device} held by {who} since {self.since or '?'}"


@dataclass(frozen=True)
class Lease:
    """The devices one request holds; valid only inside `SlotPool.acquire`'s `with` block.

    `fds` are the descriptors that hold the locks: pass them to the child that uses the GPUs
    (`subprocess.Popen(..., pass_fds=lease.fds)`) and the GPUs stay reserved until it exits too.
    """

    devices: tuple[str, ...]
    fds: tuple[int, ...] = ()

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(self.devices)

    def environ(self) -> dict[str, str]:
        """The variables to add to the environment of the process that uses these GPUs."""
        return {CUDA_ENV: self.cuda_visible_devices}


DeviceProbe = Callable[[], tuple[str, ...]]


def nvidia_smi_devices(
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
) -> tuple[str, ...]:
    """The GPU indices nvidia-smi lists; none when it is missing or fails (a CPU machine)."""
    try:
        done = run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if done.returncode != 0:
        return ()
    return tuple(line.strip() for line in done.stdout.splitlines() if line.strip())


def _split_devices(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def visible_devices(
    environ: Mapping[str, str] | None = None, probe: DeviceProbe = nvidia_smi_devices
) -> tuple[str, ...]:
    """The devices this process may hand out.

    `HUMMING_MATRIX_GPUS` wins (an operator reserving a subset, or a CPU test naming pretend
    devices); then `CUDA_VISIBLE_DEVICES`, whose entries are passed on as they are written (an
    index, a UUID or a MIG id), so a pool inside an agent that already sees a subset hands out
    only that subset; then nvidia-smi.
    """
    env = os.environ if environ is None else environ
    for name in (DEVICES_ENV, CUDA_ENV):
        if name in env:
            devices = _split_devices(env[name])
            if len(set(devices)) != len(devices):
                raise UsageError(f"{name}={env[name]!r} names a device twice")
            return devices
    return probe()


def default_pool_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    configured = env.get(SLOT_DIR_ENV)
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / "humming-matrix-gpu-slots"


def _file_stem(device: str) -> str:
    return "gpu-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in device)


class SlotPool:
    """The GPUs of one machine, shared by every process that opens the same directory."""

    def __init__(
        self,
        directory: Path,
        devices: Sequence[str],
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if len(set(devices)) != len(devices):
            raise UsageError(f"GPU slot pool: a device is listed twice in {list(devices)}")
        self.directory = directory
        self.devices = tuple(devices)
        self._poll_interval = poll_interval
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def from_environment(
        cls,
        environ: Mapping[str, str] | None = None,
        probe: DeviceProbe = nvidia_smi_devices,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> SlotPool:
        return cls(
            default_pool_dir(environ),
            visible_devices(environ, probe),
            poll_interval=poll_interval,
        )

    def _lock_path(self, device: str) -> Path:
        return self.directory / f"{_file_stem(device)}.lock"

    def _owner_path(self, device: str) -> Path:
        return self.directory / f"{_file_stem(device)}.owner.json"

    @contextlib.contextmanager
    def _pool_lock(self) -> Iterator[None]:
        """Serialises taking (never holding), so a request sees the pool as one snapshot."""
        fd = _open_lock_file(self.directory / "pool.lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _ensure_directory(self) -> None:
        if not self.directory.is_dir():
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise _unusable(self.directory, exc) from None
            # Shared by every user's agents, like /tmp: anyone may add a file, only its owner
            # may remove or replace it (the sticky bit). Set through a descriptor of the
            # directory itself, never through a path a link could redirect.
            with contextlib.suppress(OSError):
                fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                try:
                    if os.fstat(fd).st_uid == os.getuid():
                        os.fchmod(fd, POOL_DIR_MODE)
                finally:
                    os.close(fd)

    def _try_take(self, count: int) -> list[tuple[str, int]]:
        """All `count` devices or none; the caller holds the pool lock."""
        taken: list[tuple[str, int]] = []
        for device in self.devices:
            fd = _try_lock(self._lock_path(device))
            if fd is None:
                continue
            taken.append((device, fd))
            if len(taken) == count:
                return taken
        for _, fd in taken:
            os.close(fd)
        return []

    def _write_owner(self, device: str, owner: str) -> None:
        record = {
            "device": device,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "owner": owner,
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        # The note is for people (`slots --status`); in the sticky pool another user's stale
        # note cannot be replaced, and the lock, not the note, is what holds the device.
        with contextlib.suppress(PermissionError):
            replace_file(self._owner_path(device), lambda fh: json.dump(record, fh))

    def _read_owner(self, device: str) -> Holder:
        try:
            data = json.loads(self._owner_path(device).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        pid = data.get("pid")
        return Holder(
            device=device,
            pid=pid if isinstance(pid, int) else None,
            host=str(data.get("host", "")),
            owner=str(data.get("owner", "")),
            since=str(data.get("since", "")),
        )

    def holders(self) -> tuple[Holder, ...]:
        """Who holds which device right now (free devices are left out)."""
        self._ensure_directory()
        with self._pool_lock():
            return self._holders_locked()

    def _holders_locked(self) -> tuple[Holder, ...]:
        held = []
        for device in self.devices:
            fd = _try_lock(self._lock_path(device))
            if fd is None:
                held.append(self._read_owner(device))
            else:
                os.close(fd)
        return tuple(held)

    @contextlib.contextmanager
    def acquire(
        self,
        count: int,
        *,
        owner: str = "",
        timeout: float | None = None,
        on_wait: Callable[[tuple[Holder, ...]], None] | None = None,
    ) -> Iterator[Lease]:
        """Hold `count` devices for the `with` block; wait for them (for ever by default).

        `on_wait` is called once, with the current holders, when the request first has to wait.
        """
        if count < 1:
            raise UsageError(f"a GPU slot request needs at least 1 GPU, not {count}")
        if count > len(self.devices):
            listed = ",".join(self.devices) or "none"
            raise NoGPUError(
                f"needs {count} GPU(s) but this machine offers {len(self.devices)} ({listed});"
                f" set {DEVICES_ENV} or {CUDA_ENV} to name them"
            )
        self._ensure_directory()
        deadline = None if timeout is None else self._clock() + timeout
        told = False
        while True:
            with self._pool_lock():
                taken = self._try_take(count)
                if taken:
                    try:
                        for device, _ in taken:
                            self._write_owner(device, owner)
                    except BaseException:
                        for _, fd in taken:
                            os.close(fd)
                        raise
                    break
                holders = self._holders_locked()
            if deadline is not None and self._clock() >= deadline:
                held = "; ".join(h.describe() for h in holders) or "no holder recorded"
                raise SlotTimeoutError(
                    f"{count} GPU slot(s) did not come free within {timeout:g}s"
                    f" in {self.directory}: {held}"
                )
            if on_wait is not None and not told:
                on_wait(holders)
                told = True
            self._sleep(self._poll_interval)
        try:
            yield Lease(
                devices=tuple(device for device, _ in taken),
                fds=tuple(fd for _, fd in taken),
            )
        finally:
            for device, fd in reversed(taken):
                # The owner note goes first, so it never describes the next holder's lease.
                with contextlib.suppress(FileNotFoundError):
                    self._owner_path(device).unlink()
                os.close(fd)


def _unusable(directory: Path, exc: OSError) -> UsageError:
    return UsageError(
        f"GPU slot pool {directory}: {exc.strerror or exc}; set {SLOT_DIR_ENV} to a writable"
        " directory on a local disk"
    )


def _open_lock_file(path: Path) -> int:
    try:
        # O_NOFOLLOW: a link planted under the lock's name (the pool is shared) is refused, not
        # followed to a file of the victim's.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise _unusable(path.parent, exc) from None
    # Agents of different users on one host must be able to open the same lock file; umask
    # would otherwise strip the group and other bits.
    with contextlib.suppress(PermissionError):
        os.fchmod(fd, 0o666)
    return fd


def _try_lock(path: Path) -> int | None:
    """The descriptor holding an exclusive lock on `path`, or None if someone else holds it."""
    fd = _open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
