"""The matrix: `configs/matrix.toml` -> cells (humming-kernels x vLLM x torch x CUDA variant).

Standard library and `packaging` only, because `noxfile.py` imports this module before any
session environment exists.

API (stable; extend, don't rename):

    load_matrix(path=None) -> Matrix       path, else matrix_path(): HUMMING_MATRIX_FILE, else
                                           configs/matrix.toml of the checkout at or above the
                                           working directory (never a copy inside the package)
    matrix_path(path=None, *, default=None, environ=None, cwd=None) -> Path
    checkout_file(relative, flag, cwd=None) -> Path
                                           a default that lives in the checkout (the default
                                           config list, the noxfile)
    Matrix.cells() -> tuple[Cell, ...]     every session `nox -l` lists, in matrix order
    Matrix.cell_for(version, variant=None) -> Cell
                                           any release a pairing's range covers (bisect meets
                                           versions no list names); raises NoPairingError
    Matrix.cell(session) -> Cell           the cell a session name stands for
    Matrix.session_cells(extra_versions, requested)
                                           cells() plus sessions for unlisted versions (the
                                           noxfile reads HUMMING_MATRIX_EXTRA_VERSIONS and the
                                           session names nox was asked for)
    Matrix.uncovered(requested) -> tuple[str, ...]
                                           why a requested session name has no session
    sessions_requested(argv, environ)      the session names a nox command line asks for
    Cell.session                           `humming-<version>` or `humming-<version>-<variant>`

A pairing says: humming-kernels versions in this specifier set run under this vLLM and this
torch, with these CUDA variants. Its `versions` list is what `nox -l` shows; the range is what
`cell_for` answers from. The install recipe is data too, so a test matrix can install only
humming-kernels (no vLLM, no torch).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import string
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from humming_matrix.errors import MatrixError, UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

MATRIX_ENV = "HUMMING_MATRIX_FILE"
# Comma-separated humming-kernels versions to add sessions for (a bisect meets unlisted ones).
EXTRA_VERSIONS_ENV = "HUMMING_MATRIX_EXTRA_VERSIONS"
NOX_SESSION_ENV = "NOXSESSION"  # nox's own: the sessions to run when `-s` is not given
# The project's data, relative to the root of a checkout. An installed package has no checkout
# around it, so these are looked up from the working directory, never from this file's location.
CHECKOUT_MATRIX = Path("configs", "matrix.toml")
CHECKOUT_CONFIG_LIST = Path("configs", "gsm8k", "humming", "config.txt")
CHECKOUT_NOXFILE = Path("noxfile.py")
SESSION_PREFIX = "humming-"
KERNELS_PREFIX = "kernels-"
# Placeholders a recipe's requirement templates may use.
PLACEHOLDERS = frozenset({"humming", "vllm", "torch", "extra"})

_TOP_KEYS = frozenset({"matrix", "recipe", "variant", "pairing"})
_MATRIX_KEYS = frozenset({"schema_version", "recipe", "python"})
_RECIPE_KEYS = frozenset(
    {
        "description",
        "requirements",
        "kernels_requirements",
        "overrides",
        "no_deps",
        "gpus",
        "preflight",
    }
)
_VARIANT_KEYS = frozenset(
    {"description", "torch_backend", "index_url", "humming_extra", "optional"}
)
_PAIRING_KEYS = frozenset(
    {
        "humming",
        "versions",
        "vllm",
        "torch",
        "variants",
        "default_variant",
        "recipe",
        "python",
        "optional",
    }
)
SCHEMA_VERSION = 1


class NoPairingError(MatrixError):
    """No pairing (or more than one) covers the requested humming-kernels version or variant."""


class NoCheckoutError(UsageError):
    """No matrix file was named and none was found in a checkout at or above the working
    directory (exit 2): the message says what was searched and how to point at one."""


@dataclass(frozen=True)
class Variant:
    """A CUDA build of torch (and the matching humming-kernels extra)."""

    name: str
    torch_backend: str | None  # uv's `--torch-backend` (e.g. cu130)
    index_url: str | None  # an extra index for torch wheels (pip backend, or pinned mirrors)
    humming_extra: str | None  # humming-kernels extra (cu12/cu13) pulling the CUDA toolchain
    description: str = ""
    optional: bool = False  # its cells may fail without failing CI (Buildkite soft_fail)


@dataclass(frozen=True)
class Recipe:
    """How a cell's environment is installed. Requirements are templates over PLACEHOLDERS."""

    name: str
    requirements: tuple[str, ...]
    kernels_requirements: tuple[str, ...]  # the `kernels-<version>` sessions: no vLLM
    overrides: tuple[str, ...]  # forced over vLLM's own pins (`uv pip install --overrides`)
    no_deps: bool
    gpus: int  # GPUs the GSM8K stage needs; 0 means it runs anywhere (a test double serves)
    preflight: bool  # False only where the environment cannot import humming (test matrices)
    description: str = ""


@dataclass(frozen=True)
class Pairing:
    """humming-kernels versions in `humming` run under this vLLM/torch with these variants."""

    humming: SpecifierSet
    versions: tuple[Version, ...]
    vllm: Version | None
    torch: Version | None
    variants: tuple[Variant, ...]
    default_variant: Variant
    recipe: Recipe
    python: str | None
    index: int  # position in the file, for error messages
    optional: bool = False  # its cells may fail without failing CI (Buildkite soft_fail)

    def covers(self, version: Version) -> bool:
        return self.humming.contains(version, prereleases=True)


@dataclass(frozen=True)
class Cell:
    """One environment: a humming-kernels version under one vLLM/torch and one CUDA variant."""

    humming: Version
    vllm: Version | None
    torch: Version | None
    variant: Variant
    recipe: Recipe
    python: str | None
    is_default_variant: bool  # the session is `humming-<version>` (no variant suffix)
    listed: bool  # named by a pairing's `versions` (False: found by range, e.g. by a bisect)
    default_variant_name: str  # the pairing's default, so an alias session can tell it is one
    optional: bool = False  # marked optional in the matrix (its pairing or its variant)

    @property
    def session(self) -> str:
        base = f"{SESSION_PREFIX}{self.humming}"
        return base if self.is_default_variant else f"{base}-{self.variant.name}"

    @property
    def kernels_session(self) -> str:
        base = f"{KERNELS_PREFIX}{self.humming}"
        return base if self.is_default_variant else f"{base}-{self.variant.name}"

    @property
    def gpus(self) -> int:
        return self.recipe.gpus

    @property
    def tags(self) -> tuple[str, ...]:
        """Each tag selects every environment at most once: `humming` picks each version's
        default variant, `<variant>` each version under that variant, `humming-<version>` every
        variant of one version. The `-<default variant>` alias of a default session has none."""
        version_tag = f"{SESSION_PREFIX}{self.humming}"
        if self.is_default_variant:
            return ("humming", version_tag, self.variant.name)
        if self.variant.name == self.default_variant_name:
            return ()
        return (version_tag, self.variant.name)

    @property
    def description(self) -> str:
        stack = ", ".join(
            part
            for part in (
                f"vLLM {self.vllm}" if self.vllm else "",
                f"torch {self.torch}" if self.torch else "",
                self.variant.name,
            )
            if part
        )
        return f"humming-kernels {self.humming} ({stack}; recipe {self.recipe.name})"

    @property
    def kernels_description(self) -> str:
        stack = f"torch {self.torch}, " if self.torch else ""
        return f"GEMM probe of humming-kernels {self.humming} ({stack}{self.variant.name}; no vLLM)"

    def _values(self) -> dict[str, str]:
        return {
            "humming": str(self.humming),
            "vllm": str(self.vllm) if self.vllm else "",
            "torch": str(self.torch) if self.torch else "",
            "extra": self.variant.humming_extra or "",
        }

    def requirements(self, *, kernels: bool = False) -> tuple[str, ...]:
        """The requirement lines to install (for a `kernels-` session: without vLLM)."""
        templates = self.recipe.kernels_requirements if kernels else self.recipe.requirements
        return tuple(_render(t, self._values()) for t in templates)

    def overrides(self) -> tuple[str, ...]:
        return tuple(_render(t, self._values()) for t in self.recipe.overrides)

    def install_options(self) -> tuple[str, ...]:
        """Installer options for uv (`uv pip install`); the overrides file is added by the
        caller, who owns where it lives."""
        options: list[str] = []
        if self.recipe.no_deps:
            options.append("--no-deps")
        if self.variant.torch_backend:
            options += ["--torch-backend", self.variant.torch_backend]
        if self.variant.index_url:
            options += ["--extra-index-url", self.variant.index_url]
        return tuple(options)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description, as an install record embeds it."""
        return {
            "session": self.session,
            "humming": str(self.humming),
            "vllm": str(self.vllm) if self.vllm else None,
            "torch": str(self.torch) if self.torch else None,
            "variant": self.variant.name,
            "recipe": self.recipe.name,
            "requirements": list(self.requirements()),
            "overrides": list(self.overrides()),
            "install_options": list(self.install_options()),
            "gpus": self.gpus,
            "preflight": self.recipe.preflight,
            "listed": self.listed,
        }


def _session_version(session: str) -> tuple[Version, str | None] | None:
    """(version, variant or None) of a `humming-`/`kernels-` session name; None for any other."""
    for prefix in (SESSION_PREFIX, KERNELS_PREFIX):
        if session.startswith(prefix):
            # Normalised PEP 440 versions never contain "-", so the first one ends it.
            version, _, variant = session[len(prefix) :].partition("-")
            try:
                return Version(version), variant or None
            except InvalidVersion:
                return None
    return None


def sessions_requested(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[str, ...]:
    """The session names a nox command line asks for (`-s/-e/--session/--sessions`, else
    $NOXSESSION, comma-separated), as nox reads them. nox gives a noxfile no way to ask, and the
    session of an unlisted release must exist before nox selects (Matrix.session_cells)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument(
        "-s", "-e", "--session", "--sessions", dest="names", nargs="*", action="extend"
    )
    own = list(argv)
    if "--" in own:  # what follows is the sessions' posargs
        own = own[: own.index("--")]
    names = parser.parse_known_args(own)[0].names or environ.get(NOX_SESSION_ENV, "").split(",")
    return tuple(name for name in names if name)


def _render(template: str, values: Mapping[str, str]) -> str:
    return template.format_map(values).replace("[]", "")


@dataclass(frozen=True)
class Matrix:
    path: Path
    pairings: tuple[Pairing, ...]

    def cells(self) -> tuple[Cell, ...]:
        """The explicit cells (the sessions `nox -l` lists): per listed version its default
        session, then one session per variant."""
        out: list[Cell] = []
        for pairing in self.pairings:
            for version in pairing.versions:
                out.append(self._cell(pairing, version, pairing.default_variant, True, True))
                out.extend(
                    self._cell(pairing, version, variant, False, True)
                    for variant in pairing.variants
                )
        return tuple(out)

    def versions(self) -> tuple[Version, ...]:
        """The listed humming-kernels versions, ascending."""
        return tuple(sorted({v for p in self.pairings for v in p.versions}))

    def cell(self, session: str) -> Cell:
        """The cell a session name (`humming-` or `kernels-`) stands for. Any version a range
        covers resolves, so sessions for unlisted releases (EXTRA_VERSIONS_ENV) work too."""
        named = _session_version(session)
        if named is None:
            raise NoPairingError(self.path, None, f"{session!r} is not a matrix session name")
        version, variant = named
        found = self.cell_for(version, variant)
        # `humming-<v>-<default variant>` names the alias, not the default session.
        if variant and found.is_default_variant:
            found = dataclasses.replace(found, is_default_variant=False)
        return found

    def covers(self, version: Version) -> bool:
        return any(p.covers(version) for p in self.pairings)

    def uncovered(self, requested: Iterable[str]) -> tuple[str, ...]:
        """Why each requested matrix session name has no session: its version is in no
        pairing's range (nox itself then reports the session as not found)."""
        out: list[str] = []
        for name in requested:
            named = _session_version(name)
            if named is not None and not self.covers(named[0]):
                out.append(f"{name}: no pairing's humming range in {self.path} covers {named[0]}")
        return tuple(out)

    def session_cells(
        self, extra_versions: Iterable[str] = (), requested: Iterable[str] = ()
    ) -> tuple[Cell, ...]:
        """cells(), plus the same sessions for each extra (unlisted) version a range covers, as
        a bisect asks for them through EXTRA_VERSIONS_ENV, and for the version of each requested
        session name (`nox -s humming-0.1.12`) a range covers; other requested names are nox's."""
        out = list(self.cells())
        names = {c.session for c in out}
        asked = [
            str(named[0])
            for named in map(_session_version, requested)
            if named is not None and self.covers(named[0])
        ]
        extra = [text.strip() for text in extra_versions if text.strip()]
        for text in extra:
            # Blame the variable that asked for it, not the matrix file.
            try:
                version = Version(text)
            except InvalidVersion:
                raise UsageError(f"${EXTRA_VERSIONS_ENV}: {text!r} is not a version") from None
            if not self.covers(version):
                raise UsageError(
                    f"${EXTRA_VERSIONS_ENV}: {text}: no pairing's humming range "
                    f"in {self.path} covers it"
                )
        for text in [*extra, *asked]:
            default = self.cell_for(text)
            pairing = next(p for p in self.pairings if p.covers(default.humming))
            variants = [
                self._cell(pairing, default.humming, v, False, default.listed)
                for v in pairing.variants
            ]
            for candidate in (default, *variants):
                if candidate.session not in names:
                    names.add(candidate.session)
                    out.append(candidate)
        return tuple(out)

    def cell_for(self, version: str | Version, variant: str | None = None) -> Cell:
        """The cell for any humming-kernels release a pairing's range covers."""
        parsed = _parse_version(version, self.path, "version")
        matches = [p for p in self.pairings if p.covers(parsed)]
        if not matches:
            raise NoPairingError(
                self.path, "pairing", f"no pairing's humming range covers version {parsed}"
            )
        if len(matches) > 1:
            where = ", ".join(f"pairing[{p.index}] ({p.humming})" for p in matches)
            raise NoPairingError(
                self.path, "pairing", f"version {parsed} is covered by more than one: {where}"
            )
        pairing = matches[0]
        listed = parsed in pairing.versions
        if variant is None:
            return self._cell(pairing, parsed, pairing.default_variant, True, listed)
        for candidate in pairing.variants:
            if candidate.name == variant:
                is_default = candidate == pairing.default_variant
                return self._cell(pairing, parsed, candidate, is_default, listed)
        names = ", ".join(v.name for v in pairing.variants)
        raise NoPairingError(
            self.path,
            f"pairing[{pairing.index}].variants",
            f"variant {variant!r} is not offered for {parsed} (offered: {names})",
        )

    @staticmethod
    def _cell(
        pairing: Pairing, version: Version, variant: Variant, default: bool, listed: bool
    ) -> Cell:
        return Cell(
            humming=version,
            vllm=pairing.vllm,
            torch=pairing.torch,
            variant=variant,
            recipe=pairing.recipe,
            python=pairing.python,
            is_default_variant=default,
            listed=listed,
            default_variant_name=pairing.default_variant.name,
            optional=pairing.optional or variant.optional,
        )


def find_checkout(cwd: Path | None = None) -> Path | None:
    """The nearest folder at or above `cwd` (default: the working directory) holding
    configs/matrix.toml: a checkout of this project. None outside one."""
    here = (Path.cwd() if cwd is None else cwd).resolve()
    for folder in (here, *here.parents):
        if (folder / CHECKOUT_MATRIX).is_file():
            return folder
    return None


def matrix_path(
    path: Path | None = None,
    *,
    default: Path | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Path:
    """Which matrix file to read: `path` (--matrix FILE) > $HUMMING_MATRIX_FILE > `default` (the
    noxfile passes its own checkout's) > configs/matrix.toml of the checkout at or above the
    working directory > NoCheckoutError. A file inside the installed package is never used: the
    matrix is the checkout's editable data, and a hidden copy would silently go stale."""
    if path is not None:
        return path
    configured = (os.environ if environ is None else environ).get(MATRIX_ENV)
    if configured:
        return Path(configured)
    if default is not None:
        return default
    checkout = find_checkout(cwd)
    if checkout is None:
        here = (Path.cwd() if cwd is None else cwd).resolve()
        raise NoCheckoutError(
            f"no matrix file: --matrix not given, ${MATRIX_ENV} not set, and no "
            f"{CHECKOUT_MATRIX} in {here} or any folder above it; run from a humming-matrix "
            f"checkout, or pass --matrix FILE, or set {MATRIX_ENV}=FILE"
        )
    return checkout / CHECKOUT_MATRIX


def checkout_file(relative: Path, flag: str, cwd: Path | None = None) -> Path:
    """A default that lives in the checkout (`relative` to its root: the default config list,
    the noxfile), for a command given no `flag`. Outside a checkout: NoCheckoutError saying so."""
    checkout = find_checkout(cwd)
    if checkout is None:
        here = (Path.cwd() if cwd is None else cwd).resolve()
        raise NoCheckoutError(
            f"{flag} not given and no humming-matrix checkout (a folder holding "
            f"{CHECKOUT_MATRIX}) at or above {here} to take the default {relative} from; "
            f"pass {flag}, or run from a checkout"
        )
    return checkout / relative


def load_matrix(path: Path | None = None) -> Matrix:
    """Read and validate a matrix file. Every fault is one MatrixError naming file and key."""
    source = matrix_path(path)
    try:
        raw = tomllib.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MatrixError(source, None, "no such file") from None
    except OSError as exc:
        raise MatrixError(source, None, f"cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(source, None, f"not valid TOML: {exc}") from None
    return parse_matrix(raw, source)


def parse_matrix(raw: Mapping[str, Any], source: Path) -> Matrix:
    _no_unknown(raw, _TOP_KEYS, source, "")
    head = _table(raw.get("matrix", {}), source, "matrix")
    _no_unknown(head, _MATRIX_KEYS, source, "matrix")
    schema = head.get("schema_version", SCHEMA_VERSION)
    if schema != SCHEMA_VERSION:
        raise MatrixError(
            source, "matrix.schema_version", f"unsupported {schema!r} (this tool reads 1)"
        )
    python = _opt_str(head, "python", source, "matrix")

    recipes = {
        name: _recipe(name, _table(body, source, f"recipe.{name}"), source)
        for name, body in _table(raw.get("recipe", {}), source, "recipe").items()
    }
    if not recipes:
        raise MatrixError(source, "recipe", "at least one [recipe.<name>] table is required")
    default_recipe = _opt_str(head, "recipe", source, "matrix")
    if default_recipe is None:
        if len(recipes) > 1:
            raise MatrixError(source, "matrix.recipe", "required when several recipes exist")
        default_recipe = next(iter(recipes))
    if default_recipe not in recipes:
        raise MatrixError(source, "matrix.recipe", f"unknown recipe {default_recipe!r}")

    variants = {
        name: _variant(name, _table(body, source, f"variant.{name}"), source)
        for name, body in _table(raw.get("variant", {}), source, "variant").items()
    }

    rows = raw.get("pairing", [])
    if not isinstance(rows, list) or not rows:
        raise MatrixError(source, "pairing", "at least one [[pairing]] table is required")
    pairings = tuple(
        _pairing(
            i,
            _table(row, source, f"pairing[{i}]"),
            source,
            recipes,
            variants,
            default_recipe,
            python,
        )
        for i, row in enumerate(rows)
    )

    seen: dict[Version, int] = {}
    for pairing in pairings:
        for version in pairing.versions:
            key = f"pairing[{pairing.index}].versions"
            if version in seen:
                raise MatrixError(
                    source,
                    key,
                    f"duplicate cell: {version} is already listed in pairing[{seen[version]}]",
                )
            seen[version] = pairing.index
            others = [p.index for p in pairings if p is not pairing and p.covers(version)]
            if others:
                raise MatrixError(
                    source, key, f"{version} is also covered by pairing[{others[0]}]'s range"
                )
    return Matrix(path=source, pairings=pairings)


def _recipe(name: str, body: Mapping[str, Any], source: Path) -> Recipe:
    where = f"recipe.{name}"
    _no_unknown(body, _RECIPE_KEYS, source, where)
    requirements = _templates(body, "requirements", source, where, required=True)
    kernels = _templates(body, "kernels_requirements", source, where, required=False)
    gpus = body.get("gpus", 1)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise MatrixError(source, f"{where}.gpus", f"must be a non-negative integer, not {gpus!r}")
    return Recipe(
        name=name,
        requirements=requirements,
        kernels_requirements=kernels or requirements,
        overrides=_templates(body, "overrides", source, where, required=False),
        no_deps=_bool(body, "no_deps", False, source, where),
        gpus=gpus,
        preflight=_bool(body, "preflight", True, source, where),
        description=_opt_str(body, "description", source, where) or "",
    )


def _variant(name: str, body: Mapping[str, Any], source: Path) -> Variant:
    where = f"variant.{name}"
    _no_unknown(body, _VARIANT_KEYS, source, where)
    if not name.replace("_", "").isalnum():
        raise MatrixError(
            source, where, "variant names are letters and digits (they end a session name)"
        )
    return Variant(
        name=name,
        torch_backend=_opt_str(body, "torch_backend", source, where),
        index_url=_opt_str(body, "index_url", source, where),
        humming_extra=_opt_str(body, "humming_extra", source, where),
        description=_opt_str(body, "description", source, where) or "",
        optional=_bool(body, "optional", False, source, where),
    )


def _pairing(
    index: int,
    body: Mapping[str, Any],
    source: Path,
    recipes: Mapping[str, Recipe],
    variants: Mapping[str, Variant],
    default_recipe: str,
    python: str | None,
) -> Pairing:
    where = f"pairing[{index}]"
    _no_unknown(body, _PAIRING_KEYS, source, where)
    spec_text = body.get("humming")
    if not isinstance(spec_text, str) or not spec_text.strip():
        raise MatrixError(
            source, f"{where}.humming", "required: a specifier set, e.g. '>=0.1.5,<0.1.7'"
        )
    try:
        spec = SpecifierSet(spec_text)
    except InvalidSpecifier:
        raise MatrixError(
            source, f"{where}.humming", f"not a specifier set: {spec_text!r}"
        ) from None

    listed = body.get("versions", [])
    if not isinstance(listed, list):
        raise MatrixError(source, f"{where}.versions", "must be a list of version strings")
    versions: list[Version] = []
    for text in listed:
        version = _parse_version(text, source, f"{where}.versions")
        if version in versions:
            raise MatrixError(
                source, f"{where}.versions", f"duplicate cell: {version} listed twice"
            )
        if not spec.contains(version, prereleases=True):
            raise MatrixError(
                source, f"{where}.versions", f"{version} is outside this pairing's range {spec}"
            )
        versions.append(version)

    recipe_name = _opt_str(body, "recipe", source, where) or default_recipe
    if recipe_name not in recipes:
        raise MatrixError(source, f"{where}.recipe", f"unknown recipe {recipe_name!r}")
    recipe = recipes[recipe_name]

    vllm = _opt_version(body, "vllm", source, where)
    torch = _opt_version(body, "torch", source, where)
    for placeholder, value in (("vllm", vllm), ("torch", torch)):
        used = any(placeholder in _fields(t) for t in recipe.requirements + recipe.overrides)
        if used and value is None:
            raise MatrixError(
                source,
                f"{where}.{placeholder}",
                f"required: recipe {recipe_name!r} installs {{{placeholder}}}",
            )

    names = body.get("variants")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise MatrixError(
            source, f"{where}.variants", "required: a non-empty list of variant names"
        )
    chosen: list[Variant] = []
    for name in names:
        if name not in variants:
            raise MatrixError(source, f"{where}.variants", f"unknown variant {name!r}")
        if variants[name] in chosen:
            raise MatrixError(
                source, f"{where}.variants", f"duplicate cell: variant {name!r} twice"
            )
        chosen.append(variants[name])
    default_name = body.get("default_variant", names[0])
    if default_name not in names:
        raise MatrixError(
            source,
            f"{where}.default_variant",
            f"{default_name!r} is not in this pairing's variants",
        )
    return Pairing(
        humming=spec,
        versions=tuple(versions),
        vllm=vllm,
        torch=torch,
        variants=tuple(chosen),
        default_variant=variants[default_name],
        recipe=recipe,
        python=_opt_str(body, "python", source, where) or python,
        index=index,
        optional=_bool(body, "optional", False, source, where),
    )


def _fields(template: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(template) if field}


def _templates(
    body: Mapping[str, Any], key: str, source: Path, where: str, *, required: bool
) -> tuple[str, ...]:
    value = body.get(key)
    if value is None and not required:
        return ()
    if (
        not isinstance(value, list)
        or not all(isinstance(v, str) for v in value)
        or (required and not value)
    ):
        raise MatrixError(source, f"{where}.{key}", "must be a list of requirement strings")
    for template in value:
        try:
            unknown = _fields(template) - PLACEHOLDERS
        except ValueError as exc:
            raise MatrixError(
                source, f"{where}.{key}", f"bad template {template!r}: {exc}"
            ) from None
        if unknown:
            raise MatrixError(
                source,
                f"{where}.{key}",
                f"unknown placeholder {{{sorted(unknown)[0]}}} in {template!r} "
                f"(known: {', '.join(sorted(PLACEHOLDERS))})",
            )
    return tuple(value)


def _parse_version(value: object, source: Path, key: str) -> Version:
    if isinstance(value, Version):
        return value
    if not isinstance(value, str):
        raise MatrixError(source, key, f"a version must be a string, not {value!r}")
    try:
        return Version(value)
    except InvalidVersion:
        raise MatrixError(source, key, f"not a version: {value!r}") from None


def _opt_version(body: Mapping[str, Any], key: str, source: Path, where: str) -> Version | None:
    if key not in body:
        return None
    return _parse_version(body[key], source, f"{where}.{key}")


def _opt_str(body: Mapping[str, Any], key: str, source: Path, where: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise MatrixError(source, f"{where}.{key}", f"must be a string, not {value!r}")
    return value


def _bool(body: Mapping[str, Any], key: str, default: bool, source: Path, where: str) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise MatrixError(source, f"{where}.{key}", f"must be true or false, not {value!r}")
    return value


def _table(value: object, source: Path, key: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MatrixError(source, key, "must be a table")
    return value


def _no_unknown(body: Mapping[str, Any], known: frozenset[str], source: Path, where: str) -> None:
    for key in body:
        if key not in known:
            full = f"{where}.{key}" if where else key
            raise MatrixError(source, full, f"unknown key (known: {', '.join(sorted(known))})")
