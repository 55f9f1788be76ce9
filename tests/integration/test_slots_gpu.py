"""The slot pool on real GPUs: each holder's process sees exactly the GPU it was given.

Needs a machine with an NVIDIA GPU (`-m gpu`); with two or more, two holders run at once. The
device list comes from the real nvidia-smi probe; each job asks the CUDA driver itself (libcuda
through ctypes, no torch) how many devices it sees and which one is its device 0.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from humming_matrix.ci.slots import SlotPool, SlotTimeoutError, nvidia_smi_devices

pytestmark = pytest.mark.gpu

CUDA_PROBE = """\
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0, "cuInit failed"
count = ctypes.c_int()
assert cuda.cuDeviceGetCount(ctypes.byref(count)) == 0
device = ctypes.c_int()
assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
raw = (ctypes.c_ubyte * 16)()
assert cuda.cuDeviceGetUuid(raw, device) == 0
h = bytes(raw).hex()
print(count.value, f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
"""


def _uuids() -> dict[str, str]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pairs = (line.split(",", 1) for line in out.splitlines())
    return {index.strip(): uuid.strip() for index, uuid in pairs}


def _driver_available() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return len(nvidia_smi_devices()) >= 1


@pytest.mark.skipif(not _driver_available(), reason="needs libcuda and an NVIDIA GPU")
def test_concurrent_holders_see_only_their_own_gpu(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    devices = nvidia_smi_devices()[:2]
    pool = SlotPool(tmp_path / "pool", devices, poll_interval=0.05)
    names = ["a", "b"][: len(devices)]
    all_hold = threading.Barrier(len(names) + 1, timeout=60)
    seen: dict[str, tuple[str, str]] = {}

    def job(name: str) -> None:
        with pool.acquire(1, owner=name) as lease:
            done = subprocess.run(
                [sys.executable, "-c", CUDA_PROBE],
                env={**env, **lease.environ()},
                pass_fds=lease.fds,
                capture_output=True,
                text=True,
                check=True,
                timeout=120,
            )
            count, uuid = done.stdout.split()
            seen[name] = (lease.cuda_visible_devices, f"{count} {uuid}")
            all_hold.wait()  # every lease is held at once here
            all_hold.wait()  # ...until the main thread has tried one more

    threads = [threading.Thread(target=job, args=(n,)) for n in names]
    for t in threads:
        t.start()
    all_hold.wait()
    with pytest.raises(SlotTimeoutError), pool.acquire(1, timeout=0.3):
        pass
    all_hold.wait()
    for t in threads:
        t.join(60)
    with pool.acquire(len(devices)) as lease:  # all free again
        assert lease.devices == tuple(devices)
    uuids = _uuids()
    assert sorted(d for d, _ in seen.values()) == sorted(devices)
    for device, probe in seen.values():
        assert probe == f"1 {uuids[device]}"
    print(seen)
