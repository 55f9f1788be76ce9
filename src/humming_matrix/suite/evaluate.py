"""One config against one endpoint: ask every question, score it, build the result record."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from humming_matrix.errors import ConfigError, RequestError, RunTimeoutError
from humming_matrix.progress import Progress
from humming_matrix.store.results import (
    ConfigInfo,
    Gsm8kRecord,
    Metrics,
    QuestionOutcome,
    Secrets,
    Timings,
    new_run_id,
    stored_config_fields,
    utc_now_iso,
)
from humming_matrix.suite.client import Completion, CompletionsClient, RetryPolicy, run_completions
from humming_matrix.suite.config import EvalConfig
from humming_matrix.suite.gsm8k import STOP, Prompt, extract_answer

NOT_ASKED = "not asked: the run stopped first"
NOT_STARTED = "not asked: the server never became ready"
# Statuses that say the request itself is wrong (a prompt longer than --max-model-len is 400):
# asking again, or asking the next question, cannot help; the config must change.
BAD_REQUEST_STATUS = frozenset({400, 413, 422})
CONTEXT_LENGTH_MARKERS = (
    "maximum context length",
    "max_model_len",
    "max-model-len",
    "context length",
)


def score(prompt: Prompt, completion: Completion) -> QuestionOutcome:
    if completion.error is not None or completion.text is None:
        return QuestionOutcome(
            prompt.index, False, None, prompt.label, completion.error or "no text", ""
        )
    prediction = extract_answer(completion.text)
    return QuestionOutcome(
        prompt.index, prediction == prompt.label, prediction, prompt.label, None, completion.text
    )


def request_params(config: EvalConfig) -> dict[str, Any]:
    """The body fields besides the prompt, as vLLM's harness sends them (None means omitted)."""
    return {
        "max_tokens": config.max_tokens,
        "stop": list(STOP),
        "temperature": config.temperature,
        "seed": config.seed,
    }


def passes(accuracy: float, config: EvalConfig) -> bool:
    """vLLM's gate, written as its test writes it: measured >= expected - tolerance."""
    return accuracy >= config.accuracy_threshold - config.tolerance


@dataclass(frozen=True)
class RunSettings:
    retries: int = 3
    max_errors: int = 0
    time_limit: float | None = None  # seconds left for asking; None: no limit


def rejected(config: EvalConfig, completion: Completion) -> ConfigError:
    """The bad-input error for a request the server refused as malformed, naming the key."""
    error = completion.error or ""
    if any(m in error.lower() for m in CONTEXT_LENGTH_MARKERS):
        return ConfigError(
            config.path,
            "server_args",
            f"the server refused question {completion.index}: the prompt and max_tokens do not "
            f"fit --max-model-len; raise --max-model-len (or lower num_fewshot or max_tokens) "
            f"({error})",
        )
    return ConfigError(
        config.path, None, f"the server refused question {completion.index} as bad input ({error})"
    )


class Evaluation:
    """Outcomes accumulate here as answers arrive, so a run cut short still leaves a record."""

    def __init__(
        self,
        config: EvalConfig,
        prompts: Sequence[Prompt],
        environment: Mapping[str, Any],
        server: dict[str, Any],
        *,
        previous: Gsm8kRecord | None = None,
        clock: Callable[[], float] = time.monotonic,
        secrets: Secrets | None = None,
    ) -> None:
        self.secrets = secrets or Secrets()
        self.config = config
        self.prompts = list(prompts)
        self.environment = dict(environment)
        # The caller adds the endpoint and command once the server is up; share, don't copy.
        self.server = server
        self.previous = previous
        self.clock = clock
        self.run_id = new_run_id()
        self.outcomes: dict[int, QuestionOutcome] = {}
        # How this run's server start went (None: no server launched, e.g. --endpoint).
        self.startup: Mapping[str, Any] | None = None
        self.startup_seconds: float | None = None
        self._unasked = NOT_ASKED
        self._prior_duration = 0.0
        if previous is not None:
            self._prior_duration = previous.metrics.duration
            for q in previous.questions:
                if q.error is None:
                    self.outcomes[q.index] = q
        self._started: float | None = None

    @property
    def pending(self) -> list[Prompt]:
        return [p for p in self.prompts if p.index not in self.outcomes]

    def ask(
        self, client: CompletionsClient, progress: Progress, settings: RunSettings | None = None
    ) -> None:
        """Ask every pending question. Stops at once (every request cancelled, the answers so
        far kept) when the server refuses a request as malformed (ConfigError), when more
        requests failed than `settings.max_errors` allows (RequestError), or when
        `settings.time_limit` seconds have passed (RunTimeoutError)."""
        settings = settings or RunSettings(max_errors=len(self.prompts))
        pending = self.pending
        by_index = {p.index: p for p in pending}
        progress.start(self.config.name, len(self.prompts), len(self.prompts) - len(pending))
        self._started = self.clock()

        def on_done(completion: Completion) -> None:
            self.outcomes[completion.index] = score(by_index[completion.index], completion)
            progress.advance()
            if completion.status in BAD_REQUEST_STATUS:
                raise rejected(self.config, completion)
            if self.error_count > settings.max_errors:
                raise RequestError(
                    f"{self.config.name}: {self.error_count} requests failed after "
                    f"{settings.retries} retries (allowed {settings.max_errors}); stopped at once"
                )

        try:
            run_completions(
                client, [(p.index, p.text) for p in pending], on_done, settings.time_limit
            )
        except asyncio.TimeoutError:
            raise RunTimeoutError(
                f"{self.config.name}: not finished within the run's time limit "
                f"({settings.time_limit:.0f} s left for asking; --time-limit); "
                f"{len(self.pending)} questions unanswered"
            ) from None
        finally:
            progress.finish()

    def server_ready(self, seconds: float, report: Mapping[str, Any]) -> None:
        self.startup_seconds = seconds
        self.startup = report

    def server_failed(self, seconds: float, report: Mapping[str, Any]) -> None:
        """The server never became ready: the record says how far it got, and every question
        not answered before says why it was not asked."""
        self.server_ready(seconds, report)
        self._unasked = NOT_STARTED

    def _install_seconds(self) -> float | None:
        install = self.environment.get("install")
        value = install.get("install_seconds") if isinstance(install, Mapping) else None
        return float(value) if isinstance(value, (int, float)) else None

    def _elapsed(self) -> float:
        return 0.0 if self._started is None else self.clock() - self._started

    @property
    def error_count(self) -> int:
        return sum(1 for q in self.outcomes.values() if q.error is not None)

    def record(self, complete: bool) -> Gsm8kRecord:
        questions = tuple(
            self.outcomes.get(p.index)
            or QuestionOutcome(p.index, False, None, p.label, self._unasked, "")
            for p in self.prompts
        )
        n = len(questions)
        correct = sum(q.correct for q in questions)
        invalid = sum(1 for q in questions if q.error is None and q.prediction is None)
        errors = sum(1 for q in questions if q.error is not None)
        accuracy = correct / n if n else 0.0
        asking = self._prior_duration + self._elapsed()
        return Gsm8kRecord(
            run_id=self.run_id,
            created=utc_now_iso(),
            complete=complete,
            resumed_from=self.previous.run_id if self.previous else None,
            config=ConfigInfo(
                name=self.config.name,
                path=str(self.config.path),
                sha256=self.config.sha256,
                fields=stored_config_fields(self.config.fields, self.secrets),
            ),
            environment=self.environment,
            server=self.server,
            metrics=Metrics(
                accuracy=accuracy,
                invalid_rate=invalid / n if n else 0.0,
                error_count=errors,
                num_questions=n,
                threshold=self.config.accuracy_threshold,
                tolerance=self.config.tolerance,
                passed=complete and passes(accuracy, self.config),
                duration=asking,
            ),
            questions=questions,
            timings=Timings(self._install_seconds(), self.startup_seconds, asking),
            startup=self.startup,
        )


def make_client(
    config: EvalConfig,
    url: str,
    settings: RunSettings,
    check_server: Callable[[], None] | None,
    headers: Mapping[str, str] | None = None,
) -> CompletionsClient:
    return CompletionsClient(
        url,
        request_params(config),
        concurrency=config.concurrency,
        timeout=config.request_timeout_seconds,
        retry=RetryPolicy(retries=settings.retries),
        check_server=check_server,
        headers=headers,
    )
