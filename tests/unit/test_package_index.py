"""Release listing: a real local HTTP simple index (JSON and HTML), a find-links directory, the
cache with an injected clock."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from humming_matrix.errors import InfrastructureError, InputError
from humming_matrix.matrix.package_index import (
    CachedIndex,
    FindLinksDirectory,
    Release,
    SimpleIndex,
    released_versions,
    version_of,
)

FILES = [
    ("humming_kernels-0.1.9-py3-none-any.whl", False),
    ("humming_kernels-0.1.10-py3-none-any.whl", False),
    ("humming_kernels-0.1.10.tar.gz", False),
    ("humming_kernels-0.1.11-py3-none-any.whl", "broken metadata"),
    ("humming_kernels-0.1.12-py3-none-manylinux_2_28_x86_64.whl", False),
    ("humming_kernels-0.1.12-py3-none-any.whl", True),  # one yanked file of several: not yanked
    ("humming_kernels-0.1.13rc1-py3-none-any.whl", False),
    ("humming_kernels-0.1.14-cp310-abi3-manylinux_2_28_x86_64.whl", False),
    ("other_project-0.1.15-py3-none-any.whl", False),
    ("humming_kernels-not-a-version.whl", False),
]


class IndexDouble(BaseHTTPRequestHandler):
    """TEST DOUBLE of a simple index: JSON or HTML by Accept, failures planted per path."""

    pages: ClassVar[dict[str, Any]] = {}
    fail_first: ClassVar[dict[str, int]] = {}
    html_only: ClassVar[bool] = False
    hits: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.hits.append(self.path)
        if self.fail_first.get(self.path, 0) > 0:
            self.fail_first[self.path] -= 1
            self._send(503, "text/plain", b"busy")
            return
        files = self.pages.get(self.path)
        if files is None:
            self._send(404, "text/plain", b"no")
            return
        if "vnd.pypi.simple.v1+json" in self.headers.get("Accept", "") and not self.html_only:
            body = {
                "meta": {"api-version": "1.1"},
                "name": "humming-kernels",
                "files": [
                    {"filename": n, "url": f"../../f/{n}", "hashes": {}, "yanked": y}
                    for n, y in files
                ],
            }
            self._send(200, "application/vnd.pypi.simple.v1+json", json.dumps(body).encode())
            return
        anchors = "".join(
            f'<a href="../../f/{n}#sha256=00"{" data-yanked=" + repr(str(y)) if y else ""}>'
            f"{n}</a><br/>"
            for n, y in files
        )
        self._send(200, "text/html", f"<html><body>{anchors}</body></html>".encode())

    def _send(self, code: int, kind: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def index_url() -> Iterator[str]:
    IndexDouble.pages = {"/simple/humming-kernels/": FILES}
    IndexDouble.fail_first = {}
    IndexDouble.html_only = False
    IndexDouble.hits = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), IndexDouble)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


EXPECTED = (
    Release("0.1.9", False),
    Release("0.1.10", False),
    Release("0.1.11", True),
    Release("0.1.12", False),
    Release("0.1.13rc1", False),
    Release("0.1.14", False),
)


def test_json_simple_api(index_url: str) -> None:
    releases = SimpleIndex(index_url).releases("Humming_Kernels")
    assert releases == EXPECTED
    assert IndexDouble.hits == ["/simple/humming-kernels/"]


def test_html_simple_api_gives_the_same_answer(index_url: str) -> None:
    IndexDouble.html_only = True
    assert SimpleIndex(index_url).releases("humming-kernels") == EXPECTED


def test_server_errors_are_retried(index_url: str) -> None:
    IndexDouble.fail_first = {"/simple/humming-kernels/": 2}
    sleeps: list[float] = []
    assert SimpleIndex(index_url, sleep=sleeps.append).releases("humming-kernels") == EXPECTED
    assert sleeps == [1.0, 2.0]
    assert len(IndexDouble.hits) == 3


def test_persistent_server_errors_are_an_infrastructure_failure(index_url: str) -> None:
    IndexDouble.fail_first = {"/simple/humming-kernels/": 5}
    with pytest.raises(InfrastructureError, match=r"no answer after 3 tries \(HTTP 503\)"):
        SimpleIndex(index_url, sleep=lambda s: None).releases("humming-kernels")


def test_unknown_project(index_url: str) -> None:
    with pytest.raises(InfrastructureError, match="the index has no project 'nope'"):
        SimpleIndex(index_url).releases("nope")


def test_unreachable_index() -> None:
    index = SimpleIndex("http://127.0.0.1:9/simple", timeout=2, sleep=lambda s: None)
    with pytest.raises(
        InfrastructureError,
        match=r"humming-kernels/: no answer after 3 tries "
        r"\(ConnectionRefusedError: \[Errno 111\] Connection refused\)$",
    ):
        index.releases("humming-kernels")


def test_released_versions_drop_yanked_and_prereleases() -> None:
    assert released_versions(EXPECTED) == ("0.1.9", "0.1.10", "0.1.12", "0.1.14")
    assert released_versions(EXPECTED, prereleases=True) == (
        "0.1.9",
        "0.1.10",
        "0.1.12",
        "0.1.13rc1",
        "0.1.14",
    )


def test_find_links_directory(tmp_path: Path) -> None:
    for name, _ in FILES:
        (tmp_path / name).touch()
    (tmp_path / "README.txt").touch()
    releases = FindLinksDirectory(tmp_path).releases("humming-kernels")
    assert released_versions(releases) == ("0.1.9", "0.1.10", "0.1.11", "0.1.12", "0.1.14")


def test_find_links_directory_missing(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        FindLinksDirectory(tmp_path / "nope").releases("humming-kernels")
    assert str(caught.value) == f"{tmp_path / 'nope'}: find-links directory does not exist"


def test_cache_answers_until_it_expires(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "humming_kernels-0.1.2-py3-none-any.whl").touch()
    now = [1000.0]
    cached = CachedIndex(
        FindLinksDirectory(wheels), tmp_path / "cache", ttl=60, clock=lambda: now[0]
    )
    assert cached.releases("humming-kernels") == (Release("0.1.2", False),)
    (wheels / "humming_kernels-0.1.3-py3-none-any.whl").touch()
    now[0] += 59
    assert cached.releases("humming-kernels") == (Release("0.1.2", False),)
    now[0] += 2
    assert cached.releases("humming-kernels") == (
        Release("0.1.2", False),
        Release("0.1.3", False),
    )
    assert json.loads(cached.cache_file("humming-kernels").read_text())["fetched"] == 1061.0


def test_damaged_cache_is_ignored(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "humming_kernels-0.1.4-py3-none-any.whl").touch()
    cached = CachedIndex(FindLinksDirectory(wheels), tmp_path / "cache")
    path = cached.cache_file("humming-kernels")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert cached.releases("humming-kernels") == (Release("0.1.4", False),)


def test_cache_is_per_index(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert CachedIndex(FindLinksDirectory(a), tmp_path).cache_file("x") != CachedIndex(
        FindLinksDirectory(b), tmp_path
    ).cache_file("x")


@pytest.mark.parametrize(
    ("filename", "version"),
    [
        ("humming_kernels-0.1.17-cp310-abi3-manylinux_2_28_x86_64.whl", "0.1.17"),
        ("humming-kernels-0.1.3.tar.gz", "0.1.3"),
        ("humming_kernels-0.1.3.zip", "0.1.3"),
        ("torch-2.14.0-cp311-cp311-linux_x86_64.whl", None),
        ("humming_kernels-0.1.3.egg", None),
    ],
)
def test_version_of(filename: str, version: str | None) -> None:
    parsed = version_of(filename, "humming-kernels")
    assert (str(parsed) if parsed else None) == version
