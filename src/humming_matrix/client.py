"""Async client for an OpenAI-compatible `/v1/completions` endpoint, on aiohttp.

aiohttp, as vLLM's own harness uses: at 100 connections httpx's pool spent ~10 CPU seconds on
1319 requests where aiohttp spent ~0.4 (benchmarks/README.md), and vLLM already depends on it.

Bounded concurrency, a per-request timeout, and retries with exponential backoff for answers that
say nothing about the model: 5xx and 429 statuses and broken connections. A request that still
fails after its retries yields a `Completion` with `error` set: a request error, which the caller
counts apart from an invalid answer. If `check_server` says the server died, everything stops at
once with a ServerError instead of retrying into a dead socket.
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
    ) -> None:
        self.url = base_url.rstrip("/") + "/v1/completions"
        self.params = {k: v for k, v in params.items() if v is not None}
        self.concurrency = concurrency
        self.timeout = timeout
        self.retry = retry
        self.check_server = check_server or (lambda: None)
        self.sleep = sleep

    async def _attempt(self, http: aiohttp.ClientSession, prompt: str) -> str:
        try:
            async with http.post(self.url, json={"prompt": prompt, **self.params}) as response:
                status, body = response.status, await response.text()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        if status in RETRYABLE_STATUS:
            raise _Retryable(f"HTTP {status}: {body[:200]}")
        if status != 200:
            raise ValueError(f"HTTP {status}: {body[:200]}")
        try:
            text = json.loads(body)["choices"][0]["text"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ValueError(f"malformed completion: {body[:200]}") from None
        if not isinstance(text, str):
            raise ValueError(f"malformed completion text: {text!r}")
        return text

    async def _one(self, http: aiohttp.ClientSession, gate: asyncio.Semaphore, index: int,
                   prompt: str) -> Completion:
        async with gate:
            attempt = 0
            while True:
                attempt += 1
                try:
                    text = await self._attempt(http, prompt)
                    return Completion(index, text, None, attempt)
                except ValueError as exc:
                    return Completion(index, None, str(exc), attempt)
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
        the partial record if the run is cut short)."""
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


def run_completions(client: CompletionsClient, prompts: Sequence[tuple[int, str]],
                    on_done: Callable[[Completion], None]) -> list[Completion]:
    return asyncio.run(client.complete(prompts, on_done))
