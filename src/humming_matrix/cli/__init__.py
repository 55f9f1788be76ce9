"""The command line: one boundary where errors become a one-line message and an exit code.

Each subcommand lives in its own module here and exposes `register(subparsers)`, which adds its
parser and sets `handler` to a function `(argparse.Namespace) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from humming_matrix import __version__
from humming_matrix.errors import ExitCode, HummingMatrixError, ServerError

# One entry per subcommand module in this package, in the order `--help` lists them.
COMMANDS: tuple[str, ...] = (
    "run",
    "slots",
    "kernels",
    "compare",
    "report",
    "bisect",
    "premerge",
    "pipeline",
    "lm_eval",
    "session",
    "preflight",
    "divergence",
)


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 with its own text on bad usage; keep that, but as one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message}\n")


def report_fault(exc: HummingMatrixError) -> None:
    """The one-line message (and, for a server that failed, the tail of its log) on stderr."""
    message = str(exc).replace("\n", " ").strip()
    print(f"humming-matrix: error: {message}", file=sys.stderr)
    if isinstance(exc, ServerError) and exc.log_tail:
        print(f"--- server log (tail) ---\n{exc.log_tail}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="humming-matrix",
        description="Guard humming-kernels upgrades: run, compare, bisect, gate.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.handler(args))
    except HummingMatrixError as exc:
        report_fault(exc)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("humming-matrix: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        # The reader took what it wanted (`kernels --list | head`): stop quietly. Python flushes
        # stdout again at exit, into the same closed pipe, unless it points elsewhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.BROKEN_PIPE)
    return code
