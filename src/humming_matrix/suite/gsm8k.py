"""GSM8K data, prompts and answer extraction, exactly as vLLM's tests/evals/gsm8k/gsm8k_eval.py.

The thresholds in the configs were calibrated with that script, so every rule here reproduces it:
the first `num_fewshot` train examples as shots, the first `num_questions` test questions, and
the last run of digits (after removing commas) as the answer, parsed the way `ast.literal_eval`
parses it (so `007` and non-ASCII digits are invalid, and `-5` scores as `5`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from humming_matrix.errors import DataError, DownloadError
from humming_matrix.store.atomic_files import replace_bytes

ENV_DIR = "HUMMING_MATRIX_GSM8K_DIR"
ENV_CACHE = "HUMMING_MATRIX_CACHE_DIR"
ENV_URL = "HUMMING_MATRIX_GSM8K_URL"  # a mirror of the folder below (an offline cache server)
SOURCE_BASE = (
    "https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data"
)
SOURCE_URL = SOURCE_BASE + "/{name}"
SHA256 = {
    "test.jsonl": "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
    "train.jsonl": "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
}
STOP = ("Question", "Assistant:", "<|separator|>")

_DIGITS = re.compile(r"\d+")
# What Python's tokenizer accepts as a decimal int literal: ASCII digits, no leading zero unless
# every digit is zero. `ast.literal_eval` raises SyntaxError on anything else; vLLM scores that
# as invalid.
_INT_LITERAL = re.compile(r"[1-9][0-9]*|0+", re.ASCII)

Fetcher = Callable[[str], bytes]


def extract_answer(text: str) -> int | None:
    """The answer in a completion, or None when vLLM's harness would score it INVALID."""
    runs = _DIGITS.findall(text.replace(",", ""))
    if not runs:
        return None
    last = runs[-1]
    if not _INT_LITERAL.fullmatch(last):
        return None
    try:
        return int(last)
    except ValueError:  # past Python's int-string conversion limit
        return None


@dataclass(frozen=True)
class Example:
    question: str
    answer: str


@dataclass(frozen=True)
class Prompt:
    index: int
    text: str
    label: int


def _default_fetch(url: str) -> bytes:
    # Two downloads in the tool's life: the standard library's client (it follows redirects
    # and raises on an error status) rather than a second HTTP library beside aiohttp.
    with urllib.request.urlopen(url, timeout=60.0) as response:
        return bytes(response.read())


def default_cache_dir() -> Path:
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE]) / "gsm8k"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "humming-matrix" / "gsm8k"


def _verify(path: Path) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHA256[path.name]:
        raise DataError(
            f"{path}: sha256 {digest} does not match the published GSM8K file "
            f"({SHA256[path.name]}); the file is corrupt or not GSM8K"
        )


def data_file(name: str, fetch: Fetcher = _default_fetch, cache_dir: Path | None = None) -> Path:
    """A verified copy of `train.jsonl` or `test.jsonl`.

    `HUMMING_MATRIX_GSM8K_DIR` names a local copy (CI and tests); otherwise the file is downloaded
    once into the cache. Either way its sha256 must match.
    """
    local = os.environ.get(ENV_DIR)
    if local:
        path = Path(local) / name
        if not path.is_file():
            raise DataError(f"{path}: no such file ({ENV_DIR}={local})")
        _verify(path)
        return path
    directory = cache_dir or default_cache_dir()
    path = directory / name
    if not path.is_file():
        url = f"{os.environ.get(ENV_URL, SOURCE_BASE).rstrip('/')}/{name}"
        try:
            payload = fetch(url)
        except OSError as exc:
            # The network failed us, not the data: an infrastructure failure (exit 3).
            raise DownloadError(f"cannot download {url}: {exc}") from None
        digest = hashlib.sha256(payload).hexdigest()
        if digest != SHA256[name]:
            raise DataError(f"{url}: downloaded file has sha256 {digest}, expected {SHA256[name]}")
        # A name of its own per writer: two runs downloading at once each move a whole file in.
        replace_bytes(path, payload)
    _verify(path)
    return path


def read_jsonl(path: Path) -> Iterator[Example]:
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if line.startswith("#"):  # vLLM's reader skips these too
                continue
            try:
                row = json.loads(line)
                yield Example(question=row["question"], answer=row["answer"])
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise DataError(f"{path}: line {number}: not a GSM8K row ({exc})") from None


def build_prompts(
    num_questions: int,
    num_fewshot: int,
    gen_prefix: str = "",
    fetch: Fetcher = _default_fetch,
) -> list[Prompt]:
    train = list(read_jsonl(data_file("train.jsonl", fetch)))
    test = list(read_jsonl(data_file("test.jsonl", fetch)))
    shots = "".join(
        f"Question: {ex.question}\nAnswer:{gen_prefix} {ex.answer}\n\n"
        for ex in train[:num_fewshot]
    )
    prompts = []
    for index, ex in enumerate(test[:num_questions]):
        label = extract_answer(ex.answer)
        if label is None:
            raise DataError(f"test.jsonl: question {index} has no numeric label")
        text = f"{shots}Question: {ex.question}\nAnswer:{gen_prefix}"
        prompts.append(Prompt(index=index, text=text, label=label))
    return prompts
