"""A stored response is its owner's: another key can neither read nor cancel it.

SGLang and the router answer a stored response's retrieve and cancel for whoever asks;
the gateway records who each relayed response id belongs to (response_owners.py) and
answers every other id with one 404, indistinguishable from an unknown id's. The
upstream here stores responses as SGLang does with ``--enable-response-store`` (the
simulator and the router keep none), so the owner's retrieve really returns its answer.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkllm.errors import GovernanceStoreError
from sparkllm.gateway.app import build_gateway_app
from sparkllm.gateway.asgi import Message
from sparkllm.gateway.governance.redis_store import RedisStore
from sparkllm.gateway.governance.store import MemoryStore
from sparkllm.gateway.response_owners import (
    MemoryOwners,
    RedisOwners,
    claiming_send,
    owned_by,
    owners_for,
)
from sparkllm_dev.redis_fixture import RedisServer
from tests.unit.gateway_fixtures import (
    MODEL,
    gateway_config,
    read_request_body,
    running,
    train_tokenizer,
    write_keys,
    write_model_dir,
)

ALICE, BOB = {"authorization": "Bearer key-a"}, {"authorization": "Bearer key-b"}


class StoringUpstream:
    """Answers /v1/responses and keeps each answer, as SGLang's response store does."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.paths: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await read_request_body(receive)
        path = scope["path"]
        self.paths.append(path)
        if path == "/readiness":
            await _json(send, 200, {})
        elif path == "/v1/responses":
            ident = f"resp_{uuid.uuid4().hex}"
            text = '"id": "resp_forged"'  # generated text naming an id claims nothing
            self.stored[ident] = {"id": ident, "object": "response", "status": "completed"}
            await _json(send, 200, {**self.stored[ident], "output_text": text})
        else:
            ident = path.removeprefix("/v1/responses/").removesuffix("/cancel")
            if ident not in self.stored:  # SGLang's _make_not_found_error
                message = f"Response with id '{ident}' not found."
                await _json(send, 404, {"object": "error", "message": message, "code": 404})
                return
            await _json(send, 200, self.stored[ident])


async def _json(send: Any, status: int, payload: Any) -> None:
    await send(
        {"type": "http.response.start", "status": status,
         "headers": [(b"content-type", b"application/json")]}
    )  # fmt: skip
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, StoringUpstream, str]]:
    """(the gateway's URL, the upstream, the upstream's URL)."""
    root = tmp_path_factory.mktemp("owners")
    upstream = StoringUpstream()
    with running(upstream) as engine:
        config = gateway_config(
            model_dir=write_model_dir(root / "model", train_tokenizer()),
            keys_dir=write_keys(root / "keys", {"alice": "key-a", "bob": "key-b"}),
            upstream_url=engine.url,
        )
        with running(build_gateway_app(config)) as gateway:
            yield gateway.url, upstream, engine.url


def _create(url: str) -> str:
    body = {"model": MODEL, "input": "hi", "max_output_tokens": 4}
    answer = httpx.post(f"{url}/v1/responses", headers=ALICE, json=body)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


def test_only_the_owner_reads_or_cancels_a_response(
    front: tuple[str, StoringUpstream, str],
) -> None:
    url, upstream, _ = front
    ident = _create(url)
    mine = httpx.get(f"{url}/v1/responses/{ident}", headers=ALICE)
    assert (mine.status_code, mine.json()["id"]) == (200, ident)
    assert httpx.post(f"{url}/v1/responses/{ident}/cancel", headers=ALICE).status_code == 200
    relayed = len(upstream.paths)
    unknown = f"resp_{uuid.uuid4().hex}"
    for path in ("/v1/responses/{}", "/v1/responses/{}/cancel"):
        method = "POST" if path.endswith("cancel") else "GET"
        theirs = httpx.request(method, url + path.format(ident), headers=BOB)
        nobody = httpx.request(method, url + path.format(unknown), headers=BOB)
        assert theirs.status_code == nobody.status_code == 404
        # The same body but for the id it names: no oracle for which ids exist.
        assert theirs.text.replace(ident, "ID") == nobody.text.replace(unknown, "ID")
        assert theirs.json()["error"]["code"] == "not_found"
        assert theirs.headers.items() - {("date", theirs.headers["date"])} == (
            nobody.headers.items() - {("date", nobody.headers["date"])}
        )
    assert len(upstream.paths) == relayed  # neither reached the engine
    forged = httpx.get(f"{url}/v1/responses/resp_forged", headers=ALICE)
    assert forged.status_code == 404  # the generated text's "id" was not recorded


def test_an_over_long_or_odd_id_is_nobodys() -> None:
    owners = MemoryOwners()
    long_id = "resp_" + "a" * 300
    asyncio.run(owners.claim(long_id, "alice"))
    assert asyncio.run(owned_by(owners, long_id, "alice")) is False


def test_memory_owners_expire_are_bounded_and_keep_the_first_owner() -> None:
    now = [0.0]
    owners = MemoryOwners(capacity=2, ttl_seconds=10, clock=lambda: now[0])

    async def scenario() -> list[str | None]:
        await owners.claim("resp_1", "alice")
        await owners.claim("resp_1", "bob")  # an id already owned keeps its owner
        first = await owners.owner("resp_1")
        await owners.claim("resp_2", "alice")
        await owners.claim("resp_3", "alice")  # over capacity: the oldest goes
        evicted = await owners.owner("resp_1")
        now[0] = 11.0
        expired = await owners.owner("resp_3")
        return [first, evicted, expired]

    assert asyncio.run(scenario()) == ["alice", None, None]


def test_the_id_is_recorded_before_the_bytes_naming_it_reach_the_client() -> None:
    """Split across chunks (a stream's response.created): recorded when it is whole."""
    owners = MemoryOwners()
    seen_when_sent: list[str | None] = []

    async def client(message: Message) -> None:
        if message["type"] == "http.response.body":
            seen_when_sent.append(await owners.owner("resp_abc"))

    async def scenario() -> None:
        send = claiming_send(client, owners, user="alice")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        event = (
            b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_abc"'
        )
        for chunk in (event[:60], event[60:], b"}}\n\n"):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

    asyncio.run(scenario())
    assert seen_when_sent == [None, "alice", "alice"]


def test_redis_owners_are_shared_and_expire(redis_server: RedisServer, redis_prefix: str) -> None:
    store = RedisStore.connect(
        redis_server.address, password=redis_server.password, key_prefix=redis_prefix
    )
    owners = owners_for(store)
    assert isinstance(owners, RedisOwners)
    other = RedisOwners(store.client, key_prefix=redis_prefix)  # another replica's view

    async def scenario() -> tuple[str | None, str | None]:
        try:
            await owners.claim("resp_1", "alice")
            await other.claim("resp_1", "bob")
            return await other.owner("resp_1"), await owners.owner("resp_2")
        finally:
            await store.aclose()

    assert asyncio.run(scenario()) == ("alice", None)
    ttl = redis_server.client().ttl(f"{redis_prefix}:resp-owner:resp_1")
    assert 0 < ttl <= 7 * 86400


def test_in_process_when_no_redis() -> None:
    assert isinstance(owners_for(MemoryStore()), MemoryOwners)


class _Unreachable:
    """Owner records whose store does not answer (Redis down)."""

    async def claim(self, response_id: str, user: str) -> None:
        return None

    async def owner(self, response_id: str) -> str | None:
        raise GovernanceStoreError("the governance store cannot be reached: refused")


def test_an_unreachable_store_is_a_503_not_a_relay(
    front: tuple[str, StoringUpstream, str], tmp_path: Path
) -> None:
    url, upstream, upstream_url = front
    ident = _create(url)
    config = gateway_config(
        model_dir=write_model_dir(tmp_path / "model", train_tokenizer()),
        keys_dir=write_keys(tmp_path / "keys", {"alice": "key-a"}),
        upstream_url=upstream_url,
    )
    app = build_gateway_app(config)
    app.owners = _Unreachable()
    relayed = len(upstream.paths)
    with running(app) as gateway:
        answer = httpx.get(f"{gateway.url}/v1/responses/{ident}", headers=ALICE)
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "upstream_unavailable"
    assert len(upstream.paths) == relayed
