"""`humming-matrix pipeline`: the emitted Buildkite YAML and GitHub matrix JSON, parsed back and
checked step by step against the services' own schemas (vendored by check-jsonschema from
buildkite/pipeline-schema and SchemaStore) and against the matrix they came from."""

from __future__ import annotations

import importlib.resources
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from humming_matrix.ci import github_actions
from humming_matrix.ci.pipeline import Job, distinct_cells, step_key
from humming_matrix.cli import main
from humming_matrix.errors import UsageError
from humming_matrix.matrix.cells import load_matrix

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "humming-matrix.yml"
REAL_SESSIONS = [
    "humming-0.1.5",
    "humming-0.1.5-cu130",
    "humming-0.1.6",
    "humming-0.1.6-cu130",
    "humming-0.1.17",
    "humming-0.1.17-cu128",
    "humming-0.1.19",
    "humming-0.1.19-cu128",
    "humming-0.1.20",
    "humming-0.1.20-cu128",
]

TEST_MATRIX = """\
[matrix]
schema_version = 1
recipe = "full"

[recipe.full]
requirements = ["vllm=={vllm}", "humming-kernels=={humming}"]
gpus = 1

[recipe.double]
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 0
preflight = false

[variant.cu128]
torch_backend = "cu128"

[variant.cu130]
torch_backend = "cu130"

[[pairing]]
humming = ">=0.1.0,<0.1.7"
versions = ["0.1.6"]
vllm = "0.24.0"
variants = ["cu128", "cu130"]

[[pairing]]
humming = ">=0.1.7,<0.2"
versions = ["0.1.19"]
recipe = "double"
variants = ["cu130"]
"""


def _schema(name: str) -> dict[str, Any]:
    files = importlib.resources.files("check_jsonschema") / "builtin_schemas" / "vendor"
    schema: dict[str, Any] = json.loads((files / f"{name}.json").read_text(encoding="utf-8"))
    return schema


def _validate(document: Any, name: str) -> None:
    schema = _schema(name)
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class(schema).validate(document)


def _config(folder: Path, name: str, server_args: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        "model_name: m\naccuracy_threshold: 0.5\nnum_questions: 10\nnum_fewshot: 5\n"
        f"server_args: {server_args}\n"
    )
    return path


@pytest.fixture
def test_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with a small matrix and configs of tensor parallel size 1 and 2."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "matrix.toml").write_text(TEST_MATRIX)
    configs = tmp_path / "configs"
    configs.mkdir()
    _config(configs, "small", "--enforce-eager")
    _config(configs, "large", "--tensor-parallel-size 2 --max-model-len 4096")
    (configs / "both.txt").write_text("small.yaml\nlarge.yaml\n")
    (configs / "small.txt").write_text("small.yaml\n")
    return tmp_path


def emit(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(["pipeline", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err == ""
    return out


def fail(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code = main(["pipeline", *args])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    return err.removeprefix("humming-matrix: error: ").rstrip("\n")


def test_real_matrix_buildkite_pipeline(capsys: pytest.CaptureFixture[str]) -> None:
    document = yaml.safe_load(emit(capsys, "--format", "buildkite"))
    _validate(document, "buildkite")
    steps = document["steps"]
    cells, wait, report = steps[:-2], steps[-2], steps[-1]
    # Every distinct environment once, in matrix order; the default-variant aliases
    # (humming-0.1.5-cu128 is humming-0.1.5) are not run twice.
    assert [s["key"] for s in cells] == [step_key(s) for s in REAL_SESSIONS]
    assert len({s["key"] for s in steps if "key" in s}) == len(cells) + 1
    for step, session in zip(cells, REAL_SESSIONS, strict=True):
        assert step == {
            "label": f"{session} (1 GPU)",
            "key": step_key(session),
            "command": f"PYTHONPATH=src python3 -m humming_matrix.ci.ci_job {session} --"
            " --config-list configs/gsm8k/humming/config.txt"
            f" --results results/ci/{session}",
            "agents": {"queue": "gpu_1_queue"},
            "timeout_in_minutes": 240,
            "retry": {"automatic": [{"exit_status": 3, "limit": 2}]},
            "artifact_paths": [f"results/ci/{session}/**/*"],
        }
    # The report runs after every cell, failed ones included.
    assert wait == {"wait": None, "continue_on_failure": True}
    assert report == {
        "label": "humming-matrix report",
        "key": "humming-matrix-report",
        "commands": [
            "buildkite-agent artifact download 'results/ci/*' .",
            "nox -s report -- results/ci --markdown results/ci/report.md"
            " --junit results/ci/report.xml --html results/ci/report.html",
            "buildkite-agent annotate --context humming-matrix --style info < results/ci/report.md",
        ],
        "agents": {"queue": "cpu_queue"},
        "artifact_paths": [
            "results/ci/report.md",
            "results/ci/report.xml",
            "results/ci/report.html",
        ],
    }


def test_every_emitted_key_is_one_buildkite_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    """Spelled out, beyond the schema check: the keys of each step kind the service documents."""
    definitions = _schema("buildkite")["definitions"]
    command_keys = set(definitions["commandStep"]["properties"])
    wait_keys = set(definitions["waitStep"]["properties"])
    retry_keys = set(definitions["automaticRetry"]["properties"])
    document = yaml.safe_load(
        emit(capsys, "--format", "buildkite", "--optional", "humming", "--env", "HF_HOME=/cache/hf")
    )
    assert set(document) == {"steps"}
    for step in document["steps"]:
        kinds = wait_keys if "wait" in step else command_keys
        assert set(step) <= kinds, set(step) - kinds
        for rule in step.get("retry", {}).get("automatic", []):
            assert set(rule) <= retry_keys
    assert {"soft_fail", "env"} <= set(document["steps"][0])


def test_gpu_queue_from_tensor_parallel_size(
    test_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = yaml.safe_load(
        emit(
            capsys,
            "--format",
            "buildkite",
            "--matrix",
            "matrix.toml",
            "--config-list",
            "configs/both.txt",
            "--queue",
            "h100_{gpus}gpu",
            "--cpu-queue",
            "small",
        )
    )
    _validate(document, "buildkite")
    by_key = {s["key"]: s for s in document["steps"] if "command" in s}
    # One config needs --tensor-parallel-size 2, so the whole cell needs 2 GPUs...
    assert by_key["humming-0_1_6"]["agents"] == {"queue": "h100_2gpu"}
    assert by_key["humming-0_1_6"]["label"] == "humming-0.1.6 (2 GPU)"
    assert by_key["humming-0_1_6-cu130"]["agents"] == {"queue": "h100_2gpu"}
    # ...except where the recipe serves without a GPU at all.
    assert by_key["humming-0_1_19"]["agents"] == {"queue": "small"}
    assert by_key["humming-0_1_19"]["label"] == "humming-0.1.19 (CPU)"
    assert document["steps"][-1]["agents"] == {"queue": "small"}

    small = yaml.safe_load(
        emit(
            capsys,
            "--format",
            "buildkite",
            "--matrix",
            "matrix.toml",
            "--config",
            "configs/small.yaml",
            "--version",
            "0.1.6",
        )
    )
    assert [s["agents"] for s in small["steps"] if "command" in s] == [
        {"queue": "gpu_1_queue"},
        {"queue": "gpu_1_queue"},
    ]


def test_soft_fail_only_where_optional(capsys: pytest.CaptureFixture[str]) -> None:
    document = yaml.safe_load(
        emit(capsys, "--format", "buildkite", "--optional", "humming-0.1.20", "--optional", "cu128")
    )
    soft = [s["key"] for s in document["steps"] if s.get("soft_fail") is True]
    assert soft == [
        "humming-0_1_5",
        "humming-0_1_6",
        "humming-0_1_17-cu128",
        "humming-0_1_19-cu128",
        "humming-0_1_20",
        "humming-0_1_20-cu128",
    ]
    assert all("soft_fail" not in s for s in document["steps"] if s.get("key") not in soft)


def test_selection_flags(test_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def keys(*args: str) -> list[str]:
        out = emit(
            capsys,
            "--format",
            "github",
            "--matrix",
            "matrix.toml",
            "--config-list",
            "configs/small.txt",
            *args,
        )
        return [e["session"] for e in json.loads(out)["include"]]

    assert keys() == ["humming-0.1.6", "humming-0.1.6-cu130", "humming-0.1.19"]
    assert keys("--variant", "cu130") == ["humming-0.1.6-cu130", "humming-0.1.19"]
    assert keys("--tag", "humming") == ["humming-0.1.6", "humming-0.1.19"]
    assert keys("--tag", "humming-0.1.6") == ["humming-0.1.6", "humming-0.1.6-cu130"]
    assert keys("--version", "0.1.19", "--version", "0.1.6", "--variant", "cu128") == [
        "humming-0.1.6"
    ]
    # A release the matrix covers but does not list runs under its pairing's stack, and its
    # job asks the noxfile for that session.
    assert keys("--version", "0.1.13") == ["humming-0.1.13"]
    assert keys("--version", "0.1.3", "--variant", "cu130") == ["humming-0.1.3-cu130"]
    [unlisted] = json.loads(
        emit(
            capsys,
            "--format",
            "github",
            "--matrix",
            "matrix.toml",
            "--config-list",
            "configs/small.txt",
            "--version",
            "0.1.13",
        )
    )["include"]
    assert unlisted["command"] == (
        "export HUMMING_MATRIX_EXTRA_VERSIONS=0.1.13; PYTHONPATH=src python3 -m"
        " humming_matrix.ci.ci_job humming-0.1.13 -- --config-list configs/small.txt"
        " --results results/ci/humming-0.1.13"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--variant", "cu999"),
            "--variant cu999: no such variant in matrix.toml (known: cu128, cu130)",
        ),
        (("--tag", "nightly"), "--tag nightly: no cell in matrix.toml has this tag"),
        (
            ("--version", "0.1.19", "--variant", "cu128"),
            "the selection matches no cell of matrix.toml",
        ),
        (("--version", "one"), "--version one: not a version"),
        (
            ("--version", "0.3.0"),
            "matrix.toml: pairing: no pairing's humming range covers version 0.3.0",
        ),
        (
            ("--optional", "humming-9"),
            "--optional humming-9: no selected cell has this session name or tag",
        ),
        (("--config", "configs/missing.yaml"), "configs/missing.yaml: no such file"),
        (
            ("--command", "nox -s {cell}"),
            "--command 'nox -s {cell}': bad placeholder 'cell' (known: session, run_args, results;"
            " write other braces doubled)",
        ),
        (("--env", "HF_HOME"), "--env HF_HOME: expected NAME=VALUE"),
        (("--retry-limit", "11"), "--retry-limit 11: Buildkite allows 0 to 10"),
        (
            ("--queue", "gpu_{count}"),
            "--queue 'gpu_{count}': bad placeholder 'count' (known: gpus)",
        ),
        (("--limit", "0"), "--limit must be at least 1"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    test_repo: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    assert (
        fail(
            capsys,
            "--format",
            "buildkite",
            "--matrix",
            "matrix.toml",
            "--config-list",
            "configs/small.txt",
            *args,
        )
        == message
    )


def test_bad_config_and_matrix_name_file_and_key(
    test_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (test_repo / "configs" / "broken.yaml").write_text(
        "model_name: m\naccuracy_threshold: 0.5\nnum_questions: ten\nnum_fewshot: 5\n"
    )
    assert fail(
        capsys, "--format", "github", "--matrix", "matrix.toml", "--config", "configs/broken.yaml"
    ) == ("configs/broken.yaml: num_questions: expected int, got str 'ten'")
    (test_repo / "bad.toml").write_text(TEST_MATRIX.replace("gpus = 0", "gpus = -1"))
    assert fail(capsys, "--format", "github", "--matrix", "bad.toml") == (
        "bad.toml: recipe.double.gpus: must be a non-negative integer, not -1"
    )


def test_dollar_signs_survive_pipeline_upload(
    test_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pipeline upload` interpolates `$X`; a command meant for the job's shell needs `$$X`."""
    document = yaml.safe_load(
        emit(
            capsys,
            "--format",
            "buildkite",
            "--matrix",
            "matrix.toml",
            "--version",
            "0.1.19",
            "--config-list",
            "configs/small.txt",
            "--limit",
            "50",
            "--command",
            "HUMMING_RUN=$BUILDKITE_BUILD_ID nox -s {session} -- {run_args}",
            "--results",
            "results/$weird",
        )
    )
    assert document["steps"][0]["command"] == (
        "HUMMING_RUN=$$BUILDKITE_BUILD_ID nox -s humming-0.1.19 -- --config-list"
        " configs/small.txt --results 'results/$$weird/humming-0.1.19' --limit 50"
    )
    assert document["steps"][0]["artifact_paths"] == ["results/$weird/humming-0.1.19/**/*"]


def test_github_matrix_entries(test_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = emit(
        capsys,
        "--format",
        "github",
        "--matrix",
        "matrix.toml",
        "--config-list",
        "configs/both.txt",
        "--optional",
        "humming-0.1.19",
        "--runner",
        "gpu-{gpus}x",
        "--cpu-runner",
        "cpu-small",
        "--retry-limit",
        "1",
    )
    assert out.count("\n") == 1  # one line, as $GITHUB_OUTPUT takes it
    include = json.loads(out)["include"]
    assert include == [
        {
            "session": "humming-0.1.6",
            "key": "humming-0_1_6",
            "humming": "0.1.6",
            "vllm": "0.24.0",
            "torch": "",
            "variant": "cu128",
            "gpus": 2,
            "runs_on": "gpu-2x",
            "optional": False,
            "retries": 1,
            "command": "PYTHONPATH=src python3 -m humming_matrix.ci.ci_job humming-0.1.6 --"
            " --config-list configs/both.txt --results results/ci/humming-0.1.6",
            "results": "results/ci/humming-0.1.6",
            "artifact": "humming-records-humming-0_1_6",
        },
        {
            "session": "humming-0.1.6-cu130",
            "key": "humming-0_1_6-cu130",
            "humming": "0.1.6",
            "vllm": "0.24.0",
            "torch": "",
            "variant": "cu130",
            "gpus": 2,
            "runs_on": "gpu-2x",
            "optional": False,
            "retries": 1,
            "command": "PYTHONPATH=src python3 -m humming_matrix.ci.ci_job humming-0.1.6-cu130 --"
            " --config-list configs/both.txt --results results/ci/humming-0.1.6-cu130",
            "results": "results/ci/humming-0.1.6-cu130",
            "artifact": "humming-records-humming-0_1_6-cu130",
        },
        {
            "session": "humming-0.1.19",
            "key": "humming-0_1_19",
            "humming": "0.1.19",
            "vllm": "",
            "torch": "",
            "variant": "cu130",
            "gpus": 0,
            "runs_on": "cpu-small",
            "optional": True,
            "retries": 1,
            "command": "PYTHONPATH=src python3 -m humming_matrix.ci.ci_job humming-0.1.19 --"
            " --config-list configs/both.txt --results results/ci/humming-0.1.19",
            "results": "results/ci/humming-0.1.19",
            "artifact": "humming-records-humming-0_1_19",
        },
    ]


def test_example_workflow_consumes_the_matrix(capsys: pytest.CaptureFixture[str]) -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    # PyYAML reads the bare key `on` as True (YAML 1.1); GitHub reads YAML 1.2.
    workflow["on"] = workflow.pop(True)
    _validate(workflow, "github-workflows")
    assert set(workflow["on"]) == {"workflow_dispatch"}  # never on this repository's own pushes
    include = json.loads(emit(capsys, "--format", "github"))["include"]
    assert [e["session"] for e in include] == REAL_SESSIONS
    used = set(re.findall(r"\bmatrix\.(\w+)", WORKFLOW.read_text()))
    assert used == {"session", "runs_on", "optional", "command", "retries", "artifact", "results"}
    for entry in include:
        assert used <= set(entry)
    # upload-artifact refuses a name twice in one run; download-artifact's pattern must see all.
    assert len({e["artifact"] for e in include}) == len(include)
    cell = workflow["jobs"]["cell"]
    assert cell["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    [download] = [
        s
        for s in workflow["jobs"]["report"]["steps"]
        if s.get("uses", "").startswith("actions/download-artifact")
    ]
    pattern = download["with"]["pattern"]
    assert pattern == f"{github_actions.ARTIFACT_PREFIX}*"
    assert download["with"]["merge-multiple"] is True
    assert workflow["jobs"]["report"]["if"] == "always()"


def test_github_refuses_more_jobs_than_a_matrix_runs() -> None:
    job = Job(
        session="s",
        key="s",
        humming="0.1.6",
        vllm=None,
        torch=None,
        variant="cu128",
        gpus=1,
        optional=False,
        command="true",
        results="r",
    )
    settings = github_actions.GithubSettings()
    assert len(github_actions.matrix([job] * 256, settings)["include"]) == 256
    with pytest.raises(
        UsageError, match="257 cells selected; a GitHub Actions matrix runs at most 256"
    ):
        github_actions.matrix([job] * 257, settings)


def test_distinct_cells_drop_only_the_default_variant_aliases() -> None:
    matrix = load_matrix(REPO / "configs" / "matrix.toml")
    every = [c.session for c in matrix.cells()]
    kept = [c.session for c in distinct_cells(matrix)]
    assert sorted(set(every) - set(kept)) == [
        "humming-0.1.17-cu130",
        "humming-0.1.19-cu130",
        "humming-0.1.20-cu130",
        "humming-0.1.5-cu128",
        "humming-0.1.6-cu128",
    ]
    assert kept == REAL_SESSIONS


def test_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out" / "pipeline.yml"
    assert (
        emit(capsys, "--format", "buildkite", "--tag", "humming-0.1.6", "--output", str(target))
        == ""
    )
    keys = [s.get("key") for s in yaml.safe_load(target.read_text())["steps"]]
    assert keys == ["humming-0_1_6", "humming-0_1_6-cu130", None, "humming-matrix-report"]


def _fenced_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def test_docs_show_what_the_code_emits(capsys: pytest.CaptureFixture[str]) -> None:
    docs = (REPO / "docs" / "scale-out.md").read_text()
    yaml_blocks = _fenced_blocks(docs, "yaml")
    emitted = emit(
        capsys,
        "--format",
        "buildkite",
        "--tag",
        "humming-0.1.19",
        "--optional",
        "cu128",
        "--env",
        "HF_HOME=/mnt/hf",
    )
    assert emitted in yaml_blocks
    assert WORKFLOW.read_text() in yaml_blocks
    [entry] = _fenced_blocks(docs, "json")
    first = json.loads(emit(capsys, "--format", "github", "--tag", "humming-0.1.19"))
    assert json.loads(entry) == first["include"][0]


def test_soft_fail_from_the_matrix_data(
    test_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A variant or pairing marked `optional = true` soft-fails without any --optional flag."""
    text = TEST_MATRIX.replace(
        '[variant.cu130]\ntorch_backend = "cu130"\n',
        '[variant.cu130]\ntorch_backend = "cu130"\noptional = true\n',
    )
    (test_repo / "matrix.toml").write_text(text)
    document = yaml.safe_load(
        emit(
            capsys,
            "--format",
            "buildkite",
            "--matrix",
            "matrix.toml",
            "--config-list",
            "configs/small.txt",
        )
    )
    soft = [s["key"] for s in document["steps"] if s.get("soft_fail") is True]
    assert soft == ["humming-0_1_6-cu130", "humming-0_1_19"]
    _validate(document, "buildkite")
