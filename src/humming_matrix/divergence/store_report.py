"""`report --tier divergence`: every environment of a store against the baseline environment.

The baseline environment is chosen as the other sections choose theirs (`--baseline VERSION`,
else the oldest humming-kernels version); its two newest records of a config are the baseline
and its A/A floor, and every other environment's newest record of that config is a candidate.
All (config, candidate, metric) tests of the store are one Holm family.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from humming_matrix.divergence.judge import (
    DivergenceComparison,
    Loaded,
    adjust_family,
    compare_config,
    find_replicate,
)
from humming_matrix.divergence.record import load_divergence_records
from humming_matrix.errors import RecordError, UsageError
from humming_matrix.judge.compare import RunEnvironment
from humming_matrix.report.rows import choose_baseline, version_key


def build_divergence_report(
    store: Path, alpha: float = 0.05, baseline_version: str | None = None
) -> DivergenceComparison:
    if not store.is_dir():
        raise RecordError(store, None, "not a directory")
    if not 0.0 < alpha < 0.5:
        raise UsageError(f"--alpha must be in (0, 0.5), got {alpha}")
    groups: dict[tuple[RunEnvironment, str], list[Loaded]] = defaultdict(list)
    for path, record in load_divergence_records(store):
        if record.complete:
            loaded = Loaded(path, record)
            groups[(loaded.cell, record.config.name)].append(loaded)
    if not groups:
        raise RecordError(store, None, "holds no complete divergence record")
    cells = sorted({cell for cell, _ in groups}, key=version_key)
    baseline = choose_baseline(cells, baseline_version, "divergence ")
    results = []
    for (cell, name), group in sorted(
        groups.items(), key=lambda kv: (kv[0][1], version_key(kv[0][0]))
    ):
        if cell == baseline or (baseline, name) not in groups:
            continue
        base_group = groups[(baseline, name)]  # type: ignore[index]
        b = max(base_group, key=lambda g: g.order)
        r = find_replicate(b, [base_group])
        if r is None:
            raise UsageError(
                f"config {name}: the baseline environment ({b.cell.label}) has one divergence "
                "record; its A/A floor needs two (`humming-matrix divergence run --repeat 2`)"
            )
        results.append(compare_config(b, r, max(group, key=lambda g: g.order), alpha))
    return DivergenceComparison(alpha, adjust_family(results))
