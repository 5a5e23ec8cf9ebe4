"""No replica serves: the router's 404 model_not_found becomes a 503 that says why (issue 16).

The pure reply is pinned by table (scaled to 0, restarting, budget spent, unknown); then a
real gateway in front of a stand-in router that answers exactly as smg 1.13.0 does with no
worker shows the client's side: 503, Retry-After, the message, never the router's 404.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkllm.gateway.app import build_gateway_app
from sparkllm.gateway.serving import (
    CODE_NO_REPLICA_READY,
    CODE_RESTART_BUDGET_EXHAUSTED,
    CODE_SCALED_TO_ZERO,
    ServingState,
    is_no_worker,
    no_replica_reply,
)
from tests.unit.gateway_fixtures import (
    MODEL,
    gateway_config,
    read_request_body,
    running,
    train_tokenizer,
    wait_until,
    write_keys,
    write_model_dir,
)

ALICE = {"authorization": "Bearer key-alice"}
# smg 1.13.0 with no worker for the model (recorded from `smg launch` with none).
SMG_NO_WORKER_BODY = json.dumps(
    {
        "error": {
            "type": "invalid_request_error",
            "code": "model_not_found",
            "message": f"No worker available for model '{MODEL}'",
            "param": None,
        }
    }
).encode()
SMG_ALL_UNAVAILABLE_BODY = json.dumps(
    {
        "error": {
            "type": "server_error",
            "code": "no_available_workers",
            "message": "All workers are unavailable (circuit breaker open or unhealthy)",
            "param": None,
        }
    }
).encode()
SMG_NO_WORKER_HEADERS = [
    (b"content-type", b"application/json"),
    (b"x-smg-error-code", b"model_not_found"),
]


def _cluster(replicas: int, *statuses: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "llm", "namespace": "serving"},
        "spec": {"replicas": replicas},
        "status": {"replicaStatuses": list(statuses)},
    }


@pytest.mark.parametrize(
    ("cluster", "code", "retry_after", "says"),
    [
        (
            _cluster(0),
            CODE_SCALED_TO_ZERO,
            60,
            ["scaled to 0 replicas", "serving/llm", "spec.replicas is 0"],
        ),
        (  # the spec is the user's word: 0 wins over a status not yet updated
            _cluster(0, {"index": 0, "phase": "Ready"}),
            CODE_SCALED_TO_ZERO,
            60,
            ["scaled to 0"],
        ),
        (
            _cluster(1, {"index": 0, "phase": "Restarting", "message": "rank 2 exited"}),
            CODE_NO_REPLICA_READY,
            30,
            ["replica 0 is Restarting (rank 2 exited)", "Retry after 30 s"],
        ),
        (
            _cluster(2, {"index": 0, "phase": "Starting"}, {"index": 1, "phase": "Restarting"}),
            CODE_NO_REPLICA_READY,
            30,
            ["replica 0 is Starting", "replica 1 is Restarting"],
        ),
        (
            _cluster(1, {"index": 0, "phase": "Degraded", "budgetExhausted": True}),
            CODE_RESTART_BUDGET_EXHAUSTED,
            300,
            ["restart budget", "maxRestartsPerHour", "sparkllm.io/restart=now", "serving/llm"],
        ),
        (  # one replica held, another restarting: it may come back soon
            _cluster(
                2,
                {"index": 0, "phase": "Degraded", "budgetExhausted": True},
                {"index": 1, "phase": "Restarting"},
            ),
            CODE_NO_REPLICA_READY,
            30,
            ["replica 0 is stopped: it spent its restart budget", "replica 1 is Restarting"],
        ),
        (None, CODE_NO_REPLICA_READY, 30, ["no replica is registered with the router"]),
        (  # the status still says Ready: the router knows better
            _cluster(1, {"index": 0, "phase": "Ready"}),
            CODE_NO_REPLICA_READY,
            30,
            ["replica 0 is Ready by the last status, but the router holds it out"],
        ),
    ],
)
def test_the_reply_says_why(
    cluster: Mapping[str, Any] | None, code: str, retry_after: int, says: list[str]
) -> None:
    reply = no_replica_reply(cluster, model=MODEL, name="llm")
    assert (reply.status, reply.code, reply.type) == (503, code, "server_error")
    assert reply.retry_after_seconds == retry_after
    assert (b"retry-after", str(retry_after).encode()) in reply.headers()
    assert MODEL in reply.message
    for words in says:
        assert words in reply.message


@pytest.mark.parametrize(
    ("status", "headers", "body", "expected"),
    [
        (404, SMG_NO_WORKER_HEADERS, SMG_NO_WORKER_BODY, True),
        (404, [], SMG_NO_WORKER_BODY, True),  # the body alone says it
        (404, SMG_NO_WORKER_HEADERS[:1], b'{"error": {"code": "not_found"}}', False),
        (404, [], b"not json", False),
        (404, [], b"[1]", False),
        (503, SMG_NO_WORKER_HEADERS, SMG_NO_WORKER_BODY, False),
        # smg's other way: registered replicas, all failing health checks (recorded)
        (503, [(b"x-smg-error-code", b"no_available_workers")], b"", True),
        (503, [], SMG_ALL_UNAVAILABLE_BODY, True),
        (503, [], b'{"error": {"code": "upstream_unavailable"}}', False),
        (404, [], SMG_ALL_UNAVAILABLE_BODY, False),
    ],
)
def test_only_the_routers_no_worker_answer_counts(
    status: int, headers: list[tuple[bytes, bytes]], body: bytes, expected: bool
) -> None:
    assert is_no_worker(status, headers, body) is expected


class _NoWorkerRouter:
    """Answers generations as smg does with no worker; ``/v1/completions`` with prompt
    "unhealthy" as smg does when its replicas all fail health checks, with "other" a 404
    of another kind, which must pass unchanged."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_request_body(receive)
        prompt = json.loads(body or b"{}").get("prompt")
        if prompt == "other":
            status, headers, answer = 404, [(b"content-type", b"application/json")], b"{}"
        elif prompt == "unhealthy":
            status, headers, answer = 503, [(b"retry-after", b"1")], SMG_ALL_UNAVAILABLE_BODY
        else:
            status, headers, answer = 404, SMG_NO_WORKER_HEADERS, SMG_NO_WORKER_BODY
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer, "more_body": False})


class _ReadCounter(ServingState):
    """The real ServingState with the API read replaced by a fixed object, counted."""

    def __init__(self, cluster: Mapping[str, Any], *, clock: list[float]) -> None:
        super().__init__(model=MODEL, namespace="serving", name="llm", clock=lambda: clock[0])
        self.cluster = cluster
        self.reads = 0

    async def _read(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        assert (namespace, name) == ("serving", "llm")
        self.reads += 1
        return self.cluster


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("model"), train_tokenizer())


@pytest.fixture
def router() -> Iterator[str]:
    with running(_NoWorkerRouter(), lifespan="off") as server:
        yield server.url


def _chat() -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def test_the_client_gets_503_with_retry_after_never_the_routers_404(
    model_dir: Path, tmp_path: Path, router: str
) -> None:
    keys = write_keys(tmp_path / "keys", {"alice": "key-alice"})
    app = build_gateway_app(gateway_config(model_dir=model_dir, keys_dir=keys, upstream_url=router))
    clock = [100.0]
    app.serving = serving = _ReadCounter(_cluster(0), clock=clock)
    with running(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        answer = client.post("/v1/chat/completions", json=_chat(), headers=ALICE)
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "60"
        error = answer.json()["error"]
        assert error["code"] == CODE_SCALED_TO_ZERO
        assert "scaled to 0 replicas" in error["message"]
        assert "No worker available" not in answer.text
        # a burst is answered from one read; a later request reads the object again
        completion = {"model": MODEL, "prompt": "hi", "max_tokens": 4}
        assert client.post("/v1/completions", json=completion, headers=ALICE).status_code == 503
        assert serving.reads == 1
        clock[0] += 5
        serving.cluster = _cluster(1, {"index": 0, "phase": "Restarting"})
        answer = client.post("/v1/chat/completions", json=_chat(), headers=ALICE)
        assert (answer.status_code, answer.json()["error"]["code"]) == (503, CODE_NO_REPLICA_READY)
        assert "replica 0 is Restarting" in answer.json()["error"]["message"]
        assert serving.reads == 2
        # smg's 503 for registered but unhealthy replicas: the same 503, its Retry-After ours
        unhealthy = {"model": MODEL, "prompt": "unhealthy", "max_tokens": 4}
        answer = client.post("/v1/completions", json=unhealthy, headers=ALICE)
        assert (answer.status_code, answer.headers["retry-after"]) == (503, "30")
        assert answer.json()["error"]["code"] == CODE_NO_REPLICA_READY
        # any other 404 of the router's passes unchanged
        other = {"model": MODEL, "prompt": "other", "max_tokens": 4}
        passed = client.post("/v1/completions", json=other, headers=ALICE)
        assert (passed.status_code, passed.json()) == (404, {})
    # Counted as no_replica (why: no_replica_replies), never upstream_error: an operator is
    # not paged for a model scaled to zero; the router's other 404 is the client's.
    series = 'sparkllm_gateway_requests_total{outcome="%s",route="%s"} %s'
    wanted = [
        series % ("no_replica", "/v1/chat/completions", "2.0"),
        series % ("no_replica", "/v1/completions", "2.0"),
        series % ("bad_request", "/v1/completions", "1.0"),
        series % ("upstream_error", "/v1/completions", "0.0"),
    ]
    wait_until(
        lambda: all(line in app.metrics.exposition()[0].decode() for line in wanted),
        what="the outcomes counted",
    )


def test_without_a_cluster_to_read_the_503_still_says_no_replica_is_ready(
    model_dir: Path, tmp_path: Path, router: str
) -> None:
    keys = write_keys(tmp_path / "keys", {"alice": "key-alice"})
    app = build_gateway_app(gateway_config(model_dir=model_dir, keys_dir=keys, upstream_url=router))
    with running(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        answer = client.post("/v1/chat/completions", json=_chat(), headers=ALICE)
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "30"
    assert answer.json()["error"]["code"] == CODE_NO_REPLICA_READY


def test_an_unreadable_cluster_falls_back_to_the_generic_reply(
    model_dir: Path, tmp_path: Path, router: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Named but not readable (no credentials here): a warning, and the generic 503."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    keys = write_keys(tmp_path / "keys", {"alice": "key-alice"})
    config = gateway_config(
        model_dir=model_dir,
        keys_dir=keys,
        upstream_url=router,
        cluster_name="llm",
        cluster_namespace="serving",
    )
    app = build_gateway_app(config)
    with running(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        answer = client.post("/v1/chat/completions", json=_chat(), headers=ALICE)
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, CODE_NO_REPLICA_READY)
