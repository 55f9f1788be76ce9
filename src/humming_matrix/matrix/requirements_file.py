"""pip requirements files (vLLM's `requirements/cuda.txt` and the files it includes), parsed with
packaging's `Requirement`.

What pip accepts must not break us: comments, blank lines, `\\` continuations, environment
markers, extras, direct URLs, per-requirement options (`--hash=...`), global options
(`--index-url`, `--extra-index-url`, `-f`, `--pre`, ...) and `-r`/`-c` includes. Includes are read
through a `Reader`, so the same parser reads files from the working tree or from a git revision.
Constraint files (`-c`) say what may be installed, not what is, so their lines are not pins.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from humming_matrix.errors import RequirementsError

# Reads one file (a path relative to the repository root) or raises FileNotFoundError.
Reader = Callable[[PurePosixPath], str]

_INCLUDE = {"-r": True, "--requirement": True, "-c": False, "--constraint": False}
# Global options and their argument count; their values are never requirements.
_OPTIONS_WITH_VALUE = frozenset(
    {
        "-i",
        "--index-url",
        "--extra-index-url",
        "-f",
        "--find-links",
        "--trusted-host",
        "--no-binary",
        "--only-binary",
        "--use-feature",
        "--progress-bar",
    }
)
_FLAG_OPTIONS = frozenset({"--pre", "--no-index", "--prefer-binary", "--require-hashes"})
_EDITABLE = frozenset({"-e", "--editable"})
# A comment starts at `#` at the line start or after whitespace (pip's rule), so a URL fragment
# such as `#egg=name` or `#sha256=...` survives.
_COMMENT = re.compile(r"(^|\s+)#.*$")


@dataclass(frozen=True)
class Pin:
    """One requirement line: what it names and where it was written."""

    name: str  # canonical (PEP 503)
    text: str  # the requirement as packaging normalises it
    specifier: str
    extras: tuple[str, ...]
    marker: str | None
    url: str | None
    source: str  # "requirements/cuda.txt:12"

    @property
    def exact_version(self) -> str | None:
        """The version of an `==` pin without wildcard, else None."""
        specs = list(Requirement(self.text).specifier)
        if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            return specs[0].version
        return None

    @property
    def key(self) -> tuple[str, str, tuple[str, ...], str | None, str | None]:
        """What makes two pins of one name install the same thing."""
        return (self.name, self.specifier, self.extras, self.marker, self.url)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Comment-free lines, continuations joined, each with the number of its first line."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        line = raw
        if line.endswith("\\") and not _COMMENT.search(line):
            pending.append(line[:-1])
            continue
        pending.append(line)
        joined = _COMMENT.sub("", " ".join(pending)).strip()
        pending = []
        if joined:
            out.append((start, joined))
    if pending:
        joined = _COMMENT.sub("", " ".join(pending)).strip()
        if joined:
            out.append((start, joined))
    return out


def _strip_line_options(line: str) -> str:
    """Drop per-requirement options (`--hash=...`, `--config-settings ...`)."""
    cut = re.search(r"\s--?[a-zA-Z]", line)
    return line[: cut.start()].strip() if cut else line


def parse_requirements(path: PurePosixPath, read: Reader) -> tuple[Pin, ...]:
    """Every requirement of `path` and of the files it includes with `-r`, in file order."""
    return tuple(_parse(path, read, (), as_pins=True))


def _parse(
    path: PurePosixPath, read: Reader, stack: tuple[PurePosixPath, ...], *, as_pins: bool
) -> list[Pin]:
    if path in stack:
        chain = " -> ".join(str(p) for p in (*stack, path))
        raise RequirementsError(str(stack[-1]), None, f"include cycle: {chain}")
    try:
        text = read(path)
    except FileNotFoundError:
        includer = stack[-1] if stack else path
        raise RequirementsError(str(includer), None, f"cannot read {path}: no such file") from None
    pins: list[Pin] = []
    for number, line in _logical_lines(text):
        where = f"line {number}"
        if line.startswith("-"):
            try:
                words = shlex.split(line)
            except ValueError as exc:
                raise RequirementsError(str(path), where, f"cannot split {line!r}: {exc}") from None
            option, _, inline = words[0].partition("=")
            value = inline or (words[1] if len(words) > 1 else "")
            if option in _INCLUDE:
                if not value:
                    raise RequirementsError(str(path), where, f"{option} needs a file name")
                included = PurePosixPath(_normalise(path.parent / value))
                found = _parse(included, read, (*stack, path), as_pins=_INCLUDE[option])
                if as_pins:
                    pins.extend(found)
                continue
            if option in _OPTIONS_WITH_VALUE or option in _FLAG_OPTIONS or option in _EDITABLE:
                # Editable installs are a checkout, not a release; nothing to guard.
                continue
            raise RequirementsError(str(path), where, f"unknown option {option!r}")
        requirement_text = _strip_line_options(line)
        try:
            requirement = Requirement(requirement_text)
        except InvalidRequirement as exc:
            raise RequirementsError(str(path), where, f"not a requirement: {exc}") from None
        if as_pins:
            pins.append(
                Pin(
                    name=canonicalize_name(requirement.name),
                    text=str(requirement),
                    specifier=str(requirement.specifier),
                    extras=tuple(sorted(requirement.extras)),
                    marker=str(requirement.marker) if requirement.marker else None,
                    url=requirement.url,
                    source=f"{path}:{number}",
                )
            )
    return pins


def _normalise(path: PurePosixPath) -> str:
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            else:
                parts.append(part)
        elif part != ".":
            parts.append(part)
    return "/".join(parts) or "."
