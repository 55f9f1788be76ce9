"""vLLM's humming configs mirrored under configs/gsm8k/humming/vllm, the refresh tool, the shapes
table and the kernel cases derived from the config lists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from humming_matrix.kernels.cases import GemmKind
from humming_matrix.kernels.models import (
    ARCHITECTURES,
    CHECKPOINTS,
    SUITE,
    UNMODELLED,
    USES,
    derive_uses,
    listed_configs,
    suite_from,
)

REPO = Path(__file__).resolve().parents[2]
MIRROR = REPO / "configs" / "gsm8k" / "humming" / "vllm"
TOOL = REPO / "tools" / "refresh_vllm_humming_configs.py"


def test_every_list_entry_exists() -> None:
    lists = sorted(MIRROR.glob("*.txt"))
    assert len(lists) == 25
    assert len(list(MIRROR.glob("*.yaml"))) == 72
    for lst in lists:
        for entry in lst.read_text().split():
            assert (MIRROR / entry).is_file(), f"{lst.name}: {entry}"


def test_shapes_table_covers_every_listed_model() -> None:
    models = {
        str(yaml.safe_load((MIRROR / n).read_text())["model_name"]) for n in listed_configs(MIRROR)
    }
    assert models <= set(CHECKPOINTS), sorted(models - set(CHECKPOINTS))
    assert {arch for arch, _ in CHECKPOINTS.values()} <= set(ARCHITECTURES)
    for arch in ARCHITECTURES.values():
        assert arch.source


def test_uses_are_derived_from_the_mirrored_lists() -> None:
    uses, skipped = derive_uses(MIRROR)
    assert uses == USES
    # The one listed config with an activation format the reference does not model.
    assert skipped == UNMODELLED
    assert [(s.config, s.reason) for s in skipped] == [
        (
            "Qwen3-30B-A3B-online-int4-w4a4-hadamard-humming.yaml",
            "activation {'dtype': 'int4'} has no modelled quantizer",
        )
    ]


def test_suite_is_deduplicated_layers_of_the_built_schemes() -> None:
    cases, skipped = suite_from(USES)
    assert cases == SUITE
    assert len(SUITE) == 84
    assert len({c.name for c in SUITE}) == 84
    by_name = {c.name: c for c in SUITE}
    qkv = by_name["qkv-mxfp4-bf16-5120x2048"]  # Qwen3-30B-A3B: 32 x 128 + 2 x 4 x 128, hidden 2048
    assert (qkv.shape_n, qkv.shape_k, qkv.shards) == (5120, 2048, (4096, 512, 512))
    down = by_name["moe-down-gptq-int4-g128-int8-2048x768-e128k8-wide-scales"]
    assert (down.kind, down.num_experts, down.top_k, down.layer) == (GemmKind.MOE, 128, 8, "down")
    # Block FP8 (Qwen3-30B-A3B-FP8-block's MoE, with bf16 and FP8 activations, both weight
    # distributions; its q/k/v and o_proj from the config that quantizes the linear layers too).
    fp8 = sorted(c.name for c in SUITE if c.scheme.value == "fp8-block")
    assert fp8 == [
        "moe-down-fp8-block-bf16-2048x768-e128k8",
        "moe-down-fp8-block-bf16-2048x768-e128k8-wide-scales",
        "moe-down-fp8-block-fp8-e4m3-2048x768-e128k8",
        "moe-down-fp8-block-fp8-e4m3-2048x768-e128k8-wide-scales",
        "moe-gate-up-fp8-block-bf16-1536x2048-e128k8",
        "moe-gate-up-fp8-block-bf16-1536x2048-e128k8-wide-scales",
        "moe-gate-up-fp8-block-fp8-e4m3-1536x2048-e128k8",
        "moe-gate-up-fp8-block-fp8-e4m3-1536x2048-e128k8-wide-scales",
        "o-fp8-block-bf16-2048x4096",
        "qkv-fp8-block-bf16-5120x2048",
    ]
    # Every config not turned into a case says why.
    reasons = {s.reason for s in skipped}
    nvfp4 = "qwen3-30b-a3b: weight scheme nvfp4 has no checkpoint writer in the adapter"
    assert nvfp4 in reasons
    assert any(r.startswith("qwen3.5-4b: layer shapes not verified") for r in reasons)


def _checkout(root: Path, files: dict[str, str]) -> Path:
    sub = root / "tests" / "evals" / "gsm8k" / "configs" / "humming"
    sub.mkdir(parents=True)
    for name, text in files.items():
        (sub / name).write_text(text)
    return root


def test_refresh_mirrors_removes_stale_and_refuses_a_dangling_entry(tmp_path: Path) -> None:
    vllm = _checkout(tmp_path / "vllm", {"a.yaml": "model_name: a\n", "config.txt": "a.yaml\n"})
    dest = tmp_path / "mirror"
    dest.mkdir()
    (dest / "gone.yaml").write_text("old")
    done = subprocess.run(
        [sys.executable, str(TOOL), str(vllm), "--dest", str(dest)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, f"2 files mirrored into {dest}\n")
    assert sorted(p.name for p in dest.iterdir()) == ["SOURCE", "a.yaml", "config.txt"]
    assert (dest / "a.yaml").read_text() == "model_name: a\n"
    (vllm / "tests/evals/gsm8k/configs/humming/config.txt").write_text("a.yaml\nb.yaml\n")
    bad = subprocess.run(
        [sys.executable, str(TOOL), str(vllm), "--dest", str(dest)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.endswith(
        f"config.txt: names b.yaml, which {vllm}/tests/evals/gsm8k/configs/humming lacks\n"
    )


@pytest.mark.parametrize(
    ("server_args", "kinds"),
    [
        ("--moe-backend humming", [GemmKind.MOE]),
        ("--linear-backend humming", [GemmKind.DENSE]),
        ("--quantization humming", [GemmKind.MOE, GemmKind.DENSE]),
    ],
)
def test_backends_pick_the_layers(tmp_path: Path, server_args: str, kinds: list[GemmKind]) -> None:
    (tmp_path / "c.yaml").write_text(
        f'model_name: "openai/gpt-oss-20b"\nserver_args: >-\n  {server_args}\n'
        'env:\n  VLLM_HUMMING_INPUT_QUANT_CONFIG: \'{"dtype":"int8"}\'\n'
    )
    (tmp_path / "l.txt").write_text("c.yaml\n")
    uses, _ = derive_uses(tmp_path)
    assert [(u.arch, u.scheme, u.activation, u.kind) for u in uses] == sorted(
        [("gpt-oss-20b", "mxfp4", "int8", k) for k in kinds], key=lambda t: t[3].value
    )


def test_list_prints_the_cases_and_what_no_case_covers(capsys: pytest.CaptureFixture[str]) -> None:
    from humming_matrix.cli import main

    assert main(["kernels", "--list", "--cases", "qkv-mxfp4-*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [
        "qkv-mxfp4-bf16-5120x2048\tqwen3-30b-a3b\tqkv",
        "qkv-mxfp4-fp8-e4m3-5120x2048\tqwen3-30b-a3b\tqkv",
    ]
    assert lines[2] == (
        "not covered: Qwen3-30B-A3B-online-int4-w4a4-hadamard-humming.yaml: "
        "activation {'dtype': 'int4'} has no modelled quantizer"
    )
    assert len(lines) == 2 + 1 + len(suite_from(USES)[1])
    assert len(set(lines)) == len(lines)
