"""The inference server's lifecycle: launch `vllm serve`, wait for /health, always tear down.

It launches what vLLM's own harness launches (tests/utils.py RemoteOpenAIServer): `vllm serve
<model> <server_args> --trust-remote-code --disable-uvicorn-access-log --port <free> --seed 0`,
with VLLM_WORKER_MULTIPROC_METHOD=spawn and the config's `env` added for the server only. The
server runs in its own process group, so teardown (SIGTERM, then SIGKILL) reaches the engine
processes vLLM spawns, on every path out of the `with` block, Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from humming_matrix.errors import ServerError
from humming_matrix.process_group import stop_group

FIXED_FLAGS = ("--trust-remote-code", "--disable-uvicorn-access-log")
SERVER_SEED = "0"
HEALTH_POLL_SECONDS = 0.5
TERM_GRACE_SECONDS = 10.0
LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class ServerSpec:
    model: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    startup_max_wait_seconds: float = 600.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_command(executable: str, spec: ServerSpec, port: int) -> list[str]:
    return [
        executable, "serve", spec.model, *spec.args, *FIXED_FLAGS,
        "--port", str(port), "--seed", SERVER_SEED,
    ]


def server_environment(spec: ServerSpec, base: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    env["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    env.update(spec.env)
    return env


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def die_with_parent() -> None:
    # If this process is killed outright (SIGKILL, OOM), the server must not outlive it.
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class RunningServer:
    """A launched server. `url` is its base URL; `check()` raises ServerError once it has died."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log_path: Path,
                 command: Sequence[str]) -> None:
        self.process = process
        self.url = url
        self.log_path = log_path
        self.command = tuple(command)

    def alive(self) -> bool:
        return self.process.poll() is None

    def check(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise ServerError(
                f"vllm serve exited with code {code} while serving (log: {self.log_path})",
                log_tail(self.log_path),
            )

    def stop(self, grace: float = TERM_GRACE_SECONDS) -> None:
        """SIGTERM the whole process group, then SIGKILL what is left after `grace` seconds."""
        stop_group(self.process, grace)


def wait_until_healthy(
    server: RunningServer,
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    deadline = clock() + timeout
    with httpx.Client(timeout=5.0) as client:
        while True:
            code = server.process.poll()
            if code is not None:
                raise ServerError(
                    f"vllm serve exited with code {code} before becoming ready "
                    f"(log: {server.log_path})",
                    log_tail(server.log_path),
                )
            try:
                if client.get(f"{server.url}/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if clock() >= deadline:
                raise ServerError(
                    f"vllm serve not ready after {timeout:g} s (startup_max_wait_seconds; "
                    f"log: {server.log_path})",
                    log_tail(server.log_path),
                )
            sleep(HEALTH_POLL_SECONDS)


@contextlib.contextmanager
def launch(
    spec: ServerSpec,
    log_path: Path,
    *,
    executable: str = "vllm",
    base_env: Mapping[str, str] | None = None,
    port: int | None = None,
    grace: float = TERM_GRACE_SECONDS,
) -> Iterator[RunningServer]:
    """Start the server, wait until /health answers 200, yield it, and always tear it down."""
    env = server_environment(spec, os.environ if base_env is None else base_env)
    found = shutil.which(executable, path=env.get("PATH"))
    if found is None:
        raise ServerError(f"no `{executable}` executable on PATH; is vLLM installed in this env?")
    port = port or free_port()
    command = serve_command(found, spec, port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, preexec_fn=die_with_parent,
        )
    server = RunningServer(process, f"http://127.0.0.1:{port}", log_path, command)
    try:
        wait_until_healthy(server, spec.startup_max_wait_seconds)
        yield server
    finally:
        server.stop(grace)
