#!/usr/bin/env python3
"""TEST DOUBLE of the kernel worker (`python -m humming_matrix.kernels.runner PLAN EVENTS`).

The watchdog and the `kernels` command start it as their worker, so the real process group,
event file, timeout, kill, restart and record code run against it. It touches no GPU and runs no
kernel: for each case of the plan it writes the events the real worker writes, with numbers and
behaviour that the test chooses. It takes its cases from the run's queue as the real worker does
(the product's `claims.CaseQueue`), so several of it can run one suite.

Behaviour: JSON in the environment variable KERNEL_WORKER_DOUBLE, keys all optional:
  cases: {"<case name>": behaviour}   behaviour is one of
      "ok"              one batch per plan batch size, rel_err 1e-3 per draw, floor 1e-3
      "fail"            rel_err 1.0 (far out of tolerance)
      "nan"             three NaN outputs
      "unsupported"     state unsupported, reason "build: NotImplementedError: no such thing"
      "error"           a batch raised (the real worker then exits; so does this one)
      "hang"            sleeps forever after the start event (with a child in its group)
      "hang-in-turn"    takes a shared turn on the plan's GPU lock and, once another worker
                        has claimed a case, enters its first batch size's check as the real
                        worker does (the product's `CaseSignals.on_gpu`), then sleeps forever
                        in it (a kernel that hangs during its checks), also when the
                        watchdog reruns it alone
      "hang-beside-others"  "hang-in-turn" beside other workers, "ok" when the plan says
                        the case is rerun alone (a kernel starved while another one hung)
      "timed-turns"     enters a check turn per batch size as the real worker does, each
                        lasting `turn_seconds[<case name>][i]`; a null there is a kernel that
                        hangs in that turn beside other workers (sleeps forever) and returns at
                        once when the plan says the case is rerun alone; then as "ok"
      "crash"           exits with status 7 after the start event
      "raise"           raises RuntimeError("CUDA error: an illegal memory access was
                        encountered") after the start event, uncaught: Python prints the
                        traceback to the log and exits with status 1, as the real worker does
                        when a CUDA error surfaces outside a batch
    (a case not named is "ok")
  rel_err: float                      the rel_err of "ok" batches (default 1e-3)
  time_ms: float                      median time of every batch (default 1.0)
  import_error: "message"             report that humming cannot be imported
  pids: path                          append "<pid> <child pid or 0>" at every start, one a line
  env: {...}                          extra fields of the env event
  case_seconds: float                 sleep this long in every "ok" case (workers overlapping)
  pulse_s: float                      an "ok" case takes its timing turn (exclusive, on the
                                      plan's GPU lock if any) with the product's `gpu_turn`,
                                      waiting pulse (this often; default the product's) and
                                      turn events
  turn_seconds: {"<case name>": [float | null]}   its "timed-turns", one per batch size
  die_before_claiming: path           the first worker to find no file there creates it and
                                      exits with status 9 before claiming a case
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from humming_matrix.kernels.claims import CaseQueue
from humming_matrix.kernels.runner import WAIT_PULSE_S, CaseSignals, Events, gpu_turn


def main() -> int:
    plan = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    policy = json.loads(os.environ.get("KERNEL_WORKER_DOUBLE", "{}"))
    with Path(sys.argv[2]).open("a", encoding="utf-8") as events:
        return work(plan, policy, events)


def work(plan: dict[str, Any], policy: dict[str, Any], events: IO[str]) -> int:
    behaviours: dict[str, str] = policy.get("cases", {})
    child = None
    if policy.get("pids"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(policy["pids"], "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {child.pid}\n")

    stream = Events(events)
    emit = stream.emit

    emit("env", humming_kernels="0.0.0-double", gpu="double", **policy.get("env", {}))
    if policy.get("import_error"):
        emit("import_error", message=policy["import_error"])
        return 0
    if plan.get("ceilings"):
        emit("ceilings", bf16_tflops=800.0, copy_gbps=4300.0)
    marker = policy.get("die_before_claiming")
    if marker and not os.path.exists(marker):
        Path(marker).touch()
        os._exit(9)
    rel = float(policy.get("rel_err", 1e-3))
    ms = float(policy.get("time_ms", 1.0))
    queue = CaseQueue(Path(plan["queue"]), len(plan["cases"]))
    while (index := queue.claim()) is not None:
        case = plan["cases"][index]
        behaviour = behaviours.get(case["name"], "ok")
        if behaviour == "hang-beside-others":
            behaviour = "ok" if plan.get("alone") else "hang-in-turn"
        emit("start", index=index, case=case["name"])
        if behaviour == "hang":
            time.sleep(3600)
        if behaviour == "crash":
            os._exit(7)
        if behaviour == "raise":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        lock = plan.get("gpu_lock")
        signals = CaseSignals(stream, index)
        if behaviour == "hang-in-turn":
            # Claims go in index order: another worker has claimed a case once fewer than the
            # cases after this one are left (perhaps before this worker looks).
            after = len(plan["cases"]) - index - 1
            with gpu_turn(lock, exclusive=False):
                # Its first batch size's check begins once another worker has claimed a case
                # (and so queues behind this turn), then sticks: that worker waits past the
                # limit.
                deadline = time.monotonic() + 60
                while after and queue.remaining() >= after and time.monotonic() < deadline:
                    time.sleep(0.05)
                with signals.on_gpu("gpu_check", plan["batch_sizes"][0]):
                    time.sleep(3600)
        if behaviour == "timed-turns":
            for m, seconds in zip(
                plan["batch_sizes"], policy["turn_seconds"][case["name"]], strict=True
            ):
                with gpu_turn(lock, exclusive=False), signals.on_gpu("gpu_check", m):
                    if seconds is not None:
                        time.sleep(seconds)
                    elif not plan.get("alone"):
                        time.sleep(3600)
        time.sleep(float(policy.get("case_seconds", 0.0)))
        with (
            gpu_turn(
                lock,
                exclusive=True,
                waiting=signals.waiting,
                pulse_s=float(policy.get("pulse_s", WAIT_PULSE_S)),
            ),
            signals.on_gpu("gpu_timing"),
        ):
            pass
        result: dict[str, Any] = {"case": case, "batches": []}
        if behaviour == "unsupported":
            result.update(state="unsupported", reason="build: NotImplementedError: no such thing")
            emit("case", index=index, result=result)
            continue
        for m in plan["batch_sizes"]:
            batch: dict[str, Any] = {
                "m": m,
                "rel_err": [1.0 if behaviour == "fail" else rel] * int(plan["draws"]),
                "worst_row_rel_err": [2 * rel] * int(plan["draws"]),
                "floor": 1e-3,
                "nan": 3 if behaviour == "nan" else 0,
                "inf": 0,
                "sha256": "ab" * 32,
                "input_sha256": f"input-{m}",
                "deterministic": True,
                "time": {"median_ms": ms, "mad_ms": ms / 100, "min_ms": ms, "repeats": 5},
            }
            if behaviour == "error":
                batch = {
                    "m": m,
                    "rel_err": [],
                    "worst_row_rel_err": [],
                    "nan": 0,
                    "inf": 0,
                    "error": "RuntimeError: CUDA error: an illegal memory access",
                }
            result["batches"].append(batch)
            emit("progress", index=index, stage="batch", m=m)
        emit("case", index=index, result=result)
        if behaviour == "error":
            return 0
    if child is not None:
        child.kill()
        child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
