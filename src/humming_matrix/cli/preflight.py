"""`humming-matrix preflight`: the CPU preflight of this environment against GSM8K configs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from humming_matrix.distributions import imported_version
from humming_matrix.errors import ExitCode, UsageError
from humming_matrix.matrix.preflight import run_preflight
from humming_matrix.suite.config import load_configs


def register(sub: Any) -> None:
    p = sub.add_parser(
        "preflight",
        help="check on CPU that this environment can serve the configs (exit 0, or 125)",
        description="Import humming, resolve vLLM's humming integration against it, parse each "
        "config's server args with the installed vLLM's parser, and validate each humming env "
        "JSON against this humming version. Exit 0 all passed, 125 untestable, 2 usage.",
    )
    p.add_argument("--config", action="append", type=Path, default=[], metavar="FILE")
    p.add_argument("--config-list", action="append", type=Path, default=[], metavar="FILE")
    p.add_argument(
        "--without-vllm",
        action="store_true",
        help="this environment is meant to have no vLLM (skip, not fail, its checks)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the report as JSON")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    if not args.config and not args.config_list:
        raise UsageError("preflight needs --config FILE or --config-list FILE")
    configs = load_configs(args.config, args.config_list)
    report = run_preflight(configs, expect_vllm=not args.without_vllm, timeout=args.timeout)
    for check in report.checks:
        print(check.line(), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    # The copy Python imports, as the probe reports it (the first on sys.path).
    humming = imported_version("humming") or "none"
    if report.passed:
        print(f"preflight passed (humming-kernels {humming}, {report.duration:.1f} s)")
        return int(ExitCode.OK)
    print(f"preflight FAILED, untestable (humming-kernels {humming}): {report.reason()}")
    return int(ExitCode.UNTESTABLE)
