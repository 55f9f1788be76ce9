"""The exception tree. Every error the tool raises on purpose derives from `HummingMatrixError`.

The CLI turns one of these into a one-line message on stderr and the exit code the class carries,
at one boundary (`humming_matrix.cli.main`); nothing below it prints or exits.

    HummingMatrixError               exit 2 unless a subclass says otherwise
    +-- UsageError                   bad command line (2)
    +-- InputError                   bad input data: names the file and the key or line (2)
    |   +-- ConfigError              an eval config or a config list
    |   +-- MatrixError              configs/matrix.toml
    |   +-- RecordError              a result record that cannot be read or used
    |   +-- RequirementsError        a requirements file
    +-- DataError                    GSM8K data missing or corrupt (2)
    +-- InfrastructureError          the run could not be carried out (3)
    |   +-- ServerError              `vllm serve` died while serving
    |   |   +-- ServerStartError     ... or never became ready (carries the start-up report)
    |   |   +-- ServerCrashError     ... after serving, with a CUDA error in its log (evidence
    |   |                            about the kernel: recorded as such, see docs/reliability.md)
    |   +-- RequestError             too many failed requests
    |   +-- RunTimeoutError          the run passed its wall-clock limit
    |   +-- DownloadError            the network failed while fetching data
    |   +-- NoGPUError               the command needs a CUDA GPU
    +-- UntestableError              this version cannot be tested at all (125)
"""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from humming_matrix.suite.server_log import StartupReport


class ExitCode(IntEnum):
    """Exit codes of the command line (DESIGN.md, contracts)."""

    OK = 0
    FAILED = 1  # a config below its threshold, a regression, numerics out of tolerance
    USAGE = 2
    INFRASTRUCTURE = 3
    UNTESTABLE = 125  # bisect treats this version as skipped, never as bad
    INTERRUPTED = 130
    BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away (`| head`), as shells say


class HummingMatrixError(Exception):
    """Root of every error this package raises on purpose."""

    exit_code: ExitCode = ExitCode.USAGE


class UsageError(HummingMatrixError):
    """The command line asks for something impossible."""


class InputError(HummingMatrixError):
    """Bad input data. The message names the file and the key (or line) at fault."""

    def __init__(self, path: Path | str, key: str | None, message: str) -> None:
        self.path = Path(path)
        self.key = key
        self.detail = message
        where = f"{self.path}: {key}" if key else f"{self.path}"
        super().__init__(f"{where}: {message}")


class ConfigError(InputError):
    """An eval config (YAML) or a config list file is invalid."""


class MatrixError(InputError):
    """The matrix file is invalid."""


class RecordError(InputError):
    """A result record is unreadable, of an unknown schema, or unfit for the operation."""


class RequirementsError(InputError):
    """A requirements file cannot be parsed."""


class DataError(HummingMatrixError):
    """The GSM8K data is missing, unreachable or fails its sha256 check."""


class InfrastructureError(HummingMatrixError):
    """The environment failed us; the result says nothing about the kernels."""

    exit_code = ExitCode.INFRASTRUCTURE


class ServerError(InfrastructureError):
    """The inference server never became ready, or died while serving."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        self.log_tail = log_tail
        super().__init__(message)


class ServerStartError(ServerError):
    """The server exited or timed out before it was ready. `report` says how far it got: a
    result record keeps it, and a bisect may judge a release by it."""

    def __init__(self, message: str, log_tail: str, report: StartupReport) -> None:
        self.report = report
        super().__init__(message, log_tail)


class ServerCrashError(ServerError):
    """The server was ready, served, and then died with a CUDA error in its log: what crashed is
    most likely the kernel under test, so a record keeps it as a crash (`server.crash`), not as
    an environment that could not be tested."""

    def __init__(self, message: str, log_tail: str, cause: str) -> None:
        self.cause = cause
        super().__init__(message, log_tail)


class RequestError(InfrastructureError):
    """Requests kept failing after their retries."""


class RunTimeoutError(InfrastructureError):
    """The run passed its wall-clock limit (`run --time-limit`) before every question was
    answered."""


class DownloadError(InfrastructureError):
    """Fetching data failed on the network (the data itself may be fine)."""


class NoGPUError(InfrastructureError):
    """The command needs a CUDA GPU and none is visible."""


class UntestableError(HummingMatrixError):
    """This version cannot be tested here (install, import or preflight failed)."""

    exit_code = ExitCode.UNTESTABLE
