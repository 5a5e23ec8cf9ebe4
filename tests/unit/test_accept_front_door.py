"""The checklist through the real front door: the gateway (its admission, allowlist and
tool-calling policy) in front of the simulator, both served on loopback.

Here every functional row passes, the refusal of strict / required tool calls included
(the gateway's own policy and message), and the stress and soak rows pass with the
benchmark's user granted ``ignore_eos`` as the e2e serving spec grants it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkllm.bench.accept.run import AcceptConfig, run_acceptance
from sparkllm.bench.runner import BenchTarget
from sparkllm.gateway.app import build_gateway_app
from sparkllm_dev.sim.server import prepare
from tests.unit.accept_sim import KEY, MODEL, SMALL, model_dir, sim_argv
from tests.unit.gateway_fixtures import (
    gateway_config,
    running,
    train_tokenizer,
    write_keys,
    write_model_dir,
)

USER_KEY = "key-alice"


@pytest.fixture
def front_door(tmp_path: Path) -> Iterator[str]:
    engine = prepare(sim_argv(model_dir(tmp_path / "engine")), env={}).app
    with running(engine) as upstream:
        config = gateway_config(
            model_dir=write_model_dir(tmp_path / "model", train_tokenizer()),
            keys_dir=write_keys(tmp_path / "keys", {"alice": USER_KEY}),
            upstream_url=upstream.url,
            upstream_api_key=KEY,
            served_model_name=MODEL,
            model_aliases=(),
            upstream_ready_path="/health",
            extensions={"ignore_eos": ("alice",)},
        )
        with running(build_gateway_app(config)) as gateway:
            yield gateway.url


def test_every_functional_stress_and_soak_row_passes_through_the_gateway(
    front_door: str, tmp_path: Path
) -> None:
    config = AcceptConfig(
        target=BenchTarget(base_url=front_door, model=MODEL, api_key=USER_KEY, timeout_s=30),
        sizes=SMALL,
        sections=("functional", "stress", "soak"),
    )
    with (tmp_path / "bar").open("w") as bar:
        run = asyncio.run(run_acceptance(config, progress_out=bar))
    assert {row.name: (row.verdict, row.detail) for row in run.rows if row.verdict != "pass"} == {
        "rank restarts during the soak": ("not measured", "no InferenceCluster status read")
    }
    assert [row.name for row in run.rows if row.section == "functional"] == [
        "deterministic answer",
        "streaming",
        "reasoning",
        "function call",
        "unsupported tool forms refused",
    ]
