"""The pytest entry: vLLM's config-list suites, one test per config, run by this package's runner.

    pytest -p humming_matrix.pytest_plugin --pyargs humming_matrix.vllm_ci.gsm8k_correctness \\
        --config-list-file=configs/gsm8k/humming/config.txt -s -v --junitxml=junit.xml
    pytest -p humming_matrix.pytest_plugin --pyargs humming_matrix.vllm_ci.lm_eval_correctness \\
        --config-list-file=configs/lm-eval/models-small.txt --tp-size=1 -s -v

It is loaded with `-p`, never automatically (no `pytest11` entry point): vLLM's own conftest adds
`--config-list-file` too, and two plugins adding one option is an error in every pytest run of
an environment that has both installed.

The list file is found as vLLM's conftest finds it (a relative path is tried against the test
module's folder, then the working directory) and read as vLLM reads it (entries relative to the
list's folder, blank and `#` lines skipped), except that a missing entry is an error, not a
silent skip. Test ids are the config file stems. Each test runs the config exactly as
`humming-matrix run` (or `humming-matrix lm-eval`) does: same server lifecycle, scoring and
records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from humming_matrix.errors import ConfigError, HummingMatrixError, InfrastructureError
from humming_matrix.lmeval.config import load_lm_eval_configs
from humming_matrix.suite.config import load_configs

GSM8K_FIXTURE = "gsm8k_config"
LM_EVAL_FIXTURE = "lm_eval_config"


@dataclass(frozen=True)
class SuiteOptions:
    results: Path
    limit: int | None
    endpoint: str | None
    tp_size: int


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("humming-matrix", "vLLM config suites (humming-matrix)")
    group.addoption(
        "--config-list-file",
        action="store",
        metavar="FILE",
        help="list of config YAMLs, one per line, relative to the list's folder",
    )
    group.addoption(
        "--results-dir",
        action="store",
        default="results/local",
        metavar="DIR",
        help="result store for the records (default: results/local)",
    )
    group.addoption(
        "--question-limit",
        action="store",
        type=int,
        default=None,
        metavar="N",
        help="ask at most N questions (GSM8K) or documents per task (lm-eval)",
    )
    group.addoption(
        "--endpoint",
        action="store",
        default=None,
        metavar="URL",
        help="use a server that is already up instead of launching `vllm serve`",
    )
    group.addoption(
        "--tp-size",
        action="store",
        type=int,
        default=1,
        metavar="N",
        help="tensor parallel size for lm-eval configs, as vLLM's harness takes it",
    )


def failure_message(exc: HummingMatrixError) -> str:
    """A config that could not be judged says why, apart from a config that failed its gate."""
    if isinstance(exc, InfrastructureError):
        tail = getattr(exc, "log_tail", "")
        return f"infrastructure failure, not a verdict: {exc}" + (
            f"\n--- server log (tail) ---\n{tail}" if tail else ""
        )
    return f"humming-matrix: {exc}"


def resolve_list_file(option: str, test_dir: Path, cwd: Path) -> Path:
    """vLLM's lookup: as given if absolute, else next to the tests, else from the cwd."""
    path = Path(option)
    if path.is_absolute():
        return path
    for base in (test_dir, cwd):
        if (base / path).is_file():
            return base / path
    raise ConfigError(path, None, f"no such config list (looked in {test_dir} and {cwd})")


def _list_file(metafunc: pytest.Metafunc) -> Path:
    option = metafunc.config.getoption("--config-list-file")
    if not option:
        pytest.fail("--config-list-file FILE is required (a list of config YAMLs)", pytrace=False)
    return resolve_list_file(
        str(option), metafunc.definition.path.parent, metafunc.config.invocation_params.dir
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    wanted = [f for f in (GSM8K_FIXTURE, LM_EVAL_FIXTURE) if f in metafunc.fixturenames]
    if not wanted:
        return
    # Every config is validated before the first server starts; a bad one stops collection
    # with its one-line error (file and key), as `humming-matrix run` would exit 2.
    try:
        list_file = _list_file(metafunc)
        if wanted[0] == GSM8K_FIXTURE:
            configs = load_configs([], [list_file])
            metafunc.parametrize(GSM8K_FIXTURE, configs, ids=[c.name for c in configs])
        else:
            lm_configs = load_lm_eval_configs([], [list_file])
            metafunc.parametrize(LM_EVAL_FIXTURE, lm_configs, ids=[c.name for c in lm_configs])
    except HummingMatrixError as exc:
        pytest.fail(f"humming-matrix: {exc}", pytrace=False)


def _stable_nodeid(item: pytest.Item) -> str | None:
    """`humming_matrix/vllm_ci/<module>.py::<test>[<stem>]` for an item of our suite modules.

    Run with `--pyargs`, the module lies outside the rootdir and pytest gives its items node ids
    like `::test_x[stem]`, which JUnit turns into an empty classname; Buildkite Test Engine then
    cannot tell the suites apart. The package path is stable wherever the package is installed.
    """
    module = getattr(item, "module", None)
    name = getattr(module, "__name__", "")
    if not name.startswith(f"{__package__}.vllm_ci.") and name != f"{__package__}.vllm_ci":
        return None
    return f"{name.replace('.', '/')}.py::{item.name}"


class _StableNodeIds:
    """Rewrites our items' ids in their reports, before the JUnit writer and the terminal
    summary read them."""

    def __init__(self) -> None:
        self.stable: dict[str, str] = {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.stable = {item.nodeid: nodeid for item in items if (nodeid := _stable_nodeid(item))}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        report.nodeid = self.stable.get(report.nodeid, report.nodeid)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_StableNodeIds(), "humming-matrix-stable-nodeids")


@pytest.fixture(scope="session")
def suite_options(pytestconfig: pytest.Config) -> SuiteOptions:
    limit = pytestconfig.getoption("--question-limit")
    tp_size = pytestconfig.getoption("--tp-size")
    if limit is not None and limit < 1:
        raise pytest.UsageError("--question-limit must be at least 1")
    if tp_size < 1:
        raise pytest.UsageError("--tp-size must be at least 1")
    results = Path(pytestconfig.getoption("--results-dir"))
    if not results.is_absolute():
        results = pytestconfig.invocation_params.dir / results
    return SuiteOptions(
        results=results, limit=limit, endpoint=pytestconfig.getoption("--endpoint"), tp_size=tp_size
    )
