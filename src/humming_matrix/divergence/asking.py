"""The requests of a divergence pass, against vLLM's OpenAI-compatible server.

Per question, two requests: `POST /tokenize` of the prompt alone (where the answer starts), and
`POST /v1/completions` of the whole forced text with `prompt_logprobs: k`, `max_tokens: 1`,
`temperature: 0` and `return_token_ids: true`. vLLM then returns `prompt_token_ids` and, per prompt
position after the first, a map from token id to `{logprob, rank, decoded_token}` holding the top
k and the prompt's own token wherever it ranks (vLLM 0.32's `completion/protocol.py` and
`serving.py`, and its real answers; `return_token_ids` exists since vLLM 0.10.2; `--max-logprobs`,
default 20, bounds k). Prefill only: the one generated token is the only decode
step. Retries, the concurrency bound and the dead-server check are those of the GSM8K client.
"""

from __future__ import annotations

import asyncio
import json
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from humming_matrix.divergence.record import AnswerLogprobs, pad_top
from humming_matrix.divergence.teacher import ForcedText
from humming_matrix.suite.client import RETRYABLE_STATUS, RetryPolicy


class _Retryable(Exception):
    pass


class MalformedAnswer(ValueError):
    """The server answered 200 with something that is not what the request asked for."""


def completion_body(text: str, top_k: int) -> dict[str, Any]:
    return {
        "prompt": text,
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": top_k,
        "return_token_ids": True,
    }


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def parse_answer(index: int, prefix_ids: Sequence[int], body: Any, top_k: int) -> AnswerLogprobs:
    """The answer span's logprobs from a completion body (module doc). The span starts at the
    first token where the whole text's tokens leave the prompt's: a token that merges the
    prompt's end with the answer's start belongs to the answer."""
    try:
        choice = body["choices"][0]
        ids = [int(i) for i in choice["prompt_token_ids"]]
        steps = choice["prompt_logprobs"]
        if not isinstance(steps, list) or len(steps) != len(ids):
            size = f" of {len(steps)}" if isinstance(steps, list) else ""
            raise MalformedAnswer(
                f"{len(ids)} prompt tokens but prompt_logprobs is "
                f"{type(steps).__name__}{size}; does this server support "
                "prompt_logprobs?"
            )
        start = max(1, common_prefix(prefix_ids, ids))
        out = AnswerLogprobs(index, None, start)
        for position in range(start, len(ids)):
            entries = {int(t): v for t, v in steps[position].items()}
            forced = ids[position]
            listed = sorted(
                (
                    (v["rank"], t, float(v["logprob"]))
                    for t, v in entries.items()
                    if int(v["rank"]) <= top_k
                ),
                key=lambda e: (e[0], e[1]),
            )
            top_ids, top_lps = pad_top([(t, lp) for _, t, lp in listed], top_k)
            out.tokens.append(forced)
            out.logprobs.append(float(entries[forced]["logprob"]))
            out.top_ids.extend(top_ids)
            out.top_logprobs.extend(top_lps)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, MalformedAnswer):
            raise
        raise MalformedAnswer(
            f"not a prompt_logprobs answer ({type(exc).__name__}: {exc}); "
            "does this server support prompt_logprobs and "
            "return_token_ids?"
        ) from None
    return out


@dataclass(frozen=True)
class Asked:
    """One question's outcome, as the pass records it."""

    answer: AnswerLogprobs
    attempts: int


class LogprobsClient:
    def __init__(
        self,
        base_url: str,
        top_k: int,
        *,
        concurrency: int,
        timeout: float,
        retry: RetryPolicy | None = None,
        check_server: Callable[[], None] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.base = base_url.rstrip("/")
        # The launch's identity (its per-launch API key): a server that is not ours refuses us.
        self.headers = dict(headers or {})
        self.top_k = top_k
        self.concurrency = concurrency
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.check_server = check_server or (lambda: None)

    async def _post(self, http: aiohttp.ClientSession, path: str, body: dict[str, Any]) -> Any:
        try:
            async with http.post(self.base + path, json=body) as response:
                status, text = response.status, await response.text()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        if status in RETRYABLE_STATUS:
            raise _Retryable(f"HTTP {status} from {path}: {text[:200]}")
        if status != 200:
            raise MalformedAnswer(f"HTTP {status} from {path}: {text[:200]}")
        try:
            return json.loads(text)
        except ValueError:
            raise MalformedAnswer(f"{path} answered non-JSON: {text[:200]}") from None

    async def _attempt(self, http: aiohttp.ClientSession, item: ForcedText) -> AnswerLogprobs:
        tokenized = await self._post(http, "/tokenize", {"prompt": item.prompt})
        try:
            prefix = [int(t) for t in tokenized["tokens"]]
        except (KeyError, TypeError, ValueError):
            raise MalformedAnswer(f"/tokenize answered {str(tokenized)[:200]}") from None
        body = await self._post(http, "/v1/completions", completion_body(item.text, self.top_k))
        return parse_answer(item.index, prefix, body, self.top_k)

    async def _one(
        self, http: aiohttp.ClientSession, gate: asyncio.Semaphore, item: ForcedText
    ) -> Asked:
        async with gate:
            attempt = 0
            while True:
                attempt += 1
                try:
                    return Asked(await self._attempt(http, item), attempt)
                except MalformedAnswer as exc:
                    return Asked(AnswerLogprobs(item.index, str(exc)), attempt)
                except _Retryable as exc:
                    self.check_server()
                    if attempt > self.retry.retries:
                        return Asked(AnswerLogprobs(item.index, str(exc)), attempt)
                    await asyncio.sleep(self.retry.delay(attempt))

    async def ask(
        self, items: Iterable[ForcedText], on_done: Callable[[Asked], None] = lambda a: None
    ) -> list[Asked]:
        gate = asyncio.Semaphore(self.concurrency)
        connector = aiohttp.TCPConnector(limit=self.concurrency)
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, headers=self.headers
        ) as http:
            tasks = [asyncio.ensure_future(self._one(http, gate, item)) for item in items]
            done: list[Asked] = []
            try:
                for future in asyncio.as_completed(tasks):
                    asked = await future
                    on_done(asked)
                    done.append(asked)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return sorted(done, key=lambda a: a.answer.index)


def ask_all(
    client: LogprobsClient, items: Sequence[ForcedText], on_done: Callable[[Asked], None]
) -> list[Asked]:
    return asyncio.run(client.ask(items, on_done))


def empty_answer(index: int, error: str) -> AnswerLogprobs:
    return AnswerLogprobs(index, error, 0, array("i"), array("f"), array("i"), array("f"))
