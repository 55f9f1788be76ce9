"""The probe runner's process handling and GPU slots, with real processes and real file locks."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from humming_matrix.bisect.version_runner import (
    NoxRunner,
    Prober,
    ProbeStatus,
    ProbeTimeoutError,
    Suite,
)
from humming_matrix.ci.slots import SlotPool
from humming_matrix.matrix.cells import load_matrix
from humming_matrix.suite.config import EvalConfig, load_config
from tests.integration.runner_harness import alive
from tests.unit.test_bisection_driver import TEST_MATRIX, SessionDouble

# TEST DOUBLE of nox: starts a child in its process group (as a session's `vllm serve` is),
# writes both pids, then hangs; optionally ignoring SIGTERM.
HANGING_NOX_DOUBLE = """\
import json, signal, subprocess, sys, time
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN) if %r else None; time.sleep(600)"
    % ("--ignore-term" in sys.argv)])
open(sys.argv[sys.argv.index("--pids") + 1], "w").write(
    json.dumps({"nox": __import__("os").getpid(), "child": child.pid, "argv": sys.argv[1:]}))
print("nox > Running session", flush=True)
time.sleep(600)
"""


# A probe timeout long enough for a loaded CI machine to start the nox double and its child.
STARTUP_S = 3.0


@pytest.fixture
def config(tmp_path: Path) -> EvalConfig:
    path = tmp_path / "double.yaml"
    path.write_text(
        'model_name: "double/model"\naccuracy_threshold: 0.5\nnum_questions: 1319\nnum_fewshot: 5\n'
    )
    return load_config(path)


@pytest.mark.parametrize("ignore_term", [False, True])
def test_timeout_kills_the_whole_process_group(tmp_path: Path, ignore_term: bool) -> None:
    script = tmp_path / "nox_double.py"
    script.write_text(HANGING_NOX_DOUBLE)
    noxfile = tmp_path / "noxfile.py"
    noxfile.touch()
    pids_file = tmp_path / "pids.json"
    flags = ("--ignore-term",) if ignore_term else ()
    # The timeout leaves a loaded machine time to start the double and its child before it
    # fires; the double writes their pids only once both run.
    runner = NoxRunner(
        noxfile, timeout=STARTUP_S, nox=(sys.executable, str(script), *flags), grace=1.0
    )
    log = tmp_path / "probe.log"
    start = time.monotonic()
    with pytest.raises(ProbeTimeoutError, match=r"humming-0\.1\.4 ran past 3 s"):
        runner("humming-0.1.4", ["--pids", str(pids_file)], dict(os.environ), log)
    pids = json.loads(pids_file.read_text())
    assert not alive(pids["nox"])
    assert not alive(pids["child"])
    # Timeout plus grace, then SIGKILL: far from the 600 s the double would sleep.
    assert time.monotonic() - start < STARTUP_S + 1.0 + 10
    assert log.read_text().splitlines()[0] == "nox > Running session"
    assert pids["argv"] == [
        *flags,
        "-f",
        str(noxfile),
        "-s",
        "humming-0.1.4",
        "--",
        "--pids",
        str(pids_file),
    ]


def test_a_timed_out_probe_is_untestable(tmp_path: Path, config: EvalConfig) -> None:
    script = tmp_path / "nox_double.py"
    script.write_text(HANGING_NOX_DOUBLE)
    noxfile = tmp_path / "noxfile.py"
    noxfile.touch()
    (tmp_path / "m.toml").write_text(TEST_MATRIX)
    cell = load_matrix(tmp_path / "m.toml").cell_for("0.1.4")
    runner = NoxRunner(noxfile, timeout=STARTUP_S, nox=(sys.executable, str(script)), grace=1.0)
    suite = Suite((config,), ("--pids", str(tmp_path / "pids.json")), tmp_path / "store", 5)
    result = Prober(suite, runner, log_dir=tmp_path / "logs").probe(cell)
    assert (result.status, result.reason) == (
        ProbeStatus.UNTESTABLE,
        "humming-0.1.4 ran past 3 s",
    )
    assert not alive(json.loads((tmp_path / "pids.json").read_text())["child"])


class SlotRecordingSessionDouble(SessionDouble):
    """The session double, also noting the GPU environment each session got and how many ran
    at once."""

    def __init__(self, config: EvalConfig) -> None:
        super().__init__(config, bad_from=None, wrong=())
        self.seen: dict[str, tuple[str, str, str]] = {}
        self.running = 0
        self.peak = 0
        self.guard = threading.Condition()

    def __call__(
        self, session: str, posargs: Sequence[str], env: Mapping[str, str], log: Path
    ) -> int:
        with self.guard:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.seen[session] = (
                env["CUDA_VISIBLE_DEVICES"],
                env["HUMMING_MATRIX_GPUS"],
                env["HUMMING_MATRIX_SLOT_DIR"],
            )
            # The first two hold their GPU until both run, however late the second thread
            # starts; a pool that serialised them leaves peak at 1 when this gives up.
            self.guard.notify_all()
            self.guard.wait_for(lambda: self.peak >= 2, timeout=30)
        time.sleep(0.4)  # a third let in beside them would be counted while they hold
        with self.guard:
            self.running -= 1
        return super().__call__(session, posargs, env, log)


def test_parallel_probes_each_get_their_own_gpu(tmp_path: Path, config: EvalConfig) -> None:
    (tmp_path / "m.toml").write_text(TEST_MATRIX.replace("gpus = 0", "gpus = 1"))
    matrix = load_matrix(tmp_path / "m.toml")
    cells = [matrix.cell_for(v) for v in ("0.1.3", "0.1.4", "0.1.5")]
    pool = SlotPool(tmp_path / "slots", ["0", "1"], poll_interval=0.05)
    recorder = SlotRecordingSessionDouble(config)
    suite = Suite((config,), (), tmp_path / "store", 5)
    prober = Prober(suite, recorder, log_dir=tmp_path / "logs", slots=pool, base_env={})
    results = prober.probe_many(cells)
    assert [r.status for r in results] == [ProbeStatus.RAN] * 3
    assert recorder.peak == 2  # three probes, two GPUs: never more than two at once
    assert sorted(recorder.seen) == ["humming-0.1.3", "humming-0.1.4", "humming-0.1.5"]
    for session, (visible, pool_devices, slot_dir) in recorder.seen.items():
        assert visible in {"0", "1"}
        # The session's own slot pool (if it takes one) is private and holds exactly its GPU.
        assert pool_devices == visible
        assert slot_dir == str(tmp_path / "logs" / f"slots-{session}")
    assert pool.holders() == ()


# Runs two probes in parallel through the real NoxRunner (nox replaced by HANGING_NOX_DOUBLE), as
# the bisect command does with --jobs 2, and waits to be told to stop.
PARALLEL_PROBES = """\
import sys
from pathlib import Path
from humming_matrix.suite.config import load_config
from humming_matrix.matrix.cells import load_matrix
from humming_matrix.interrupts import terminate_unwinds
from humming_matrix.bisect.version_runner import NoxRunner, Prober, Suite
root = Path(sys.argv[1])
matrix = load_matrix(root / "m.toml")
runner = NoxRunner(root / "noxfile.py", nox=(sys.executable, str(root / "nox_double.py")),
                   grace=1.0)
suite = Suite((load_config(root / "double.yaml"),), ("--pids", "PIDS"), root / "store", 5)
def call(session, posargs, env, log):
    pids = str(root / f"pids-{session}.json")
    return NoxRunner.__call__(runner, session, ["--pids", pids], env, log)
class Runner:
    __call__ = staticmethod(call)
    stop_all = staticmethod(runner.stop_all)
prober = Prober(suite, Runner(), log_dir=root / "logs")
try:
    with terminate_unwinds():
        prober.probe_many([matrix.cell_for("0.1.3"), matrix.cell_for("0.1.4")])
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def test_sigterm_stops_every_parallel_probe(tmp_path: Path, config: EvalConfig) -> None:
    (tmp_path / "nox_double.py").write_text(HANGING_NOX_DOUBLE)
    (tmp_path / "noxfile.py").touch()
    (tmp_path / "m.toml").write_text(TEST_MATRIX)
    (tmp_path / "double.yaml").write_text(config.path.read_text())
    script = tmp_path / "parallel.py"
    script.write_text(PARALLEL_PROBES)
    process = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    pid_files = [tmp_path / f"pids-humming-0.1.{v}.json" for v in (3, 4)]
    try:
        deadline = time.monotonic() + 30
        while not all(p.exists() and p.read_text() for p in pid_files):
            assert time.monotonic() < deadline, "the probes never started"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
        assert (process.returncode, out) == (130, "interrupted\n")
        for path in pid_files:
            pids = json.loads(path.read_text())
            assert not alive(pids["nox"])
            assert not alive(pids["child"])
    finally:
        # A failing run must not leave its hanging doubles behind on the CI machine.
        process.kill()
        process.wait()
        for path in pid_files:
            if path.exists() and path.read_text():
                for pid in (json.loads(path.read_text())[k] for k in ("nox", "child")):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
