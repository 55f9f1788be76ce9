"""Async client for an OpenAI-compatible `/v1/completions` endpoint, on aiohttp.

aiohttp, as vLLM's own harness uses: at 100 connections httpx's pool spent ~10 CPU seconds on
1319 requests where aiohttp spent ~0.4 (benchmarks/README.md), and vLLM already depends on it.

Bounded concurrency, a per-request timeout, and retries with exponential backoff for answers that
say nothing about the model: 5xx and 429 statuses and broken connections. A request that still
fails after its retries yields a `Completion` with `error` set: a request error, which the caller
counts apart from an invalid answer. A request that timed out is not retried: a server that held
it for `timeout` seconds will not answer a retry sooner, and retrying multiplies the wait. If
`check_server` says the server died, everything stops at once with a ServerError instead of
retrying into a dead socket; whatever `on_done` raises stops everything the same way.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0

    def delay(self, attempt: int) -> float:
        """Seconds before retry number `attempt` (1-based): exponential, with jitter."""
        base: float = min(self.max_backoff, self.backoff * 2.0 ** (attempt - 1))
        return base * (0.5 + random.random() / 2)


@dataclass(frozen=True)
class Completion:
    index: int
    text: str | None
    error: str | None
    attempts: int
    status: int | None = None  # the HTTP status of the last answer, if one came


class _Final(Exception):
    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class _Retryable(Exception):
    pass


class CompletionsClient:
    def __init__(
        self,
        base_url: str,
        params: Mapping[str, Any],
        *,
        concurrency: int,
        timeout: float,
        retry: RetryPolicy = RetryPolicy(),
        check_server: Callable[[], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.headers = dict(headers or {})
        self.url = base_url.rstrip("/") + "/v1/completions"
        self.params = {k: v for k, v in params.items() if v is not None}
        self.concurrency = concurrency
        self.timeout = timeout
        self.retry = retry
        self.check_server = check_server or (lambda: None)
        self.sleep = sleep

    async def _attempt(self, http: aiohttp.ClientSession, prompt: str) -> str:
        try:
            async with http.post(
                self.url, json={"prompt": prompt, **self.params}, headers=self.headers
            ) as response:
                status, body = response.status, await response.text()
        except asyncio.TimeoutError:
            raise _Final(f"no answer within {self.timeout:g} s") from None
        except aiohttp.ClientError as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        if status in RETRYABLE_STATUS:
            raise _Retryable(f"HTTP {status}: {body[:200]}")
        if status != 200:
            raise _Final(f"HTTP {status}: {body[:200]}", status)
        try:
            text = json.loads(body)["choices"][0]["text"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise _Final(f"malformed completion: {body[:200]}", status) from None
        if not isinstance(text, str):
            raise _Final(f"malformed completion text: {text!r}", status)
        return text

    async def _one(
        self, http: aiohttp.ClientSession, gate: asyncio.Semaphore, index: int, prompt: str
    ) -> Completion:
        async with gate:
            attempt = 0
            while True:
                attempt += 1
                try:
                    text = await self._attempt(http, prompt)
                    return Completion(index, text, None, attempt)
                except _Final as exc:
                    return Completion(index, None, str(exc), attempt, exc.status)
                except _Retryable as exc:
                    self.check_server()
                    if attempt > self.retry.retries:
                        return Completion(index, None, str(exc), attempt)
                    await self.sleep(self.retry.delay(attempt))

    async def complete(
        self,
        prompts: Iterable[tuple[int, str]],
        on_done: Callable[[Completion], None] = lambda c: None,
    ) -> list[Completion]:
        """Ask every prompt; `on_done` sees each completion as it arrives (for progress and for
        the partial record if the run is cut short, and to stop the run by raising)."""
        gate = asyncio.Semaphore(self.concurrency)
        connector = aiohttp.TCPConnector(limit=self.concurrency)
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            tasks = [asyncio.ensure_future(self._one(http, gate, i, p)) for i, p in prompts]
            results: list[Completion] = []
            try:
                for future in asyncio.as_completed(tasks):
                    completion = await future
                    on_done(completion)
                    results.append(completion)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return sorted(results, key=lambda c: c.index)


def run_completions(
    client: CompletionsClient,
    prompts: Sequence[tuple[int, str]],
    on_done: Callable[[Completion], None],
    time_limit: float | None = None,
) -> list[Completion]:
    """Ask every prompt; raises TimeoutError (every request cancelled) once `time_limit`
    seconds have passed."""
    return asyncio.run(asyncio.wait_for(client.complete(prompts, on_done), time_limit))
