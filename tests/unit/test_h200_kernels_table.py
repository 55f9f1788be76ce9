"""results/h200/gen2, gen3, gen4, gen6 and gen7/README.md are what tools/h200-kernels/table.py
makes of the committed records (generated, never edited by hand), and their tables say what the
records say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GEN2 = REPO / "results" / "h200" / "gen2"
GEN3 = REPO / "results" / "h200" / "gen3"
GEN4 = REPO / "results" / "h200" / "gen4"
GEN6 = REPO / "results" / "h200" / "gen6"
GEN7 = REPO / "results" / "h200" / "gen7"


def generated(folder: Path, script: str = "table.py") -> str:
    """What a tools/h200-kernels script prints for `folder`, run as its README says."""
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "h200-kernels" / script), str(folder)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return done.stdout


def test_the_committed_readme_is_the_generated_one() -> None:
    text = (GEN2 / "README.md").read_text()
    assert generated(GEN2) == text
    # 0.1.8 gives NaN/Inf in the GPTQ dense layer (call 3), and 0.1.11 cannot compile MXFP4 with
    # bf16 activations: both are in the release-to-release table.
    assert (
        "| qkv-gptq-int4-g128-bf16-5120x2048 | 1 | 0.1.6 | 0.1.8 | newly-broken | unknown "
        "| nonfinite |"
    ) in text
    assert "| qkv-mxfp4-bf16-5120x2048 | 1 | 0.1.10 | 0.1.11 | newly-broken |" in text
    # A case the call's deadline cut is `not run`, not a failure to build.
    assert "| 0.1.13 | call3/71cedf | not run |" in text


def test_the_third_generation_readme_is_generated_and_says_what_its_records_say() -> None:
    text = (GEN3 / "README.md").read_text()
    assert generated(GEN3) == text
    # Every run complete with all 38 cases; the two runs of one release agree case for case.
    assert "| 0.1.20 | call1/1b0d48 | yes | 15 | 12 | 11 | 0 | 0 | 0 | 0 | 0 |" in text
    assert "| 0.1.20 | call1/4a1d12 | yes | 15 | 12 | 11 | 0 | 0 | 0 | 0 | 0 |" in text
    assert "| 0.1.17 | call2/e9e827 | yes | 17 | 14 | 7 | 0 | 0 | 0 | 0 | 0 |" in text
    # Release to release: a case newly out of tolerance is `worse`, one back within it `fixed`.
    assert (
        "| moe-gate-up-mxfp4-fp8-e4m3-1536x2048-e128k8 | 128 | 0.1.16 | 0.1.17 | worse |"
    ) in text
    assert "| qkv-gptq-int4-g128-fp8-e4m3-5120x2048 | 128 | 0.1.16 | 0.1.17 | fixed |" in text


def test_the_fourth_generation_readme_is_generated_and_says_what_its_records_say() -> None:
    text = (GEN4 / "README.md").read_text()
    assert generated(GEN4) == text
    # The default screen of 0.1.20: all 84 cases within the bound, 39 not bit-identical on
    # relaunch; its compiles are most of the workers' seconds.
    assert "| 0.1.20 | call1/130c3d | yes | 45 | 0 | 39 | 0 | 0 | 0 | 0 | 0 | 73 | 1190 |" in text
    # 0.1.20 brings MXFP4 MoE with FP8 activations back within the bound; 0.1.18 put gpt-oss's
    # checkpoint-like down GEMM out of it at 1 token.
    assert (
        "| moe-down-mxfp4-fp8-e4m3-2880x2880-e32k4-wide-scales | 1 | 0.1.19 | 0.1.20 | fixed |"
    ) in text
    assert "| moe-down-mxfp4-fp8-e4m3-2880x2880-e32k4 | 1 | 0.1.17 | 0.1.18 | worse |" in text
    # The runs of 0.1.17 the deadline cut do not count as failures to build.
    assert "| 0.1.17 | call3/19e85a | not run |" in text


def test_the_sixth_generation_readme_names_its_gpus_and_says_what_its_records_say() -> None:
    text = (GEN6 / "README.md").read_text()
    assert generated(GEN6) == text
    # Call 1 ran on an H100, calls 2 - 8 on an H200 (the lent machine is whichever comes): the
    # title says so, from the records.
    title = "# Kernel tier on the H100 80GB HBM3 and the H200: the records of gen6\n"
    assert text.startswith(title)
    # The deadline cut call 1 at 40 of 84 cases and call 4 at 44; 0.1.12 and 0.1.13 are complete.
    assert "| 0.1.14 | call1/55c07a | no | 22 | 4 | 14 | 0 | 0 | 0 | 0 | 0 |" in text
    assert "| 0.1.15 | call1/22fe9d | no | 22 | 4 | 14 | 0 | 0 | 0 | 0 | 0 |" in text
    assert "| 0.1.11 | call4/27e2a2 | no | 21 | 5 | 14 | 0 | 0 | 4 | 0 | 0 |" in text
    assert "| 0.1.12 | call3/5587ca | yes | 46 | 7 | 31 | 0 | 0 | 0 | 0 | 0 |" in text
    assert "| 0.1.13 | call3/35ea27 | yes | 52 | 6 | 26 | 0 | 0 | 0 | 0 | 0 |" in text
    # gpt-oss's MXFP4 MoE with FP8 activations is out of tolerance already in 0.1.14.
    assert "| 0.1.14 | call1/55c07a | fail 145.49u |" in text
    # 0.1.12 corrupts dense layers at 2048 tokens in some launches (both runs), 0.1.13 does not.
    # Out of tolerance outranks not bit-identical on relaunch: the cell says `fail` (it said
    # `nondeterministic 980.47u` while the ranking was the other way round).
    assert "| 0.1.12 | call3/5587ca | fail 980.47u |" in text
    release_to_release = text.split("## 2. Release to release")[1].split("## 3.")[0]
    assert (
        "| qkv-gptq-int4-g128-bf16-5120x2048 | 2048 | 0.1.12 | 0.1.13 | fixed | same 1.00x | "
        "fail before, within tolerance now |"
    ) in release_to_release
    # 0.1.11 cannot compile gpt-oss's MXFP4 MoE with bf16 activations; 0.1.12 can again.
    assert (
        "| moe-gate-up-mxfp4-bf16-5760x2880-e32k4 | 1 | 0.1.10 | 0.1.11 | newly-broken | unknown | "
        "RuntimeError: <class 'humming.jit.compiler.NVRTCCompiler'> run failed |"
    ) in release_to_release
    assert "| moe-gate-up-mxfp4-bf16-5760x2880-e32k4 | 1 | 0.1.11 | 0.1.12 | fixed |" in text
    assert "| 0.1.14 | 0.1.15 | worse |" not in release_to_release
    # The A/A spread per call: call 18 ran 0.1.4's pair (cases 77 - 84) beside a probe of two
    # other cases; the pair, with the most timed batches in common, is the one measured.
    aa = text.split("## 3. A/A")[1]
    assert "| 0.1.4 | call18 | 743b3d / d631e1 | 16 | 1.002 | 1.048x |" in aa
    assert "| 0.1.6 | call15 | d3dfe7 / c9c81e | 32 | 1.000 | 1.110x |" in aa
    assert "8133a9" not in aa
    # This session's calls 5 - 8: 0.1.8's cut run (70 of 84 cases) has 56 NaN/Inf and 12 out of
    # tolerance, none within it; 0.1.6 and 0.1.7 crash on the AWQ dense layers, and the cell
    # names the CUDA error from the record's log tail.
    assert "| 0.1.8 | call6/635b64 | no | 0 | 12 | 0 | 56 | 0 | 2 | 0 | 0 |" in text
    assert (
        "| 0.1.7 | call7/8b3a0e | crash: torch.AcceleratorError: CUDA error: an illegal memory"
        " access was encountered |"
    ) in text


def test_the_spread_across_calls_of_one_machine_is_what_the_records_say() -> None:
    # Gen6 calls 20 - 22 (one H100, kept warm) ran each 0.1.0 / 0.1.1 case's second run in a
    # later call than its first; no case has an A/A pair within one call.
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "h200-kernels" / "across_calls.py"),
            *(str(GEN6 / f"call{n}") for n in (20, 21, 22)),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert done.stdout.splitlines() == [
        "| humming | calls | timed batches | median ratio | widest |",
        "| --- | --- | ---: | ---: | ---: |",
        "| 0.1.0 | call20 / call21 | 76 | 0.999 | 1.039x |",
        "| 0.1.0 | call20 / call22 | 80 | 0.999 | 1.043x |",
        "| 0.1.0 | call21 / call22 | 24 | 0.996 | 1.064x |",
        "| 0.1.1 | call20 / call21 | 60 | 1.000 | 1.035x |",
        "| 0.1.1 | call20 / call22 | 88 | 1.001 | 1.129x |",
        "| 0.1.1 | call21 / call22 | 36 | 0.998 | 1.053x |",
    ]


def _same_bytes(first: Path, second: Path) -> list[str]:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "h200-kernels" / "same_bytes.py"),
            str(first),
            str(second),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return done.stdout.splitlines()[2:]


def test_an_h100_and_an_h200_give_the_same_output_bytes(tmp_path: Path) -> None:
    # Gen6 call 23 ran 0.1.17 on an H100, gen5 on an H200: every (case, batch) bit-identical on
    # relaunch on both gave the same bytes, so `changed` across GPU models is the release's.
    h100 = GEN6 / "call23"
    assert _same_bytes(REPO / "results" / "h200" / "gen5", h100) == [
        "| 0.1.17 | H200 / H100 80GB HBM3 | 275 | 275 | 0 |"
    ]
    # One of the two H100 runs alone, one draw's bytes altered: that (case, batch) differs.
    first = sorted(h100.glob("kernels__suite__0.1.17__*.json"))[0]
    record = json.loads(first.read_text())
    batch = record["cases"][0]["batches"][0]
    batch["output_sha256"][1] = "0" * 64
    (tmp_path / first.name).write_text(json.dumps(record))
    assert _same_bytes(REPO / "results" / "h200" / "gen5", tmp_path) == [
        "| 0.1.17 | H200 / H100 80GB HBM3 | 275 | 274 | 1 |"
    ]


def test_compiling_only_the_used_dense_kernels_gave_the_same_bytes() -> None:
    # Gen6 call 27 ran the default screen of 0.1.17 with `--compile used` (the new default) and
    # `--compile all`, cold, one after the other; call 23 had run it with every kernel. The rows
    # compiled are the records' own count: 4 of the table's 92 for Qwen2-1.5B's q/k/v.
    call27 = sorted((GEN6 / "call27").glob("kernels__suite__0.1.17__*.json"))
    records = [json.loads(p.read_text()) for p in call27]
    assert [r["settings"]["compile"] for r in records] == ["used", "all"]
    qkv = [
        next(c for c in r["cases"] if c["name"] == "qkv-fp8-channel-bf16-2048x1536")
        for r in records
    ]
    assert [c["dense_kernels"] for c in qkv] == [
        {"table": 92, "compiled": 4},
        {"table": 92, "compiled": 92},
    ]
    assert [b["kernel_config"] for b in qkv[0]["batches"]] == [
        b["kernel_config"] for b in qkv[1]["batches"]
    ]
    for other in (GEN6 / "call23", GEN6 / "call27"):
        assert _same_bytes(GEN6 / "call27", other) == [
            "| 0.1.17 | H100 80GB HBM3 / H100 80GB HBM3 | 275 | 275 | 0 |"
        ]
    # Calls 27 - 28 ran the dense cases of 0.1.9 and 0.1.12 with `--compile used`: the bytes of
    # the H200's runs that compiled every kernel.
    assert _same_bytes(REPO / "results" / "h200" / "compile-used", GEN6) == [
        "| 0.1.9 | H100 80GB HBM3 / H200 | 25 | 25 | 0 |",
        "| 0.1.12 | H100 80GB HBM3 / H200 | 40 | 40 | 0 |",
    ]


def test_the_seventh_generation_readme_is_the_full_sweep_of_its_records() -> None:
    text = (GEN7 / "README.md").read_text()
    assert generated(GEN7) == text
    # 0.1.20's full sweep, cold then warm JIT cache: every case's state agrees; the cold run's
    # workers spent 1199 s compiling, the warm one's 27.
    assert "| 0.1.20 | call1/3a9172 | yes | 39 | 0 | 45 | 0 | 0 | 0 | 0 | 0 | 52 | 1199 |" in text
    assert "| 0.1.20 | call2/97f85e | yes | 39 | 0 | 45 | 0 | 0 | 0 | 0 | 0 | 37 | 27 |" in text
    for path in sorted(GEN7.rglob("kernels__suite__0.1.20__*.json")):
        record = json.loads(path.read_text())
        assert record["settings"]["compile"] == "all"
        assert record["settings"]["batch_sizes"] == [
            1,
            2,
            4,
            8,
            16,
            32,
            64,
            128,
            256,
            512,
            1024,
            2048,
            4096,
        ]
    assert _same_bytes(GEN7 / "call1", GEN7 / "call2") == [
        "| 0.1.20 | H100 80GB HBM3 / H100 80GB HBM3 | 839 | 839 | 0 |"
    ]
