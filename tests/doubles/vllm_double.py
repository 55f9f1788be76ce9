#!/usr/bin/env python3
"""TEST DOUBLE of `vllm serve`: a stand-in OpenAI-compatible completions server.

It is put first on PATH as an executable named `vllm` by the tests, so the product's real launcher,
health wait, HTTP client, scoring and records run against it. It is not vLLM and computes nothing:
it recognises each GSM8K test question in the prompt and answers by a policy the test chooses.

Standard library only: under nox it runs in the session's own interpreter (`/usr/bin/env python3`
resolves to the session venv), so it can read the installed humming-kernels version.

Launched with `--api-key KEY` (as the product launches it), every /v1 request must carry
`Authorization: Bearer KEY` or gets 401, as vLLM's own middleware answers.

Policy: JSON in the environment variable HUMMING_DOUBLE_POLICY (from the test's environment or the
config's `env`, which also checks that the config env reaches the server). Keys, all optional:
  wrong: [index...]           answered with label + 1
  invalid: [index...]         answered with no digits
  wrong_if_humming: {"<specifier>": [index...]}   wrong when the installed humming-kernels
                              version is in the specifier set (`>=`,`<`,`==`... comma-joined)
  fail: {"index": n}          the first n requests for that question get HTTP 500
  die_at: k                   the process exits (code 1) when the k-th completion request arrives
  hang_at: k                  from the k-th request on, requests never get an answer
  startup_delay: s            seconds before the server listens
  exit_at_start: code         print a fatal message and exit with that code before listening
  replay_log: path            print that file (a real vLLM log, tests/data/) at start, before
                              exit_at_start or never_healthy take effect
  never_healthy: true         /health answers 503 forever
  spawn_child: true           start a child in the same process group (as vLLM's engine does)
  ignore_sigterm: true        ignore SIGTERM (the launcher must escalate to SIGKILL)
  record: path                write {argv, env, pid, child_pid, humming} as JSON there at start
  record_env: [name...]       environment variable names to include in that record
  delay: s                    seconds to wait before each answer
  log_requests: path          append the question index of every completion request, one a line
  impostor: true              behave as a server that is not the one launched (another process
                              that took the port): answer every request, ignoring `--api-key`
  bad_request: [index...]     answered with HTTP 400 and vLLM's context-length message
  cuda_crash_at: k            at the k-th completion request, print a CUDA error traceback as
                              vLLM's engine does and exit (code 1)
  echo_args: true             print the argv at start, as vLLM logs its non-default args
  lm_eval: true               lm-eval mode: accept lm-eval `local-completions` requests instead of
                              the GSM8K harness's exact parameters (any max_tokens, stop list and
                              seed; `model` must name the served model; temperature 0), and answer
                              in GSM8K's own format, `... #### <value>`, which lm-eval's
                              strict-match filter reads
  no_marker: [index...]       (lm-eval mode) answered correctly but without `####`, so only
                              lm-eval's flexible-extract filter finds the number
  lm_eval_log: path           (lm-eval mode) append one JSON line per completion request:
                              {index, model, max_tokens, temperature, stop, seed, shots, turns}
                              In lm-eval mode /v1/chat/completions answers too (lm-eval's
                              `local-chat-completions`): the last user message is the prompt;
                              `turns` counts the chat's messages (0 for /v1/completions).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

EXPECTED_STOP = ["Question", "Assistant:", "<|separator|>"]


def _humming_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("humming-kernels")
    except metadata.PackageNotFoundError:
        return None


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def _in_specifier(version: str, spec: str) -> bool:
    """A deliberately tiny specifier check (no `packaging` in a bare session venv)."""
    v = _version_tuple(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        op, bound = re.match(r"(==|!=|>=|<=|>|<)\s*(.+)", clause).groups()  # type: ignore[union-attr]
        b = _version_tuple(bound)
        ok = {
            "==": v == b,
            "!=": v != b,
            ">=": v >= b,
            "<=": v <= b,
            ">": v > b,
            "<": v < b,
        }[op]
        if not ok:
            return False
    return True


class Double:
    def __init__(self, policy: dict[str, Any], model: str, api_key: str | None = None) -> None:
        self.policy = policy
        self.api_key = None if policy.get("impostor") else api_key
        self.model = model
        self.lock = threading.Lock()
        self.requests = 0
        self.failures: dict[int, int] = {}
        data_dir = Path(os.environ["HUMMING_MATRIX_GSM8K_DIR"])
        self.questions: dict[str, tuple[int, int]] = {}
        with (data_dir / "test.jsonl").open(encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                row = json.loads(line)
                label = int(row["answer"].split("####")[-1].strip().replace(",", ""))
                self.questions[row["question"]] = (i, label)
        humming = _humming_version()
        self.wrong = set(policy.get("wrong", []))
        for spec, indices in policy.get("wrong_if_humming", {}).items():
            if humming is not None and _in_specifier(humming, spec):
                self.wrong.update(indices)
        self.invalid = set(policy.get("invalid", []))
        self.fail = {int(k): int(v) for k, v in policy.get("fail", {}).items()}

    def _lm_eval_problem(self, body: dict[str, Any]) -> str | None:
        """Why a request is not what lm-eval's `local-completions` sends, or None if it is."""
        if body.get("model") != self.model:
            return f"double expects model={self.model!r}, got {body.get('model')!r}"
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
            return f"double expects a positive max_tokens, got {body.get('max_tokens')!r}"
        if body.get("temperature") not in (0, 0.0):
            return f"double expects temperature 0, got {body.get('temperature')!r}"
        stop = body.get("stop")
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            return f"double expects a stop list of strings, got {stop!r}"
        if body.get("echo") or body.get("logprobs"):
            return "double answers generation requests only (no echo/logprobs)"
        return None

    def chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """lm-eval's `local-chat-completions`: the last user message is the question's prompt
        (the shots come before it, in it or as earlier turns); answered as `answer` would."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return 400, {"error": "double expects messages as a list of objects"}
        users = [m.get("content") for m in messages if m.get("role") == "user"]
        if not users or not isinstance(users[-1], str):
            return 400, {"error": "double expects a user message"}
        earlier = "".join(str(m.get("content", "")) for m in messages[:-1])
        code, payload = self.answer(
            {**body, "prompt": users[-1].rstrip()},
            extra_shots=earlier.count("Question: "),
            turns=len(messages),
        )
        if code == 200:
            text = payload["choices"][0].pop("text")
            payload["choices"][0]["message"] = {"role": "assistant", "content": text}
            payload["object"] = "chat.completion"
        return code, payload

    def answer(
        self, body: dict[str, Any], extra_shots: int = 0, turns: int = 0
    ) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.requests += 1
            n = self.requests
        if self.policy.get("die_at") == n:
            os._exit(1)
        if self.policy.get("cuda_crash_at") == n:
            print(
                "ERROR 12-03 08:10:00 [core.py:708] EngineCore encountered a fatal error.\n"
                "Traceback (most recent call last):\n"
                '  File "/vllm/v1/engine/core.py", line 699, in run_engine_core\n'
                "torch.AcceleratorError: CUDA error: an illegal memory access was "
                "encountered",
                flush=True,
            )
            os._exit(1)
        hang_at = self.policy.get("hang_at")
        if hang_at is not None and n >= hang_at:
            time.sleep(3600)
        lm_eval = bool(self.policy.get("lm_eval"))
        if lm_eval:
            problem = self._lm_eval_problem(body)
            if problem:
                return 400, {"error": problem}
        for key, expected in (
            ()
            if lm_eval
            else (("max_tokens", 256), ("temperature", 0.0), ("seed", 42), ("stop", EXPECTED_STOP))
        ):
            if body.get(key) != expected:
                return 400, {"error": f"double expects {key}={expected!r}, got {body.get(key)!r}"}
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt.endswith("\nAnswer:"):
            return 400, {"error": "prompt must be a string ending in '\\nAnswer:'"}
        question = prompt[prompt.rfind("Question: ") + len("Question: ") : -len("\nAnswer:")]
        if question not in self.questions:
            return 400, {"error": "unknown question"}
        index, label = self.questions[question]
        if index in self.policy.get("bad_request", []):
            return 400, {
                "object": "error",
                "type": "BadRequestError",
                "code": 400,
                "message": "This model's maximum context length is 1024 tokens. However, "
                "you requested 1210 tokens (954 in the messages, 256 in the "
                "completion). Please reduce the length of the messages or "
                "completion.",
            }
        if lm_eval and "lm_eval_log" in self.policy:
            entry = {
                key: body.get(key) for key in ("model", "max_tokens", "temperature", "stop", "seed")
            }
            entry.update(
                index=index, shots=prompt.count("Question: ") - 1 + extra_shots, turns=turns
            )
            with self.lock, open(self.policy["lm_eval_log"], "a", encoding="utf-8") as log:
                log.write(json.dumps(entry) + "\n")
        if "log_requests" in self.policy:
            with self.lock, open(self.policy["log_requests"], "a", encoding="utf-8") as log:
                log.write(f"{index}\n")
        with self.lock:
            seen = self.failures.get(index, 0)
            self.failures[index] = seen + 1
        if seen < self.fail.get(index, 0):
            return 500, {"error": "double: planted server error"}
        if self.policy.get("delay"):
            time.sleep(float(self.policy["delay"]))
        if index in self.invalid:
            text = " I am not sure how to solve this."
        else:
            value = label + 1 if index in self.wrong else label
            text = f" Step by step, 2 + 2 = 4.\nSo the answer is ${value:,}.\n\n"
            if lm_eval and index not in self.policy.get("no_marker", []):
                text = f" Step by step, 2 + 2 = 4.\n#### {value}"
        return 200, {
            "id": f"cmpl-{n}",
            "object": "text_completion",
            "model": self.model,
            "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 8, "total_tokens": 9},
        }


class _Server(ThreadingHTTPServer):
    # uvicorn's backlog is 2048; socketserver's default of 5 resets bursts of connections.
    request_queue_size = 1024
    daemon_threads = True


def _handler(double: Double) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, code: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            if double.api_key is None or not self.path.startswith("/v1"):
                return True
            if self.headers.get("Authorization") == f"Bearer {double.api_key}":
                return True
            self._send(401, {"error": "Unauthorized"})
            return False

        def do_GET(self) -> None:
            if not self._authorized():
                return
            if self.path == "/health":
                code = 503 if double.policy.get("never_healthy") else 200
                self._send(code, {})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": double.model}]})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            if not self._authorized():
                return
            if self.path == "/v1/chat/completions" and double.policy.get("lm_eval"):
                code, payload = double.chat(body)
                self._send(code, payload)
                return
            if self.path != "/v1/completions":
                self._send(404, {"error": "not found"})
                return
            code, payload = double.answer(body)
            self._send(code, payload)

    return Handler


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "serve":
        print("vllm double: only `vllm serve MODEL ... --port N` is supported", file=sys.stderr)
        return 2
    model = argv[1]
    port = int(argv[argv.index("--port") + 1])
    policy: dict[str, Any] = json.loads(os.environ.get("HUMMING_DOUBLE_POLICY", "{}"))
    api_key = argv[argv.index("--api-key") + 1] if "--api-key" in argv else None
    print(f"vllm double: serve {model} on port {port}", flush=True)
    if policy.get("echo_args"):
        print(f"vllm double: non-default args: {argv}", flush=True)
    if policy.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = None
    if policy.get("spawn_child"):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    if "record" in policy:
        names = policy.get("record_env", [])
        Path(policy["record"]).write_text(
            json.dumps(
                {
                    "argv": argv,
                    "env": {n: os.environ.get(n) for n in names},
                    "pid": os.getpid(),
                    "child_pid": child.pid if child else None,
                    "humming": _humming_version(),
                }
            )
        )
    if "replay_log" in policy:
        print(Path(policy["replay_log"]).read_text(encoding="utf-8"), end="", flush=True)
    if "exit_at_start" in policy:
        print("vllm double: planted fatal error: CUDA out of memory", flush=True)
        return int(policy["exit_at_start"])
    time.sleep(float(policy.get("startup_delay", 0)))
    double = Double(policy, model, api_key)
    server = _Server(("127.0.0.1", port), _handler(double))
    print("vllm double: ready", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
