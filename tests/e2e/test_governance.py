"""Fair queuing end to end: a heavy user at 16 concurrent cannot starve a light user.

The real operator serves two simulated replicas behind the real front door (operator ->
gateway pod -> smg -> simulated rank 0s), with the gateway's default 8 slots. The heavy
user (alice) keeps 16 requests in flight — 8 running, 8 waiting — while a light user
sends one request at a time. With first-come-first-served the light user would wait
behind the heavy user's whole backlog (about one full service time); with fair queuing
over users the light user gets the next slot that frees, so its queue wait stays within
one slot turnover (one request's service time). Waits are the gateway's own
``sparkllm_gateway_user_queue_wait_seconds``; the ledger is printed with ``sparkllm usage``.
"""

from __future__ import annotations

import base64
import json
import secrets
import statistics
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkllm.gateway.governance.usage import table
from sparkllm.usage_command import fetch_usage
from sparkllm_dev.devcluster import wait_until
from sparkllm_dev.testing import OperatorProcess
from tests.e2e.serving import USERS_SECRET, serve
from tests.unit.gateway_fixtures import MODEL

NAME = "fair"
GROUPS = [["spark-a0", "spark-a1", "spark-a2"], ["spark-b0", "spark-b1", "spark-b2"]]
TPOT_MS = 10
HEAVY_TOKENS = 100  # ~1 s of service at 10 ms per token (ignore_eos: exactly this long)
HEAVY_CONCURRENCY = 16
SLOTS = 8  # the gateway's default admission.maxConcurrentRequests
LIGHT_REQUESTS = 10


def _chat(max_tokens: int, **extra: object) -> dict[str, object]:
    messages = [{"role": "user", "content": "hello"}]
    return {"model": MODEL, "messages": messages, "max_tokens": max_tokens, **extra}


def _waits(exposition: str) -> dict[str, dict[str, float]]:
    """Per user: count, sum and the smallest bucket bound holding every wait."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(exposition):
        if family.name != "sparkllm_gateway_user_queue_wait_seconds":
            continue
        for sample in family.samples:
            user = found.setdefault(sample.labels["user"], {"max_at_most": float("inf")})
            if sample.name.endswith("_count"):
                user["count"] = sample.value
            elif sample.name.endswith("_sum"):
                user["sum"] = sample.value
        for sample in family.samples:  # buckets ascend: the first full one bounds the max
            if sample.name.endswith("_bucket"):
                user = found[sample.labels["user"]]
                bound = float(sample.labels["le"])
                if sample.value >= user["count"] and bound < user["max_at_most"]:
                    user["max_at_most"] = bound
    return found


def _light(client: httpx.Client, url: str, key: str) -> float:
    """One light request's end-to-end seconds."""
    started = time.perf_counter()
    response = client.post(url, json=_chat(8), headers={"authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    return time.perf_counter() - started


def _load(
    url: str, *, heavy_key: str, light_key: str
) -> tuple[list[float], list[int], list[float]]:
    """16 heavy requests in flight while the light user sends one at a time.

    Returns the heavy requests' latencies, any heavy failure statuses, and the light
    requests' latencies.
    """
    stop = threading.Event()
    heavy_seconds: list[float] = []
    heavy_failures: list[int] = []

    def heavy_worker(delay: float) -> None:
        headers = {"authorization": f"Bearer {heavy_key}"}
        body = _chat(HEAVY_TOKENS, ignore_eos=True)
        time.sleep(delay)
        with httpx.Client(timeout=120) as client:
            while not stop.is_set():
                started = time.perf_counter()
                status = client.post(url, json=body, headers=headers).status_code
                if status == 200:
                    heavy_seconds.append(time.perf_counter() - started)
                else:
                    heavy_failures.append(status)

    # Staggered, as independent clients would be: the 8 slots then turn over one after
    # another, every service time / 8. Started together, they would turn over in lockstep
    # and the light user would wait for the next whole batch (within one turnover still).
    stagger = HEAVY_TOKENS * TPOT_MS / 1000 / SLOTS
    workers = [
        threading.Thread(target=heavy_worker, args=(n * stagger,)) for n in range(HEAVY_CONCURRENCY)
    ]
    for worker in workers:
        worker.start()
    light: list[float] = []
    try:
        time.sleep(4)  # the heavy backlog builds: 8 running, 8 waiting
        with httpx.Client(timeout=120) as client:
            for _ in range(LIGHT_REQUESTS):
                light.append(_light(client, url, light_key))
                time.sleep(0.2)
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=180)
    return heavy_seconds, heavy_failures, light


@pytest.mark.cluster
@pytest.mark.sim_args(f"--sim-tpot-ms={TPOT_MS}")
def test_a_light_user_waits_at_most_one_slot_turnover_behind_a_heavy_one(
    namespace: str, shared_operator: OperatorProcess, model_dir: Path, tmp_path: Path
) -> None:
    cluster = shared_operator.cluster
    with serve(
        cluster, namespace, name=NAME, model_dir=model_dir, groups=GROUPS, log_dir=tmp_path
    ) as serving:
        base = serving.gateway.admission_url
        url = f"{base}/v1/chat/completions"
        light = secrets.token_urlsafe(24)
        patch = {"data": {"light": base64.b64encode(light.encode()).decode()}}
        cluster.kubectl("patch", "secret", USERS_SECRET, "-n", namespace, "-p", json.dumps(patch))
        auth = {"authorization": f"Bearer {light}"}
        wait_until(
            lambda: httpx.post(url, json=_chat(1), headers=auth, timeout=30).status_code == 200,
            timeout=60,
            what="the light user's key to be accepted",
        )
        with httpx.Client(timeout=120) as client:  # the light request's own service time
            alone = statistics.median(_light(client, url, light) for _ in range(5))
        heavy_seconds, heavy_failures, light_seconds = _load(
            url, heavy_key=serving.alice, light_key=light
        )
        metrics = httpx.get(serving.gateway.metrics_url, timeout=30).text  # its own port
        report = "\n".join(
            table(fetch_usage(base, key=key, day_from=None, day_to=None))
            for key in (serving.alice, light)
        )
    waits = _waits(metrics)
    heavy, light_waits = waits["alice"], waits["light"]
    heavy_mean = heavy["sum"] / heavy["count"]
    light_mean = statistics.mean(light_seconds) - alone
    # One slot turnover: the time a slot is held by one heavy request (its service time).
    turnover = statistics.median(heavy_seconds) - heavy_mean
    # The light user's waits, client side: each request's latency beyond its own alone.
    light_max = max(light_seconds) - alone
    print(
        f"heavy: {len(heavy_seconds)} requests, mean queue wait {heavy_mean * 1000:.0f} ms; "
        f"light: {LIGHT_REQUESTS} requests, wait mean {light_mean * 1000:.0f} ms, max "
        f"{light_max * 1000:.0f} ms (latency - {alone * 1000:.0f} ms alone; the gateway's "
        f"histogram: all <= {light_waits['max_at_most'] * 1000:.0f} ms); slot turnover "
        f"~{turnover * 1000:.0f} ms\n{report}"
    )
    assert heavy_failures == []  # the heavy user's 16 fit: 8 slots + 8 in the queue
    assert heavy_mean > 0.4 * turnover  # the heavy user did queue
    assert light_max <= turnover  # within one slot turnover
    assert light_mean < heavy_mean / 3
    assert "alice" in report
    assert "light" in report
