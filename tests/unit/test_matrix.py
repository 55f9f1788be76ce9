"""matrix.toml -> cells: the shipped matrix, range pairing, and one-line errors for bad data."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
from packaging.version import Version

from humming_matrix.errors import ExitCode, MatrixError, UsageError
from humming_matrix.matrix.cells import (
    CHECKOUT_CONFIG_LIST,
    CHECKOUT_MATRIX,
    NoCheckoutError,
    NoPairingError,
    checkout_file,
    find_checkout,
    load_matrix,
    matrix_path,
    sessions_requested,
)
from humming_matrix.matrix.requirements_file import parse_requirements

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / CHECKOUT_MATRIX

SMALL = """
[matrix]
recipe = "full"

[recipe.full]
requirements = ["vllm=={vllm}", "torch=={torch}", "humming-kernels[{extra}]=={humming}"]
kernels_requirements = ["torch=={torch}", "humming-kernels[{extra}]=={humming}"]
overrides = ["humming-kernels=={humming}"]

[recipe.bare]
requirements = ["humming-kernels=={humming}"]
no_deps = true
gpus = 0
preflight = false

[variant.cu128]
torch_backend = "cu128"
humming_extra = "cu12"

[variant.cu130]
torch_backend = "cu130"
humming_extra = "cu13"

[variant.plain]

[[pairing]]
humming = ">=0.1.0,<0.1.7"
versions = ["0.1.5", "0.1.6"]
vllm = "0.24.0"
torch = "2.11.0"
variants = ["cu128", "cu130"]

[[pairing]]
humming = ">=0.1.7,<0.2"
versions = ["0.1.19"]
vllm = "0.33.0"
torch = "2.14.0"
variants = ["cu128", "cu130"]
default_variant = "cu130"

[[pairing]]
humming = ">=0.2"
versions = ["0.2.0"]
recipe = "bare"
variants = ["plain"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_matrix_lists_the_required_cells_with_their_stacks() -> None:
    matrix = load_matrix(SHIPPED)
    stacks = {c.session: (str(c.vllm), str(c.torch), c.variant.name) for c in matrix.cells()}
    assert stacks["humming-0.1.5"] == ("0.24.0", "2.11.0", "cu128")
    assert stacks["humming-0.1.6"] == ("0.24.0", "2.11.0", "cu128")
    assert stacks["humming-0.1.6-cu130"] == ("0.24.0", "2.11.0", "cu130")
    for version in ("0.1.17", "0.1.19", "0.1.20"):
        assert stacks[f"humming-{version}"] == ("0.33.0", "2.14.0", "cu130")
        assert stacks[f"humming-{version}-cu128"] == ("0.33.0", "2.14.0", "cu128")
    assert [str(v) for v in matrix.versions()] == ["0.1.5", "0.1.6", "0.1.17", "0.1.19", "0.1.20"]


def test_sessions_tags_and_install_recipe(tmp_path: Path) -> None:
    matrix = load_matrix(write(tmp_path, SMALL))
    by_name = {c.session: c for c in matrix.cells()}
    assert list(by_name) == [
        "humming-0.1.5",
        "humming-0.1.5-cu128",
        "humming-0.1.5-cu130",
        "humming-0.1.6",
        "humming-0.1.6-cu128",
        "humming-0.1.6-cu130",
        "humming-0.1.19",
        "humming-0.1.19-cu128",
        "humming-0.1.19-cu130",
        "humming-0.2.0",
        "humming-0.2.0-plain",
    ]
    default = by_name["humming-0.1.19"]
    assert default.tags == ("humming", "humming-0.1.19", "cu130")
    assert by_name["humming-0.1.19-cu128"].tags == ("humming-0.1.19", "cu128")
    # The alias of the default variant carries no tag, so no tag selects one environment twice.
    assert by_name["humming-0.1.19-cu130"].tags == ()
    assert default.requirements() == (
        "vllm==0.33.0",
        "torch==2.14.0",
        "humming-kernels[cu13]==0.1.19",
    )
    assert default.requirements(kernels=True) == ("torch==2.14.0", "humming-kernels[cu13]==0.1.19")
    assert default.overrides() == ("humming-kernels==0.1.19",)
    assert default.install_options() == ("--torch-backend", "cu130")
    assert default.kernels_session == "kernels-0.1.19"
    assert default.gpus == 1
    assert default.description == (
        "humming-kernels 0.1.19 (vLLM 0.33.0, torch 2.14.0, cu130; recipe full)"
    )

    bare = by_name["humming-0.2.0"]
    assert bare.requirements() == ("humming-kernels==0.2.0",)
    assert bare.install_options() == ("--no-deps",)
    assert (bare.gpus, bare.recipe.preflight, bare.vllm, bare.torch) == (0, False, None, None)


def test_cell_for_pairs_an_unlisted_release_by_range(tmp_path: Path) -> None:
    matrix = load_matrix(write(tmp_path, SMALL))
    cell = matrix.cell_for("0.1.12")
    assert (cell.session, str(cell.vllm), str(cell.torch), cell.variant.name, cell.listed) == (
        "humming-0.1.12",
        "0.33.0",
        "2.14.0",
        "cu130",
        False,
    )
    other = matrix.cell_for(Version("0.1.6"), "cu130")
    assert (other.session, other.listed, other.is_default_variant) == (
        "humming-0.1.6-cu130",
        True,
        False,
    )
    assert matrix.cell_for("0.1.6", "cu128").session == "humming-0.1.6"
    assert matrix.cell("kernels-0.1.6-cu130") == other


def test_cell_for_names_what_is_missing(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        SMALL.replace('humming = ">=0.2"', 'humming = ">=0.3"').replace('"0.2.0"', '"0.3.0"'),
    )
    matrix = load_matrix(path)
    with pytest.raises(NoPairingError) as info:
        matrix.cell_for("0.2.1")
    assert str(info.value) == f"{path}: pairing: no pairing's humming range covers version 0.2.1"
    with pytest.raises(NoPairingError) as info:
        matrix.cell_for("0.1.6", "cu126")
    assert str(info.value) == (
        f"{path}: pairing[0].variants: variant 'cu126' is not offered for 0.1.6 "
        "(offered: cu128, cu130)"
    )
    assert info.value.exit_code == ExitCode.USAGE


def test_environment_variable_selects_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, SMALL)
    monkeypatch.setenv("HUMMING_MATRIX_FILE", str(path))
    assert load_matrix().path == path


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "[variant.plain]",
            "[variant.plain]\ncolour = 'red'",
            "variant.plain.colour: unknown key (known: description, humming_extra, index_url, "
            "optional, torch_backend)",
        ),
        (
            'versions = ["0.1.19"]',
            'versions = ["0.1.19"]\noptional = "yes"',
            "pairing[1].optional: must be true or false, not 'yes'",
        ),
        (
            'versions = ["0.1.19"]',
            'versions = ["0.1.x"]',
            "pairing[1].versions: not a version: '0.1.x'",
        ),
        (
            'versions = ["0.1.19"]',
            'versions = ["0.1.19", "0.1.19"]',
            "pairing[1].versions: duplicate cell: 0.1.19 listed twice",
        ),
        (
            'versions = ["0.1.19"]',
            'versions = ["0.1.6"]',
            "pairing[1].versions: 0.1.6 is outside this pairing's range <0.2,>=0.1.7",
        ),
        (
            'humming = ">=0.1.7,<0.2"',
            'humming = ">=0.1.5,<0.2"',
            "pairing[0].versions: 0.1.5 is also covered by pairing[1]'s range",
        ),
        (
            'humming = ">=0.1.7,<0.2"',
            'humming = "newest"',
            "pairing[1].humming: not a specifier set: 'newest'",
        ),
        (
            'variants = ["plain"]',
            'variants = ["cu126"]',
            "pairing[2].variants: unknown variant 'cu126'",
        ),
        (
            'default_variant = "cu130"',
            'default_variant = "cu126"',
            "pairing[1].default_variant: 'cu126' is not in this pairing's variants",
        ),
        ('vllm = "0.33.0"\n', "", "pairing[1].vllm: required: recipe 'full' installs {vllm}"),
        (
            "no_deps = true",
            'no_deps = "yes"',
            "recipe.bare.no_deps: must be true or false, not 'yes'",
        ),
        (
            'overrides = ["humming-kernels=={humming}"]',
            'overrides = ["humming-kernels=={hk}"]',
            "recipe.full.overrides: unknown placeholder {hk} in 'humming-kernels=={hk}' "
            "(known: extra, humming, torch, vllm)",
        ),
        ('recipe = "full"', 'recipe = "fast"', "matrix.recipe: unknown recipe 'fast'"),
    ],
)
def test_bad_matrix_data_is_one_line_naming_file_and_key(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    assert old in SMALL
    path = write(tmp_path, SMALL.replace(old, new, 1))
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    assert str(info.value) == f"{path}: {expected}"
    assert "\n" not in str(info.value)


def test_unreadable_or_malformed_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    with pytest.raises(MatrixError, match=r"absent\.toml: no such file$"):
        load_matrix(missing)
    with pytest.raises(MatrixError, match=r"matrix\.toml: not valid TOML: "):
        load_matrix(write(tmp_path, "[matrix\n"))


def test_guarded_pins_match_the_matrix_cell_of_their_humming() -> None:
    pins = {
        p.name: p
        for p in parse_requirements(
            PurePosixPath("requirements/cuda.txt"),
            lambda path: (REPO / path).read_text(encoding="utf-8"),
        )
    }
    humming = pins["humming-kernels"]
    assert humming.extras == ("cu13",)
    cell = load_matrix(SHIPPED).cell_for(str(humming.exact_version))
    assert (pins["vllm"].exact_version, pins["torch"].exact_version) == (
        str(cell.vllm),
        str(cell.torch),
    )
    assert cell.variant.humming_extra == "cu13"
    assert cell.session == "humming-0.1.19"


def test_session_names_resolve_and_extra_versions_get_sessions(tmp_path: Path) -> None:
    matrix = load_matrix(write(tmp_path, SMALL))
    assert matrix.cell("humming-0.1.12-cu128").session == "humming-0.1.12-cu128"
    assert matrix.cell("kernels-0.1.12").variant.name == "cu130"
    assert [matrix.cell(c.session) for c in matrix.session_cells(["0.1.12"])] == list(
        matrix.session_cells(["0.1.12"])
    )
    with pytest.raises(NoPairingError) as info:
        matrix.cell("lint")
    assert str(info.value) == f"{tmp_path / 'matrix.toml'}: 'lint' is not a matrix session name"
    names = [c.session for c in matrix.session_cells(["0.1.12", "", "0.1.19"])]
    assert names[-3:] == ["humming-0.1.12", "humming-0.1.12-cu128", "humming-0.1.12-cu130"]
    assert len(names) == len(matrix.cells()) + 3  # 0.1.19 is listed already


def checkout(root: Path) -> Path:
    """A folder laid out like a checkout: configs/matrix.toml and a config list."""
    (root / "configs" / "gsm8k" / "humming").mkdir(parents=True)
    (root / CHECKOUT_MATRIX).write_text(SMALL, encoding="utf-8")
    (root / CHECKOUT_CONFIG_LIST).write_text("", encoding="utf-8")
    return root


def test_matrix_lookup_order(tmp_path: Path) -> None:
    root = checkout(tmp_path / "co")
    deep = root / "results" / "local"
    deep.mkdir(parents=True)
    env = {"HUMMING_MATRIX_FILE": "from-env.toml"}
    given, default = Path("given.toml"), Path("default.toml")
    assert matrix_path(given, default=default, environ=env, cwd=deep) == given
    assert matrix_path(None, default=default, environ=env, cwd=deep) == Path("from-env.toml")
    assert matrix_path(None, default=default, environ={}, cwd=deep) == default
    assert matrix_path(None, environ={"HUMMING_MATRIX_FILE": ""}, cwd=deep) == (
        root / "configs" / "matrix.toml"
    )
    assert find_checkout(root) == root
    assert find_checkout(tmp_path) is None


def test_outside_a_checkout_the_error_says_what_was_searched_and_how_to_point(
    tmp_path: Path,
) -> None:
    with pytest.raises(NoCheckoutError) as info:
        matrix_path(environ={}, cwd=tmp_path)
    assert str(info.value) == (
        f"no matrix file: --matrix not given, $HUMMING_MATRIX_FILE not set, and no "
        f"configs/matrix.toml in {tmp_path} or any folder above it; run from a humming-matrix "
        "checkout, or pass --matrix FILE, or set HUMMING_MATRIX_FILE=FILE"
    )
    assert isinstance(info.value, UsageError)
    assert info.value.exit_code == ExitCode.USAGE


def test_load_matrix_never_looks_beside_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This package is imported from the checkout's src/ here, whose configs/matrix.toml the old
    # lookup (relative to matrix.py) found from anywhere; an installed package has none.
    monkeypatch.delenv("HUMMING_MATRIX_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NoCheckoutError, match=rf"and no configs/matrix\.toml in {tmp_path} "):
        load_matrix()
    monkeypatch.chdir(checkout(tmp_path / "co") / "configs" / "gsm8k")
    assert load_matrix().path == tmp_path / "co" / "configs" / "matrix.toml"


def test_defaults_that_live_in_the_checkout(tmp_path: Path) -> None:
    root = checkout(tmp_path / "co")
    assert checkout_file(CHECKOUT_CONFIG_LIST, "--configs", cwd=root / "configs") == (
        root / "configs" / "gsm8k" / "humming" / "config.txt"
    )
    with pytest.raises(NoCheckoutError) as info:
        checkout_file(CHECKOUT_CONFIG_LIST, "--configs", cwd=tmp_path)
    assert str(info.value) == (
        f"--configs not given and no humming-matrix checkout (a folder holding "
        f"configs/matrix.toml) at or above {tmp_path} to take the default "
        "configs/gsm8k/humming/config.txt from; pass --configs, or run from a checkout"
    )


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["-s", "humming-0.1.12", "lint", "--", "-s", "x"], {}, ("humming-0.1.12", "lint")),
        (["-f", "noxfile.py", "--envdir", "e", "-s", "a", "-e", "b"], {}, ("a", "b")),
        (["--session=humming-0.1.12-cu128", "--sessions", "c"], {}, ("humming-0.1.12-cu128", "c")),
        (["-l"], {"NOXSESSION": "humming-0.1.12,lint"}, ("humming-0.1.12", "lint")),
        (["-s", "a"], {"NOXSESSION": "b"}, ("a",)),
        (["-t", "humming"], {}, ()),
    ],
)
def test_sessions_requested_reads_nox_command_line(
    argv: list[str], environ: dict[str, str], expected: tuple[str, ...]
) -> None:
    assert sessions_requested(argv, environ) == expected


def test_requested_unlisted_release_gets_its_sessions(tmp_path: Path) -> None:
    matrix = load_matrix(write(tmp_path, SMALL))
    requested = ["humming-0.1.12-cu128", "lint", "kernels-0.1.13", "humming-0.0.9", "humming-x"]
    names = [c.session for c in matrix.session_cells((), requested)]
    assert names[len(matrix.cells()) :] == [
        "humming-0.1.12",
        "humming-0.1.12-cu128",
        "humming-0.1.12-cu130",
        "humming-0.1.13",
        "humming-0.1.13-cu128",
        "humming-0.1.13-cu130",
    ]
    assert matrix.cell("humming-0.1.12-cu128").listed is False
    assert matrix.uncovered(requested) == (
        f"humming-0.0.9: no pairing's humming range in {tmp_path / 'matrix.toml'} covers 0.0.9",
    )
