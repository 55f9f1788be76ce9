"""The `lm-eval` record: vLLM's pass rule, per-sample outcomes, pairing, and the local task file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from humming_matrix.errors import ConfigError, RecordError
from humming_matrix.lmeval.config import load_lm_eval_config
from humming_matrix.lmeval.record import (
    checks_from_output,
    load_lm_eval_record,
    paired_outcomes,
    samples_from_output,
    write_lm_eval_record,
)
from humming_matrix.lmeval.suite import effective_limit, model_args, worker_environment
from humming_matrix.lmeval.tasks import write_task_dir
from humming_matrix.lmeval.worker import slim_sample
from humming_matrix.pytest_plugin import resolve_list_file
from humming_matrix.store.lm_eval import CheckState, LmEvalRecord, MetricCheck, passes
from humming_matrix.store.results import ConfigInfo

CONFIG = """\
model_name: "org/model"
tasks:
- name: "gsm8k"
  metrics:
  - name: "exact_match,strict-match"
    value: 0.5
  - name: "exact_match,flexible-extract"
    value: 0.9
limit: 4
num_fewshot: 5
rtol: 0.5
"""


def output(strict: list[float], flexible: list[float]) -> dict[str, object]:
    """What the worker writes: lm-eval's aggregated results and its slimmed samples."""
    rows = [
        {
            "doc_id": i,
            "filter": name,
            "values": {"exact_match": v},
            "prediction": "1",
            "target": "#### 1",
            "output": " #### 1",
        }
        for name, values in (("strict-match", strict), ("flexible-extract", flexible))
        for i, v in enumerate(values)
    ]
    return {
        "lm_eval_version": "0.4.13",
        "results": {
            "gsm8k": {
                "alias": "gsm8k",
                "exact_match,strict-match": sum(strict) / len(strict),
                "exact_match,strict-match_stderr": "N/A",
                "exact_match,flexible-extract": sum(flexible) / len(flexible),
            }
        },
        "samples": {"gsm8k": list(reversed(rows))},
    }


def build(
    tmp_path: Path, strict: list[float], flexible: list[float], run_id: str = "r1"
) -> LmEvalRecord:
    path = tmp_path / "cfg.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    config = load_lm_eval_config(path)
    out = output(strict, flexible)
    samples = samples_from_output(out, tmp_path / "output.json")
    checks = checks_from_output(config, out, samples, tmp_path / "output.json")
    return LmEvalRecord(
        run_id,
        "2026-12-02T00:00:00+00:00",
        True,
        ConfigInfo(config.name, str(path), config.sha256, dict(config.fields)),
        {"humming_kernels": "0.1.6"},
        {"version": "0.4.13"},
        checks,
        samples,
        1.5,
    )


def test_the_pass_rule_is_vllms_relative_tolerance() -> None:
    assert passes(0.25, 0.5, 0.5)
    assert not passes(0.2499, 0.5, 0.5)
    check = MetricCheck("gsm8k", "exact_match", "exact_match,none", 0.5, 0.5, None, None, 0)
    assert check.verdict is CheckState.MISSING


def test_checks_judge_each_metric_and_agree_with_the_samples(tmp_path: Path) -> None:
    record = build(tmp_path, strict=[1, 0, 0, 0], flexible=[1, 1, 1, 0])
    strict, flexible = record.checks
    assert (strict.measured, strict.per_sample, strict.threshold, strict.num_samples) == (
        0.25,
        0.25,
        0.25,
        4,
    )
    assert strict.verdict is CheckState.PASSED
    assert (flexible.measured, flexible.threshold, flexible.verdict) == (
        0.75,
        0.45,
        CheckState.PASSED,
    )
    assert record.passed
    assert strict.line() == (
        "gsm8k | exact_match,strict-match: ground_truth=0.5000 | "
        "measured=0.2500 | rtol=0.5 | threshold=0.2500 | n=4 -> PASSED"
    )
    assert record.outcomes("gsm8k", "exact_match,strict-match") == {
        0: True,
        1: False,
        2: False,
        3: False,
    }
    assert [s.doc_id for s in record.samples[:4]] == [0, 1, 2, 3]  # sorted by filter, doc


def test_a_metric_lm_eval_did_not_report_fails_the_record(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(CONFIG.replace("flexible-extract", "other-filter"), encoding="utf-8")
    config = load_lm_eval_config(path)
    out = output([1, 1, 1, 1], [1, 1, 1, 1])
    samples = samples_from_output(out, path)
    checks = checks_from_output(config, out, samples, path)
    assert [c.verdict for c in checks] == [CheckState.PASSED, CheckState.MISSING]
    assert (
        checks[1].line().endswith("measured=missing | rtol=0.5 | threshold=0.4500 | n=0 -> MISSING")
    )


def test_records_round_trip_and_pair_by_document(tmp_path: Path) -> None:
    store = tmp_path / "store"
    base = build(tmp_path, strict=[1, 1, 0, 1], flexible=[1, 1, 1, 1], run_id="a")
    cand = build(tmp_path, strict=[1, 0, 1, 0], flexible=[1, 1, 1, 1], run_id="b")
    path = write_lm_eval_record(store, base)
    assert path.name.startswith("lm-eval__cfg__0.1.6__a")
    assert load_lm_eval_record(path) == base
    pairs = paired_outcomes(base, cand, "gsm8k", "exact_match,strict-match")
    assert pairs == [(0, True, True), (1, True, False), (2, False, True), (3, True, False)]

    config = cand.config.path
    with pytest.raises(RecordError) as refused:
        paired_outcomes(
            base, dataclasses.replace(cand, complete=False), "gsm8k", "exact_match,strict-match"
        )
    assert str(refused.value) == f"{config}: run b is incomplete; it cannot be judged"
    other = dataclasses.replace(cand, config=dataclasses.replace(cand.config, sha256="x"))
    with pytest.raises(RecordError) as refused:
        paired_outcomes(base, other, "gsm8k", "exact_match,strict-match")
    assert str(refused.value) == f"{config}: config 'cfg' differs between the runs (sha256)"
    fewer = dataclasses.replace(cand, samples=cand.samples[1:])
    with pytest.raises(RecordError) as refused:
        paired_outcomes(base, fewer, "gsm8k", "exact_match,flexible-extract")
    assert str(refused.value) == (
        f"{config}: gsm8k.exact_match,flexible-extract: the runs did not score the same documents"
    )


def test_a_malformed_record_names_the_key(tmp_path: Path) -> None:
    path = write_lm_eval_record(tmp_path, build(tmp_path, [1, 1, 1, 1], [1, 1, 1, 1]))
    data = json.loads(path.read_text())
    del data["samples"][2]["filter"]
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError) as raised:
        load_lm_eval_record(path)
    assert str(raised.value) == f"{path}: samples[2].filter: missing"


def test_the_local_task_includes_lm_evals_own_file_and_swaps_only_the_data(tmp_path: Path) -> None:
    package = tmp_path / "lm_eval"
    (package / "tasks" / "gsm8k").mkdir(parents=True)
    (package / "tasks" / "gsm8k" / "gsm8k.yaml").write_text("task: gsm8k\n")
    seen: list[str] = []

    def data_file(name: str) -> Path:
        seen.append(name)
        return tmp_path / "data" / name

    tasks = write_task_dir(
        tmp_path / "tasks", ["gsm8k", "mmlu_pro"], package_dir=package, data_file=data_file
    )
    assert (tasks.local, tasks.remote, tasks.offline) == (("gsm8k",), ("mmlu_pro",), False)
    assert seen == ["train.jsonl", "test.jsonl"]
    written = yaml.safe_load((tmp_path / "tasks" / "gsm8k.yaml").read_text())
    assert written == {
        "include": str(package / "tasks" / "gsm8k" / "gsm8k.yaml"),
        "task": "gsm8k",
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {
            "data_files": {
                "train": str(tmp_path / "data" / "train.jsonl"),
                "test": str(tmp_path / "data" / "test.jsonl"),
            }
        },
    }
    assert sorted(p.name for p in (tmp_path / "tasks").iterdir()) == ["gsm8k.yaml"]


def test_a_list_file_is_found_next_to_the_tests_first_then_from_the_cwd(tmp_path: Path) -> None:
    tests, cwd = tmp_path / "tests", tmp_path / "cwd"
    for folder in (tests, cwd):
        (folder / "configs").mkdir(parents=True)
        (folder / "configs" / "list.txt").write_text("a.yaml\n")
    (cwd / "configs" / "only-here.txt").write_text("a.yaml\n")
    assert resolve_list_file("configs/list.txt", tests, cwd) == tests / "configs" / "list.txt"
    assert resolve_list_file("configs/only-here.txt", tests, cwd) == (
        cwd / "configs" / "only-here.txt"
    )
    absolute = cwd / "configs" / "list.txt"
    assert resolve_list_file(str(absolute), tests, cwd) == absolute
    with pytest.raises(ConfigError, match=r"configs/nope.txt: no such config list"):
        resolve_list_file("configs/nope.txt", tests, cwd)


def test_the_limit_cap_and_the_model_args_lm_eval_gets(tmp_path: Path) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    config = load_lm_eval_config(path)
    assert (
        effective_limit(config, None),
        effective_limit(config, 2),
        effective_limit(config, 9),
    ) == (4, 2, 4)
    assert model_args(config, "http://127.0.0.1:8000/") == {
        "model": "org/model",
        "base_url": "http://127.0.0.1:8000/v1/completions",
        "tokenizer_backend": None,
        "tokenized_requests": False,
        "num_concurrent": 16,
        "max_retries": 3,
        "timeout": 600,
        "max_length": 4096,
    }
    env = worker_environment({"PATH": "/bin", "HF_HUB_OFFLINE": "0"}, tmp_path, offline=True)
    assert env == {
        "PATH": "/bin",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp_path / "hf-datasets"),
    }
    assert "HF_HUB_OFFLINE" not in worker_environment({}, tmp_path, offline=False)


def test_a_logged_sample_keeps_the_outcome_not_the_document() -> None:
    sample = {
        "doc_id": 7,
        "doc": {"question": "q", "answer": "#### 3"},
        "target": "#### 3",
        "arguments": [["Question: q\nAnswer:", {"until": ["Question:"]}]],
        "resps": [[" so #### 3"]],
        "filtered_resps": ["3"],
        "filter": "strict-match",
        "metrics": ["exact_match"],
        "exact_match": 1.0,
        "doc_hash": "d",
        "prompt_hash": "p",
        "target_hash": "t",
    }
    assert slim_sample(sample) == {
        "doc_id": 7,
        "filter": "strict-match",
        "target": "#### 3",
        "prediction": "3",
        "output": " so #### 3",
        "values": {"exact_match": 1.0},
        "prompt_hash": "p",
    }
