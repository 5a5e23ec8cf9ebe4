"""The engine harness on the real control plane: kwok runs the pod, the simulator the engine.

Each test creates, in its own namespace, one-pod StatefulSets shaped like the operator's
rank StatefulSets and runs a harness scoped to that namespace (so other engineers' pods
on the shared dev cluster are never touched). The first tests pin the kubelet's rules
(``devcluster.kubelet``) with plain asserts; they need no cluster.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkllm.devcluster import ContainerFault, DevCluster, FaultInjector, kubelet, wait_until
from sparkllm.devcluster.engines import EngineHarness, EngineInfo
from sparkllm.errors import DevClusterError

RANK0_NODE, RANK0_IP = "spark-b0", "127.0.0.21"
WORKER_NODE, WORKER_IP = "spark-b1", "127.0.0.22"
KEY_ENV = "SPARKLLM_ENGINE_API_KEY"
STARTUP_SECONDS = 4  # the simulator's /health answers 503 this long: the not-Ready window
DEADLINE = 90  # seconds; generous, the machine is busy


# --- the kubelet's rules, pure --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("--api-key $(KEY)", "--api-key s3cret"),
        ("$(KEY)$(KEY)", "s3crets3cret"),
        ("$(MISSING)", "$(MISSING)"),  # undefined: left as written
        ("$$(KEY)", "$(KEY)"),  # escaped
        ("$$$(KEY)", "$s3cret"),
        ("cost $5", "cost $5"),
        ("$(KEY", "$(KEY"),  # unterminated
        ("end$", "end$"),
        ("", ""),
    ],
)
def test_references_expand_like_the_kubelet(text: str, expanded: str) -> None:
    assert kubelet.expand_references(text, {"KEY": "s3cret"}) == expanded


def _env_pod(env: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"nodeName": "spark-b0", "containers": [{"name": "engine", "env": env}]},
        "status": {"hostIP": RANK0_IP, "podIP": RANK0_IP},
    }


def test_container_env_resolves_values_refs_and_fields_in_order() -> None:
    secret = kubelet.KeyRef(kind="Secret", name="k", key="token")
    optional = kubelet.KeyRef(kind="ConfigMap", name="c", key="gone", optional=True)
    pod = _env_pod(
        [
            {"name": "A", "value": "1"},
            {"name": "B", "value": "$(A)-$(C)"},  # C is defined later: stays verbatim
            {"name": "C", "value": "3"},
            {"name": KEY_ENV, "valueFrom": {"secretKeyRef": {"name": "k", "key": "token"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {
                "name": "OPT",
                "valueFrom": {"configMapKeyRef": {"name": "c", "key": "gone", "optional": True}},
            },
        ]
    )
    container = pod["spec"]["containers"][0]
    assert kubelet.key_refs(container) == [secret, optional]
    env = kubelet.container_env(pod, container, values={secret: "s3cret", optional: None})
    assert env == {"A": "1", "B": "1-$(C)", "C": "3", KEY_ENV: "s3cret", "IP": RANK0_IP}


def test_a_missing_required_secret_key_keeps_the_container_from_starting() -> None:
    pod = _env_pod([{"name": "K", "valueFrom": {"secretKeyRef": {"name": "k", "key": "t"}}}])
    with pytest.raises(kubelet.ContainerConfigError, match="secret 'k' has no key 't'"):
        kubelet.container_env(pod, pod["spec"]["containers"][0], values={})


@pytest.mark.parametrize(
    ("returncode", "code", "reason"), [(0, 0, "Completed"), (1, 1, "Error"), (-9, 137, "Error")]
)
def test_exit_shows_as_a_container_exit(returncode: int, code: int, reason: str) -> None:
    state = kubelet.terminated_state(returncode=returncode, started_at="t0", finished_at="t1")
    assert (state["exitCode"], state["reason"]) == (code, reason)


@pytest.mark.parametrize(("restarts", "seconds"), [(1, 10), (2, 20), (3, 40), (6, 300), (9, 300)])
def test_crash_backoff_doubles_to_five_minutes(restarts: int, seconds: float) -> None:
    assert kubelet.crash_backoff_seconds(restarts) == seconds


def test_status_patch_moves_transition_time_only_on_a_flip() -> None:
    pod = _env_pod([])
    pod["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "t0"},
        {"type": "ContainersReady", "status": "False", "lastTransitionTime": "t0"},
    ]
    view = kubelet.ContainerView(running_since="t1", ready=False, restart_count=0)
    patch = kubelet.status_patch(pod, "engine", view, now="t2")["status"]
    times = {c["type"]: (c["status"], c["lastTransitionTime"]) for c in patch["conditions"]}
    assert times == {"Ready": ("False", "t2"), "ContainersReady": ("False", "t0")}
    [entry] = patch["containerStatuses"]
    assert entry["state"] == {"running": {"startedAt": "t1"}}
    assert (entry["ready"], entry["started"], entry["restartCount"]) == (False, True, 0)


@pytest.mark.parametrize(
    ("http_get", "url"),
    [
        ({"path": "/health", "port": 30000}, f"http://{RANK0_IP}:30000/health"),
        ({"path": "health", "port": "http"}, f"http://{RANK0_IP}:30000/health"),  # named port
        ({"port": "30000", "host": "127.0.0.5"}, "http://127.0.0.5:30000/"),
        ({"port": "metrics"}, None),  # no such container port: no probe
    ],
)
def test_readiness_probe_resolves_to_the_node_address(
    http_get: dict[str, Any], url: str | None
) -> None:
    pod = _env_pod([])
    container = {"ports": [{"name": "http", "containerPort": 30000}]}
    container["readinessProbe"] = {"httpGet": http_get, "failureThreshold": 5}
    probe = kubelet.readiness_probe(pod, container)
    assert (probe.url if probe else None) == url
    if probe is not None:
        assert (probe.timeout_seconds, probe.failure_threshold, probe.success_threshold) == (
            1.0,
            5,
            1,
        )


def test_a_restart_the_pod_already_shows_is_adopted_not_erased() -> None:
    pod = _env_pod([])
    last = {"exitCode": 137, "reason": "OOMKilled"}
    pod["status"]["containerStatuses"] = [
        {"name": "engine", "restartCount": 1, "lastState": {"terminated": last}}
    ]
    view = kubelet.ContainerView(running_since="t1", ready=True, restart_count=0)
    adopted = kubelet.with_observed_restarts(view, pod, "engine")
    assert (adopted.restart_count, adopted.last_terminated) == (1, last)
    crashed = kubelet.after_exit(adopted, returncode=1, finished_at="t2", backoff_seconds=20)
    assert crashed.restart_count == 2
    assert crashed.last_terminated == {
        "exitCode": 1,
        "reason": "Error",
        "startedAt": "t1",
        "finishedAt": "t2",
    }
    assert (crashed.running_since, crashed.ready) == (None, False)
    assert kubelet.with_observed_restarts(crashed, pod, "engine") == crashed


# --- the harness on the dev cluster ----------------------------------------------------


def _rank_statefulset(
    name: str, *, node: str, node_rank: int, nnodes: int, key_secret: str | None
) -> dict[str, Any]:
    """A one-pod StatefulSet shaped like the operator's rank ``node_rank``."""
    args = [
        "--model-path", "/models/x", "--served-model-name", "m", "--nnodes", str(nnodes),
        "--node-rank", str(node_rank), "--pp-size", str(nnodes), "--tp-size", "1",
        "--host", "0.0.0.0", "--port", "30000", "--enable-metrics",
    ]  # fmt: skip
    env: list[dict[str, Any]] = [{"name": "SGLANG_PP_LAYER_PARTITION", "value": "20,23"}]
    container: dict[str, Any] = {
        "name": "engine",
        "image": "registry.invalid/sglang:0.5.23",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": args,
        "env": env,
        "ports": [{"name": "http", "containerPort": 30000}],
    }
    if nnodes > 1:
        args += ["--dist-init-addr", f"{RANK0_IP}:5000"]
    if key_secret is not None:
        args += ["--api-key", f"$({KEY_ENV})"]
        env.append(
            {"name": KEY_ENV, "valueFrom": {"secretKeyRef": {"name": key_secret, "key": "token"}}}
        )
        container["readinessProbe"] = {
            "httpGet": {"path": "/health", "port": 30000, "scheme": "HTTP"},
            "periodSeconds": 10,
            "timeoutSeconds": 25,
        }
    labels = {
        "app": name,
        "app.kubernetes.io/component": "engine",
        "sparkllm.io/rank": str(node_rank),
    }
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [term]
                            }
                        }
                    },
                    "containers": [container],
                },
            },
        },
    }


def _apply(cluster: DevCluster, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))


def _pod(cluster: DevCluster, namespace: str, name: str) -> dict[str, Any] | None:
    found = cluster.kubectl("get", "-n", namespace, "pod", name, "-o", "json", check=False)
    if found.returncode != 0:
        return None
    pod: dict[str, Any] = json.loads(found.stdout)
    return pod


def _ready(pod: dict[str, Any] | None) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _container(pod: dict[str, Any] | None) -> dict[str, Any]:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def _get(url: str) -> int | None:
    """The HTTP status at ``url``, or None when nothing answers."""
    try:
        return httpx.get(url, timeout=5, trust_env=False).status_code
    except httpx.HTTPError:
        return None


def _engine(harness: EngineHarness, pod: str) -> EngineInfo | None:
    return next((e for e in harness.engines() if e.pod == pod and e.pid is not None), None)


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


@pytest.fixture
def harness(devcluster: DevCluster, namespace: str, tmp_path: Path) -> Iterator[EngineHarness]:
    for url in (f"http://{RANK0_IP}:30000/health", f"http://{WORKER_IP}:30000/health"):
        assert _get(url) is None, f"something already listens at {url}: another harness?"
    engines = EngineHarness(
        devcluster,
        namespace=namespace,
        sim_args=["--sim-startup-seconds", str(STARTUP_SECONDS)],
        log_dir=tmp_path / "engines",
    )
    try:
        engines.start()
    except DevClusterError as exc:
        pytest.fail(f"engine harness did not start: {exc}")
    yield engines
    running = [e.pid for e in engines.engines() if e.pid is not None]
    engines.stop()
    assert engines.engines() == ()
    assert [pid for pid in running if _alive(pid)] == [], "stop() left a simulator behind"


@pytest.fixture
def engine_key(devcluster: DevCluster, namespace: str) -> str:
    """A Secret ``engine-key`` with a random ``token``; returns the token."""
    token = secrets.token_hex(16)
    devcluster.kubectl(
        "create",
        "secret",
        "generic",
        "engine-key",
        "-n",
        namespace,
        f"--from-literal=token={token}",
    )
    stored = devcluster.kubectl_json("get", "secret", "engine-key", "-n", namespace)
    assert base64.b64decode(stored["data"]["token"]).decode() == token
    return token


def _apply_rank0(devcluster: DevCluster, namespace: str) -> None:
    rank0 = _rank_statefulset("r0", node=RANK0_NODE, node_rank=0, nnodes=1, key_secret="engine-key")
    _apply(devcluster, namespace, rank0)


def _ready_pod(devcluster: DevCluster, namespace: str, name: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        pod = _pod(devcluster, namespace, name)
        return pod if _ready(pod) else None

    return wait_until(ready, timeout=DEADLINE, what=f"pod {name} Ready")


def _start_rank0(devcluster: DevCluster, namespace: str, harness: EngineHarness) -> EngineInfo:
    _apply_rank0(devcluster, namespace)
    engine = wait_until(lambda: _engine(harness, "r0-0"), timeout=DEADLINE, what="rank 0 engine")
    _ready_pod(devcluster, namespace, "r0-0")
    return engine


@pytest.mark.cluster
def test_rank0_is_ready_only_once_health_answers_and_its_key_comes_from_the_secret(
    devcluster: DevCluster, namespace: str, harness: EngineHarness, engine_key: str
) -> None:
    _apply_rank0(devcluster, namespace)
    engine = wait_until(lambda: _engine(harness, "r0-0"), timeout=DEADLINE, what="rank 0 engine")
    assert engine.node_ip == RANK0_IP
    # From here on the harness owns readiness (kwok's first status said Ready at once).
    seen_unready_while_starting = []

    def ready_implies_health() -> bool:
        pod = _pod(devcluster, namespace, "r0-0")  # pod first, then /health: never stale
        health = _get(f"http://{RANK0_IP}:30000/health")
        if _ready(pod):
            assert health == 200, "pod Ready while its engine's /health does not answer 200"
            assert _container(pod)["ready"] is True
            return True
        if health != 200:
            seen_unready_while_starting.append(health)
        return False

    wait_until(ready_implies_health, timeout=DEADLINE, interval=0.05, what="rank 0 Ready")
    assert seen_unready_while_starting, "never saw the pod not Ready while the engine started"

    models = f"http://{RANK0_IP}:30000/v1/models"
    with httpx.Client(trust_env=False, timeout=5) as client:
        served = client.get(models, headers={"Authorization": f"Bearer {engine_key}"})
        assert served.status_code == 200
        assert [m["id"] for m in served.json()["data"]] == ["m"]
        assert client.get(models).status_code == 401
        assert client.get(models, headers={"Authorization": "Bearer $(X)"}).status_code == 401
    log = engine.log_path.read_text()
    assert "SIMULATOR" in log
    assert "role=rank 0 HTTP API" in log
    assert f"$({KEY_ENV})" in log
    assert engine_key not in log


@pytest.mark.cluster
@pytest.mark.usefixtures("engine_key")
@pytest.mark.parametrize("ending", ["deleted", "failed"])
def test_an_ended_pod_stops_its_simulator_and_its_replacement_gets_a_new_one(
    devcluster: DevCluster,
    namespace: str,
    harness: EngineHarness,
    faults: FaultInjector,
    ending: str,
) -> None:
    old = _start_rank0(devcluster, namespace, harness)
    assert old.pid is not None
    if ending == "deleted":
        faults.delete_pod(namespace=namespace, pod="r0-0")
    else:  # phase Failed; the StatefulSet controller then replaces the pod
        faults.fail_container(namespace=namespace, pod="r0-0", mode=ContainerFault.FAILED)
    wait_until(lambda: not _alive(old.pid or 0), timeout=DEADLINE, what="old simulator exit")

    def replacement() -> EngineInfo | None:
        engine = _engine(harness, "r0-0")
        return engine if engine is not None and engine.uid != old.uid else None

    new = wait_until(replacement, timeout=DEADLINE, what="a simulator for the new pod")
    assert new.pid != old.pid
    assert new.log_path != old.log_path  # the log is per pod uid
    _ready_pod(devcluster, namespace, "r0-0")
    assert _get(f"http://{RANK0_IP}:30000/health") == 200

    devcluster.kubectl("scale", "-n", namespace, "statefulset/r0", "--replicas=0")
    wait_until(lambda: harness.engines() == (), timeout=DEADLINE, what="no engine left")
    health = f"http://{RANK0_IP}:30000/health"
    wait_until(lambda: _get(health) is None, timeout=DEADLINE, what="the port to stop answering")
    wait_until(lambda: not _alive(new.pid or 0), timeout=DEADLINE, what="simulator exit")


@pytest.mark.cluster
@pytest.mark.usefixtures("engine_key")
def test_a_crashed_simulator_shows_as_a_container_restart(
    devcluster: DevCluster, namespace: str, harness: EngineHarness
) -> None:
    engine = _start_rank0(devcluster, namespace, harness)
    assert engine.pid is not None
    os.kill(engine.pid, signal.SIGKILL)

    def restarted_once() -> dict[str, Any] | None:
        pod = _pod(devcluster, namespace, "r0-0")
        return pod if _container(pod).get("restartCount") == 1 else None

    pod = wait_until(restarted_once, timeout=DEADLINE, what="restartCount 1")
    status = _container(pod)
    assert status["lastState"]["terminated"]["exitCode"] == 137  # 128 + SIGKILL
    assert status["lastState"]["terminated"]["reason"] == "Error"
    # The kubelet's back-off is 10 s: the first status after the crash is still waiting.
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["ready"] is False
    assert not _ready(pod)

    # Like a kubelet with restartPolicy Always, the harness starts the engine again.
    def running_again() -> EngineInfo | None:
        again = _engine(harness, "r0-0")
        return again if again is not None and again.pid != engine.pid else None

    wait_until(running_again, timeout=DEADLINE, what="the engine restarted after back-off")
    pod = _ready_pod(devcluster, namespace, "r0-0")
    status = _container(pod)
    assert status["restartCount"] == 1
    assert "running" in status["state"]
    assert status["lastState"]["terminated"]["exitCode"] == 137


@pytest.mark.cluster
def test_a_worker_rank_gets_a_worker_simulator_and_keeps_kwoks_status(
    devcluster: DevCluster, namespace: str, harness: EngineHarness
) -> None:
    worker = _rank_statefulset("r1", node=WORKER_NODE, node_rank=1, nnodes=2, key_secret=None)
    _apply(devcluster, namespace, worker)
    engine = wait_until(lambda: _engine(harness, "r1-0"), timeout=DEADLINE, what="worker engine")
    assert engine.node_ip == WORKER_IP
    health = f"http://{WORKER_IP}:30000/health"
    wait_until(lambda: _get(health) == 200, timeout=DEADLINE, what="worker /health 200")
    assert _get(f"http://{WORKER_IP}:30000/v1/models") == 404  # no API on ranks > 0
    log = engine.log_path.read_text()
    assert "role=worker dummy health server" in log
    assert "layer_partition=[20, 23]" in log  # the container's env reached the process
    pod = _pod(devcluster, namespace, "r1-0")
    assert _ready(pod)
    assert _container(pod)["ready"] is True
    assert _container(pod)["restartCount"] == 0
