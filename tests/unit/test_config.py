"""Eval configs: vLLM's files load unchanged; bad input names the file and the key."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from humming_matrix.errors import ConfigError
from humming_matrix.suite.config import load_config, load_configs, read_config_list

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "gsm8k" / "humming"

BASE = 'model_name: "org/model"\naccuracy_threshold: 0.86\nnum_questions: 1319\nnum_fewshot: 5\n'


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_shipped_suite_loads() -> None:
    configs = load_configs([], [SUITE / "config.txt", SUITE / "config-act-fp8.txt"])
    by_name = {c.name: c for c in configs}
    assert sorted(by_name) == [
        "Qwen3-30B-A3B-MXFP4A16-humming",
        "Qwen3-30B-A3B-MXFP4A16-humming-act-fp8",
        "gpt-oss-20b-humming",
        "gpt-oss-20b-humming-act-fp8",
    ]
    qwen = by_name["Qwen3-30B-A3B-MXFP4A16-humming-act-fp8"]
    assert qwen.model_name == "nm-testing/Qwen3-30B-A3B-MXFP4A16"
    assert qwen.accuracy_threshold == 0.86
    assert (qwen.num_questions, qwen.num_fewshot) == (1319, 5)
    assert qwen.server_args == (
        "--enforce-eager",
        "--max-model-len",
        "8192",
        "--tensor-parallel-size",
        "1",
        "--quantization",
        "humming",
    )
    assert qwen.env == {"VLLM_HUMMING_INPUT_QUANT_CONFIG": '{"dtype":"float8e4m3"}'}
    assert qwen.tensor_parallel_size == 1
    assert by_name["gpt-oss-20b-humming-act-fp8"].accuracy_threshold == 0.30
    assert by_name["gpt-oss-20b-humming"].server_args[-2:] == ("--moe-backend", "humming")
    assert by_name["gpt-oss-20b-humming"].env == {}


def test_every_key_vllm_reads_loads(tmp_path: Path) -> None:
    cfg = load_config(
        write(
            tmp_path,
            BASE
            + (
                'server_args: "--max-model-len 4096 --hf-overrides \'{\\"a\\": 1}\'"\n'
                "env:\n  VLLM_X: '1'\n  VLLM_N: 2\n"
                "tolerance: 0.05\n"
                "startup_max_wait_seconds: 1200\n"
                "max_tokens: 512\n"
                "temperature: 0.6\n"
                "seed: 7\n"
                "request_timeout_seconds: 30.5\n"
                "max_concurrency: 16\n"
                'gen_prefix: " Let\'s think step by step."\n'
            ),
        )
    )
    assert cfg.server_args == ("--max-model-len", "4096", "--hf-overrides", '{"a": 1}')
    assert cfg.env == {"VLLM_X": "1", "VLLM_N": "2"}
    assert (cfg.tolerance, cfg.startup_max_wait_seconds, cfg.max_tokens) == (0.05, 1200.0, 512)
    assert (cfg.temperature, cfg.seed, cfg.request_timeout_seconds) == (0.6, 7, 30.5)
    assert (cfg.max_concurrency, cfg.concurrency) == (16, 16)
    assert cfg.gen_prefix == " Let's think step by step."
    assert cfg.fields["seed"] == 7


def test_defaults_are_vllms(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, BASE))
    assert cfg.server_args == ()
    assert cfg.env == {}
    assert (cfg.tolerance, cfg.startup_max_wait_seconds) == (0.08, 600.0)
    assert (cfg.max_tokens, cfg.temperature, cfg.seed) == (256, 0.0, 42)
    assert (cfg.request_timeout_seconds, cfg.max_concurrency, cfg.concurrency) == (600.0, None, 100)
    assert cfg.gen_prefix == ""
    assert cfg.name == "cfg"
    assert cfg.sha256 == hashlib.sha256(BASE.encode()).hexdigest()  # of the file's bytes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BASE + "acuracy: 1\n", r"cfg\.yaml: acuracy: unknown key$"),
        (BASE.replace("num_fewshot: 5\n", ""), r"cfg\.yaml: num_fewshot: missing required key$"),
        (
            BASE.replace("1319", '"1319"'),
            r"cfg\.yaml: num_questions: expected int, got str '1319'$",
        ),
        (
            BASE.replace("0.86", "true"),
            r"cfg\.yaml: accuracy_threshold: expected number, got bool True$",
        ),
        (
            BASE + "server_args: [--enforce-eager]\n",
            r"cfg\.yaml: server_args: expected str, got list",
        ),
        (BASE + "env: [a]\n", r"cfg\.yaml: env: expected mapping, got list"),
        (BASE + "env:\n  A: [1]\n", r"cfg\.yaml: env\.A: expected a string, got list$"),
        (
            BASE + "server_args: --port 8000\n",
            r"cfg\.yaml: server_args: --port is set by the launcher; remove it$",
        ),
        (
            BASE + "server_args: --seed=1\n",
            r"cfg\.yaml: server_args: --seed is set by the launcher; remove it$",
        ),
        (
            BASE + 'server_args: "--a \'unclosed"\n',
            r"cfg\.yaml: server_args: cannot be split like a shell line",
        ),
        (BASE.replace("1319", "0"), r"cfg\.yaml: num_questions: must be at least 1$"),
        (
            BASE.replace("num_fewshot: 5", "num_fewshot: -1"),
            r"cfg\.yaml: num_fewshot: must not be negative$",
        ),
        ("- a\n- b\n", r"cfg\.yaml: expected a mapping of keys to values$"),
        (BASE + "env: {\n", r"cfg\.yaml: line \d+: not valid YAML"),
        (BASE + "max_concurrency: 0\n", r"cfg\.yaml: max_concurrency: must be at least 1$"),
        (
            BASE + "seed: null\n" + "temperature: null\n" + "tolerance: null\n",
            r"cfg\.yaml: tolerance: must not be null$",
        ),
    ],
)
def test_bad_configs_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_list_entries_resolve_next_to_the_list(tmp_path: Path) -> None:
    sub = tmp_path / "suite"
    sub.mkdir()
    write(sub, BASE, "a.yaml")
    write(sub, BASE, "b.yaml")
    listing = write(sub, "# comment\n\na.yaml\n  b.yaml  \n", "list.txt")
    assert read_config_list(listing) == [sub / "a.yaml", sub / "b.yaml"]


def test_missing_list_entry_is_an_error_not_a_skip(tmp_path: Path) -> None:
    write(tmp_path, BASE, "a.yaml")
    listing = write(tmp_path, "a.yaml\n\nmissing.yaml\n", "list.txt")
    message = r"list\.txt: line 3: missing\.yaml: no such config file$"
    with pytest.raises(ConfigError, match=message):
        read_config_list(listing)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such file$"):
        load_config(tmp_path / "nope.yaml")


def test_two_configs_with_one_name_are_refused(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    first = write(tmp_path, BASE, "same.yaml")
    second = write(tmp_path / "x", BASE, "same.yaml")
    with pytest.raises(ConfigError) as caught:
        load_configs([first, second], [])
    assert str(caught.value) == f"{second}: config name 'same' is also used by {first}"
