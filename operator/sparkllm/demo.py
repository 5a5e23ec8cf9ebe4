"""``sparkllm demo``: the whole system on one machine, brought to Ready.

It starts the dev cluster (real control plane, six simulated DGX Spark nodes), installs
the CRD generated from the API models, starts the operator and the engine harness (one
SGLang SIMULATOR per rank pod, on its node's 127.0.0.x) as background processes, applies
the documents' sample InferenceCluster and waits until it is Ready. ``demo down`` stops
the processes and the cluster. Process ids and logs live under the cache directory.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from sparkllm.api.crd import render_crd_yaml
from sparkllm.devcluster import DevCluster, wait_until
from sparkllm.errors import DevClusterError

NAMESPACE = "llm"
SAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "samples" / "deepseek-v4-flash.yaml"
PROCESSES = {
    "operator": ["run", "-n", NAMESPACE, "--metrics-port", "18080"],
    "engines": ["devcluster", "engines", "-n", NAMESPACE],
}


def _pid_file(cluster: DevCluster, name: str) -> Path:
    return cluster.paths.state_dir / f"demo-{name}.pid"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _gone(pid: int) -> bool:
    return not _alive(pid)


def _start_background(cluster: DevCluster, name: str) -> Path:
    pid_file = _pid_file(cluster, name)
    log = cluster.paths.state_dir / f"demo-{name}.log"
    if pid_file.exists() and _alive(int(pid_file.read_text())):
        return log
    env = {**os.environ, "KUBECONFIG": str(cluster.paths.kubeconfig)}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkllm.cli", *PROCESSES[name]],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    pid_file.write_text(str(proc.pid))
    return log


def _ready(cluster: DevCluster) -> dict[str, Any] | None:
    result = cluster.kubectl("get", "icl", "-n", NAMESPACE, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    items = yaml.safe_load(result.stdout).get("items") or []
    if not items:
        return None
    obj: dict[str, Any] = items[0]
    status = obj.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    generation_seen = status.get("observedGeneration") == obj["metadata"]["generation"]
    return obj if conditions.get("Ready") == "True" and generation_seen else None


def demo_up(cluster: DevCluster | None = None, *, timeout: float = 300) -> int:
    cluster = cluster or DevCluster()
    started = time.monotonic()
    cluster.up()
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-", input=render_crd_yaml()
    )
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/inferenceclusters.sparkllm.io", "--timeout=60s"
    )
    if cluster.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0:
        cluster.kubectl("create", "namespace", NAMESPACE)
    key = secrets.token_hex(16)
    if cluster.kubectl("get", "secret", "llm-user-keys", "-n", NAMESPACE, check=False).returncode:
        cluster.kubectl(
            "create", "secret", "generic", "llm-user-keys", "-n", NAMESPACE,
            f"--from-literal=demo={key}",
        )  # fmt: skip
    logs = [_start_background(cluster, name) for name in PROCESSES]
    print(f"[demo] operator and engine harness running; logs: {', '.join(map(str, logs))}")
    if not SAMPLE.exists():
        raise DevClusterError(f"sample not found at {SAMPLE} (run the demo from the repository)")
    cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(SAMPLE))
    print(f"[demo] applied {SAMPLE.name}; waiting for Ready ...", flush=True)
    last_phase = None

    def ready_with_progress() -> dict[str, Any] | None:
        nonlocal last_phase
        obj = _ready(cluster)
        phase = cluster.kubectl(
            "get", "icl", "-n", NAMESPACE, "-o", "jsonpath={.items[0].status.phase}", check=False
        ).stdout
        if phase and phase != last_phase:
            print(f"[demo] phase: {phase}", flush=True)
            last_phase = phase
        return obj

    wait_until(ready_with_progress, timeout=timeout, interval=0.5, what="InferenceCluster Ready")
    print(f"[demo] Ready in {time.monotonic() - started:.1f} s\n")
    for what in ("icl", "statefulsets,services,secrets", "pods"):
        print(cluster.kubectl("get", what, "-n", NAMESPACE, "-o", "wide").stdout)
    print(f"export KUBECONFIG={cluster.paths.kubeconfig}")
    print("kubectl -n llm get icl deepseek-v4-flash -o yaml   # status, conditions, replicas")
    print("sparkllm demo down                                  # stop everything")
    return 0


def demo_down(cluster: DevCluster | None = None) -> int:
    cluster = cluster or DevCluster()
    for name in PROCESSES:
        pid_file = _pid_file(cluster, name)
        if pid_file.exists():
            pid = int(pid_file.read_text())
            if _alive(pid):
                os.kill(pid, signal.SIGTERM)
                wait_until(partial(_gone, pid), timeout=30, what=f"demo {name} exit")
            pid_file.unlink()
    cluster.down()
    print("[demo] stopped the operator, the engine harness and the dev cluster")
    return 0
