"""The preflight's inside half: runs in the environment under test, in its own process.

`python -m humming_matrix.preflight_probe OUT.json < request.json` imports humming (and vLLM's
humming integration, and vLLM's argument parser) the way a server would, and writes one JSON
object `{"checks": [{"name", "subject", "status", "detail"}, ...]}` to OUT.json. It runs apart
from the CLI because importing torch takes seconds, may initialise CUDA, and may crash; the
outside half (`preflight.py`) turns a crash or a hang into a failed check.

Request (stdin): {"expect_vllm": bool, "configs": [{"name", "argv", "env"}]} where `argv` is what
the launcher passes after `vllm serve`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import json
import os
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

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


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def check_humming_import() -> tuple[dict[str, str], ModuleType | None]:
    installed = _version("humming-kernels")
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
            f"import humming (humming-kernels {installed}) failed: {_error(exc)}",
        ), None
    return _check(
        "humming_import", "humming", PASSED, f"humming-kernels {installed} imports"
    ), humming


def _humming_modules_of_vllm() -> list[str]:
    files = metadata.distribution("vllm").files or []
    names = []
    for path in files:
        text = str(path)
        if text.startswith("vllm/") and text.endswith(".py") and "humming" in text:
            names.append(text[: -len(".py")].replace("/", ".").removesuffix(".__init__"))
    return sorted(names)


def check_vllm_integration(humming: ModuleType | None, expect_vllm: bool) -> dict[str, str]:
    vllm = _version("vllm")
    if vllm is None:
        status = FAILED if expect_vllm else SKIPPED
        why = "the cell's recipe installs vLLM" if expect_vllm else "this recipe installs none"
        return _check("vllm_integration", "vllm", status, f"vLLM is not installed ({why})")
    if humming is None:
        return _check("vllm_integration", "vllm", SKIPPED, "humming does not import")
    modules = _humming_modules_of_vllm()
    if not modules:
        return _check(
            "vllm_integration", "vllm", SKIPPED, f"vLLM {vllm} ships no humming integration module"
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
    installed = _version("humming-kernels")
    if failures:
        causes = []
        for error, where in failures.items():
            more = f" and {len(where) - 1} more" if len(where) > 1 else ""
            causes.append(f"{error} (in {where[0]}{more})")
        return _check(
            "vllm_integration",
            "vllm",
            FAILED,
            f"vLLM {vllm} cannot use humming-kernels {installed}: " + "; ".join(causes),
        )
    return _check(
        "vllm_integration",
        "vllm",
        PASSED,
        f"vLLM {vllm}: {len(modules)} humming modules import and resolve against "
        f"humming-kernels {installed}",
    )


def _vllm_serve_parser() -> tuple[Any, Any]:
    """vLLM's own `vllm serve` parser and its post-parse validator (None if this vLLM has none)."""
    try:
        cli_args = importlib.import_module("vllm.entrypoints.common.cli_args")
    except ImportError:  # vLLM before the common/ split
        cli_args = importlib.import_module("vllm.entrypoints.openai.cli_args")
    try:
        argparse_utils = importlib.import_module("vllm.utils.argparse_utils")
        parser_class = argparse_utils.FlexibleArgumentParser
    except (ImportError, AttributeError):
        parser_class = importlib.import_module("vllm.utils").FlexibleArgumentParser
    parser = cli_args.make_arg_parser(parser_class(prog="vllm serve"))
    return parser, getattr(cli_args, "validate_parsed_serve_args", None)


def check_server_args(configs: list[dict[str, Any]], expect_vllm: bool) -> list[dict[str, str]]:
    if _version("vllm") is None:
        status = FAILED if expect_vllm else SKIPPED
        return [_check("server_args", c["name"], status, "vLLM is not installed") for c in configs]
    try:
        parser, validate = _vllm_serve_parser()
    except BaseException as exc:
        return [
            _check(
                "server_args",
                c["name"],
                FAILED,
                f"cannot build vLLM's `serve` argument parser: {_error(exc)}",
            )
            for c in configs
        ]
    out = []
    for config in configs:
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                args = parser.parse_args(config["argv"])
                if validate is not None:
                    validate(args)
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
            _check("server_args", config["name"], PASSED, "accepted by vLLM's `serve` parser")
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
    humming: ModuleType | None, configs: list[dict[str, Any]]
) -> list[dict[str, str]]:
    out = []
    installed = _version("humming-kernels")
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


def _prefer_cpu_platform() -> None:
    """vLLM's argument parser infers a device; on a machine without a GPU that fails unless
    vLLM is told to plan for the CPU platform. A GPU machine keeps its own platform."""
    if "VLLM_TARGET_DEVICE" in os.environ:
        return
    try:
        torch = importlib.import_module("torch")
        has_cuda = bool(torch.cuda.is_available())
    except BaseException:
        has_cuda = False
    if not has_cuda:
        os.environ["VLLM_TARGET_DEVICE"] = "cpu"


def probe(request: dict[str, Any]) -> list[dict[str, str]]:
    expect_vllm = bool(request.get("expect_vllm", False))
    configs = list(request.get("configs", []))
    first, humming = check_humming_import()
    checks = [first]
    if _version("vllm") is not None:
        _prefer_cpu_platform()
    checks.append(check_vllm_integration(humming, expect_vllm))
    checks.extend(check_server_args(configs, expect_vllm))
    checks.extend(check_humming_env(humming, configs))
    return checks


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m humming_matrix.preflight_probe OUT.json < request.json",
            file=sys.stderr,
        )
        return 2
    request = json.loads(sys.stdin.read() or "{}")
    checks = probe(request)
    Path(argv[0]).write_text(json.dumps({"checks": checks}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
