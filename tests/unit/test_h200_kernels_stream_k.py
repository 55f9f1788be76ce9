"""tools/h200-kernels/stream_k.py: GEMMs not bit-identical on relaunch against the kernel config's
stream-K, on the committed records."""

from __future__ import annotations

from tests.unit.test_h200_kernels_releases import RESULTS
from tests.unit.test_h200_kernels_table import generated


def test_every_gemm_not_bit_identical_on_relaunch_ran_stream_k() -> None:
    # Gen7's full sweep of 0.1.2 - 0.1.20: 6549 timed batches not bit-identical on relaunch, each
    # with stream-K; the 3172 without it (0.1.13 on) all bit-identical. Stream-K with identical
    # bytes is common too (9005): it allows a different order, it does not force one.
    lines = generated(RESULTS / "gen7", "stream_k.py").splitlines()
    assert lines[0] == (
        "| humming | stream-K, bit-identical | stream-K, not | no stream-K, bit-identical"
        " | no stream-K, not |"
    )
    assert lines[2] == "| 0.1.2 | 90 | 68 | 0 | 0 |"
    assert lines[4] == "| 0.1.4 | 398 | 272 | 0 | 0 |"
    assert "| 0.1.8 | 181 | 843 | 0 | 0 |" in lines
    assert lines[-1] == "| all | 9005 | 6549 | 3172 | 0 |"
    # Every generation, every release: the same holds.
    everything = generated(RESULTS, "stream_k.py").splitlines()
    assert everything[-1] == "| all | 16601 | 9547 | 6408 | 0 |"
    assert all(line.endswith("| 0 |") for line in everything[2:])
