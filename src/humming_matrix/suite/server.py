"""The inference server's lifecycle: launch `vllm serve`, wait for /health, always tear down.

It launches what vLLM's own harness launches (tests/utils.py RemoteOpenAIServer): `vllm serve
<model> <server_args> --trust-remote-code --disable-uvicorn-access-log --port <free> --seed 0`,
with VLLM_WORKER_MULTIPROC_METHOD=spawn and the config's `env` added for the server only. The
server runs in its own process group (`process_group`), so teardown (SIGTERM, then SIGKILL)
reaches the engine processes vLLM spawns, on every path out of the `with` block, Ctrl-C included.

Each launch is given an identity: a random `--api-key` (or the config's own) that every request
carries. Once /health answers, the server must accept that key on /v1/models and refuse a request
without it; a server that does not is not the one launched (another process took the port between
our choosing it and vLLM binding it) and the start fails rather than scoring a stranger.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from humming_matrix import environment, process_group
from humming_matrix.errors import ServerCrashError, ServerError, ServerStartError
from humming_matrix.interrupts import deferred
from humming_matrix.store.results import Secrets
from humming_matrix.suite.server_log import StartupPhase, StartupReport, phase_reached, root_cause

FIXED_FLAGS = ("--trust-remote-code", "--disable-uvicorn-access-log")
API_KEY_FLAG = "--api-key"
SERVER_SEED = "0"
HEALTH_POLL_SECONDS = 0.5
TERM_GRACE_SECONDS = 10.0
LOG_TAIL_LINES = 40
ENDPOINT_CHECK_SECONDS = 10.0
# What a record keeps of the server's environment: the variables that decide whether and how
# vLLM and humming run (the sampler, the JIT cache, which packages are imported, which GPUs).
RECORDED_ENV_PREFIXES = ("VLLM_", "HUMMING_", "CUDA_", "TORCH_", "NCCL_", "HF_")
RECORDED_ENV_NAMES = frozenset(
    {"PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "VIRTUAL_ENV", "PYTHONHOME"}
)


@dataclass(frozen=True)
class ServerSpec:
    model: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    startup_max_wait_seconds: float = 600.0
    # Flags (`--token`) and env variable names a user declared secret, beyond `--api-key` and
    # the config's env (`results.Secrets`).
    secret_names: tuple[str, ...] = ()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_command(
    executable: str, spec: ServerSpec, port: int, api_key: str | None = None
) -> list[str]:
    """`api_key`: the launch's identity, added unless the config's args carry their own."""
    identity = [] if api_key is None or configured_api_key(spec.args) else [API_KEY_FLAG, api_key]
    return [
        executable,
        "serve",
        spec.model,
        *spec.args,
        *identity,
        *FIXED_FLAGS,
        "--port",
        str(port),
        "--seed",
        SERVER_SEED,
    ]


def configured_api_key(args: Sequence[str]) -> str | None:
    """The value of `--api-key` in a config's server args (the first, if vLLM takes several)."""
    for i, arg in enumerate(args):
        if arg == API_KEY_FLAG and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(API_KEY_FLAG + "="):
            return arg.split("=", 1)[1]
    return None


def new_api_key() -> str:
    """A launch's identity. Hex, never URL-safe base64: a key starting with '-' (1 launch in
    64 with `token_urlsafe`) is read by `vllm serve`'s parser as an option, and the server exits
    with "argument --api-key: expected at least one argument" before it is ready."""
    return secrets.token_hex(16)


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {} if api_key is None else {"Authorization": f"Bearer {api_key}"}


def server_environment(spec: ServerSpec, base: Mapping[str, str]) -> dict[str, str]:
    env = dict(base)
    env["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    env.update(spec.env)
    return env


def recorded_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The part of the server's effective environment a record keeps (unredacted: the caller
    redacts)."""
    return {
        name: value
        for name, value in sorted(env.items())
        if name in RECORDED_ENV_NAMES or name.startswith(RECORDED_ENV_PREFIXES)
    }


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class RunningServer:
    """A launched server. `url` is its base URL; `check()` raises ServerError once it has died."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        url: str,
        log_path: Path,
        command: Sequence[str],
        environ: Mapping[str, str] | None = None,
        api_key: str | None = None,
        secrets: Secrets | None = None,
    ) -> None:
        self.process = process
        self.secrets = secrets or Secrets()
        self.api_key = api_key  # the launch's identity: every request must carry it
        self.url = url
        self.log_path = log_path
        self.command = tuple(command)
        self.environ = dict(environ or {})  # what the process was started with
        self.startup: StartupReport | None = None  # set once /health answered

    def alive(self) -> bool:
        return self.process.poll() is None

    def check(self) -> None:
        code = self.process.poll()
        if code is None:
            return
        message = f"vllm serve exited with code {code} while serving (log: {self.log_path})"
        text = self.secrets.text(_read_log(self.log_path))
        tail = "\n".join(text.splitlines()[-LOG_TAIL_LINES:])
        crash = cuda_crash(text)
        if crash:
            raise ServerCrashError(f"{message}: {crash}", tail, crash)
        raise ServerError(message, tail)

    def stop(self, grace: float = TERM_GRACE_SECONDS) -> None:
        """SIGTERM the whole process group, then SIGKILL what is left after `grace` seconds."""
        process_group.stop_group(self.process, grace)

    @property
    def headers(self) -> dict[str, str]:
        return auth_headers(self.api_key)


# What a CUDA fault in a kernel leaves in the log (torch's and the driver's wording).
CUDA_FAULT_MARKERS = (
    "CUDA error",
    "cudaErrorIllegalAddress",
    "illegal memory access",
    "CUBLAS_STATUS_EXECUTION_FAILED",
    "device-side assert",
)


def cuda_crash(text: str) -> str:
    """The log's root cause if it shows a CUDA fault ("" if not)."""
    if not any(marker in text for marker in CUDA_FAULT_MARKERS):
        return ""
    cause = root_cause(text)
    if cause:
        return cause
    return next(
        line.strip()
        for line in text.splitlines()
        if any(marker in line for marker in CUDA_FAULT_MARKERS)
    )


def _read_log(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _failure(
    server: RunningServer,
    exit_code: int | None,
    timeout: float,
    seconds: float,
    gpu_activity: Callable[[], list[dict[str, Any]] | None],
    stranger: str = "",
) -> ServerStartError:
    """The error for a start-up that failed (the process exited with `exit_code`, or None: it
    timed out), with the report a record keeps: the phase the log reached, the first exception
    in it (vLLM's own last words only point "above" to it), its tail, and what the GPUs were
    doing, sampled now, before the teardown frees them."""
    text = server.secrets.text(_read_log(server.log_path))
    phase = phase_reached(text)
    cause = root_cause(text)
    if stranger:
        reason = f"the server answering on {server.url} is not the one launched: {stranger}"
        cause = ""
    elif exit_code is not None:
        reason = f"vllm serve exited with code {exit_code} before becoming ready"
    else:
        reason = (
            f"vllm serve not ready after {timeout:g} s (startup_max_wait_seconds; "
            f"last phase: {phase.label})"
        )
    if cause:
        reason += f": {cause}"
    tail = "\n".join(text.splitlines()[-LOG_TAIL_LINES:])
    gpu = gpu_activity()
    report = StartupReport(
        ready=False,
        phase=phase,
        seconds=seconds,
        reason=reason,
        log_tail=tuple(tail.splitlines()),
        gpu=None if gpu is None else tuple(gpu),
    )
    return ServerStartError(f"{reason} (log: {server.log_path})", tail, report)


def wait_until_healthy(
    server: RunningServer,
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    gpu_activity: Callable[[], list[dict[str, Any]] | None] = environment.gpu_activity,
    started: float | None = None,
) -> StartupReport:
    """Poll /health until it answers 200; raise ServerStartError if the process exits first or
    `timeout` seconds pass. `started` is when the process was launched (default: now)."""
    begin = clock() if started is None else started
    deadline = begin + timeout
    while True:
        code = server.process.poll()
        if code is not None:
            raise _failure(server, code, timeout, clock() - begin, gpu_activity)
        try:
            if http_status(f"{server.url}/health") == 200:
                stranger = _not_ours(server)
                if stranger:
                    raise _failure(server, None, timeout, clock() - begin, gpu_activity, stranger)
                report = StartupReport(True, StartupPhase.READY, clock() - begin)
                server.startup = report
                return report
        except OSError:
            pass
        if clock() >= deadline:
            raise _failure(server, None, timeout, clock() - begin, gpu_activity)
        sleep(HEALTH_POLL_SECONDS)


def http_status(url: str, headers: Mapping[str, str] | None = None, timeout: float = 5.0) -> int:
    """The status of a GET (any status, not only 2xx); OSError when nothing answers.

    The few plain GETs of the tool (health, identity, the endpoint check) use the standard
    library's client: aiohttp serves the questions, and no second HTTP library is needed.
    """
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def _not_ours(server: RunningServer) -> str:
    """Why the server that answered /health is not the one launched ("" if it is): it must
    accept the launch's key and refuse a request without one."""
    if server.api_key is None:
        return ""
    url = f"{server.url}/v1/models"
    with_key = http_status(url, server.headers)
    if with_key != 200:
        return f"it refused this launch's API key (HTTP {with_key} from /v1/models)"
    without = http_status(url)
    if without != 401:
        return f"it answered without this launch's API key (HTTP {without} from /v1/models)"
    return ""


@contextlib.contextmanager
def launch(
    spec: ServerSpec,
    log_path: Path,
    *,
    executable: str = "vllm",
    base_env: Mapping[str, str] | None = None,
    port: int | None = None,
    grace: float = TERM_GRACE_SECONDS,
    identity: bool = True,
) -> Iterator[RunningServer]:
    """Start the server, wait until /health answers 200 and the server proves it is ours, yield
    it, and always tear it down. `identity=False` launches it without a key (for a server that
    clients without the key will use, e.g. through `--endpoint`)."""
    env = server_environment(spec, os.environ if base_env is None else base_env)
    found = shutil.which(executable, path=env.get("PATH"))
    if found is None:
        raise ServerError(f"no `{executable}` executable on PATH; is vLLM installed in this env?")
    port = port or free_port()
    api_key = (configured_api_key(spec.args) or new_api_key()) if identity else None
    command = serve_command(found, spec, port, api_key)
    hidden = Secrets.gather(
        spec.args, spec.env, spec.secret_names, extra_values=[api_key] if api_key else []
    )
    started = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(hidden.argv(command))}\n".encode())
        log.flush()
        process = process_group.start(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = RunningServer(
        process, f"http://127.0.0.1:{port}", log_path, command, env, api_key, hidden
    )
    try:
        wait_until_healthy(server, spec.startup_max_wait_seconds, started=started)
        yield server
    finally:
        # A signal arriving now waits until the group is gone and the log is clean.
        with deferred():
            server.stop(grace)
            # vLLM logs its arguments (the key among them) and may echo its environment.
            hidden.scrub_file(log_path)


def check_endpoint(url: str, timeout: float = ENDPOINT_CHECK_SECONDS) -> None:
    """A server named by --endpoint must answer /health before any question is asked."""
    try:
        status = http_status(f"{url.rstrip('/')}/health", timeout=timeout)
    except OSError as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise ServerError(
            f"--endpoint {url} does not answer ({type(reason).__name__}: {reason})"
        ) from None
    if status != 200:
        raise ServerError(f"--endpoint {url} is not healthy (HTTP {status} from /health)")
