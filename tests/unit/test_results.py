"""Result records: schema round trip, atomic never-overwriting writes, errors naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from humming_matrix.errors import RecordError
from humming_matrix.store.results import (
    ConfigInfo,
    Gsm8kRecord,
    Metrics,
    QuestionOutcome,
    RecordKind,
    Secrets,
    iter_gsm8k_records,
    load_gsm8k_record,
    record_paths,
    redact,
    stored_config_fields,
    write_json_atomic,
    write_record,
)


def make_record(run_id: str = "20261202T000000Z-h-abcdef", complete: bool = True) -> Gsm8kRecord:
    questions = (
        QuestionOutcome(0, True, 18, 18, None, " 18"),
        QuestionOutcome(1, False, None, 3, None, " none"),
        QuestionOutcome(2, False, None, 70000, "HTTP 500: boom", ""),
    )
    return Gsm8kRecord(
        run_id=run_id,
        created="2026-12-02T00:00:00+00:00",
        complete=complete,
        config=ConfigInfo("cfg", "/c/cfg.yaml", "ab" * 32, {"model_name": "m"}),
        environment={"humming_kernels": "0.1.6", "packages": {"humming-kernels": "0.1.6"}},
        metrics=Metrics(1 / 3, 1 / 3, 1, 3, 0.5, 0.08, False, 1.5),
        questions=questions,
        server={"model": "m"},
    )


def test_round_trip(tmp_path: Path) -> None:
    record = make_record()
    path = write_record(tmp_path, record)
    assert path.name == "gsm8k__cfg__0.1.6__20261202T000000Z-h-abcdef.json"
    assert load_gsm8k_record(path) == record
    data = json.loads(path.read_text())
    for key in ("schema_version", "config", "environment", "metrics", "questions"):
        assert key in data
    assert data["questions"][2] == {
        "index": 2,
        "correct": False,
        "prediction": None,
        "label": 70000,
        "error": "HTTP 500: boom",
        "output": "",
    }
    assert [p for p, _ in iter_gsm8k_records(tmp_path)] == [path]


def test_records_are_never_overwritten(tmp_path: Path) -> None:
    path = write_record(tmp_path, make_record())
    before = path.read_bytes()
    with pytest.raises(RecordError) as refused:
        write_record(tmp_path, make_record(complete=False))
    assert str(refused.value) == (
        f"{path}: a record of that name exists; records are never overwritten"
    )
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temp file left


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "sub" / "x.json", {"a": 1})
    assert json.loads((tmp_path / "sub" / "x.json").read_text()) == {"a": 1}
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["x.json"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("metrics"), r"r\.json: metrics: missing$"),
        (
            lambda d: d["questions"][1].update(correct="no"),
            r"r\.json: questions\[1\]\.correct: expected bool, got str$",
        ),
        (
            lambda d: d["questions"][0].update(index=True),
            r"r\.json: questions\[0\]\.index: expected int, got bool$",
        ),
        (lambda d: d.update(schema_version=99), r"r\.json: schema_version: expected 1$"),
        (lambda d: d.update(kind="kernels"), r"r\.json: kind: expected 'gsm8k', got 'kernels'$"),
        (lambda d: d["config"].pop("sha256"), r"r\.json: config\.sha256: missing$"),
    ],
)
def test_bad_records_name_the_key(tmp_path: Path, mutate: object, message: str) -> None:
    data = make_record().to_json()
    mutate(data)  # type: ignore[operator]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match=message):
        load_gsm8k_record(path)


def test_unreadable_records(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RecordError, match=r"bad\.json: not a JSON record"):
        load_gsm8k_record(tmp_path / "bad.json")
    with pytest.raises(RecordError, match=r"gone\.json: no such file$"):
        load_gsm8k_record(tmp_path / "gone.json")
    with pytest.raises(RecordError, match=r"nowhere: no such file or directory$"):
        record_paths(tmp_path / "nowhere")


def test_record_paths_scan_recursively_by_kind(tmp_path: Path) -> None:
    a = write_record(tmp_path / "machine-a", make_record("20261202T000000Z-a-000001"))
    b = write_record(tmp_path / "machine-b" / "x", make_record("20261202T000000Z-b-000002"))
    write_json_atomic(tmp_path / "kernels__case__0.1.6__r.json", {"kind": "kernels"})
    assert record_paths(tmp_path, RecordKind.GSM8K) == [a, b]
    assert sorted(record_paths(tmp_path)) == sorted(
        [a, b, tmp_path / "kernels__case__0.1.6__r.json"]
    )


def test_redact_hides_credentials_only() -> None:
    env = {
        "HF_TOKEN": "hf_x",
        "OPENAI_API_KEY": "k",
        "my_secret_path": "s",
        "VLLM_HUMMING_INPUT_QUANT_CONFIG": '{"dtype":"float8e4m3"}',
        "KEYBOARD": "us",
    }
    assert redact(env) == {
        "HF_TOKEN": "***",
        "OPENAI_API_KEY": "***",
        "my_secret_path": "***",
        "VLLM_HUMMING_INPUT_QUANT_CONFIG": '{"dtype":"float8e4m3"}',
        "KEYBOARD": "***",
    }


def test_secrets_hide_flag_values_in_both_spellings_and_listed_ones() -> None:
    secrets = Secrets.gather(
        ["--api-key", "sk-one-two", "--hf-token=hf_listed_9", "--max-model-len", "4096"],
        {
            "VLLM_USE_V1": "1",
            "DB_URL": "postgres://u:pw@db/x",
            "MY_VAR": "plainvalue",
            "VLLM_HUMMING_INPUT_QUANT_CONFIG": '{"dtype": "float8e4m3"}',
        },
        listed=["--hf-token", "MY_VAR"],
        extra_values=["launch-key-abcdef"],
    )
    assert secrets.argv(
        [
            "vllm",
            "serve",
            "m",
            "--api-key",
            "sk-one-two",
            "--hf-token=hf_listed_9",
            "--max-model-len",
            "4096",
            "--api-key=launch-key-abcdef",
        ]
    ) == [
        "vllm",
        "serve",
        "m",
        "--api-key",
        "***",
        "--hf-token=***",
        "--max-model-len",
        "4096",
        "--api-key=***",
    ]
    # Every config env value is a secret (but the humming knobs); short ones are not scrubbed
    # from text, so "1" does not blank a log.
    assert secrets.text("args: sk-one-two hf_listed_9 postgres://u:pw@db/x plainvalue 1") == (
        "args: *** *** *** *** 1"
    )
    assert secrets.environment(
        {
            "VLLM_USE_V1": "1",
            "PATH": "/bin",
            "HF_HOME": "/h",
            "COPY": "postgres://u:pw@db/x",
            "OPENAI_API_KEY": "x",
            "VLLM_HUMMING_INPUT_QUANT_CONFIG": "{}",
        }
    ) == {
        "VLLM_USE_V1": "***",
        "PATH": "/bin",
        "HF_HOME": "/h",
        "COPY": "***",
        "OPENAI_API_KEY": "***",
        "VLLM_HUMMING_INPUT_QUANT_CONFIG": "{}",
    }


def test_stored_config_fields_keep_the_humming_knobs_only() -> None:
    env = {"HF_TOKEN": "x", "VLLM_HUMMING_MOE_GEMM_TYPE": "humming"}
    fields: dict[str, object] = {
        "model_name": "m",
        "server_args": "--api-key 'a b c d' --enforce-eager",
        "env": env,
        "env_vars": {"ANY": "y"},
    }
    stored = stored_config_fields(fields, Secrets.gather(["--api-key", "a b c d"], {}))
    assert stored == {
        "model_name": "m",
        "server_args": "--api-key '***' --enforce-eager",
        "env": {"HF_TOKEN": "***", "VLLM_HUMMING_MOE_GEMM_TYPE": "humming"},
        "env_vars": {"ANY": "***"},
    }
    assert env["HF_TOKEN"] == "x"  # the config itself is untouched
