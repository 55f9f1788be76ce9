"""A recording HTTP proxy for tests: forwards every request to a real server unchanged and keeps
each exchange, so a test can hold a record against what the server really answered (and see
exactly what a client asked) without asking anything twice.

Not a double: nothing is made up here; the answers are the upstream server's own.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import httpx

# Generous: a CPU server answers a burst of concurrent requests one batch at a time.
UPSTREAM_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True)
class Exchange:
    method: str
    path: str
    request: Any  # the JSON body sent, or None
    status: int
    response: Any  # the JSON body answered, or None


def _json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None


class RecordingProxy:
    """`with RecordingProxy(upstream) as proxy:` serves on `proxy.url` until the block ends."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def exchanges(self, path: str | None = None) -> list[Exchange]:
        with self._lock:
            return [e for e in self._exchanges if path is None or e.path == path]

    def completions(self) -> Iterator[tuple[Any, Any]]:
        """(request, response) of every successful /v1/completions exchange."""
        for e in self.exchanges("/v1/completions"):
            if e.status == 200:
                yield e.request, e.response

    def _keep(self, exchange: Exchange) -> None:
        with self._lock:
            self._exchanges.append(exchange)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {}
                if self.headers.get("Content-Type"):
                    headers["Content-Type"] = self.headers["Content-Type"]
                with httpx.Client(timeout=UPSTREAM_TIMEOUT_SECONDS) as client:
                    answer = client.request(
                        self.command, proxy.upstream + self.path, content=body, headers=headers
                    )
                proxy._keep(
                    Exchange(
                        self.command,
                        self.path,
                        _json(body),
                        answer.status_code,
                        _json(answer.content),
                    )
                )
                self.send_response(answer.status_code)
                self.send_header(
                    "Content-Type", answer.headers.get("Content-Type", "application/json")
                )
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            do_GET = _forward
            do_POST = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test reads exchanges, not an access log

        return Handler

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
