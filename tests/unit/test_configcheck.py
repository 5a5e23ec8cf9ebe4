"""ConfigApplied: rank 0's /get_server_info against the spec, pure and with the simulator."""

from __future__ import annotations

import asyncio
import copy
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

import sparkllm.sglang_contract.command as command_module
from sparkllm.api import InferenceClusterSpec, validate_inference_cluster
from sparkllm.configcheck import (
    REDACTED,
    Mismatch,
    compare_server_info,
    describe_mismatches,
    expected_server_args,
    redact_server_info,
    values_match,
)
from sparkllm.sglang_contract.command import ENGINE_COMMAND, engine_args
from sparkllm.sglang_contract.fields import ENGINE_API_KEY_ENV, LaunchValue
from sparkllm.sglang_contract.flags import parse_sglang_argv
from sparkllm_dev.devcluster import kubelet
from sparkllm_dev.sim.engine_config import build_engine_config
from sparkllm_dev.sim.options import SimOptions
from sparkllm_dev.sim.server import prepare
from sparkllm_dev.testing import source_pythonpath

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
KEY = "engine-key-do-not-leak"
DEADLINE_SECONDS = 30.0


def sample_spec(**engine: Any) -> InferenceClusterSpec:
    document = yaml.safe_load(SAMPLE.read_text())
    document = copy.deepcopy(document)
    document["spec"]["engine"].update(engine)
    return validate_inference_cluster(document).spec


# Rank 0's env holds the key; its launcher adds it to SGLang's argv inside the process.
RANK0_ENV = {ENGINE_API_KEY_ENV: KEY}


def rank0_command(spec: InferenceClusterSpec) -> list[str]:
    """Rank 0's command as the kubelet starts it (``$(VAR)`` expanded from its env)."""
    args = engine_args(spec, rank=0, rank0_ip="127.0.0.1")
    return kubelet.command_line({"command": list(ENGINE_COMMAND), "args": args}, RANK0_ENV)


def server_info_in_process(spec: InferenceClusterSpec, sim: Sequence[str]) -> dict[str, Any]:
    rank = prepare([*sim, "--", *rank0_command(spec)], env=RANK0_ENV)

    async def fetch() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=rank.app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            reply = await client.get("/get_server_info", headers={"Authorization": f"Bearer {KEY}"})
            reply.raise_for_status()
            info: dict[str, Any] = reply.json()
            return info

    return asyncio.run(fetch())


@pytest.mark.parametrize(
    ("ignored", "field", "wanted", "actual"),
    [
        (None, None, None, None),
        ("--pp-size", "pp_size", 3, 1),
        ("--mem-fraction-static", "mem_fraction_static", 0.57, None),
        ("--cuda-graph-max-bs-decode", "cuda_graph_max_bs_decode", 4, None),
        ("--context-length", "context_length", 12288, None),
        ("--chunked-prefill-size", "chunked_prefill_size", 4096, None),
        ("--max-running-requests", "max_running_requests", 8, None),
        ("--nnodes", "nnodes", 3, 1),
        ("--tool-call-parser", "tool_call_parser", "deepseekv4", None),
        ("--enable-metrics", "enable_metrics", True, False),
        (
            "--served-model-name",
            "served_model_name",
            "deepseek-v4-flash",
            "/models/DeepSeek-V4-Flash-NVFP4",
        ),
        ("--tp-size", None, None, None),  # SGLang's default (1) is what the spec wants
    ],
)
def test_an_ignored_flag_is_named(
    ignored: str | None, field: str | None, wanted: Any, actual: Any
) -> None:
    spec = sample_spec()
    sim = [] if ignored is None else [f"--sim-ignore-flag={ignored}"]
    mismatches = compare_server_info(spec, server_info_in_process(spec, sim))
    if field is None:
        assert mismatches == []
        return
    (mismatch,) = mismatches
    assert (mismatch.field, mismatch.wanted, mismatch.actual) == (field, wanted, actual)
    assert KEY not in repr(mismatch)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_simulator_process_that_ignores_two_flags() -> None:
    spec = sample_spec()
    port = _free_port()
    sim = [
        "--sim-host", "127.0.0.1", "--sim-port", str(port),
        "--sim-ignore-flag=--pp-size", "--sim-ignore-flag=--cuda-graph-max-bs-decode",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": source_pythonpath(), **RANK0_ENV}
    process = subprocess.Popen(
        [sys.executable, "-m", "sparkllm_dev.sim", *sim, "--", *rank0_command(spec)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        info = None
        deadline = time.monotonic() + DEADLINE_SECONDS
        while info is None and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                reply = httpx.get(
                    f"{url}/get_server_info", headers={"Authorization": f"Bearer {KEY}"}
                )
                info = reply.json() if reply.status_code == 200 else None
            except httpx.TransportError:
                time.sleep(0.05)
        assert info is not None, "simulator did not answer /get_server_info in time"
    finally:
        process.terminate()
        process.communicate(timeout=DEADLINE_SECONDS)
    assert info["simulator"] is True
    mismatches = compare_server_info(spec, info)
    assert [(m.field, m.wanted, m.actual) for m in mismatches] == [
        ("cuda_graph_max_bs_decode", 4, None),
        ("pp_size", 3, 1),
    ]
    message = describe_mismatches(mismatches)
    assert "cuda_graph_max_bs_decode: wanted 4 (spec.engine.cudaGraphMaxBatchSize)" in message
    assert KEY not in message


def test_expected_values_are_the_rendered_command() -> None:
    wanted = expected_server_args(sample_spec())
    assert {
        "mem_fraction_static": 0.57,
        "context_length": 12288,
        "pp_size": 3,
        "tp_size": 1,
        "nnodes": 3,
        "node_rank": 0,
        "chunked_prefill_size": 4096,
        "cuda_graph_max_bs_decode": 4,
        "max_running_requests": 8,
        "served_model_name": "deepseek-v4-flash",
        "reasoning_parser": "deepseek-v4",
    }.items() <= wanted.items()
    assert "api_key" not in wanted
    assert "dist_init_addr" not in wanted
    with_address = expected_server_args(sample_spec(), rank0_address="10.0.0.10")
    assert with_address["dist_init_addr"] == "10.0.0.10:5000"


def test_extra_args_are_compared_too() -> None:
    spec = sample_spec(extraArgs=["--watchdog-timeout", "600"])
    info = {**expected_server_args(spec)}
    del info["watchdog_timeout"]
    (mismatch,) = compare_server_info(spec, info)
    assert mismatch == Mismatch(
        field="watchdog_timeout",
        source="spec.engine.extraArgs",
        wanted=600.0,
        actual=None,
        reported=False,
    )
    assert mismatch.message().endswith("engine does not report it")


@pytest.mark.parametrize(
    ("wanted", "actual", "same"),
    [
        (0.57, 0.5700000000000001, True),
        (0.57, "0.57", True),
        (0.57, 0.5, False),
        (12288, 12288.0, True),
        (4, None, False),
        (True, 1, False),
        (False, False, True),
        ("deepseekv4", "deepseekv4", True),
        ("12", 12, False),
        ([1, 2], [1.0, 2.0], True),
        ([1, 2], [1], False),
    ],
)
def test_values_match(wanted: Any, actual: Any, same: bool) -> None:
    assert values_match(wanted, actual) is same


def test_the_api_key_never_appears_in_a_mismatch() -> None:
    spec = sample_spec()
    info = {
        **expected_server_args(spec),
        "api_key": KEY,
        "served_model_name": f"leaked-{KEY}",
        "launch_command": f"python3 -m sglang.launch_server --api-key {KEY}",
    }
    mismatches = compare_server_info(spec, info)
    assert [(m.field, m.actual) for m in mismatches] == [("served_model_name", REDACTED)]
    assert KEY not in repr(mismatches)
    assert KEY not in describe_mismatches(mismatches)
    redacted = redact_server_info(info)
    assert KEY not in repr(redacted)
    assert redacted["launch_command"] == REDACTED
    assert redacted["pp_size"] == 3


def test_describe_without_mismatches() -> None:
    assert describe_mismatches([]) == "rank 0 runs with every setting the spec asks for"


# --- a render bug is caught: the check does not agree with the renderer by construction ---


def simulated_server_info(argv: Sequence[str]) -> dict[str, Any]:
    """What the simulator (playing SGLang) reports for rank 0 started with ``argv``."""
    config = build_engine_config(
        parsed=parse_sglang_argv(argv), sim=SimOptions(), env={}, model_config={}
    )
    return dict(config.server_info_args)


def test_the_renderers_own_command_is_applied() -> None:
    spec = sample_spec(extraArgs=["--watchdog-timeout", "600"])
    argv = engine_args(spec, rank=0, rank0_ip="10.0.0.10")
    assert compare_server_info(spec, simulated_server_info(argv), rank0_address="10.0.0.10") == []


def _rounding_word(value: LaunchValue) -> str:
    """A render bug: floats written with one decimal (0.57 -> "0.6")."""
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def test_a_flag_rendered_with_a_wrong_value_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = sample_spec()
    monkeypatch.setattr(command_module, "argv_word", _rounding_word)
    argv = engine_args(spec, rank=0, rank0_ip="10.0.0.10")
    (mismatch,) = compare_server_info(spec, simulated_server_info(argv))
    assert (mismatch.field, mismatch.wanted, mismatch.actual) == ("mem_fraction_static", 0.57, 0.6)
    assert mismatch.source == "spec.engine.memFractionStatic"


def test_a_flag_the_renderer_drops_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = sample_spec()
    real = command_module.field_words
    monkeypatch.setattr(
        command_module,
        "field_words",
        lambda field, value: [] if field.flag == "--context-length" else real(field, value),
    )
    argv = engine_args(spec, rank=0, rank0_ip="10.0.0.10")
    (mismatch,) = compare_server_info(spec, simulated_server_info(argv))
    assert (mismatch.field, mismatch.wanted, mismatch.source) == (
        "context_length",
        12288,
        "spec.engine.contextLength",
    )
