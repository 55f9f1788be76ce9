"""Which releases of a project a package index offers: the candidate list of a bisect.

Sources, each behind the `PackageIndex` protocol so a test (or an air-gapped CI) can swap them:
- `SimpleIndex`: a PEP 503/691 "simple" index over HTTP (PyPI by default). It asks for the JSON
  form (PEP 691) and falls back to the HTML form; releases come from the file names, and a
  release whose every file is yanked (PEP 592) counts as yanked.
- `FindLinksDirectory`: a directory of wheels and sdists, as pip's and uv's `--find-links` read.
- `CachedIndex`: wraps either and keeps the answer in a JSON file for a while, so a nightly job
  that bisects twice, or a resumed bisect, asks the index once.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from humming_matrix.errors import InfrastructureError, InputError

DEFAULT_INDEX_URL = "https://pypi.org/simple/"
PROJECT = "humming-kernels"
CACHE_TTL_S = 3600.0
_JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_ACCEPT = f"{_JSON_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
_RETRIES = 3


class IndexUnavailableError(InfrastructureError):
    """The index could not be reached or answered something unreadable."""


@dataclass(frozen=True)
class Release:
    version: str
    yanked: bool


class PackageIndex(Protocol):
    @property
    def key(self) -> str:
        """Identifies the source in caches and logs."""
        ...

    def releases(self, project: str) -> tuple[Release, ...]: ...


def released_versions(releases: Iterable[Release], *, prereleases: bool = False) -> tuple[str, ...]:
    """Versions in packaging's order, without yanked releases (and pre/dev releases unless
    asked for): what `pip install` would pick from, so what a user could have installed."""
    keep = {
        Version(r.version): r.version
        for r in releases
        if not r.yanked and (prereleases or not Version(r.version).is_prerelease)
    }
    return tuple(keep[v] for v in sorted(keep))


def version_of(filename: str, project: str) -> Version | None:
    """The version in a distribution file name, if the file belongs to `project`."""
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        elif filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return version if name == canonicalize_name(project) else None


def _collect(files: Iterable[tuple[str, bool]], project: str) -> tuple[Release, ...]:
    yanked: dict[Version, list[bool]] = defaultdict(list)
    for filename, is_yanked in files:
        version = version_of(filename, project)
        if version is not None:
            yanked[version].append(is_yanked)
    return tuple(Release(str(v), all(flags)) for v, flags in sorted(yanked.items()))


class _AnchorParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "a":
            return
        attributes = dict(attrs)
        href = attributes.get("href") or ""
        name = unquote(urlsplit(href).path.rsplit("/", 1)[-1])
        self.files.append((name, "data-yanked" in attributes))


class SimpleIndex:
    """A PEP 503/691 simple repository reached over HTTP(S)."""

    def __init__(
        self,
        url: str = DEFAULT_INDEX_URL,
        *,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/") + "/"
        self.timeout = timeout
        self.sleep = sleep

    @property
    def key(self) -> str:
        return self.url

    def releases(self, project: str) -> tuple[Release, ...]:
        url = f"{self.url}{canonicalize_name(project)}/"
        status, content_type, body = self._get(url)
        if status == 404:
            raise IndexUnavailableError(f"{url}: the index has no project {project!r}")
        if status != 200:
            raise IndexUnavailableError(f"{url}: HTTP {status}")
        if content_type.split(";")[0].strip() == _JSON_TYPE:
            return _collect(self._json_files(body, url), project)
        parser = _AnchorParser()
        parser.feed(body.decode("utf-8", errors="replace"))
        return _collect(parser.files, project)

    def _get(self, url: str) -> tuple[int, str, bytes]:
        """(status, content type, body); 5xx and connection failures are retried."""
        # Three GETs in the whole tool: the standard library's client (it follows redirects)
        # rather than a second HTTP dependency beside aiohttp.
        last = ""
        request = urllib.request.Request(url, headers={"Accept": _ACCEPT})
        for attempt in range(_RETRIES):
            if attempt:
                self.sleep(0.5 * 2**attempt)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                    return answer.status, answer.headers.get("content-type", ""), answer.read()
            except urllib.error.HTTPError as exc:
                if exc.code < 500:
                    return exc.code, exc.headers.get("content-type", ""), exc.read()
                last = f"HTTP {exc.code}"
            except (OSError, ValueError) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                last = f"{type(reason).__name__}: {reason}"
        raise IndexUnavailableError(f"{url}: no answer after {_RETRIES} tries ({last})")

    @staticmethod
    def _json_files(body: bytes, url: str) -> list[tuple[str, bool]]:
        try:
            data = json.loads(body)
            # PEP 691: `yanked` is false, true, or the reason (a string): any reason means yanked.
            return [(f["filename"], f.get("yanked") not in (False, None)) for f in data["files"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise IndexUnavailableError(f"{url}: not a PEP 691 project page ({exc})") from None


class FindLinksDirectory:
    """A directory of distribution files, read by name only (as `--find-links` does)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def key(self) -> str:
        return str(self.path.resolve())

    def releases(self, project: str) -> tuple[Release, ...]:
        if not self.path.is_dir():
            raise InputError(self.path, None, "find-links directory does not exist")
        return _collect(((p.name, False) for p in self.path.iterdir()), project)


class CachedIndex:
    """Keeps each project's releases in `cache_dir` for `ttl` seconds."""

    def __init__(
        self,
        inner: PackageIndex,
        cache_dir: Path,
        ttl: float = CACHE_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.inner = inner
        self.cache_dir = cache_dir
        self.ttl = ttl
        self.clock = clock

    @property
    def key(self) -> str:
        return self.inner.key

    def cache_file(self, project: str) -> Path:
        digest = hashlib.sha256(f"{self.inner.key}\0{canonicalize_name(project)}".encode())
        return self.cache_dir / f"{canonicalize_name(project)}-{digest.hexdigest()[:16]}.json"

    def releases(self, project: str) -> tuple[Release, ...]:
        path = self.cache_file(project)
        cached = self._read(path)
        if cached is not None:
            return cached
        releases = self.inner.releases(project)
        payload = {
            "index": self.inner.key,
            "project": project,
            "fetched": self.clock(),
            "releases": [{"version": r.version, "yanked": r.yanked} for r in releases],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(payload), encoding="utf-8")
        os.replace(tmp, path)
        return releases

    def _read(self, path: Path) -> tuple[Release, ...] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            age = self.clock() - float(data["fetched"])
            if not 0 <= age <= self.ttl:
                return None
            return tuple(Release(str(r["version"]), bool(r["yanked"])) for r in data["releases"])
        except (OSError, ValueError, KeyError, TypeError):
            # A missing, stale or damaged cache is only a cache: ask the index again.
            return None


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "humming-matrix" / "index"
