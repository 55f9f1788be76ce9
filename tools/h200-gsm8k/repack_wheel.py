#!/usr/bin/env python3
"""Rewrite a wheel for the H200 payload: drop members, strip debug sections from others, keep
RECORD true to what is left, and store every member uncompressed.

Uncompressed (ZIP_STORED) members are what make the payload small: the payload is one tar
compressed with xz, and xz finds nothing left to compress in deflated zip members, while it
squeezes the raw bytes well. pip installs a stored wheel like any other.

    repack_wheel.py SRC.whl DEST.whl [--drop GLOB]... [--strip-debug GLOB]...

Every pattern must match at least one member, so a wheel whose layout changed fails loudly
instead of travelling unshrunk. Errors: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import base64
import csv
import fnmatch
import hashlib
import io
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


class RepackError(Exception):
    """A wheel that cannot be repacked as asked."""


@dataclass(frozen=True)
class Plan:
    drop: tuple[str, ...]
    strip_debug: tuple[str, ...]


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def strip_debug(data: bytes, name: str) -> bytes:
    """`strip --strip-debug`: removes only .debug_* sections; code, symbols and the dynamic
    symbol table stay as they were."""
    tool = shutil.which("strip")
    if tool is None:
        raise RepackError(f"{name}: --strip-debug needs binutils' strip on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "member"
        path.write_bytes(data)
        done = subprocess.run(
            [tool, "--strip-debug", str(path)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RepackError(f"{name}: strip failed: {done.stderr.strip()}")
        return path.read_bytes()


def _matches(name: str, patterns: Sequence[str]) -> str | None:
    return next((p for p in patterns if fnmatch.fnmatchcase(name, p)), None)


def repack(src: Path, dest: Path, plan: Plan) -> tuple[int, int]:
    """Write DEST from SRC; returns (members dropped, members stripped)."""
    try:
        source = zipfile.ZipFile(src)
    except (OSError, zipfile.BadZipFile) as exc:
        raise RepackError(f"{src}: not a readable wheel ({exc})") from None
    with source:
        infos = source.infolist()
        records = [i.filename for i in infos if i.filename.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise RepackError(f"{src}: expected one .dist-info/RECORD, found {len(records)}")
        record_name = records[0]
        used: set[str] = set()
        kept: list[tuple[zipfile.ZipInfo, bytes]] = []
        dropped = stripped = 0
        for info in infos:
            if info.filename == record_name:
                continue
            pattern = _matches(info.filename, plan.drop)
            if pattern is not None:
                used.add(pattern)
                dropped += 1
                continue
            data = source.read(info)
            pattern = _matches(info.filename, plan.strip_debug)
            if pattern is not None:
                used.add(pattern)
                data = strip_debug(data, f"{src.name}:{info.filename}")
                stripped += 1
            kept.append((info, data))
    unused = [p for p in (*plan.drop, *plan.strip_debug) if p not in used]
    if unused:
        raise RepackError(f"{src}: pattern {unused[0]!r} matches no member")

    # RECORD is CSV: vLLM ships names with commas in them (`N=7168,K=8192,...json`).
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerows((info.filename, record_hash(data), len(data)) for info, data in kept)
    writer.writerow((record_name, "", ""))
    record_bytes = text.getvalue().encode("utf-8")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED) as out:
        for info, data in kept:
            member = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            member.external_attr = info.external_attr  # keeps vllm-rs & co. executable
            member.compress_type = zipfile.ZIP_STORED
            out.writestr(member, data)
        member = zipfile.ZipInfo(record_name, date_time=infos[0].date_time)
        member.external_attr = 0o644 << 16
        out.writestr(member, record_bytes)
    partial.replace(dest)
    return dropped, stripped


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("src", type=Path)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--drop", action="append", default=[], metavar="GLOB")
    parser.add_argument("--strip-debug", action="append", default=[], metavar="GLOB")
    args = parser.parse_args(argv)
    try:
        dropped, stripped = repack(
            args.src, args.dest, Plan(tuple(args.drop), tuple(args.strip_debug))
        )
    except RepackError as exc:
        print(f"repack_wheel: error: {exc}", file=sys.stderr)
        return 2
    size = args.dest.stat().st_size
    print(f"{args.dest.name}: {dropped} members dropped, {stripped} stripped, {size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
