"""The CPU preflight: can this environment serve these configs at all, before any GPU time?

Four checks, run by `preflight_probe` inside the environment's own interpreter:
`humming_import` (`import humming` works), `vllm_integration` (every humming module of the
installed vLLM imports and its lazy facade resolves against this humming version),
`server_args` (each config's server args, plus the launcher's fixed flags, pass the installed
vLLM's own `serve` parser), `humming_env` (each humming JSON in a config's env is accepted by this
humming version's schema). A failed check makes the version untestable (exit 125), never bad.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from humming_matrix import process_group
from humming_matrix.suite.config import EvalConfig
from humming_matrix.suite.server import ServerSpec, serve_command

PROBE_MODULE = "humming_matrix.matrix.preflight_in_env"
DEFAULT_TIMEOUT_SECONDS = 600.0
# The port is a placeholder: the parser checks its type, the launcher picks a free one.
PLACEHOLDER_PORT = 8000


class CheckStatus(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Check:
    name: str  # humming_import, vllm_integration, server_args, humming_env, or probe
    subject: str  # the config name, or the package the check is about
    status: CheckStatus
    detail: str

    def line(self) -> str:
        return f"{self.status.value.upper():7} {self.name} [{self.subject}]: {self.detail}"


@dataclass(frozen=True)
class PreflightReport:
    checks: tuple[Check, ...]
    duration: float

    @property
    def passed(self) -> bool:
        return all(c.status is not CheckStatus.FAILED for c in self.checks)

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status is CheckStatus.FAILED)

    def reason(self) -> str:
        """One line naming every failed check, for the exit-125 message."""
        return "; ".join(f"{c.name} [{c.subject}]: {c.detail}" for c in self.failures)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "duration": round(self.duration, 3),
            "checks": [
                {"name": c.name, "subject": c.subject, "status": c.status.value, "detail": c.detail}
                for c in self.checks
            ],
        }


@dataclass(frozen=True)
class ProbeOutcome:
    returncode: int | None  # None: killed at the timeout
    stderr_tail: str


# Runs argv with `stdin` as input, waits at most `timeout` seconds; the seam tests replace.
ProbeRunner = Callable[[Sequence[str], str, float], ProbeOutcome]


def run_probe_process(argv: Sequence[str], stdin: str, timeout: float) -> ProbeOutcome:
    """A process group of its own, killed whole on timeout: torch and vLLM imports may start
    helpers that must not outlive the preflight."""
    with tempfile.TemporaryFile("w+") as err:
        code: int | None = None
        # No grace: whatever of the group is left once the probe answered (or timed out) goes.
        with (
            process_group.group(
                argv,
                grace=0.0,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=err,
                text=True,
            ) as process,
            contextlib.suppress(subprocess.TimeoutExpired),
        ):
            process.communicate(stdin, timeout=timeout)
            code = process.returncode
        err.seek(0)
        lines = [ln for ln in err.read().splitlines() if ln.strip()]
    return ProbeOutcome(code, " | ".join(lines[-3:]))


def probe_request(configs: Sequence[EvalConfig], expect_vllm: bool) -> dict[str, Any]:
    return {
        "expect_vllm": expect_vllm,
        "configs": [
            {
                "name": c.name,
                "argv": serve_command(
                    "vllm",
                    ServerSpec(c.model_name, c.server_args, c.env, c.startup_max_wait_seconds),
                    PLACEHOLDER_PORT,
                )[2:],
                "env": dict(c.env),
            }
            for c in configs
        ],
    }


def run_preflight(
    configs: Sequence[EvalConfig],
    *,
    expect_vllm: bool,
    python: str = sys.executable,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    runner: ProbeRunner = run_probe_process,
    clock: Callable[[], float] = time.monotonic,
) -> PreflightReport:
    """Run the checks in `python` (the environment under test)."""
    start = clock()
    with tempfile.TemporaryDirectory(prefix="humming-preflight-") as tmp:
        out = Path(tmp) / "checks.json"
        request = json.dumps(probe_request(configs, expect_vllm))
        outcome = runner([python, "-m", PROBE_MODULE, str(out)], request, timeout)
        checks = _read_checks(out, outcome, python, timeout)
    return PreflightReport(checks, clock() - start)


def _read_checks(
    out: Path, outcome: ProbeOutcome, python: str, timeout: float
) -> tuple[Check, ...]:
    if outcome.returncode is None:
        return (
            Check(
                "probe",
                python,
                CheckStatus.FAILED,
                f"the preflight did not finish within {timeout:g} s (killed)",
            ),
        )
    try:
        raw = json.loads(out.read_text(encoding="utf-8"))["checks"]
        return tuple(
            Check(c["name"], c["subject"], CheckStatus(c["status"]), c["detail"]) for c in raw
        )
    except (OSError, ValueError, KeyError, TypeError):
        tail = f": {outcome.stderr_tail}" if outcome.stderr_tail else ""
        return (
            Check(
                "probe",
                python,
                CheckStatus.FAILED,
                f"the preflight process exited {outcome.returncode} without a report{tail}",
            ),
        )
