"""Charges follow the work: non-streamed requests the client leaves mid-generation.

Issue 25: six non-streamed chats closed after 7.6 s while the engine ran all six were
charged their prompts only (342 tokens; the engine produced ~13,900): for a non-streamed
request the whole generation happens before the first byte, so "no byte sent" does not
mean "no output made". The gateway now keeps reading such an answer for a client that
left (proxy.py, ``drain``) and charges its ``usage``.

Real parts on loopback (tests/unit/smg_stack.py): the SGLang simulator (in process, its
own HTTP server), the real ``smg`` router launched with the arguments the operator
renders, and the gateway. The
clients hang up while the simulator is generating all N answers; the ledger must then
hold exactly what the simulator produced (its ``sglang:*_tokens_total`` counters).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkllm.gateway.app import GatewayApp
from sparkllm.gateway.proxy import StreamEnd
from tests.unit.accept_sim import MODEL
from tests.unit.gateway_fixtures import wait_until
from tests.unit.smg_stack import smg_stack

REQUESTS = 6
MAX_TOKENS = 60  # each answer: 60 tokens at 20 ms, ~1.2 s of generation
TPOT_MS = 20
USER_KEY = "key-alice"
# One user per route: the ledger's row is per user and day.
ROUTES = {"/v1/chat/completions": ("alice", USER_KEY), "/v1/messages": ("bob", "key-bob")}
STREAMER = ("carol", "key-carol")  # the streamed answers' user (their own ledger row)


def engine_tokens(sim_url: str) -> dict[str, float]:
    """The simulator's own counts: prompt and generated tokens, finished and running
    requests (summed over labels)."""
    text = httpx.get(f"{sim_url}/metrics", timeout=10).text
    wanted = ("prompt_tokens_total", "generation_tokens_total", "num_requests_total")
    totals = dict.fromkeys((*wanted, "num_running_reqs"), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removeprefix("sglang:")
            if name in totals:
                totals[name] += sample.value
    return totals


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, GatewayApp, str]]:
    """(the simulator's URL, the gateway app, the gateway's URL), smg between them."""
    sim_options = [f"--sim-tpot-ms={TPOT_MS}", "--sim-answer-tokens=1000"]
    keys = {**dict(ROUTES.values()), STREAMER[0]: STREAMER[1]}
    with smg_stack(tmp_path_factory.mktemp("charges"), keys=keys, sim=sim_options) as front:
        yield front.sim_url, front.app, front.url


def _open_chat(gateway_url: str, index: int, route: str) -> socket.socket:
    """A non-streamed chat (or Anthropic Messages request: the same fields) sent over a
    raw socket, so the test can hang up mid-answer."""
    body = json.dumps({
        "model": MODEL, "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": f"tell me a long story, number {index}"}],
    }).encode()  # fmt: skip
    host, port = gateway_url.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)))
    conn.sendall(
        b"POST " + route.encode() + b" HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        b"authorization: Bearer " + ROUTES[route][1].encode() + b"\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    return conn


@pytest.mark.parametrize("route", ROUTES)
def test_non_streamed_chats_left_mid_generation_are_charged_what_the_engine_made(
    stack: tuple[str, GatewayApp, str], route: str
) -> None:
    sim_url, app, gateway_url = stack
    before = engine_tokens(sim_url)
    connections = [_open_chat(gateway_url, i, route) for i in range(REQUESTS)]
    try:
        wait_until(
            lambda: engine_tokens(sim_url)["num_running_reqs"] == REQUESTS,
            what="the engine to generate all the answers",
        )
        assert engine_tokens(sim_url)["num_requests_total"] == before["num_requests_total"]
    finally:
        for conn in connections:  # every client hangs up mid-generation
            conn.close()
    wait_until(lambda: app.limiter.in_flight == 0, timeout=30, what="the answers to be read")
    after = engine_tokens(sim_url)
    made_output = after["generation_tokens_total"] - before["generation_tokens_total"]
    made_prompt = after["prompt_tokens_total"] - before["prompt_tokens_total"]
    usage = httpx.get(
        f"{gateway_url}/v1/usage",
        headers={"authorization": f"Bearer {ROUTES[route][1]}"},
        timeout=10,
    ).json()
    (row,) = usage["data"]
    print(
        f"\n{REQUESTS} non-streamed {route} requests (max_tokens {MAX_TOKENS}) closed by the "
        f"client while the engine generated all {REQUESTS}:\n"
        f"  engine produced: {made_output:.0f} output tokens, {made_prompt:.0f} prompt tokens, "
        f"{after['num_requests_total'] - before['num_requests_total']:.0f} requests finished\n"
        f"  ledger charged:  {row['output_tokens']} output tokens, {row['input_tokens']} "
        f"input tokens, outcomes {row['outcomes']}\n"
        f"  (the earlier rule, 'no byte sent' = prompt only, charged no output)"
    )
    assert after["num_requests_total"] - before["num_requests_total"] == REQUESTS
    assert made_output == REQUESTS * MAX_TOKENS  # every answer ran to max_tokens
    assert row["outcomes"] == {"client_closed": REQUESTS}
    assert row["output_tokens"] == made_output  # the engine's usage, charged exactly
    assert row["input_tokens"] == made_prompt
    assert app.limiter.in_flight == 0  # no slot leaked
    assert app.limiter.queued == 0


def test_streams_read_to_done_then_closed_at_once_are_ok_and_charged_in_full(
    stack: tuple[str, GatewayApp, str],
) -> None:
    """As ``sparkllm bench`` and the SDKs do: read to ``data: [DONE]``, hang up at once.
    On the demo some of these raced the router's end of body and were logged
    ``client_closed status=0`` and charged nothing; the deterministic test of that race
    is test_gateway_stream_end.py. Here, on the real stack, every one is ``ok`` and the
    ledger holds exactly what the engine made."""
    sim_url, app, gateway_url = stack
    before = engine_tokens(sim_url)
    body = json.dumps({
        "model": MODEL, "max_tokens": MAX_TOKENS, "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "tell me a story"}],
    }).encode()  # fmt: skip
    headers = {"authorization": f"Bearer {STREAMER[1]}", "content-type": "application/json"}
    with httpx.Client(base_url=gateway_url, timeout=30) as client, ExitStack() as streams:
        answers = [
            streams.enter_context(client.stream("POST", "/v1/chat/completions", content=body,
                                                headers=headers))
            for _ in range(REQUESTS)
        ]  # fmt: skip
        for answer in answers:  # all generating at once; each read to its end, then closed
            end, pieces = StreamEnd(), []
            for piece in answer.iter_raw():
                pieces.append(piece)
                if end.passed(piece):  # the gateway's own test of the router's framing
                    break
            assert b"".join(pieces).endswith(b"data: [DONE]\n\n"), pieces[-1:]
            answer.close()  # at once, as the bench does

    def row() -> dict[str, Any]:
        usage = httpx.get(f"{gateway_url}/v1/usage", headers=headers, timeout=10).json()
        return dict(usage["data"][0]) if usage["data"] else {"outcomes": {}}

    # The ledger is written after the answer's last byte: read it once all are counted.
    wait_until(lambda: sum(row()["outcomes"].values()) == REQUESTS, what="all to be counted")
    assert app.limiter.in_flight == 0
    after, (counted,) = engine_tokens(sim_url), [row()]
    made_output = after["generation_tokens_total"] - before["generation_tokens_total"]
    print(
        f"\n{REQUESTS} streams closed right after [DONE]: outcomes {counted['outcomes']}, "
        f"charged {counted['output_tokens']} output tokens, engine made {made_output:.0f}"
    )
    assert counted["outcomes"] == {"ok": REQUESTS}
    assert counted["output_tokens"] == made_output == REQUESTS * MAX_TOKENS
    assert counted["input_tokens"] == after["prompt_tokens_total"] - before["prompt_tokens_total"]
