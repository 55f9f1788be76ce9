"""The divergence tier on a real vLLM, with no GPU (marker `real_vllm`; CI runs it): vLLM's CPU
build serves the smoke model (smoke/tiny_llama.py) and a copy with noise in one layer
(smoke/perturb_weights.py), and `humming-matrix divergence run|compare` (this checkout's CLI)
launches and asks them through the product's launcher.

Three server starts, one at a time: the smoke model with two passes (the baseline and its A/A
floor), the smoke model again (a second server of the same model and seed: at the floor, SAME),
and the perturbed copy (DIVERGED). It reuses the environment test_real_vllm_cpu.py caches
(`<cache>/real-vllm-cpu/nox/smoke`), building it with the README's `nox -s smoke` line only if
it is missing, under the same lock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from humming_matrix.divergence.record import load_divergence_records

from .test_real_vllm_cpu import CACHE, ENVDIR, MODEL, VENV, readme_smoke_command

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
QUESTIONS = 30
# Noise of 1% of the tensor's own sd in layer 0's MLP down projection: flagged with every
# question above the floor, while GSM8K accuracy (0 on this random model) cannot move
# (docs/divergence.md has the sweep).
SCALE = "1e-2"
# The family-wise level of both comparisons: an A/A comparison is called diverged with at most
# this probability, so the SAME check fails CI by chance at most once in a thousand runs; the
# perturbed model's p-value (3 * 2**-30 when every question is above the floor) is far below.
ALPHA = "0.001"


def _gsm8k_dir() -> Path:
    configured = os.environ.get("HUMMING_MATRIX_GSM8K_DIR")
    return Path(configured).resolve() if configured else REPO.parent / "shared" / "gsm8k"


def _env() -> dict[str, str]:
    # The smoke environment's `vllm` first on PATH: the launcher starts that one.
    return {
        **os.environ,
        "HUMMING_MATRIX_GSM8K_DIR": str(_gsm8k_dir()),
        "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }


def _hm(*args: object, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "humming_matrix", *map(str, args)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _config(directory: Path, model: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tiny-llama-cpu.yaml"  # one name: compare pairs configs by name
    path.write_text(
        f'model_name: "{model}"\naccuracy_threshold: 0.0\nnum_questions: {QUESTIONS}\n'
        "num_fewshot: 5\nstartup_max_wait_seconds: 900\nserver_args: >-\n  --dtype float32 "
        "--max-model-len 2048 --enforce-eager --max-num-seqs 32\nenv:\n"
        "  VLLM_CPU_KVCACHE_SPACE: 1\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("divergence")
    CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(CACHE / "lock")):
        if not (VENV / "bin" / "vllm").exists() or not (MODEL / "model.safetensors").exists():
            built = subprocess.run(
                [
                    *readme_smoke_command(),
                    "--envdir",
                    str(ENVDIR),
                    "--",
                    "--results",
                    str(root / "smoke"),
                ],
                cwd=REPO,
                env=_env(),
                capture_output=True,
                text=True,
                timeout=1500,
                check=False,
            )
            assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
        perturbed = root / "models" / f"noise-{SCALE}"
        made = subprocess.run(
            [
                str(VENV / "bin" / "python"),
                str(REPO / "smoke" / "perturb_weights.py"),
                "--model",
                str(MODEL),
                "--out",
                str(perturbed),
                "--scale",
                SCALE,
            ],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert made.returncode == 0, made.stderr
        out = {name: root / name for name in ("base", "again", "perturbed")}
        runs = [
            ("base", MODEL, ["--repeat", "2"]),
            ("again", MODEL, []),
            ("perturbed", perturbed, []),
        ]
        for name, model, extra in runs:
            done = _hm(
                "divergence",
                "run",
                "--config",
                _config(root / f"{name}-config", model),
                "--results",
                out[name],
                *extra,
            )
            assert done.returncode == 0, done.stderr[-4000:]
        yield out


def test_each_pass_holds_every_answer_token_of_the_real_server(stores: dict[str, Path]) -> None:
    records = [r for name in stores for _, r in load_divergence_records(stores[name])]
    assert len(records) == 4
    first = records[0]
    for record in records:
        assert (record.complete, record.error_count, record.top_k) == (True, 0, 5)
        assert len(record.questions) == QUESTIONS
        assert record.server["launched"] is True
        command = record.server["command"]
        assert command[command.index("--max-logprobs") + 1] == "20"
        # Same prompts, same tokenizer: the same forced tokens in every pass.
        assert [list(q.tokens) for q in record.questions] == [
            list(q.tokens) for q in first.questions
        ]
    assert all(len(q) > 0 for q in first.questions)


def test_a_second_server_of_the_same_model_is_at_the_floor(
    stores: dict[str, Path], tmp_path: Path
) -> None:
    done = _hm(
        "divergence",
        "compare",
        stores["base"],
        stores["again"],
        "--alpha",
        ALPHA,
        "--json",
        tmp_path / "same.json",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == "tiny-llama-cpu: SAME"
    [config] = json.loads((tmp_path / "same.json").read_text())["configs"]
    assert config["questions"] == QUESTIONS
    # Passes of one model land at most about 1 float32 ulp apart (docs/divergence.md), in
    # whichever passes a run happens to: snapped, every question ties on every metric.
    assert [(t["above"], t["below"], t["ties"], t["adjusted_p"]) for t in config["tests"]] == [
        (0, 0, QUESTIONS, 1.0)
    ] * 3


def test_the_perturbed_model_is_flagged_diverged(stores: dict[str, Path], tmp_path: Path) -> None:
    done = _hm(
        "compare",
        "--tier",
        "divergence",
        stores["base"],
        stores["perturbed"],
        "--alpha",
        ALPHA,
        "--json",
        tmp_path / "diverged.json",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == "tiny-llama-cpu: DIVERGED"
    [config] = json.loads((tmp_path / "diverged.json").read_text())["configs"]
    kl = config["tests"][0]
    assert (kl["metric"], kl["above"], kl["below"]) == ("kl", QUESTIONS, 0)
    assert kl["adjusted_p"] == pytest.approx(3 * 0.5**QUESTIONS, rel=1e-9)
    assert kl["candidate_mean"] > 10 * kl["floor_mean"]
