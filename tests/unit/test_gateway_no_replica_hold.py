"""Held, not refused, through a short gap (issue 29 item 4), with the real smg.

A simulated engine whose port is reserved but not yet listening stands for a replica
restarting: smg has no worker for the model and answers 404 model_not_found, as it does in
a pod while discovery has no Ready rank 0. In front, the real gateway, whose
InferenceCluster is a fixed object (the API read replaced, as test_gateway_no_replica.py
does): scaled to 0 -> the 503 at once; a replica Restarting -> requests are held, up to
``no_replica_hold_seconds``. Shown: the bound passes -> today's 503 with its reason; a
client leaving while held is charged nothing and frees its slot; a scale to 0 while held
ends the hold with its 503; held requests are answered (200) once the engine comes up
and smg registers it.
"""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkllm.gateway.app import GatewayApp, build_gateway_app
from sparkllm.gateway.serving import (
    CODE_NO_REPLICA_READY,
    CODE_SCALED_TO_ZERO,
    ServingState,
    replica_expected,
)
from sparkllm.sglang_contract.argv import replace_option_values
from sparkllm_dev.devcluster.gateway_io import (
    ROUTER_PORT_FLAGS,
    free_port,
    localize_router_args,
    with_worker_url,
)
from sparkllm_dev.sim.server import prepare
from tests.unit.accept_sim import KEY, MODEL, sim_argv
from tests.unit.gateway_fixtures import (
    ServerThread,
    gateway_config,
    hold_histogram,
    running,
    train_tokenizer,
    wait_until,
    write_keys,
    write_model_dir,
)
from tests.unit.test_render_secret_args import router_command

SMG = Path(sys.executable).parent / "smg"
CAROL = {"authorization": "Bearer key-carol"}
CHAT = "/v1/chat/completions"


def _cluster(replicas: int, *statuses: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "llm", "namespace": "serving"},
        "spec": {"replicas": replicas},
        "status": {"replicaStatuses": list(statuses)},
    }


RESTARTING = _cluster(1, {"index": 0, "phase": "Restarting", "message": "rank 0 exited"})


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        (None, False),  # not known (run by hand, no credentials): never held
        (_cluster(0), False),  # scaled to 0: nothing will come
        (_cluster(0, {"index": 0, "phase": "Restarting"}), False),
        (_cluster(1, {"index": 0, "phase": "Degraded", "budgetExhausted": True}), False),
        (RESTARTING, True),
        (_cluster(1), True),  # no status yet: starting
        (  # one stopped for good, the other restarting: one is coming
            _cluster(
                2,
                {"index": 0, "phase": "Degraded", "budgetExhausted": True},
                {"index": 1, "phase": "Starting"},
            ),
            True,
        ),
    ],
)
def test_a_replica_is_expected_only_when_the_object_says_one_is_coming(
    cluster: Mapping[str, Any] | None, expected: bool
) -> None:
    assert replica_expected(cluster) is expected


class _FixedObject(ServingState):
    """The real ServingState (holds, the shared readiness poll) with the API read replaced."""

    def __init__(self, cluster: Mapping[str, Any], app: GatewayApp, hold_seconds: float) -> None:
        super().__init__(
            model=MODEL,
            namespace="serving",
            name="llm",
            hold_seconds=hold_seconds,
            probe=functools.partial(app.upstream.probe, "/readiness"),
        )
        self.cluster = cluster

    async def _read(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.cluster


def _chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], **fields}


def _held(app: GatewayApp) -> dict[str, tuple[float, float]]:
    """The hold histogram: outcome -> (count, sum of seconds)."""
    return hold_histogram(app.metrics.exposition()[0].decode())


def test_requests_are_held_through_a_gap_and_answered_when_a_replica_is_back(
    tmp_path: Path,
) -> None:
    model = write_model_dir(tmp_path / "model", train_tokenizer())
    engine = prepare([*sim_argv(model, sim=(), parsers=False)], env={})
    replica = ServerThread(engine.app)  # its port is bound, not listening: "restarting"
    ports = {flag: free_port("127.0.0.1") for flag in ROUTER_PORT_FLAGS}
    args = localize_router_args(
        with_worker_url(router_command(key=KEY)[2:], url=replica.url), ports=ports
    )
    # smg checks a worker every 10 s as the operator renders it; 1 s here, so that the
    # replica is registered within a second or two of coming up.
    args = [*replace_option_values(args, {"--health-check-interval-secs": "1"})]
    args += ["--worker-startup-check-interval", "1"]
    with (tmp_path / "smg.log").open("wb") as sink:
        router = subprocess.Popen([str(SMG), "launch", *args], stdout=sink, stderr=sink)
    try:
        router_url = f"http://127.0.0.1:{ports['--port']}"
        wait_until(lambda: _answers(f"{router_url}/liveness"), timeout=60, what="smg to listen")
        config = gateway_config(
            model_dir=model, keys_dir=write_keys(tmp_path / "keys", {"carol": "key-carol"}),
            upstream_url=router_url, upstream_api_key=KEY, served_model_name=MODEL,
            model_aliases=(),
        )  # fmt: skip
        app = build_gateway_app(config)
        assert config.no_replica_hold_seconds == 30  # the default: holding is on
        with running(app) as gateway, httpx.Client(base_url=gateway.url, timeout=60) as client:
            _scaled_to_zero_is_answered_at_once(app, client)
            _the_bound_passes_then_the_503_with_its_reason(app, client)
            _a_client_leaving_while_held_is_charged_nothing(app, client, gateway.url)
            _a_scale_to_zero_while_held_ends_the_hold(app, gateway.url)
            _held_requests_are_served_once_the_replica_is_up(app, gateway.url, replica)
    finally:
        router.kill()  # ours; a graceful stop waits out smg's drain window
        router.wait(timeout=30)
        replica.__exit__(None, None, None)  # stops it if it came up; closes its socket


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _scaled_to_zero_is_answered_at_once(app: GatewayApp, client: httpx.Client) -> None:
    app.serving = _FixedObject(_cluster(0), app, hold_seconds=30)
    started = time.monotonic()
    answer = client.post(CHAT, json=_chat(max_tokens=4), headers=CAROL)
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, CODE_SCALED_TO_ZERO)
    assert time.monotonic() - started < 10  # not held for the 30 s bound
    assert _held(app) == {}


def _the_bound_passes_then_the_503_with_its_reason(app: GatewayApp, client: httpx.Client) -> None:
    app.serving = _FixedObject(RESTARTING, app, hold_seconds=1)
    started = time.monotonic()
    answer = client.post(CHAT, json=_chat(max_tokens=4), headers=CAROL)
    waited = time.monotonic() - started
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, CODE_NO_REPLICA_READY)
    assert "replica 0 is Restarting (rank 0 exited)" in answer.json()["error"]["message"]
    assert answer.headers["retry-after"] == "30"
    assert waited >= 1.0
    # A hold is counted when its relay ends, just after the client has the 503's last byte.
    wait_until(lambda: "refused" in _held(app), timeout=20, what="the hold counted")
    count, seconds = _held(app)["refused"]
    assert count == 1
    assert seconds >= 1.0


def _a_client_leaving_while_held_is_charged_nothing(
    app: GatewayApp, client: httpx.Client, url: str
) -> None:
    app.serving = serving = _FixedObject(RESTARTING, app, hold_seconds=30)
    body = json.dumps(_chat(max_tokens=4)).encode()
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(
            f"POST {CHAT} HTTP/1.1\r\nhost: gateway\r\nauthorization: {CAROL['authorization']}"
            f"\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        wait_until(lambda: serving._waiting == 1, timeout=20, what="the request held")
    # the client hung up while held
    wait_until(lambda: "client_closed" in _held(app), timeout=10, what="the hold to end")
    wait_until(lambda: app.limiter.in_flight == 0, timeout=10, what="its slot freed")
    assert app.limiter.queued == 0
    (row,) = client.get("/v1/usage", headers=CAROL).json()["data"]
    assert row["outcomes"]["client_closed"] == 1
    assert (row["input_tokens"], row["output_tokens"]) == (0, 0)  # no engine saw it


def _a_scale_to_zero_while_held_ends_the_hold(app: GatewayApp, url: str) -> None:
    """The object is read again while a request waits: scaled to 0 meanwhile, nothing
    will come, and the held request gets that 503 (not the rest of its 60 s bound)."""
    app.serving = serving = _FixedObject(RESTARTING, app, hold_seconds=60)
    answers: list[httpx.Response] = []
    asking = threading.Thread(
        target=lambda: answers.append(
            httpx.post(f"{url}{CHAT}", json=_chat(max_tokens=4), headers=CAROL, timeout=90)
        ),
        daemon=True,
    )
    asking.start()
    wait_until(lambda: serving._waiting == 1, timeout=20, what="the request held")
    serving.cluster = _cluster(0)
    asking.join(timeout=30)
    (answer,) = answers
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, CODE_SCALED_TO_ZERO)
    # held, then refused: counted as held (when its relay ends, just after the answer)
    wait_until(lambda: _held(app)["refused"][0] >= 2, timeout=20, what="the hold counted")
    assert _held(app)["refused"][0] == 2


def _held_requests_are_served_once_the_replica_is_up(
    app: GatewayApp, url: str, replica: ServerThread
) -> None:
    app.serving = serving = _FixedObject(RESTARTING, app, hold_seconds=60)
    results: list[tuple[int, float]] = []

    def ask(stream: bool) -> None:
        started = time.monotonic()
        answer = httpx.post(
            f"{url}{CHAT}", json=_chat(max_tokens=8, stream=stream), headers=CAROL, timeout=90
        )
        results.append((answer.status_code, time.monotonic() - started))

    before = sum(n for n, _ in _held(app).values())
    clients = [threading.Thread(target=ask, args=(i == 0,), daemon=True) for i in range(3)]
    for thread in clients:
        thread.start()
    wait_until(lambda: serving._waiting == 3, timeout=20, what="three requests held")
    came_up = time.monotonic()
    replica.__enter__()  # the replica is back: smg registers it at its next check
    for thread in clients:
        thread.join(timeout=60)
    registered = time.monotonic() - came_up
    # A hold is counted when its request's relay ends, just after the client has its last
    # byte: wait for these three counts, then see how each ended.
    wait_until(
        lambda: sum(n for n, _ in _held(app).values()) >= before + 3,
        timeout=20,
        what="the three holds counted",
    )
    count, seconds = _held(app)["served"]
    print(
        f"\nheld {len(results)} requests while no replica served; the replica came up and "
        f"they were answered {registered:.1f} s later: statuses "
        f"{sorted(status for status, _ in results)}, waits "
        f"{', '.join(f'{wait:.2f} s' for _, wait in sorted(results, key=lambda r: r[1]))} "
        f"(held {seconds:.2f} s in all)"
    )
    assert [status for status, _ in results] == [200, 200, 200]
    assert count == 3
    assert app.limiter.in_flight == 0
