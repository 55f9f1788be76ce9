"""GSM8K data, prompts and answer extraction against vLLM's gsm8k_eval.py rules."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from humming_matrix.errors import DataError
from humming_matrix.suite import gsm8k

# The published files' sha256 (DESIGN.md), written out rather than read from the module.
TEST_SHA256 = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
TRAIN_SHA256 = "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (" The answer is 18.", 18),
        (" So she has $1,234 left.", 1234),  # commas are removed before matching
        (" 1,000,000 dollars", 1000000),
        (" It costs $5.", 5),
        (" The total is -5 degrees.", 5),  # the sign is not a digit: -5 scores as 5
        (" 3.75 hours", 75),  # the last run of digits, as vLLM takes it
        (" 12 apples and 7 pears, so 19", 19),
        (" no numbers here", None),
        ("", None),
        (" the code is 007", None),  # ast.literal_eval refuses leading zeros: INVALID
        (" 0", 0),
        (" 000", 0),  # an all-zero literal is valid Python
        (" ١٢", None),  # non-ASCII digits match \\d but are no Python literal: INVALID
        (" 5 then ٣", None),
        (" 10\nQuestion: next", 10),
        (" #### 72", 72),
    ],
)
def test_extract_answer_table(text: str, expected: int | None) -> None:
    assert gsm8k.extract_answer(text) == expected


def _rows(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_prompt_is_byte_for_byte_the_vllm_format(gsm8k_dir: Path) -> None:
    train = _rows(gsm8k_dir / "train.jsonl")
    test = _rows(gsm8k_dir / "test.jsonl")
    prompts = gsm8k.build_prompts(num_questions=3, num_fewshot=5)
    shots = "".join(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in train[:5])
    assert [p.index for p in prompts] == [0, 1, 2]
    for prompt, row in zip(prompts, test[:3], strict=True):
        assert prompt.text == f"{shots}Question: {row['question']}\nAnswer:"
    assert prompts[0].text.startswith("Question: Natalia sold clips to 48 of her friends")
    assert prompts[0].text.endswith(
        "How much in dollars does she make every day at the farmers' market?\nAnswer:"
    )
    assert [p.label for p in prompts] == [18, 3, 70000]
    assert (
        hashlib.sha256(prompts[0].text.encode()).hexdigest()
        == hashlib.sha256(
            (shots + f"Question: {test[0]['question']}\nAnswer:").encode()
        ).hexdigest()
    )


def test_gen_prefix_and_zero_shots() -> None:
    prompts = gsm8k.build_prompts(num_questions=1, num_fewshot=0, gen_prefix=" Let's think.")
    assert prompts[0].text.startswith("Question: Janet")
    assert prompts[0].text.endswith("\nAnswer: Let's think.")
    with_shot = gsm8k.build_prompts(num_questions=1, num_fewshot=1, gen_prefix=" X")
    assert "\nAnswer: X Natalia sold 48/2" in with_shot[0].text


def test_all_1319_labels_are_valid(gsm8k_dir: Path) -> None:
    prompts = gsm8k.build_prompts(num_questions=5000, num_fewshot=0)
    assert len(prompts) == 1319  # num_questions is capped at the test set, as in vLLM
    # Each label is the number after the answer's `####`, without its sign: vLLM's harness reads
    # labels with the same last-run-of-digits rule as predictions (questions 489 and 1113 are
    # -10 and -3, and score as 10 and 3 on both sides).
    rows = _rows(gsm8k_dir / "test.jsonl")
    published = [int(r["answer"].split("####")[-1].strip().replace(",", "")) for r in rows]
    assert [i for i, value in enumerate(published) if value < 0] == [489, 1113]
    assert [p.label for p in prompts] == [abs(value) for value in published]
    assert [p.index for p in prompts] == list(range(1319))


def test_corrupt_local_copy_is_refused(
    tmp_path: Path, gsm8k_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(gsm8k_dir / "train.jsonl", tmp_path / "train.jsonl")
    data = (gsm8k_dir / "test.jsonl").read_bytes()
    (tmp_path / "test.jsonl").write_bytes(data.replace(b"Janet", b"Jenny", 1))
    monkeypatch.setenv(gsm8k.ENV_DIR, str(tmp_path))
    with pytest.raises(DataError, match=r"test\.jsonl: sha256 [0-9a-f]{64} does not match"):
        gsm8k.build_prompts(1, 0)


def test_missing_local_copy_names_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gsm8k.ENV_DIR, str(tmp_path))
    with pytest.raises(DataError, match=r"train\.jsonl: no such file"):
        gsm8k.build_prompts(1, 1)


def test_download_once_into_cache_and_verify(
    tmp_path: Path, gsm8k_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(gsm8k.ENV_DIR)
    fetched: list[str] = []

    def fetch(url: str) -> bytes:
        fetched.append(url)
        return (gsm8k_dir / url.rsplit("/", 1)[1]).read_bytes()

    cache = tmp_path / "cache"
    first = gsm8k.data_file("test.jsonl", fetch, cache)
    second = gsm8k.data_file("test.jsonl", fetch, cache)
    assert first == second == cache / "test.jsonl"
    assert fetched == [gsm8k.SOURCE_URL.format(name="test.jsonl")]

    other = b"not gsm8k\n"
    with pytest.raises(DataError) as refused:
        gsm8k.data_file("train.jsonl", lambda url: other, cache)
    assert str(refused.value) == (
        f"{gsm8k.SOURCE_URL.format(name='train.jsonl')}: downloaded file has sha256 "
        f"{hashlib.sha256(other).hexdigest()}, expected {TRAIN_SHA256}"
    )
    assert not (cache / "train.jsonl").exists()

    tampered = b"tampered\n"
    (cache / "test.jsonl").write_bytes(tampered)
    with pytest.raises(DataError) as refused:
        gsm8k.data_file("test.jsonl", fetch, cache)
    assert str(refused.value) == (
        f"{cache / 'test.jsonl'}: sha256 {hashlib.sha256(tampered).hexdigest()} "
        f"does not match the published GSM8K file ({TEST_SHA256}); the file is corrupt or not "
        "GSM8K"
    )
