"""The GPU slot pool with real concurrent processes: `humming-matrix slots` wrapping a job double.

The devices are pretend (`HUMMING_MATRIX_GPUS`), the locks, processes and signals are real. Each
job writes `start`/`end` lines with the CUDA_VISIBLE_DEVICES it was given to a shared log and
holds its GPUs until the test drops a release file, so every interleaving is set by the test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from humming_matrix.ci.slots import SlotPool, SlotTimeoutError
from humming_matrix.errors import NoGPUError

# TEST DOUBLE of a GPU job: logs what it was given, holds until released, exits as told.
JOB_DOUBLE = """\
import os, sys, time, pathlib
name, log, release, code, hold = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), \\
    int(sys.argv[4]), float(sys.argv[5])
def note(event):
    line = f"{name} {event} {os.environ.get('CUDA_VISIBLE_DEVICES', '-')} {os.getpid()}\\n"
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode())
    os.close(fd)
note("start")
if hold >= 0:
    time.sleep(hold)
else:
    deadline = time.monotonic() + 60
    while not (release / name).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
note("end")
sys.exit(code)
"""

WAIT_S = 20.0


@dataclass
class Jobs:
    tmp: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]]

    @property
    def log(self) -> Path:
        return self.tmp / "events.log"

    def start(
        self,
        name: str,
        *slot_args: str,
        code: int = 0,
        hold: float = -1.0,
        job_args: tuple[str, ...] = (),
    ) -> subprocess.Popen[bytes]:
        stderr = (self.tmp / f"{name}.stderr").open("wb")
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "humming_matrix",
                "slots",
                *slot_args,
                "--",
                sys.executable,
                str(self.tmp / "job_double.py"),
                name,
                str(self.log),
                str(self.tmp / "release"),
                str(code),
                str(hold),
                *job_args,
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        stderr.close()
        self.procs[name] = proc
        return proc

    def release(self, name: str) -> None:
        (self.tmp / "release" / name).touch()

    def stderr(self, name: str) -> str:
        return (self.tmp / f"{name}.stderr").read_text()

    def events(self) -> list[tuple[str, str, tuple[str, ...], int]]:
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            name, event, devices, pid = line.split()
            out.append((name, event, tuple(devices.split(",")), int(pid)))
        return out

    def devices_of(self, name: str) -> tuple[str, ...]:
        return next(d for n, e, d, _ in self.events() if n == name and e == "start")

    def started(self, name: str) -> bool:
        return any(n == name and e == "start" for n, e, _, _ in self.events())


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[Jobs]:
    (tmp_path / "job_double.py").write_text(JOB_DOUBLE)
    (tmp_path / "release").mkdir()
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["HUMMING_MATRIX_GPUS"] = "0,1,2"
    env["HUMMING_MATRIX_SLOT_DIR"] = str(tmp_path / "pool")
    running = Jobs(tmp_path, env, {})
    yield running
    # Never leave a job behind, whatever the test did.
    for name, proc in running.procs.items():
        running.release(name)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for _, _, _, pid in running.events():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_request_waits_for_whole_set_and_never_shares_a_gpu(jobs: Jobs) -> None:
    a = jobs.start("a", "--gpus", "2", "--owner", "job-a")
    wait_for(lambda: jobs.started("a"), "a to start")
    b = jobs.start("b", "--gpus", "2", "--owner", "job-b", code=5)
    wait_for(lambda: "waiting for 2 GPU(s)" in jobs.stderr("b"), "b to wait")
    # b waits on a's lease and says whose it is.
    assert f"GPU 0 held by pid {a.pid}" in jobs.stderr("b")
    assert "(job-a)" in jobs.stderr("b")
    c = jobs.start("c", "--gpus", "1", "--owner", "job-c")
    wait_for(lambda: jobs.started("c"), "c to start")
    assert not jobs.started("b")  # one GPU is free, but b needs two: it takes none
    jobs.release("a")
    assert a.wait(timeout=WAIT_S) == 0
    wait_for(lambda: jobs.started("b"), "b to start after a released")
    jobs.release("b")
    jobs.release("c")
    assert b.wait(timeout=WAIT_S) == 5  # the job's own status comes back
    assert c.wait(timeout=WAIT_S) == 0
    assert jobs.devices_of("a") == ("0", "1")
    assert jobs.devices_of("c") == ("2",)
    assert jobs.devices_of("b") == ("0", "1")
    events = [(n, e) for n, e, _, _ in jobs.events()]
    assert events[:4] == [("a", "start"), ("c", "start"), ("a", "end"), ("b", "start")]
    assert sorted(events[4:]) == [("b", "end"), ("c", "end")]


def test_many_concurrent_requests_never_overlap(jobs: Jobs) -> None:
    sizes = {"j0": 2, "j1": 1, "j2": 1, "j3": 2, "j4": 1, "j5": 3, "j6": 1, "j7": 2}
    # j1 and j2 hold their GPU until released, so they must come to run side by side however
    # slowly the machine starts the others; the rest hold briefly and interleave as they may.
    held_open = ("j1", "j2")
    for name, size in sizes.items():
        jobs.start(name, "--gpus", str(size), hold=-1.0 if name in held_open else 0.15)
    wait_for(lambda: all(jobs.started(n) for n in held_open), "j1 and j2 to run at once")
    for name in held_open:
        jobs.release(name)
    codes = {name: proc.wait(timeout=60) for name, proc in jobs.procs.items()}
    assert codes == dict.fromkeys(sizes, 0)
    held: dict[str, tuple[str, ...]] = {}
    most_at_once = 0
    for name, event, devices, _ in jobs.events():
        if event == "start":
            assert len(devices) == sizes[name]
            in_use = {d for ds in held.values() for d in ds}
            assert not in_use & set(devices), f"{name} got {devices} while {held} ran"
            held[name] = devices
            most_at_once = max(most_at_once, len(held))
        else:
            del held[name]
    assert sorted(n for n, e, _, _ in jobs.events() if e == "start") == sorted(sizes)
    assert held == {}
    assert most_at_once >= 2  # the pool does run jobs side by side, not one at a time


def test_gpus_stay_reserved_while_the_job_outlives_a_killed_wrapper(jobs: Jobs) -> None:
    jobs.env["HUMMING_MATRIX_GPUS"] = "0"
    a = jobs.start("a", "--gpus", "1", "--owner", "job-a")
    wait_for(lambda: jobs.started("a"), "a to start")
    child_pid = next(pid for n, _, _, pid in jobs.events() if n == "a")
    a.kill()  # SIGKILL: the wrapper gets no chance to clean up
    a.wait()
    b = jobs.start("b", "--gpus", "1", "--timeout", "1")
    assert b.wait(timeout=WAIT_S) == 3
    message = jobs.stderr("b")
    assert "humming-matrix: error: 1 GPU slot(s) did not come free within 1s" in message
    assert f"GPU 0 held by pid {a.pid}" in message
    assert "Traceback" not in message
    # The lock lives in the job's inherited descriptor: when the job ends, the GPU is free.
    jobs.release("a")
    wait_for(lambda: not _alive(child_pid), "the job to end")
    c = jobs.start("c", "--gpus", "1", "--timeout", "5")
    wait_for(lambda: jobs.started("c"), "c to start")
    jobs.release("c")
    assert c.wait(timeout=WAIT_S) == 0
    assert jobs.devices_of("c") == ("0",)


def test_sigterm_reaches_the_job_and_frees_the_gpus(jobs: Jobs) -> None:
    a = jobs.start("a", "--gpus", "3")
    wait_for(lambda: jobs.started("a"), "a to start")
    child_pid = next(pid for n, _, _, pid in jobs.events() if n == "a")
    a.send_signal(signal.SIGTERM)
    assert a.wait(timeout=WAIT_S) == 128 + signal.SIGTERM
    wait_for(lambda: not _alive(child_pid), "the job to die")
    b = jobs.start("b", "--gpus", "3", "--timeout", "5")
    wait_for(lambda: jobs.started("b"), "b to start")
    jobs.release("b")
    assert b.wait(timeout=WAIT_S) == 0


def test_gpu_count_comes_from_the_configs_tensor_parallel_size(jobs: Jobs) -> None:
    base = "model_name: m\naccuracy_threshold: 0.5\nnum_questions: 5\nnum_fewshot: 5\n"
    (jobs.tmp / "tp2.yaml").write_text(base + "server_args: --enforce-eager -tp 2\n")
    (jobs.tmp / "tp1.yaml").write_text(base + "server_args: --max-model-len 4096\n")
    (jobs.tmp / "list.txt").write_text("tp1.yaml\ntp2.yaml\n")
    a = jobs.start("a", "--config-list", str(jobs.tmp / "list.txt"))
    wait_for(lambda: jobs.started("a"), "a to start")
    jobs.release("a")
    assert a.wait(timeout=WAIT_S) == 0
    assert jobs.devices_of("a") == ("0", "1")

    # With no count given, the configs the wrapped command names decide.
    c = jobs.start("c", job_args=("--limit", "3", f"--config={jobs.tmp / 'tp2.yaml'}"))
    wait_for(lambda: jobs.started("c"), "c to start")
    jobs.release("c")
    assert c.wait(timeout=WAIT_S) == 0
    assert jobs.devices_of("c") == ("0", "1")

    jobs.env["HUMMING_MATRIX_GPUS"] = "0"
    b = jobs.start("b", "--config", str(jobs.tmp / "tp2.yaml"))
    assert b.wait(timeout=WAIT_S) == 3
    assert jobs.stderr("b") == (
        "humming-matrix: error: needs 2 GPU(s) but this machine offers 1 (0);"
        " set HUMMING_MATRIX_GPUS or CUDA_VISIBLE_DEVICES to name them\n"
    )


def test_bad_usage_is_one_line_and_exit_2(jobs: Jobs) -> None:
    bad_config = jobs.tmp / "bad.yaml"
    bad_config.write_text("model_name: m\n")
    cases = {
        (
            "--gpus",
            "1",
            "--config",
            str(bad_config),
        ): "slots: give --gpus or --config/--config-list, not both",
        ("--config", str(bad_config)): f"{bad_config}: accuracy_threshold: missing required key",
        ("--gpus", "0"): "a GPU slot request needs at least 1 GPU, not 0",
        (): "slots: say how many GPUs (--gpus N, --config/--config-list, or a wrapped command"
        " with --config/--config-list)",
    }
    for i, (args, message) in enumerate(cases.items()):
        proc = jobs.start(f"bad{i}", *args)
        assert proc.wait(timeout=WAIT_S) == 2, args
        assert jobs.stderr(f"bad{i}") == f"humming-matrix: error: {message}\n"
    (jobs.tmp / "a-file").write_text("")
    unusable = subprocess.run(
        [sys.executable, "-m", "humming_matrix", "slots", "--gpus", "1", "--", "true"],
        env={**jobs.env, "HUMMING_MATRIX_SLOT_DIR": str(jobs.tmp / "a-file" / "pool")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert unusable.returncode == 2
    assert unusable.stderr == (
        f"humming-matrix: error: GPU slot pool {jobs.tmp / 'a-file' / 'pool'}: Not a directory;"
        " set HUMMING_MATRIX_SLOT_DIR to a writable directory on a local disk\n"
    )
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "slots",
            "--gpus",
            "1",
            "--",
            str(jobs.tmp / "no-such-program"),
        ],
        env=jobs.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2
    assert missing.stderr.endswith(
        f"humming-matrix: error: slots: command not found: {jobs.tmp / 'no-such-program'}\n"
    )


def test_status_lists_holders(jobs: Jobs) -> None:
    a = jobs.start("a", "--gpus", "2", "--owner", "humming-0.1.6")
    wait_for(lambda: jobs.started("a"), "a to start")
    status = subprocess.run(
        [sys.executable, "-m", "humming_matrix", "slots", "--status"],
        env=jobs.env,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = status.stdout.splitlines()
    assert lines[0] == f"{jobs.tmp / 'pool'}: 3 GPU(s) (0,1,2), 1 free"
    assert [line.split(" held by ")[0] for line in lines[1:]] == ["GPU 0", "GPU 1"]
    assert all(f"pid {a.pid}" in line and "(humming-0.1.6)" in line for line in lines[1:])


def test_threads_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    """The bisect's --jobs may take slots from threads of one process: flock still excludes."""
    pool = SlotPool(tmp_path / "pool", ["7"], poll_interval=0.01)
    first_in = threading.Event()
    first_may_leave = threading.Event()
    order: list[str] = []
    waited: list[int] = []

    def first() -> None:
        with pool.acquire(1, owner="first") as lease:
            order.append(f"first {lease.cuda_visible_devices}")
            first_in.set()
            first_may_leave.wait(WAIT_S)
            order.append("first out")

    def second() -> None:
        first_in.wait(WAIT_S)
        with pool.acquire(
            1, owner="second", on_wait=lambda holders: waited.append(len(holders))
        ) as lease:
            order.append(f"second {lease.cuda_visible_devices}")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    wait_for(lambda: bool(waited), "second to wait")
    first_may_leave.set()
    for t in threads:
        t.join(WAIT_S)
    assert order == ["first 7", "first out", "second 7"]
    assert waited == [1]


def test_api_errors_and_lease(tmp_path: Path) -> None:
    ticks = iter([0.0, 0.0, 2.5])
    pool = SlotPool(
        tmp_path / "pool", ["0", "GPU-9a/b"], clock=lambda: next(ticks), sleep=lambda _: None
    )
    too_many = r"needs 3 GPU\(s\) but this machine offers 2 \(0,GPU-9a/b\)"
    with pytest.raises(NoGPUError, match=too_many), pool.acquire(3):
        pass
    with pool.acquire(2, owner="outer") as lease:
        assert lease.devices == ("0", "GPU-9a/b")
        assert lease.environ() == {"CUDA_VISIBLE_DEVICES": "0,GPU-9a/b"}
        assert len(lease.fds) == 2
        assert sorted(p.name for p in (tmp_path / "pool").iterdir()) == [
            "gpu-0.lock",
            "gpu-0.owner.json",
            "gpu-GPU-9a_b.lock",
            "gpu-GPU-9a_b.owner.json",
            "pool.lock",
        ]
        with pytest.raises(SlotTimeoutError) as err, pool.acquire(1, timeout=2.0):
            pass
        assert "1 GPU slot(s) did not come free within 2s" in str(err.value)
        assert f"GPU 0 held by pid {os.getpid()}" in str(err.value)
        assert err.value.exit_code == 3
    assert pool.holders() == ()
    with pool.acquire(1) as again:
        assert again.devices == ("0",)


def _holding(jobs: Jobs) -> list[str]:
    """Jobs that started, have not ended and have not been told to end."""
    ended = {n for n, e, _, _ in jobs.events() if e == "end"}
    return [
        n
        for n, e, _, _ in jobs.events()
        if e == "start" and n not in ended and not (jobs.tmp / "release" / n).exists()
    ]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it holds no locks any more.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


NOXFILE = """\
import sys
import nox

@nox.session(venv_backend="none", allow_parallel=True)
@nox.parametrize("job", ["a", "b", "c", "d"])
def cell(session, job):
    session.run(sys.executable, "-m", "humming_matrix", "slots", "--gpus", "1",
                "--owner", "cell-" + job, "--", sys.executable, {double!r}, job, {log!r},
                {release!r}, "0", "-1", external=True)
"""


def test_nox_parallel_sessions_never_share_a_gpu(jobs: Jobs) -> None:
    """`nox -j 4` over four one-GPU sessions on a two-GPU machine: two at a time, never one GPU
    twice. Each nox session is its own process, so only the file locks keep them apart."""
    help_text = subprocess.run(
        [sys.executable, "-m", "nox", "--help"], capture_output=True, text=True, check=True
    ).stdout
    if "--parallel" not in help_text:
        if os.environ.get("CI") == "true":
            pytest.fail("nox has no --parallel; CI installs a nox that has it", pytrace=False)
        pytest.skip("this nox has no --parallel")
    jobs.env["HUMMING_MATRIX_GPUS"] = "0,1"
    noxfile = jobs.tmp / "noxfile.py"
    noxfile.write_text(
        NOXFILE.format(
            double=str(jobs.tmp / "job_double.py"),
            log=str(jobs.log),
            release=str(jobs.tmp / "release"),
        )
    )
    nox = subprocess.Popen(
        [sys.executable, "-m", "nox", "-f", str(noxfile), "-j", "4"],
        env=jobs.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Each job holds its GPU until released: two must come to hold at once (both GPUs),
        # then each release lets exactly one waiting session in.
        for round_ in range(2):
            wait_for(lambda: len(_holding(jobs)) == 2, f"two sessions to hold a GPU ({round_})")
            for name in _holding(jobs):
                jobs.release(name)
        output, _ = nox.communicate(timeout=120)
    finally:
        if nox.poll() is None:
            for name in "abcd":
                jobs.release(name)
            nox.kill()
            nox.wait()
    assert nox.returncode == 0, output
    held: dict[str, tuple[str, ...]] = {}
    most_at_once = 0
    for name, event, devices, _ in jobs.events():
        if event == "start":
            assert len(devices) == 1
            assert not {d for ds in held.values() for d in ds} & set(devices)
            held[name] = devices
            most_at_once = max(most_at_once, len(held))
        else:
            del held[name]
    assert sorted(n for n, e, _, _ in jobs.events() if e == "start") == ["a", "b", "c", "d"]
    assert most_at_once == 2
