"""Issue 16 items 4 and 5 on the dev cluster: a hung pipeline is found and restarted whole,
a long prefill is not mistaken for one, and a planned restart lets its requests finish.

The engines are the SGLang simulator, whose ``/health`` is SGLang 0.5.23's (no output for
20 s: 503); the operator and the engine harness (rank 0's readiness prober) run for real.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkllm.keys import SECRET_USE_LABEL
from sparkllm.reconcile.engines import RUNNING_METRIC
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.testing import OperatorProcess, quick_resync
from tests.integration.test_faults import GROUP_A, gang_restart_events, ready_at, replica_status
from tests.integration.test_reconcile import NAME, apply, icl, pods, sample, user_keys

pytestmark = pytest.mark.cluster
KEY_SECRET = "hang-drain-engine-key"
DRAIN_TOKENS = 60  # at 0.5 s each: a 30 s answer, running when the drain begins
DOCUMENTED_LATENCY = ("--sim-ttft-base-ms", "13990", "--sim-ttft-per-1k-tokens-ms", "3708.5")


def start(cluster: DevCluster, namespace: str) -> tuple[str, str]:
    """The sample on group a with a known engine key: (rank 0's endpoint, the key)."""
    user_keys(cluster, namespace)
    key = secrets.token_urlsafe(24)
    cluster.kubectl(
        "create", "secret", "generic", KEY_SECRET, "-n", namespace, f"--from-literal=token={key}"
    )
    marked = f"{SECRET_USE_LABEL}=engine-api-key"
    cluster.kubectl("label", "secret", KEY_SECRET, "-n", namespace, marked)
    doc = sample(GROUP_A)
    doc["spec"]["engine"]["apiKeySecretRef"] = {"name": KEY_SECRET, "key": "token"}
    apply(cluster, namespace, doc)
    obj = wait_until(ready_at(cluster, namespace, 1), timeout=120, what="Ready at generation 1")
    return str(replica_status(obj)["endpoint"]), key


def rank0(cluster: DevCluster, namespace: str) -> dict[str, Any]:
    (pod,) = [
        p for p in pods(cluster, namespace) if p["metadata"]["labels"]["sparkllm.io/rank"] == "0"
    ]
    return pod


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def running(endpoint: str) -> int:
    """The requests the engine runs, from its own ``sglang:num_running_reqs``."""
    text = httpx.get(f"{endpoint}/metrics", timeout=5, trust_env=False).text
    return int(
        sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == RUNNING_METRIC
            for sample in family.samples
        )
    )


def in_background(call: Callable[[], httpx.Response]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``call`` in a thread; the dict gets its response (or error) and end time."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["response"] = call()
        except httpx.HTTPError as exc:
            box["error"] = exc
        box["ended"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


# 2 s /health windows instead of SGLang's 20 s: rank 0 turns NotReady after 6 failed probes
# (about a minute, where 6 x 20 s took two), then the operator's 60 s as in production.
@pytest.mark.sim_args("--sim-hang-after", "1", "--sim-health-check-timeout", "2")
def test_hung_pipeline_is_restarted_whole_as_pipeline_hung(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess
) -> None:
    endpoint, key = start(devcluster, namespace)
    first = rank0(devcluster, namespace)["metadata"]["uid"]
    reply = httpx.post(
        f"{endpoint}/v1/chat/completions",
        json={"model": NAME, "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
        trust_env=False,
    )
    assert reply.status_code == 200, reply.text[:200]
    hung_at = time.monotonic()  # the engine stalls once that request is done

    def suspected() -> dict[str, Any] | None:
        obj = icl(devcluster, namespace)
        replica = replica_status(obj)
        return obj if "rank 0 not Ready since" in str(replica.get("message")) else None

    wait_until(suspected, timeout=240, what="replica Degraded: rank 0 NotReady while alive")
    pod = rank0(devcluster, namespace)
    statuses = pod["status"]["containerStatuses"]
    assert pod["metadata"]["uid"] == first
    assert not pod_ready(pod)
    assert all("running" in s["state"] and s["restartCount"] == 0 for s in statuses)
    unready_after = time.monotonic() - hung_at
    obj = wait_until(ready_at(devcluster, namespace, 2), timeout=300, what="Ready at generation 2")
    recovered_after = time.monotonic() - hung_at
    replica = replica_status(obj)
    assert replica["lastRestart"]["reason"].startswith("pipeline hung: rank 0 alive")
    assert replica["restarts"] == 1
    assert len(replica["restartTimes"]) == 1  # counted in the hourly budget
    assert any("pipeline hung" in m for m in gang_restart_events(devcluster, namespace))
    assert first not in {p["metadata"]["uid"] for p in pods(devcluster, namespace)}
    print(
        f"\nhang -> rank 0 NotReady+Degraded seen after {unready_after:.0f} s; "
        f"hang -> Ready again (generation 2) after {recovered_after:.0f} s"
    )


@pytest.mark.sim_args(*DOCUMENTED_LATENCY, "--sim-tpot-ms", "78")
def test_an_8k_prefill_keeps_rank0_ready_and_routed(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess
) -> None:
    endpoint, key = start(devcluster, namespace)
    first = rank0(devcluster, namespace)["metadata"]["uid"]
    began = time.monotonic()
    thread, box = in_background(
        lambda: httpx.post(
            f"{endpoint}/v1/completions",
            json={"model": NAME, "prompt": [7] * 8192, "max_tokens": 8},
            headers={"Authorization": f"Bearer {key}"},
            timeout=180,
            trust_env=False,
        )
    )
    # SGLang's own verdict in the middle of the prefill: nothing came out for 20 s.
    time.sleep(1)
    health, verdict = in_background(
        lambda: httpx.get(f"{endpoint}/health", timeout=30, trust_env=False)
    )
    samples = []
    while thread.is_alive() and time.monotonic() - began < 180:
        pod = rank0(devcluster, namespace)
        labels = pod["metadata"]["labels"]
        phase = replica_status(icl(devcluster, namespace)).get("phase")
        samples.append(
            (pod_ready(pod), labels.get("sparkllm.io/serving"), phase, pod["metadata"]["uid"])
        )
        time.sleep(1)
    thread.join(timeout=5)
    health.join(timeout=5)
    mid = verdict["response"]
    took = box["ended"] - began
    assert mid.status_code == 503, "the simulator's /health must fail a 20 s window without output"
    response = box.get("response")
    assert response is not None, box
    assert response.status_code == 200, response.text[:300]
    assert response.json()["usage"]["prompt_tokens"] == 8192
    assert took >= 44, took  # the documents' 8K TTFT (44.37 s) plus 8 tokens
    assert samples
    assert all(s == (True, "true", "Ready", first) for s in samples), samples
    assert replica_status(icl(devcluster, namespace))["restarts"] == 0
    print(
        f"\n8K prompt answered in {took:.1f} s; rank 0 Ready and serving in {len(samples)} samples"
    )


# The annotation is read within the 5 s resync, well inside the request (the default
# minute needed a 100 s answer).
@quick_resync
@pytest.mark.sim_args("--sim-tpot-ms", "500", "--sim-answer-tokens", str(DRAIN_TOKENS))
def test_restart_annotation_drains_a_long_request_first(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess
) -> None:
    endpoint, key = start(devcluster, namespace)
    first = rank0(devcluster, namespace)["metadata"]["uid"]
    thread, box = in_background(
        lambda: httpx.post(
            f"{endpoint}/v1/chat/completions",
            json={"model": NAME, "messages": [{"role": "user", "content": "a long answer"}]},
            headers={"Authorization": f"Bearer {key}"},
            timeout=180,
            trust_env=False,
        )
    )
    # The answer takes DRAIN_TOKENS x 0.5 s = 30 s: annotate once the engine runs it.
    wait_until(lambda: running(endpoint) == 1, timeout=30, what="the request running")
    devcluster.kubectl("annotate", "icl", NAME, "-n", namespace, "sparkllm.io/restart=now")
    out_of_routing = wait_until(
        lambda: (
            rank0(devcluster, namespace)["metadata"]["labels"].get("sparkllm.io/serving") == "false"
        ),
        timeout=30,
        what="rank 0 out of routing",
    )
    assert thread.is_alive(), "the request must still run when the drain begins"
    assert out_of_routing
    while thread.is_alive():  # nothing of generation 1 goes while the request runs
        current = pods(devcluster, namespace)
        assert len(current) == 3
        assert not any(p["metadata"].get("deletionTimestamp") for p in current)
        assert rank0(devcluster, namespace)["metadata"]["uid"] == first
        time.sleep(0.5)
    response = box.get("response")
    assert response is not None, box
    assert response.status_code == 200, response.text[:300]
    body = response.json()
    assert body["usage"]["completion_tokens"] == DRAIN_TOKENS
    assert body["choices"][0]["finish_reason"] == "stop"
    obj = wait_until(ready_at(devcluster, namespace, 2), timeout=120, what="Ready at generation 2")
    replica = replica_status(obj)
    assert replica["lastRestart"]["reason"] == "restart requested (annotation sparkllm.io/restart)"
    assert replica["restarts"] == 1
    assert first not in {p["metadata"]["uid"] for p in pods(devcluster, namespace)}
