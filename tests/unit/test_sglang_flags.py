"""The runtime flag contract: extraArgs validation and SGLang-faithful argv parsing."""

from __future__ import annotations

import argparse

import pytest

from sparkllm.errors import SpecError
from sparkllm.sglang_contract.flags import (
    SGLANG_VERSION,
    canonical_flag,
    flag_takes_value,
    known_flags,
    parse_human_readable_int,
    parse_sglang_argv,
    server_args_with_defaults,
    validate_extra_args,
)

RESERVED = ("--pp-size", "--tp-size", "--api-key", "--context-length", "--node-rank")
BASE = ["--model-path", "/models/m"]


def test_pinned_version_is_the_table_version() -> None:
    assert SGLANG_VERSION == "0.5.23"


@pytest.mark.parametrize(
    ("name", "canonical", "takes_value"),
    [
        ("--pp-size", "--pp-size", True),
        ("--pipeline-parallel-size", "--pp-size", True),
        ("--model", "--model-path", True),
        ("--nccl-init-addr", "--dist-init-addr", True),
        ("--enable-metrics", "--enable-metrics", False),
        ("--no-dcp-replicate-q-proj", "--dcp-replicate-q-proj", False),
        ("--disable-cuda-graph", "--disable-cuda-graph", False),
        ("--monokernel-backend", "--monokernel-backend", True),
    ],
)
def test_canonical_and_arity(name: str, canonical: str, takes_value: bool) -> None:
    assert name in known_flags()
    assert canonical_flag(name) == canonical
    assert flag_takes_value(name) is takes_value


def test_unknown_flag_lookup_suggests_a_close_match() -> None:
    with pytest.raises(SpecError, match=r"did you mean --enable-metrics\?"):
        canonical_flag("--enable-metric")


OWNED = "is set by the operator from the spec and may not appear in extraArgs"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], []),
        (["--enable-metrics", "--log-level", "debug"], []),
        (["--trust-remote-code", "--watchdog-timeout=600"], []),
        (["--chunked-prefill-size", "-1"], []),
        (["--cuda-graph-bs-decode", "1", "2", "4"], []),
        # What another SGLang version may accept is the image's own SGLang's to judge (the
        # launch check): an unknown flag, an abbreviation, a value 0.5.23 refuses, syntax
        # 0.5.23's arities would refuse.
        (["--enable-metrix"], []),
        (["--no-such-thing-at-all", "7"], []),
        (["--log-level"], []),
        (["--watchdog-timeout", "soon"], []),
        (["--tool-call-parser", "deepseekv9"], []),
        (["--enable-metrics=yes"], []),
        (["stray"], []),
        (["--trust-remote"], []),
        # The flags the operator owns stay refused, however spelled.
        (["--pp-size", "3"], [f"--pp-size {OWNED}"]),
        (["--pipeline-parallel-size=3"], [f"--pipeline-parallel-size {OWNED}"]),
        (["--pipeline-parallel", "3"], [f"--pipeline-parallel {OWNED}"]),  # an abbreviation
        (["--pp-size", "abc"], [f"--pp-size {OWNED}"]),  # whatever its value
        (
            ["--api-key", "x", "--context-length", "4k"],
            [f"--api-key {OWNED}", f"--context-length {OWNED}"],
        ),
    ],
)
def test_validate_extra_args(args: list[str], expected: list[str]) -> None:
    assert validate_extra_args(args, reserved=RESERVED) == expected


def test_an_ambiguous_prefix_that_could_be_an_owned_flag_is_refused() -> None:
    # --context could be --context-length (owned) or another flag: refused either way.
    assert validate_extra_args(["--context", "4k"], reserved=RESERVED) == [f"--context {OWNED}"]
    assert validate_extra_args(["--cuda-graph-max-bs", "4"], reserved=RESERVED) == []


def test_validate_extra_args_rejects_unknown_reserved_names() -> None:
    with pytest.raises(SpecError):
        validate_extra_args([], reserved=["--not-a-flag"])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--pp-size", "3"], {"pp_size": "3"}),
        (["--pp-size=3"], {"pp_size": "3"}),
        (["--pipeline-parallel-size", "3"], {"pp_size": "3"}),
        (["--model", "/other"], {"model_path": "/other"}),
        (["--enable-metrics"], {"enable_metrics": True}),
        (["--no-dcp-replicate-q-proj"], {"dcp_replicate_q_proj": False}),
        (["--dcp-replicate-q-proj"], {"dcp_replicate_q_proj": True}),
        (["--chunked-prefill-size", "-1"], {"chunked_prefill_size": "-1"}),
        (["--context-length", "12k"], {"context_length": "12k"}),
        (["--cuda-graph-bs-decode", "1", "2"], {"cuda_graph_bs_decode": ["1", "2"]}),
        (["--lora-paths"], {"lora_paths": []}),
        (["--model-checksum"], {"model_checksum": ""}),
        (["--model-checksum", "sums.json"], {"model_checksum": "sums.json"}),
        (["--monokernel-backend", "amd"], {"enable_amd_monokernel": "amd"}),
        (["--tp-size", "1", "--tp-size", "2"], {"tp_size": "2"}),
        (["--trust-remote"], {"trust_remote_code": True}),
        (["--enable-metrics-for-all"], {"enable_metrics_for_all_schedulers": True}),
        (["--tool-call-parser", "deepseekv4"], {"tool_call_parser": "deepseekv4"}),
        (["--reasoning-parser", "deepseek-v4"], {"reasoning_parser": "deepseek-v4"}),
        (["--api-key=-dash-key"], {"api_key": "-dash-key"}),  # attached: any value
        (["--api-key=--pp-size=3"], {"api_key": "--pp-size=3"}),
    ],
)
def test_parse_sglang_argv(argv: list[str], expected: dict[str, object]) -> None:
    parsed = parse_sglang_argv([*BASE, *argv])
    model_path = expected.get("model_path", "/models/m")
    assert parsed == {"model_path": model_path, **expected}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pp-size"], "argument --pp-size/--pipeline-parallel-size: expected one argument"),
        (["--pp-size", "three"], "invalid int value: 'three'"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--enable-metr"], "ambiguous option: --enable-metr could match --enable-metrics, "),
        (["--cuda-graph-max-bs", "4"], "ambiguous option: --cuda-graph-max-bs could match"),
        (["--pp", "3"], "ambiguous option: --pp could match"),
        (["--reasoning-parser", "nope"], "argument --reasoning-parser: invalid choice: 'nope'"),
        (["--context-length", "lots"], "invalid human_readable_int value: 'lots'"),
        (["--api-key", "-dash-key"], "argument --api-key: expected one argument"),
    ],
)
def test_parse_sglang_argv_refuses_like_argparse(argv: list[str], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace("?", r"\?")):
        parse_sglang_argv([*BASE, *argv])


@pytest.mark.parametrize("attach", [True, False])
@pytest.mark.parametrize("key", ["-dash", "--looks-like-a-flag", "--pp-size", "-1", "-k=v", "k"])
def test_a_key_parses_as_pythons_own_argparse_reads_it(key: str, attach: bool) -> None:
    """The model against the real thing: argparse with SGLang's two options that matter."""
    real = argparse.ArgumentParser(prog="sglang serve", exit_on_error=False)
    real.add_argument("--model-path", required=True)
    real.add_argument("--api-key")
    words = [*BASE, *([f"--api-key={key}"] if attach else ["--api-key", key])]
    try:
        expected = real.parse_args(words).api_key
    except argparse.ArgumentError:
        expected = None
    try:
        modelled = parse_sglang_argv(words).get("api_key")
    except SpecError:
        modelled = None
    assert modelled == expected
    assert (modelled == key) is (attach or not key.startswith("-") or key == "-1")


def test_parse_requires_model_path() -> None:
    with pytest.raises(
        SpecError, match="the following arguments are required: --model-path/--model"
    ):
        parse_sglang_argv(["--pp-size", "3"])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("12288", 12288),
        ("12k", 12000),
        ("1.5k", 1500),
        ("12Ki", 12288),
        ("1M", 10**6),
        ("x", None),
        ("k", None),
    ],
)
def test_human_readable_int(text: str, value: int | None) -> None:
    assert parse_human_readable_int(text) == value


def test_server_args_with_defaults_types_values_and_fills_defaults() -> None:
    args = server_args_with_defaults(
        parse_sglang_argv(
            [*BASE, "--pp-size", "3", "--mem-fraction-static", "0.57", "--context-length", "12k"]
        )
    )
    assert args["pp_size"] == 3
    assert args["mem_fraction_static"] == 0.57
    assert args["context_length"] == 12000
    assert args["port"] == 30000
    assert args["host"] == "127.0.0.1"
    assert args["watchdog_timeout"] == 300
    assert args["enable_metrics"] is False
    assert args["reasoning_parser"] is None
