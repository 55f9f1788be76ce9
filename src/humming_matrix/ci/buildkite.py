"""The jobs as a Buildkite dynamic pipeline, for `buildkite-agent pipeline upload`.

One command step per cell on a queue chosen by its GPU count, retried automatically on the
infrastructure exit status only (a regression, 1, or an untestable version, 125, is an answer and
must not be retried into a pass), soft-failing where the cell is optional, uploading its records
as artifacts whatever its exit status. Then a `wait` that continues on failure (a failed cell is
exactly when the report matters) and one step that downloads every job's records into one folder,
runs `report` over it, and posts the Markdown as the build annotation `humming-matrix`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from humming_matrix.ci.pipeline import INFRASTRUCTURE_EXIT, Job
from humming_matrix.errors import UsageError

ANNOTATION_CONTEXT = "humming-matrix"
REPORT_KEY = "humming-matrix-report"
DEFAULT_QUEUE = "gpu_{gpus}_queue"
DEFAULT_CPU_QUEUE = "cpu_queue"
DEFAULT_REPORT_COMMAND = (
    "nox -s report -- {results} --markdown {markdown} --junit {junit} --html {html}"
)


@dataclass(frozen=True)
class BuildkiteSettings:
    queue: str = DEFAULT_QUEUE  # {gpus} is the job's GPU count
    cpu_queue: str = DEFAULT_CPU_QUEUE  # jobs that need no GPU, and the report step
    retry_limit: int = 2
    timeout_minutes: int | None = 240
    env: Mapping[str, str] = field(default_factory=dict)
    report_command: str = DEFAULT_REPORT_COMMAND  # {results}, {markdown}, {junit}, {html}


def _escape(command: str) -> str:
    """`pipeline upload` interpolates `$NAME` when it reads the YAML; `$$` leaves a `$` for the
    job's shell, which is where a variable in a command is meant to be read."""
    return command.replace("$", "$$")


def _queue(template: str, gpus: int) -> str:
    try:
        return template.format(gpus=gpus)
    except (KeyError, IndexError, ValueError) as exc:
        raise UsageError(f"--queue {template!r}: bad placeholder {exc} (known: gpus)") from None


def command_step(job: Job, settings: BuildkiteSettings) -> dict[str, Any]:
    queue = _queue(settings.queue, job.gpus) if job.gpus else settings.cpu_queue
    step: dict[str, Any] = {
        "label": job.label,
        "key": job.key,
        "command": _escape(job.command),
        "agents": {"queue": queue},
    }
    if settings.env:
        step["env"] = dict(settings.env)
    if settings.timeout_minutes is not None:
        step["timeout_in_minutes"] = settings.timeout_minutes
    if settings.retry_limit > 0:
        step["retry"] = {
            "automatic": [{"exit_status": INFRASTRUCTURE_EXIT, "limit": settings.retry_limit}]
        }
    step["artifact_paths"] = [f"{job.results}/**/*"]
    if job.optional:
        step["soft_fail"] = True
    return step


def report_step(results: str, settings: BuildkiteSettings) -> dict[str, Any]:
    results = results.rstrip("/")
    outputs = {
        "markdown": f"{results}/report.md",
        "junit": f"{results}/report.xml",
        "html": f"{results}/report.html",
    }
    markdown = outputs["markdown"]
    try:
        report = settings.report_command.format(
            results=shlex.quote(results), **{k: shlex.quote(v) for k, v in outputs.items()}
        )
    except (KeyError, IndexError, ValueError) as exc:
        raise UsageError(
            f"--report-command {settings.report_command!r}: bad placeholder {exc}"
            " (known: results, markdown, junit, html)"
        ) from None
    return {
        "label": "humming-matrix report",
        "key": REPORT_KEY,
        "commands": [
            # `DIR/*` rather than `DIR/**/*`: the agent's download search misses the files
            # directly under DIR with the latter, and `*` already crosses folders there.
            _escape(f"buildkite-agent artifact download {shlex.quote(results + '/*')} ."),
            _escape(report),
            _escape(
                f"buildkite-agent annotate --context {ANNOTATION_CONTEXT} --style info"
                f" < {shlex.quote(markdown)}"
            ),
        ],
        "agents": {"queue": settings.cpu_queue},
        "artifact_paths": list(outputs.values()),
    }


def pipeline(jobs: Sequence[Job], results: str, settings: BuildkiteSettings) -> dict[str, Any]:
    if settings.retry_limit < 0 or settings.retry_limit > 10:
        raise UsageError(f"--retry-limit {settings.retry_limit}: Buildkite allows 0 to 10")
    if settings.timeout_minutes is not None and settings.timeout_minutes < 1:
        raise UsageError(f"--timeout-minutes {settings.timeout_minutes}: must be at least 1")
    steps: list[dict[str, Any]] = [command_step(job, settings) for job in jobs]
    steps.append({"wait": None, "continue_on_failure": True})
    steps.append(report_step(results, settings))
    return {"steps": steps}


def render(document: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(document), sort_keys=False, width=1000, default_flow_style=False)
