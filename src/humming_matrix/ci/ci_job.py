"""One CI job: run a cell's nox session and exit with the session's own status.

    PYTHONPATH=src python3 -m humming_matrix.ci.ci_job humming-0.1.19 -- --config-list LIST ...

nox exits 1 whatever failed, but CI must tell an infrastructure failure (3: retry it) from a
regression (1) or an untestable version (125: retrying cannot help). The session writes its own
exit code into its install record (`<envdir>/<venv>/humming-install.json`); this reads the record
that session wrote during this job and exits with that code. When nox fails before the session
records anything (the environment could not be installed, no such session), the job fails with 1.

Standard library only: a CI agent needs python3, nox and the checkout, nothing installed. The
`PYTHONPATH=src` that finds this module is not passed on to nox: the session runs the
humming-matrix it installed (and recorded), as `nox -s` by hand does, not the checkout's sources.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType

RECORD_NAME = "humming-install.json"  # installation.RECORD_NAME; not imported: stdlib only


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m humming_matrix.ci.ci_job",
        usage="%(prog)s [--envdir DIR] [--noxfile FILE] SESSION -- RUN_ARGS...",
        description="Run `nox -s SESSION -- RUN_ARGS` and exit with the session's own status "
        "(0 pass, 1 below threshold, 2 usage, 3 infrastructure, 125 untestable).",
    )
    parser.add_argument("session")
    parser.add_argument(
        "--envdir", type=Path, default=Path(".nox"), help="nox's --envdir (default .nox)"
    )
    parser.add_argument("--noxfile", type=Path, default=Path("noxfile.py"))
    argv = list(argv)
    # Everything after `--` is the run's, even what looks like one of ours.
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    args.run_args = argv[split + 1 :]
    return args


def session_exit_code(envdir: Path, session: str, since: datetime) -> tuple[int | None, str]:
    """The exit code the session recorded at or after `since`, and a line saying where from."""
    newest: tuple[str, int | None, str] | None = None
    for path in sorted(envdir.glob(f"*/{RECORD_NAME}")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            created = datetime.fromisoformat(str(data["created"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if data.get("session") != session or created < since:
            continue  # another session's, or left by an earlier job in this checkout
        code = data.get("exit_code")
        entry = (
            str(data["created"]),
            code if isinstance(code, int) and not isinstance(code, bool) else None,
            f"{path}: outcome {data.get('outcome')!r}, exit code {code}",
        )
        if newest is None or entry[0] >= newest[0]:
            newest = entry
    if newest is None:
        return None, f"{session} left no install record in {envdir} during this job"
    return newest[1], newest[2]


def nox_environment(environ: Mapping[str, str], sources: Path) -> dict[str, str]:
    """`environ` without the PYTHONPATH entries naming `sources` (the folder this module was
    imported from); PYTHONPATH is dropped when nothing else is left in it."""
    out = dict(environ)
    kept = [
        entry
        for entry in environ.get("PYTHONPATH", "").split(os.pathsep)
        if entry and Path(entry).resolve() != sources.resolve()
    ]
    if kept:
        out["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        out.pop("PYTHONPATH", None)
    return out


def run(
    argv: Sequence[str] | None = None,
    popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    # The record's time has whole seconds.
    started = now().replace(microsecond=0)
    command = [
        sys.executable,
        "-m",
        "nox",
        "-f",
        str(args.noxfile),
        "--envdir",
        str(args.envdir),
        "-s",
        args.session,
        "--",
        *args.run_args,
    ]
    proc = popen(command, env=nox_environment(os.environ, Path(__file__).resolve().parents[2]))

    def forward(signum: int, frame: FrameType | None) -> None:
        proc.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        status = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if status == 0:
        return 0
    code, where = session_exit_code(args.envdir, args.session, started)
    if code is None:
        # nox's own statuses are not ours (it exits 3 for an unknown session, which CI would
        # retry as an infrastructure failure): a failure before the session ran is just a failure.
        print(f"ci_job: nox exited {status}; {where}; failing with 1", file=sys.stderr)
        return 1
    if code == 0:
        print(f"ci_job: nox exited {status} after the session passed ({where})", file=sys.stderr)
        return 1
    print(
        f"ci_job: nox exited {status}; the session's own status is {code} ({where})",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    sys.exit(run())
