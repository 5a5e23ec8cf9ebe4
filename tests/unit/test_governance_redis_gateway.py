"""The real gateway on a shared Redis: the ledger survives a restart, replicas share budgets.

Issue 17 item 5, through the gateway's own sockets (uvicorn, the admission layer, the
governor, the Redis store; a recording upstream that answers with ``usage``):

* usage recorded by one gateway process is what the next one reports after a restart,
  and ``sparkllm usage`` prints it as a table and as JSON, read through the gateway or
  straight from Redis (``--redis``) when no gateway runs;
* two gateways on one Redis spend one user's budget once, not once each;
* a Redis that cannot answer is a clear 503 with Retry-After, never an unchecked pass.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkllm.cli import main
from sparkllm.gateway.app import GatewayApp, build_gateway_app
from sparkllm.gateway.governance.replies import CODE_STORE_UNAVAILABLE
from sparkllm.gateway.governance.store import utc_day
from sparkllm.gateway_settings import governance_key_prefix
from sparkllm_dev.devcluster.gateway_io import free_port
from sparkllm_dev.redis_fixture import RedisServer
from tests.unit.gateway_fixtures import (
    MODEL,
    gateway_config,
    running,
    train_tokenizer,
    wait_until,
    write_keys,
    write_model_dir,
)
from tests.unit.test_governance_gateway import CHAT, USED_OUTPUT, UsageUpstream

KEYS = {"alice": "key-alice", "bob": "key-bob", "ops": "key-ops"}
PROMPT_TOKENS = 11  # what UsageUpstream says each prompt was


def bearer(user: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[user]}"}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], **fields}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("model"), train_tokenizer())


@pytest.fixture
def upstream_url() -> Any:
    with running(UsageUpstream(), lifespan="off") as server:
        yield server.url


@pytest.fixture
def cluster() -> tuple[str, str]:
    """A namespace/name of this test's own: its keys in the shared Redis are apart."""
    return f"t-{uuid.uuid4().hex[:8]}", "llm"


def gateway(
    *, tmp_path: Path, model_dir: Path, upstream_url: str, policy: str, address: str,
    password: str, cluster: tuple[str, str],
) -> GatewayApp:  # fmt: skip
    tmp_path.mkdir(parents=True, exist_ok=True)
    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text(policy)
    config = gateway_config(
        model_dir=model_dir,
        keys_dir=write_keys(tmp_path / "keys", KEYS),
        upstream_url=upstream_url,
        governance_policy_path=policy_path,
        governance_redis_address=address,
        governance_redis_password=password,
        governance_key_prefix=governance_key_prefix(*cluster),
    )
    return build_gateway_app(config)


def test_usage_survives_a_gateway_restart_and_the_report_reads_it(  # noqa: PLR0917
    redis_server: RedisServer,
    model_dir: Path,
    tmp_path: Path,
    upstream_url: str,
    cluster: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def start() -> GatewayApp:
        return gateway(
            tmp_path=tmp_path, model_dir=model_dir, upstream_url=upstream_url,
            policy="admins: [ops]\ndefaults: {tokensPerHour: 10000}\n",
            address=redis_server.address, password=redis_server.password, cluster=cluster,
        )  # fmt: skip

    with running(start()) as first, httpx.Client(base_url=first.url, timeout=30) as client:
        for user in ("alice", "alice", "bob"):
            assert client.post(CHAT, json=chat(max_tokens=20), headers=bearer(user)).is_success
    # The first gateway is gone (its process state with it); a new one reads the ledger.
    with running(start()) as second, httpx.Client(base_url=second.url, timeout=30) as client:
        report = client.get("/v1/usage", headers=bearer("ops")).json()
        monkeypatch.setenv("OPS_KEY", KEYS["ops"])
        through_gateway = ["usage", "--base-url", second.url, "--api-key-env", "OPS_KEY"]
        assert main(through_gateway) == 0
        gateway_table = capsys.readouterr().out
    # No gateway at all: straight from Redis.
    monkeypatch.setenv("REDIS_PASSWORD", redis_server.password)
    from_redis = ["usage", "--redis", redis_server.address, "--redis-password-env",
                  "REDIS_PASSWORD", "--cluster", "/".join(cluster)]  # fmt: skip
    assert main(from_redis) == 0
    redis_table = capsys.readouterr().out
    assert main([*from_redis, "--json"]) == 0
    redis_json = json.loads(capsys.readouterr().out)

    rows = {row["user"]: row for row in report["data"]}
    assert rows["alice"]["requests"] == 2
    assert rows["alice"]["outcomes"] == {"ok": 2}
    assert rows["alice"]["input_tokens"] == 2 * PROMPT_TOKENS
    assert rows["alice"]["output_tokens"] == 2 * USED_OUTPUT
    assert rows["bob"]["requests"] == 1
    assert report["store"]["shared"] is True
    assert redis_json["data"] == report["data"]
    assert redis_table == gateway_table
    assert "store: state in a shared store" in redis_table
    day = report["data"][0]["day"]
    assert [line.split() for line in redis_table.splitlines()[1:3]] == [
        [day, "alice", "2", "2", str(2 * PROMPT_TOKENS), str(2 * USED_OUTPUT)],
        [day, "bob", "1", "1", str(PROMPT_TOKENS), str(USED_OUTPUT)],
    ]
    with capsys.disabled():  # the report, as an operator sees it
        print("\n" + redis_table + "\n" + json.dumps(redis_json, indent=2))


@dataclass(frozen=True)
class Spent:
    """What two gateways answered one user until the budget ran out."""

    answers: list[tuple[int, int]]  # (which gateway, status) in turn
    other: httpx.Response  # the other gateway, asked once more after the 429
    usage: dict[str, Any]  # alice's ledger row


def spend_on_two_gateways(start: Callable[[int], GatewayApp]) -> Spent:
    """Alternate gateways until one refuses; each answer settled before the next request.

    A gateway settles a request just after its answer went out, so without the wait the
    next request would meet the previous one's reservation rather than its use.
    """
    answers: list[tuple[int, int]] = []
    with running(start(0)) as one, running(start(1)) as two:
        clients = [httpx.Client(base_url=s.url, timeout=30) for s in (one, two)]

        def settled() -> dict[str, Any]:
            rows = clients[0].get("/v1/usage", headers=bearer("alice")).json()["data"]
            served = sum(1 for _, status in answers if status == 200)
            return rows[0] if rows and rows[0]["requests"] == served else {}

        try:
            for turn in range(30):
                body = chat(max_tokens=50)
                answer = clients[turn % 2].post(CHAT, json=body, headers=bearer("alice"))
                answers.append((turn % 2, answer.status_code))
                if answer.status_code == 429:
                    assert "tokens_per_day" in answer.json()["error"]["message"]
                    break
                wait_until(lambda: bool(settled()), what="the answer settled in Redis")
            again = chat(max_tokens=50)  # the same request, on the other gateway
            other = clients[1 - answers[-1][0]].post(CHAT, json=again, headers=bearer("alice"))
            usage = settled()
        finally:
            for client in clients:
                client.close()
    return Spent(answers, other, usage)


def test_two_gateways_spend_one_budget_once(
    redis_server: RedisServer, model_dir: Path, tmp_path: Path, upstream_url: str
) -> None:
    budget = 200

    def start(index: int) -> GatewayApp:
        return gateway(
            tmp_path=tmp_path / prefix / str(index), model_dir=model_dir,
            upstream_url=upstream_url,
            policy=f"minOutputTokens: 8\ndefaults: {{tokensPerDay: {budget}}}\n",
            address=redis_server.address, password=redis_server.password,
            cluster=(prefix, "llm"),
        )  # fmt: skip

    for _attempt in range(2):  # again on fresh keys if the UTC day turned meanwhile
        prefix, day = f"t-{uuid.uuid4().hex[:8]}", utc_day(time.time())
        spent = spend_on_two_gateways(start)
        if utc_day(time.time()) == day:
            break
    served = [gateway for gateway, status in spent.answers if status == 200]
    assert spent.answers[-1][1] == 429
    assert spent.other.status_code == 429  # the other gateway refuses too: one budget
    assert set(served) == {0, 1}  # both gateways served some of it
    assert spent.usage["requests"] == len(served)
    used = spent.usage["input_tokens"] + spent.usage["output_tokens"]
    # Spent once and nearly whole: a budget per gateway would have let twice as much by.
    assert budget - 2 * (PROMPT_TOKENS + USED_OUTPUT) < used <= budget


def test_a_redis_that_cannot_answer_is_a_503_with_retry_after(
    model_dir: Path, tmp_path: Path, upstream_url: str, cluster: tuple[str, str]
) -> None:
    app = gateway(
        tmp_path=tmp_path, model_dir=model_dir, upstream_url=upstream_url, policy="{}\n",
        address=f"127.0.0.1:{free_port('127.0.0.1')}", password="x", cluster=cluster,
    )  # fmt: skip
    with running(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        refused = client.post(CHAT, json=chat(), headers=bearer("alice"))
        ledger = client.get("/v1/usage", headers=bearer("alice"))
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "5"
    error = refused.json()["error"]
    assert error["code"] == CODE_STORE_UNAVAILABLE
    assert "cannot check usage limits" in error["message"]
    assert "governance store (Redis)" in error["message"]
    assert ledger.status_code == 503
    assert ledger.json()["error"]["code"] == CODE_STORE_UNAVAILABLE
