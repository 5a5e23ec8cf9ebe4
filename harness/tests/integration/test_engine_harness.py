"""The engine harness on the real control plane: kwok runs the pod, the simulator the engine.

Each test creates, in its own namespace, one-pod StatefulSets shaped like the operator's
rank StatefulSets and runs a harness scoped to that namespace (so other engineers' pods
on the shared dev cluster are never touched), with the simulated nodes' files under the
test's own temporary directory. The kubelet's rules it follows (``devcluster.kubelet``,
``hostpaths``, ``init_containers``) are pinned without a cluster in
harness/tests/unit/test_devcluster_kubelet_rules.py.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.unit.test_integrity_fixtures import make_model_dir, shard_name

from sparkllm.integrity import ModelSummary
from sparkllm_dev.devcluster import ContainerFault, DevCluster, FaultInjector, wait_until
from sparkllm_dev.devcluster.engines import EngineHarness, EngineInfo
from sparkllm_dev.errors import DevClusterError

# The tests' dev cluster's addresses (the plugin chose its profile before this import).
RANK0_NODE, RANK0_IP = "spark-b0", DevCluster().node_ip("spark-b0")
WORKER_NODE, WORKER_IP = "spark-b1", DevCluster().node_ip("spark-b1")
KEY_ENV = "SPARKLLM_ENGINE_API_KEY"
STARTUP_SECONDS = 4  # the simulator's /health answers 503 this long: the not-Ready window
DEADLINE = 90  # seconds; generous, the machine is busy


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
        args.append(f"--api-key=$({KEY_ENV})")  # one word, as the operator renders it
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


@contextlib.contextmanager
def _running_harness(
    devcluster: DevCluster, namespace: str, tmp_path: Path, *, crash_backoff_seconds: float = 10.0
) -> Iterator[EngineHarness]:
    for url in (f"http://{RANK0_IP}:30000/health", f"http://{WORKER_IP}:30000/health"):
        assert _get(url) is None, f"something already listens at {url}: another harness?"
    engines = EngineHarness(
        devcluster,
        namespace=namespace,
        sim_args=["--sim-startup-seconds", str(STARTUP_SECONDS)],
        log_dir=tmp_path / "engines",
        hosts_root=tmp_path / "hosts",
        crash_backoff_seconds=crash_backoff_seconds,
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
def harness(devcluster: DevCluster, namespace: str, tmp_path: Path) -> Iterator[EngineHarness]:
    with _running_harness(devcluster, namespace, tmp_path) as engines:
        yield engines


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


# --- init containers on the dev cluster -------------------------------------------------

MODEL = "/models/tiny"
SHARDS = 3


def _with_verify_init(sts: dict[str, Any], *, checksums: str | None) -> dict[str, Any]:
    """Add the operator's verify-model init container (hostPath model, optional manifest)."""
    spec = sts["spec"]["template"]["spec"]
    args = ["verify-model", "--model-dir", MODEL, "--expected-shards", str(SHARDS),
            "--expected-layers", "6"]  # fmt: skip
    mounts = [{"name": "model", "mountPath": MODEL, "readOnly": True}]
    spec["volumes"] = [{"name": "model", "hostPath": {"path": MODEL, "type": "Directory"}}]
    if checksums is not None:
        args += ["--checksums", "/etc/sparkllm/checksums/SHA256SUMS"]
        mounts.append({"name": "sums", "mountPath": "/etc/sparkllm/checksums", "readOnly": True})
        spec["volumes"].append({"name": "sums", "configMap": {"name": checksums}})
    spec["automountServiceAccountToken"] = False  # as the operator renders ranks
    spec["initContainers"] = [
        {
            "name": "verify-model",
            "image": "ghcr.io/sparkllm/sparkllm:0.1.0",
            "command": ["sparkllm"],
            "args": args,
            "terminationMessagePolicy": "File",
            "volumeMounts": mounts,
        }
    ]
    spec["containers"][0]["volumeMounts"] = [{"name": "model", "mountPath": MODEL}]
    return sts


def _worker_with_init(*, checksums: str | None = None) -> dict[str, Any]:
    worker = _rank_statefulset("r1", node=WORKER_NODE, node_rank=1, nnodes=2, key_secret=None)
    return _with_verify_init(worker, checksums=checksums)


def _node_model(tmp_path: Path, node: str) -> Path:
    return make_model_dir(tmp_path / "hosts" / node / MODEL.lstrip("/"), layers=6, shards=SHARDS)


def _init_status(pod: dict[str, Any] | None) -> dict[str, Any]:
    statuses = ((pod or {}).get("status") or {}).get("initContainerStatuses") or [{}]
    return dict(statuses[0])


def _pod_condition(pod: dict[str, Any] | None, kind: str) -> str | None:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == kind), None)


@pytest.mark.cluster
def test_init_containers_run_on_the_nodes_files_before_the_engine(
    devcluster: DevCluster, namespace: str, harness: EngineHarness, tmp_path: Path
) -> None:
    model = _node_model(tmp_path, WORKER_NODE)
    sums = "".join(
        f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n"
        for path in sorted(model.iterdir())
    )
    devcluster.kubectl(
        "create", "configmap", "sums", "-n", namespace, f"--from-literal=SHA256SUMS={sums}"
    )
    _apply(devcluster, namespace, _worker_with_init(checksums="sums"))

    def verified() -> dict[str, Any] | None:
        pod = _pod(devcluster, namespace, "r1-0")
        return (
            pod
            if "message" in (_init_status(pod).get("state") or {}).get("terminated", {})
            else None
        )

    pod = wait_until(verified, timeout=DEADLINE, what="verify-model's termination message")
    terminated = _init_status(pod)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    summary = ModelSummary.from_message(terminated["message"])
    assert (summary.ok, summary.shards, summary.mode) == (True, SHARDS, "sha256")
    assert summary.files == len(list(model.iterdir()))
    [run] = harness.init_runs()
    assert (run.pod, run.node, run.container, run.exit_code) == (
        "r1-0",
        WORKER_NODE,
        "verify-model",
        0,
    )
    assert run.message == terminated["message"]
    assert "verified: digest" in run.log_path.read_text()

    engine = wait_until(lambda: _engine(harness, "r1-0"), timeout=DEADLINE, what="worker engine")
    pod = _ready_pod(devcluster, namespace, "r1-0")
    assert _pod_condition(pod, "Initialized") == "True"
    started = _container(pod)["state"]["running"]["startedAt"]
    assert terminated["finishedAt"] <= started  # RFC 3339 in UTC: compares as text
    assert engine.initializing is False
    health = f"http://{WORKER_IP}:30000/health"
    wait_until(lambda: _get(health) == 200, timeout=DEADLINE, what="worker /health 200")
    assert "role=worker dummy health server" in engine.log_path.read_text()


@pytest.mark.cluster
def test_a_failing_init_container_backs_off_and_holds_the_engine_back(
    devcluster: DevCluster, namespace: str, tmp_path: Path
) -> None:
    model = _node_model(tmp_path, WORKER_NODE)
    missing = model / shard_name(1, SHARDS)
    kept = missing.read_bytes()
    missing.unlink()
    with _running_harness(devcluster, namespace, tmp_path, crash_backoff_seconds=2) as harness:
        _apply(devcluster, namespace, _worker_with_init())

        def backing_off() -> dict[str, Any] | None:
            pod = _pod(devcluster, namespace, "r1-0")
            waiting = (_init_status(pod).get("state") or {}).get("waiting") or {}
            return pod if waiting.get("reason") == "CrashLoopBackOff" else None

        pod = wait_until(backing_off, timeout=DEADLINE, interval=0.1, what="Init:CrashLoopBackOff")
        status = _init_status(pod)
        last = status["lastState"]["terminated"]
        assert (last["exitCode"], last["reason"]) == (1, "Error")
        summary = ModelSummary.from_message(last["message"])
        assert summary.ok is False
        assert f"shard {missing.name}" in (summary.error or "")
        assert status["restartCount"] >= 1
        assert status["ready"] is False
        assert _container(pod)["state"] == {"waiting": {"reason": "PodInitializing"}}
        assert (_pod_condition(pod, "Initialized"), _pod_condition(pod, "Ready")) == (
            "False",
            "False",
        )
        [info] = [e for e in harness.engines() if e.pod == "r1-0"]
        assert (info.pid, info.initializing) == (None, True)
        assert not info.log_path.exists(), "the engine ran although its init container failed"
        assert {run.exit_code for run in harness.init_runs()} == {1}

        missing.write_bytes(kept)  # the files are fixed: the next attempt passes
        engine = wait_until(lambda: _engine(harness, "r1-0"), timeout=DEADLINE, what="engine")
        pod = _ready_pod(devcluster, namespace, "r1-0")
        status = _init_status(pod)
        assert status["state"]["terminated"]["exitCode"] == 0
        assert status["restartCount"] >= 1  # the failed attempts stay counted
        assert status["lastState"]["terminated"]["exitCode"] == 1
        assert harness.init_runs()[-1].exit_code == 0
        assert engine.initializing is False
