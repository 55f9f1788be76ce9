"""The completions client against small aiohttp servers on loopback: retries, errors, the
concurrency bound, and stopping when the server is gone."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from humming_matrix.errors import ServerError
from humming_matrix.suite.client import Completion, CompletionsClient, RetryPolicy

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def run(
    handler: Handler,
    prompts: list[tuple[int, str]],
    *,
    retries: int = 3,
    concurrency: int = 4,
    check: Callable[[], None] | None = None,
) -> tuple[list[Completion], list[float]]:
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def main() -> list[Completion]:
        app = web.Application()
        app.router.add_post("/v1/completions", handler)
        async with TestServer(app) as server:
            client = CompletionsClient(
                str(server.make_url("/")),
                {"max_tokens": 256, "temperature": 0.0, "seed": None},
                concurrency=concurrency,
                timeout=5,
                retry=RetryPolicy(retries=retries),
                sleep=sleep,
                check_server=check,
            )
            return await client.complete(prompts)

    return asyncio.run(main()), sleeps


def answer(text: str) -> web.Response:
    return web.json_response({"choices": [{"text": text}]})


def test_body_omits_none_and_5xx_is_retried_with_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    # The jitter factor is 0.5 + random() / 2; pinning random() at 0.5 makes it 0.75 exactly.
    monkeypatch.setattr(random, "random", lambda: 0.5)
    bodies: list[object] = []

    async def handle(request: web.Request) -> web.Response:
        bodies.append(await request.json())
        return web.Response(status=503, text="busy") if len(bodies) <= 2 else answer(" 42")

    [done], sleeps = run(handle, [(0, "Q")])
    assert (done.text, done.error, done.attempts) == (" 42", None, 3)
    assert bodies[0] == {"prompt": "Q", "max_tokens": 256, "temperature": 0.0}
    assert sleeps == [0.5 * 0.75, 1.0 * 0.75]  # backoff 0.5 s doubling, times the jitter


def test_4xx_is_not_retried_and_is_an_error() -> None:
    async def handle(request: web.Request) -> web.Response:
        return web.Response(status=400, text="bad")

    [done], sleeps = run(handle, [(3, "Q")])
    assert (done.index, done.text, done.error, done.attempts) == (3, None, "HTTP 400: bad", 1)
    assert sleeps == []


def test_broken_connections_exhaust_retries() -> None:
    async def handle(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()  # drop the connection without an answer
        return answer("never")

    [done], sleeps = run(handle, [(0, "Q")], retries=2)
    assert done.error is not None
    assert done.error.startswith(("ServerDisconnectedError", "ClientOSError"))
    assert done.attempts == 3
    assert len(sleeps) == 2


def test_malformed_answer_is_an_error() -> None:
    async def handle(request: web.Request) -> web.Response:
        return web.json_response({"x": 1})

    [done], _ = run(handle, [(0, "Q")])
    assert done.error == 'malformed completion: {"x": 1}'


def test_dead_server_stops_everything() -> None:
    def check() -> None:
        raise ServerError("vllm serve exited with code 1 while serving")

    async def handle(request: web.Request) -> web.Response:
        return web.Response(status=502)

    with pytest.raises(ServerError, match="exited with code 1"):
        run(handle, [(i, "Q") for i in range(10)], check=check)


def test_concurrency_is_bounded_and_results_come_in_order() -> None:
    state = {"now": 0, "peak": 0}
    full = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        if state["now"] == 3:
            full.set()
        # The first requests hold until three are in flight at once, so the bound is reached
        # however the event loop interleaves them; a client that let more through would have
        # them counted while these wait.
        await asyncio.wait_for(full.wait(), timeout=10)
        await asyncio.sleep(0.01)
        state["now"] -= 1
        return answer(json.dumps((await request.json())["prompt"]))

    done, _ = run(handle, [(i, f"Q{i}") for i in range(20)], concurrency=3)
    assert [c.index for c in done] == list(range(20))
    assert [c.text for c in done] == [f'"Q{i}"' for i in range(20)]
    assert state["peak"] == 3
