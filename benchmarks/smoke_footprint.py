"""Wall time and peak memory of the CPU smoke run (`nox -s smoke`, or any command given).

Starts the command, then every `--interval` seconds walks its process tree in /proc and keeps:
  server group  the summed RSS of every process in the process group of `vllm serve` (the API
                server, VLLM::EngineCore, VLLM::Worker, the resource tracker), peak over samples;
  humming-matrix  the peak RSS (the kernel's VmHWM) of the `humming-matrix` process that
                launched the server (for `nox -s smoke`: `humming-matrix session`, which runs
                the GSM8K stage in-process);
  wall          start to exit of the whole command.
Sampling can miss a peak shorter than the interval; VmHWM cannot. Usage:
  HUMMING_MATRIX_GSM8K_DIR=../shared/gsm8k python benchmarks/smoke_footprint.py [--json FILE] \
      [-- nox -s smoke --envdir .nox]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PAGE_KIB = 4
DEFAULT_COMMAND = ("nox", "-s", "smoke")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    rss_kib: int
    hwm_kib: int
    argv: tuple[str, ...]


def _read(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
        argv = tuple(
            Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
        )
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    values = {
        k: v.split()[0]
        for k, _, v in (ln.partition(":") for ln in status.splitlines())
        if v.strip()
    }
    return Proc(
        pid,
        int(fields[1]),
        int(fields[2]),
        int(fields[21]) * PAGE_KIB,
        int(values.get("VmHWM", "0")),
        argv,
    )


def _tree(root: int) -> list[Proc]:
    procs = [
        p
        for p in (_read(int(e.name)) for e in Path("/proc").iterdir() if e.name.isdigit())
        if p is not None
    ]
    children: dict[int, list[Proc]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    # vLLM's workers leave the tree when their parent exits first; the group still holds them.
    groups = {p.pgid for p in found}
    found += [p for p in procs if p.pgid in groups and p not in found]
    return found


def _is_server(p: Proc) -> bool:
    return len(p.argv) > 2 and Path(p.argv[1]).name == "vllm" and p.argv[2] == "serve"


def _is_humming_matrix(p: Proc) -> bool:
    return len(p.argv) > 1 and Path(p.argv[1]).name == "humming-matrix"


@dataclass(frozen=True)
class Footprint:
    command: list[str]
    exit_code: int
    wall_seconds: float
    server_group_peak_rss_mib: float
    server_group_peak_members: dict[str, float]  # name -> RSS MiB at that peak
    humming_matrix_peak_rss_mib: float
    samples: int


def measure(command: list[str], interval: float) -> Footprint:
    start = time.monotonic()
    child = subprocess.Popen(command)
    peak_group, members, peak_hm, samples = 0, {}, 0, 0
    while child.poll() is None:
        tree = _tree(child.pid)
        for server in filter(_is_server, tree):
            group = [p for p in tree if p.pgid == server.pgid]
            total = sum(p.rss_kib for p in group)
            if total > peak_group:
                peak_group = total
                members = {
                    f"{p.pid} {' '.join(p.argv)[:60]}": round(p.rss_kib / 1024, 1) for p in group
                }
        for hm in filter(_is_humming_matrix, tree):
            peak_hm = max(peak_hm, hm.hwm_kib)
        samples += 1
        time.sleep(interval)
    return Footprint(
        command,
        child.returncode,
        round(time.monotonic() - start, 1),
        round(peak_group / 1024, 1),
        members,
        round(peak_hm / 1024, 1),
        samples,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.5, metavar="SECONDS")
    parser.add_argument("--json", type=Path, metavar="FILE")
    parser.add_argument("command", nargs="*", default=list(DEFAULT_COMMAND))
    args = parser.parse_args()
    result = measure(list(args.command), args.interval)
    text = json.dumps(asdict(result), indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
