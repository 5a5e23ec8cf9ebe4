"""One contract per command: what a renderer writes, the command's own parser reads back.

Each of sparkllm's commands that runs in a pod has one args type (``sparkllm.cli_args``):
``verify-model``, ``verify-network``, the bandwidth collective, ``bench`` (and ``bench
--accept``). For each, every field set away from its default (and, apart, only the
required ones) goes through ``command_line`` and comes back equal from the parser the
command really runs with (``sparkllm``'s, or the bandwidth module's own). The rank pods'
init containers, as rendered from the sample, parse back to what the spec asks for; and
the bandwidth module runs from the files verify-network ships into the engine image,
with nothing but the standard library beside them.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from sparkllm.bench.args import BenchArgs
from sparkllm.cli import build_parser
from sparkllm.cli_args import CommandArgs, command_line, from_namespace, parse_args, to_argv
from sparkllm.integrity.args import VerifyModelArgs
from sparkllm.preflight import bandwidth
from sparkllm.preflight.args import VerifyMemoryArgs, VerifyNetworkArgs
from sparkllm.preflight.bandwidth import BandwidthArgs
from sparkllm.preflight.verify import copy_bandwidth_module
from sparkllm.render.network_preflight import BANDWIDTH_CONTAINER, NETWORK_CONTAINER
from sparkllm.render.ranks import VERIFY_CONTAINER
from sparkllm.staging.command import StageModelArgs
from tests.unit.test_preflight_render import _pods

ARGS_TYPES: tuple[type[Any], ...] = (
    VerifyModelArgs, VerifyNetworkArgs, VerifyMemoryArgs, BandwidthArgs, BenchArgs,
    StageModelArgs,
)  # fmt: skip


def _changed(kind: Any, field: dataclasses.Field[Any]) -> Any:
    """A value of ``kind`` that differs from the field's default."""
    if isinstance(kind, types.UnionType):  # X | None: the X
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if kind is bool:
        return True
    if typing.get_origin(kind) is typing.Literal:
        return next(v for v in typing.get_args(kind) if v != field.default)
    if typing.get_origin(kind) is tuple:
        return ("first", "second")
    if kind is int:
        return 7 if field.default != 7 else 8
    if kind is float:
        return 2.5
    if kind is Path:
        return Path(f"/some/{field.name}")
    assert kind is str, f"{field.name}: a type the contract does not know: {kind}"
    return f"value-of-{field.name}"


def every_option_set(cls: type[Any]) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _changed(hints[f.name], f) for f in dataclasses.fields(cls)})


def only_required(cls: type[Any]) -> Any:
    hints = typing.get_type_hints(cls)
    required = [f for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
    return cls(**{f.name: _changed(hints[f.name], f) for f in required})


def parsed(args: CommandArgs) -> Any:
    """``args`` written out, then read by the parser its command runs with."""
    words = command_line(args)
    if isinstance(args, BandwidthArgs):
        return from_namespace(BandwidthArgs, bandwidth._parser().parse_args(words))
    return from_namespace(type(args), build_parser().parse_args(words))


@pytest.mark.parametrize("cls", ARGS_TYPES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("build", [every_option_set, only_required])
def test_what_a_renderer_writes_the_command_reads_back(cls: type[Any], build: Any) -> None:
    args = build(cls)
    assert parsed(args) == args


def test_a_field_at_its_default_is_not_written_unless_always() -> None:
    assert to_argv(VerifyModelArgs(model_dir=Path("/m"), expected_shards=2)) == [
        "--model-dir", "/m", "--expected-shards", "2",
    ]  # fmt: skip
    # the collective names its backend and op even at their defaults
    assert to_argv(BandwidthArgs())[:4] == ["--backend", "nccl", "--op", "all_reduce"]


def test_a_missing_required_option_is_the_parsers_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(VerifyModelArgs, ["--model-dir", "/m"])
    assert "--expected-shards" in capsys.readouterr().err


def _init_container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["initContainers"] if c["name"] == name)


def test_the_rank_pods_init_containers_parse_as_the_spec_asks() -> None:
    rank0 = _pods("gate", preflight={"minBusBandwidthGbps": 80})[0]
    model = parsed_words(_init_container(rank0, VERIFY_CONTAINER)["args"], VerifyModelArgs)
    assert (model.model_dir, model.expected_shards, model.expected_layers) == (
        Path("/models/DeepSeek-V4-Flash-NVFP4"), 46, 43,
    )  # fmt: skip
    network = parsed_words(_init_container(rank0, NETWORK_CONTAINER)["args"], VerifyNetworkArgs)
    assert network.gate
    assert network.sys_dir == Path("/host/sys")
    assert network.copy_bandwidth_module is not None  # rank 0 measures: it ships the module
    collective = _init_container(rank0, BANDWIDTH_CONTAINER)["args"]
    measured = from_namespace(BandwidthArgs, bandwidth._parser().parse_args(collective))
    assert (measured.threshold_gbps, measured.gate) == (80.0, True)


def parsed_words(words: list[str], cls: type[Any]) -> Any:
    return from_namespace(cls, build_parser().parse_args(words))


def test_the_shipped_bandwidth_module_needs_nothing_else(tmp_path: Path) -> None:
    copy_bandwidth_module(tmp_path)
    result = subprocess.run(
        [sys.executable, "-S", "-m", "sparkllm.preflight.bandwidth", "--help"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "--threshold-gbps" in result.stdout
