"""Requirements parsing as pip reads vLLM's files: includes, options, markers, extras."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from humming_matrix.errors import RequirementsError
from humming_matrix.matrix.requirements_file import Pin, Reader, parse_requirements

CUDA = """\
# Common dependencies
-r common.txt
--extra-index-url https://download.pytorch.org/whl/cu130
-c ../constraints.txt

numba == 0.61.2 # Required for N-gram speculative decoding
# Dependencies for NVIDIA GPUs
torch==2.14.0 ; platform_system == "Linux" \\
    --hash=sha256:0123456789abcdef
torchaudio==2.14.0
humming-kernels[cu13]==0.1.19   # pinned kernels
flashinfer-python @ https://example.invalid/flashinfer-0.5.tar.gz#sha256=00
-e ./third_party/foo
--pre
"""
COMMON = """\
--index-url=https://pypi.org/simple
vllm==0.33.0
requests>=2.26
"""
CONSTRAINTS = "torch<3\nhumming-kernels<1\n"


def reader(files: dict[str, str]) -> Reader:
    def read(path: PurePosixPath) -> str:
        try:
            return files[str(path)]
        except KeyError:
            raise FileNotFoundError(str(path)) from None

    return read


FILES = {
    "requirements/cuda.txt": CUDA,
    "requirements/common.txt": COMMON,
    "constraints.txt": CONSTRAINTS,
}


def test_parses_vllm_style_file_with_includes() -> None:
    pins = parse_requirements(PurePosixPath("requirements/cuda.txt"), reader(FILES))
    assert [(p.name, p.specifier, p.source) for p in pins] == [
        ("vllm", "==0.33.0", "requirements/common.txt:2"),
        ("requests", ">=2.26", "requirements/common.txt:3"),
        ("numba", "==0.61.2", "requirements/cuda.txt:6"),
        ("torch", "==2.14.0", "requirements/cuda.txt:8"),
        ("torchaudio", "==2.14.0", "requirements/cuda.txt:10"),
        ("humming-kernels", "==0.1.19", "requirements/cuda.txt:11"),
        ("flashinfer-python", "", "requirements/cuda.txt:12"),
    ]
    by_name = {p.name: p for p in pins}
    assert by_name["torch"].marker == 'platform_system == "Linux"'
    assert by_name["humming-kernels"].extras == ("cu13",)
    assert by_name["humming-kernels"].exact_version == "0.1.19"
    assert by_name["requests"].exact_version is None
    assert by_name["flashinfer-python"].url == (
        "https://example.invalid/flashinfer-0.5.tar.gz#sha256=00"
    )


def test_pin_key_tells_extras_and_markers_apart() -> None:
    a = parse_requirements(PurePosixPath("a.txt"), reader({"a.txt": "humming-kernels[cu12]==1"}))
    b = parse_requirements(PurePosixPath("a.txt"), reader({"a.txt": "Humming_Kernels[cu13]==1"}))
    assert a[0].name == b[0].name == "humming-kernels"
    assert a[0].key != b[0].key


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"r.txt": "torch==2.14.0\nnot a requirement!!\n"},
            r"^r\.txt: line 2: not a requirement: ",
        ),
        ({"r.txt": "-r missing.txt\n"}, r"^r\.txt: cannot read missing\.txt: no such file$"),
        ({"r.txt": "-r r.txt\n"}, r"^r\.txt: include cycle: r\.txt -> r\.txt$"),
        ({"r.txt": "--frobnicate\n"}, r"^r\.txt: line 1: unknown option '--frobnicate'$"),
        ({"r.txt": "\n\n-r\n"}, r"^r\.txt: line 3: -r needs a file name$"),
    ],
)
def test_bad_files_name_file_and_line(files: dict[str, str], message: str) -> None:
    with pytest.raises(RequirementsError, match=message):
        parse_requirements(PurePosixPath("r.txt"), reader(files))


def test_missing_top_file() -> None:
    with pytest.raises(RequirementsError, match=r"^x\.txt: cannot read x\.txt: no such file$"):
        parse_requirements(PurePosixPath("x.txt"), reader({}))


def test_wildcard_pin_is_not_exact() -> None:
    pin = Pin("torch", "torch==2.14.*", "==2.14.*", (), None, None, "r.txt:1")
    assert pin.exact_version is None
