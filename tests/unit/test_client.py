"""The completions client through httpx's mock transport: retries, errors, concurrency bound."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from humming_matrix.client import CompletionsClient, RetryPolicy
from humming_matrix.errors import ServerError


def make_client(handler: httpx.MockTransport, *, retries: int = 3, concurrency: int = 4,
                check: object = None) -> tuple[CompletionsClient, list[float]]:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    client = CompletionsClient(
        "http://server", {"max_tokens": 256, "temperature": 0.0, "seed": None},
        concurrency=concurrency, timeout=5, retry=RetryPolicy(retries=retries),
        transport=handler, sleep=sleep, check_server=check,  # type: ignore[arg-type]
    )
    return client, sleeps


def test_body_omits_none_and_5xx_is_retried_with_backoff() -> None:
    bodies: list[dict[str, object]] = []
    calls = {"n": 0}

    def handle(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        calls["n"] += 1
        if calls["n"] <= 2:
            return httpx.Response(503, text="busy")
        return httpx.Response(200, json={"choices": [{"text": " 42"}]})

    client, sleeps = make_client(httpx.MockTransport(handle))
    [done] = asyncio.run(client.complete([(0, "Q")]))
    assert (done.text, done.error, done.attempts) == (" 42", None, 3)
    assert bodies[0] == {"prompt": "Q", "max_tokens": 256, "temperature": 0.0}
    assert len(sleeps) == 2
    assert 0.25 <= sleeps[0] <= 0.5
    assert 0.5 <= sleeps[1] <= 1.0


def test_4xx_is_not_retried_and_is_an_error() -> None:
    client, sleeps = make_client(httpx.MockTransport(lambda r: httpx.Response(400, text="bad")))
    [done] = asyncio.run(client.complete([(3, "Q")]))
    assert (done.index, done.text, done.error, done.attempts) == (3, None, "HTTP 400: bad", 1)
    assert sleeps == []


def test_broken_connections_exhaust_retries() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    client, sleeps = make_client(httpx.MockTransport(handle), retries=2)
    [done] = asyncio.run(client.complete([(0, "Q")]))
    assert done.error == "ConnectError: refused"
    assert done.attempts == 3
    assert len(sleeps) == 2


def test_malformed_answer_is_an_error() -> None:
    client, _ = make_client(httpx.MockTransport(lambda r: httpx.Response(200, json={"x": 1})))
    [done] = asyncio.run(client.complete([(0, "Q")]))
    assert done.error == 'malformed completion: {"x":1}'


def test_dead_server_stops_everything() -> None:
    def check() -> None:
        raise ServerError("vllm serve exited with code 1 while serving")

    client, _ = make_client(httpx.MockTransport(lambda r: httpx.Response(502)), check=check)
    with pytest.raises(ServerError, match="exited with code 1"):
        asyncio.run(client.complete([(i, "Q") for i in range(10)]))


def test_concurrency_is_bounded() -> None:
    state = {"now": 0, "peak": 0}

    async def handle(request: httpx.Request) -> httpx.Response:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.01)
        state["now"] -= 1
        return httpx.Response(200, json={"choices": [{"text": "1"}]})

    client, _ = make_client(httpx.MockTransport(handle), concurrency=3)
    done = asyncio.run(client.complete([(i, "Q") for i in range(20)]))
    assert [c.index for c in done] == list(range(20))
    assert state["peak"] == 3
