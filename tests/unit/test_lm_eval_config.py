"""vLLM's lm-eval config format: real files load unchanged, mistakes name the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from humming_matrix.errors import ConfigError
from humming_matrix.lmeval.config import load_lm_eval_config, load_lm_eval_configs

# vLLM's .buildkite/lm-eval-harness/configs/Meta-Llama-3-8B-Instruct-FP8-compressed-tensors.yaml
LLAMA_FP8 = (
    "# For vllm script, with -t option (tensor parallel size).\n"
    "# bash .buildkite/lm-eval-harness/run-lm-eval-gsm-vllm-baseline.sh -m nm-testing/Meta-Llama-3-8B-FP8-compressed-tensors-test -b 32 -l 1000 -f 5 -t 1\n"  # noqa: E501
    """\
model_name: "nm-testing/Meta-Llama-3-8B-FP8-compressed-tensors-test"
tasks:
- name: "gsm8k"
  metrics:
  - name: "exact_match,strict-match"
    value: 0.755
  - name: "exact_match,flexible-extract"
    value: 0.755
limit: 1000
num_fewshot: 5
"""
)

# The shape of vLLM's DeepSeek-V4-Flash-MXFP4.yaml: engine knobs, ROCm-only keys, env_vars.
ENGINE_KNOBS = """\
model_name: "amd/DeepSeek-V4-Flash-MXFP4"
tasks:
- name: "gsm8k"
  metrics:
  - name: "exact_match,strict-match"
    value: 0.95
limit: 1319
num_fewshot: 8
max_model_len: 8192
kv_cache_dtype: fp8
moe_backend: aiter
jit_monitor_mode: error
enforce_eager: false
trust_remote_code: true
tokenizer_mode: deepseek_v4
required_gpu_arch:
- gfx950
env_vars:
  VLLM_ROCM_USE_AITER: "1"
  SOME_NUMBER: 3
rtol: 0.05
"""


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_copied_vllm_config_loads_with_vllm_defaults(tmp_path: Path) -> None:
    config = load_lm_eval_config(write(tmp_path, LLAMA_FP8, "Meta-Llama-3-8B-FP8.yaml"))
    assert config.name == "Meta-Llama-3-8B-FP8"
    assert config.model_name == "nm-testing/Meta-Llama-3-8B-FP8-compressed-tensors-test"
    [task] = config.tasks
    assert task.name == "gsm8k"
    assert [(m.key, m.metric, m.filter, m.value) for m in task.metrics] == [
        ("exact_match,strict-match", "exact_match", "strict-match", 0.755),
        ("exact_match,flexible-extract", "exact_match", "flexible-extract", 0.755),
    ]
    assert (config.limit, config.num_fewshot, config.rtol) == (1000, 5, 0.08)
    spec = config.server_spec()
    assert spec.model == config.model_name
    assert spec.args == (
        "--tensor-parallel-size",
        "1",
        "--max-model-len",
        "4096",
        "--enforce-eager",
    )
    assert dict(spec.env) == {}


def test_engine_settings_become_serve_flags_and_env_vars_go_to_the_server(tmp_path: Path) -> None:
    config = load_lm_eval_config(write(tmp_path, ENGINE_KNOBS))
    spec = config.server_spec(tp_size=4)
    assert spec.args == (
        "--tensor-parallel-size",
        "4",
        "--max-model-len",
        "8192",
        "--kv-cache-dtype",
        "fp8",
        "--moe-backend",
        "aiter",
        "--tokenizer-mode",
        "deepseek_v4",
    )
    assert dict(spec.env) == {"VLLM_ROCM_USE_AITER": "1", "SOME_NUMBER": "3"}
    assert config.rtol == 0.05
    assert config.fields["required_gpu_arch"] == ["gfx950"]


def test_own_server_args_are_appended_after_the_translated_flags(tmp_path: Path) -> None:
    text = LLAMA_FP8 + 'server_args: "--gpu-memory-utilization 0.8"\nnum_concurrent: 4\n'
    config = load_lm_eval_config(write(tmp_path, text))
    assert config.serve_args()[-2:] == ("--gpu-memory-utilization", "0.8")
    assert config.num_concurrent == 4


def test_a_chat_template_config_asks_the_chat_endpoint(tmp_path: Path) -> None:
    plain = load_lm_eval_config(write(tmp_path, LLAMA_FP8, "plain.yaml"))
    assert (plain.lm_eval_model, plain.endpoint_path) == ("local-completions", "/v1/completions")
    chat = load_lm_eval_config(
        write(
            tmp_path,
            LLAMA_FP8 + "apply_chat_template: true\nfewshot_as_multiturn: true\n",
            "chat.yaml",
        )
    )
    assert (chat.lm_eval_model, chat.endpoint_path) == (
        "local-chat-completions",
        "/v1/chat/completions",
    )
    assert chat.fewshot_as_multiturn


def test_a_bare_metric_name_is_its_none_filter(tmp_path: Path) -> None:
    text = LLAMA_FP8.replace('"exact_match,strict-match"', '"exact_match"')
    config = load_lm_eval_config(write(tmp_path, text))
    assert config.tasks[0].metrics[0].key == "exact_match,none"
    assert config.tasks[0].metrics[0].name == "exact_match"


@pytest.mark.parametrize(
    ("edit", "where", "detail"),
    [
        (lambda t: t + "tp_size: 2\n", "tp_size", "unknown key"),
        (lambda t: t.replace("limit: 1000\n", ""), "limit", "missing required key"),
        (
            lambda t: t.replace(
                '    value: 0.755\n  - name: "exact_match,flex',
                '    value: high\n  - name: "exact_match,flex',
            ),
            "tasks[0].metrics[0].value",
            "expected number, got str 'high'",
        ),
        (
            lambda t: t.replace(
                "    value: 0.755\nlimit", "    value: 0.755\n    rtol: 0.1\nlimit"
            ),
            "tasks[0].metrics[1].rtol",
            "unknown key",
        ),
        (lambda t: t.replace('- name: "gsm8k"', '- nam: "gsm8k"'), "tasks[0].nam", "unknown key"),
        (
            lambda t: t + "backend: vllm-vlm\n",
            "backend",
            "'vllm-vlm' is not supported: this suite asks a text completions server (lm-eval "
            "local-completions), as backend 'vllm' does in-process",
        ),
        (
            lambda t: t + "apply_chat_template: yes please\n",
            "apply_chat_template",
            "expected boolean, got str 'yes please'",
        ),
        (lambda t: t + "rtol: 1.5\n", "rtol", "must be at least 0 and below 1"),
        (lambda t: t + "enforce_eager: 1\n", "enforce_eager", "expected boolean, got int 1"),
        (lambda t: t + "num_concurrent: true\n", "num_concurrent", "expected int, got bool True"),
        (
            lambda t: t + 'server_args: "--port 9"\n',
            "server_args",
            "--port is set by the launcher; remove it",
        ),
        (
            lambda t: t.replace("limit: 1000", "limit: 0"),
            "limit",
            "must be a positive count, or a fraction up to 1.0",
        ),
        (lambda t: t + "env_vars:\n  X: [1]\n", "env_vars.X", "expected a string, got list"),
        (
            lambda t: t.replace("num_fewshot: 5", "num_fewshot: -1"),
            "num_fewshot",
            "must not be negative",
        ),
    ],
)
def test_mistakes_name_the_file_and_the_key(
    tmp_path: Path, edit: object, where: str, detail: str
) -> None:
    assert callable(edit)
    path = write(tmp_path, edit(LLAMA_FP8))
    with pytest.raises(ConfigError) as raised:
        load_lm_eval_config(path)
    assert raised.value.path == path
    assert raised.value.key == where
    assert raised.value.detail == detail
    assert str(raised.value) == f"{path}: {where}: {detail}"


def test_limit_may_be_null_as_vllm_allows(tmp_path: Path) -> None:
    config = load_lm_eval_config(write(tmp_path, LLAMA_FP8.replace("limit: 1000", "limit: null")))
    assert config.limit is None


def test_a_list_names_configs_relative_to_itself_and_a_missing_entry_is_an_error(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    write(folder, LLAMA_FP8, "a.yaml")
    write(folder, ENGINE_KNOBS, "b.yaml")
    listing = write(folder, "# comment\n\na.yaml\nb.yaml\na.yaml\n", "models.txt")
    assert [c.name for c in load_lm_eval_configs([], [listing])] == ["a", "b"]
    listing.write_text("a.yaml\nmissing.yaml\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"models.txt: line 2: missing.yaml: no such config"):
        load_lm_eval_configs([], [listing])
