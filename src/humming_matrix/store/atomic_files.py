"""Files written in one step: a reader (an artifact uploader, `report` over a store that is still
being filled, `run` reading the install record a session rewrites) never sees half a file.

The bytes go to a temporary file in the target's directory and are then moved (`replace_file`)
or hard-linked (`create_file`, which never replaces) into place. `tempfile.mkstemp` makes its file
0600; the result gets the mode any other file the user writes would get (0666 less the umask),
so records and reports can be read by whoever can read the server logs beside them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


def current_umask() -> int:
    # os.umask can only be read by setting it; set it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def _temporary(path: Path, durable: bool) -> Iterator[tuple[IO[str], Path]]:
    with _temporary_fd(path) as (fd, tmp), os.fdopen(fd, "w", encoding="utf-8") as fh:
        yield fh, tmp
        fh.flush()
        if durable:
            os.fsync(fh.fileno())


@contextmanager
def _temporary_fd(path: Path) -> Iterator[tuple[int, Path]]:
    """A new file of a unique name beside `path` (two writers never share one), removed if the
    block fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".tmp-{path.name}.", dir=path.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        yield fd, tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def replace_file(path: Path, write: Callable[[IO[str]], object]) -> Path:
    """Write `path` through `write(fh)`, replacing any file of that name in one step."""
    with _temporary(path, durable=False) as (fh, tmp):
        write(fh)
    _move(tmp, path)
    return path


def _move(tmp: Path, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        # e.g. a file of another user's in a sticky directory: no stray temporary left behind
        tmp.unlink(missing_ok=True)
        raise


def create_file(path: Path, write: Callable[[IO[str]], object]) -> Path:
    """Write a new file `path` through `write(fh)`, flushed to disk, then linked into place;
    raises FileExistsError (leaving the existing file as it was) if the name is taken."""
    with _temporary(path, durable=True) as (fh, tmp):
        write(fh)
    try:
        os.link(tmp, path)
    finally:
        tmp.unlink()
    return path


def replace_bytes(path: Path, data: bytes) -> Path:
    """`replace_file` for bytes (a downloaded file, kept byte for byte)."""
    with _temporary_fd(path) as (fd, tmp), os.fdopen(fd, "wb") as fh:
        fh.write(data)
    _move(tmp, path)
    return path
