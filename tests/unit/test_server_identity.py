"""A launch's API key reaches `vllm serve` as the value of `--api-key`, whatever it is."""

from __future__ import annotations

import argparse

import pytest

from humming_matrix.suite.server import ServerSpec, configured_api_key, new_api_key, serve_command


def _vllm_like_parser() -> argparse.ArgumentParser:
    # vLLM declares --api-key with nargs="+"; a value starting with '-' is read as an option
    # (CI, 2026-12-03: "argument --api-key: expected at least one argument").
    parser = argparse.ArgumentParser(prog="vllm serve", exit_on_error=False)
    parser.add_argument("model")
    parser.add_argument("--api-key", nargs="+")
    parser.add_argument("--port", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--disable-uvicorn-access-log", action="store_true")
    return parser


def test_every_generated_key_is_parsed_back_as_the_api_key() -> None:
    """2000 launches' keys (with URL-safe base64, about 31 of them would start with '-')."""
    parser = _vllm_like_parser()
    spec = ServerSpec("/models/m", (), {}, 60)
    keys = [new_api_key() for _ in range(2000)]
    assert len(set(keys)) == 2000
    for key in keys:
        command = serve_command("vllm", spec, 8000, key)
        assert configured_api_key(command) == key
        parsed = parser.parse_args(command[2:])
        assert parsed.api_key == [key]


def test_a_key_starting_with_a_dash_is_what_broke_the_launch() -> None:
    parser = _vllm_like_parser()
    command = serve_command("vllm", ServerSpec("/models/m", (), {}, 60), 8000, "-Xk3")
    with pytest.raises(argparse.ArgumentError) as caught:
        parser.parse_args(command[2:])
    assert str(caught.value) == "argument --api-key: expected at least one argument"
