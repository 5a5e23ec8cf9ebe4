"""``sparkllm-dev demo``: the whole system on one machine, brought to Ready.

It starts the dev cluster (real control plane, six simulated DGX Spark nodes), installs
the CRD generated from the API models, starts the operator and the engine harness (one
SGLang SIMULATOR per rank pod, on its node's 127.0.0.x) as background processes, applies
the documents' sample InferenceCluster and waits until it is Ready, then sends one chat
request through the front door (admission layer -> smg router -> simulated rank 0). The
gateway pods and the benchmark and acceptance Jobs' pods run as background processes too
(``sparkllm-dev gateways``, ``sparkllm-dev jobs``), so a benchmark or acceptance request
by annotation runs to its end here as it does in the tests. A
tiny but real model directory stands in for the weights on the group's nodes, so the
integrity check (ModelVerified) runs. The administrator's policy of a default chart
install is in force, in both its places (:func:`chart_default_policy`): the API server
refuses an object outside it at ``kubectl apply``, and the operator checks it again.
``demo down`` stops the processes and the cluster.
Process ids and logs live in the cluster's state directory. The demo runs on the ``demo``
dev cluster (``devcluster/paths.py``), so `make test`, on the ``test`` one, can run beside
it; the background processes are told which cluster through ``SPARKLLM_DEVCLUSTER``.

Where is it, later: :func:`access_lines` is what the demo prints last and what
``sparkllm-dev status`` prints while it runs — the kubeconfig, the cluster's own kubectl
(the harness builds v1.36.1; an older kubectl on PATH warns of version skew), the front
door's URL (the gateway pod's admission layer runs on this machine, on a port chosen at
start: no Service address or port-forward reaches it here), the demo user's key, and how
to run ``sparkllm bench`` by hand with the key the operator made for its own Jobs (user
``sparkllm:bench``, the one identity the front door lets send ``ignore_eos``).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import yaml

from sparkllm.api.crd import render_crd_yaml
from sparkllm.render.names import BENCH_USER, bench_key_secret_name
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.gateway_pods import metrics_file
from sparkllm_dev.devcluster.memory_host import write_memory
from sparkllm_dev.devcluster.nodes import spark_nodes
from sparkllm_dev.devcluster.paths import K8S_VERSION, PROFILE_ENV
from sparkllm_dev.devcluster.toymodel import write_toy_model
from sparkllm_dev.errors import DevClusterError

NAMESPACE = "llm"
DEMO_USER = "demo"  # the data key of the users' keys Secret the demo creates
MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
SAMPLE = MANIFESTS / "samples" / "deepseek-v4-flash.yaml"
# The chart's default install, rendered (hack/render-manifests.sh checks it matches):
# where the demo takes the administrator's policy from, so the two cannot differ.
CHART_DEFAULT = MANIFESTS / "base" / "operator.yaml"
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
POLICY_ENV = "SPARKLLM_ADMIN_POLICY"
GROUP_A = ("spark-a0", "spark-a1", "spark-a2")
MODEL_PATH = "/models/DeepSeek-V4-Flash-NVFP4"  # the sample's spec.model.path
BENCH_KEY_SECRET = bench_key_secret_name("deepseek-v4-flash")  # the sample's Jobs' key


@dataclass(frozen=True)
class DemoPolicy:
    """The administrator's policy a default chart install has, in its two places: the
    ValidatingAdmissionPolicy and binding (the API server refuses an object outside it at
    ``kubectl apply``) and the operator's ``SPARKLLM_ADMIN_POLICY`` env (the operator's own
    check). The demo builds no helm, so it reads both from the rendered chart."""

    documents: list[dict[str, Any]]  # the policy and its binding (every namespace)
    env: str  # the operator container's SPARKLLM_ADMIN_POLICY value (JSON)


def chart_default_policy(rendered: Path = CHART_DEFAULT) -> DemoPolicy:
    """The policy documents and the operator's policy env of the rendered chart."""
    objs = [o for o in yaml.safe_load_all(rendered.read_text()) if o]
    documents = [o for o in objs if o["kind"] in POLICY_KINDS]
    (operator,) = [o for o in objs if o["kind"] == "StatefulSet"]
    containers = operator["spec"]["template"]["spec"]["containers"]
    (operator_container,) = [c for c in containers if c["name"] == "operator"]
    (env,) = [e["value"] for e in operator_container["env"] if e["name"] == POLICY_ENV]
    if sorted(o["kind"] for o in documents) != sorted(POLICY_KINDS):
        raise DevClusterError(f"{rendered}: no ValidatingAdmissionPolicy and binding")
    return DemoPolicy(documents=documents, env=str(env))


_STOPPED = {  # how `demo down` names each background process it stops
    "operator": "the operator",
    "engines": "the engine harness",
    "gateways": "the gateway pods' harness",
    "jobs": "the Jobs' pods' harness",
    "model-source": "the staging journey's S3 server",  # sparkllm-dev model-source
}


def _processes(cluster: DevCluster) -> dict[str, list[str]]:
    """Each background process as ``python -m MODULE ARGS``: the product CLI runs the
    operator, the harness CLI (``sparkllm-dev``) the engines, the gateway pods and the
    Jobs' pods."""
    tokenizer_dir = _host_model_dir(cluster, GROUP_A[0])
    metrics_port = str(cluster.paths.profile.operator_metrics_port)
    return {
        "operator": ["sparkllm.cli", "run", "-n", NAMESPACE, "--metrics-port", metrics_port],
        "engines": ["sparkllm_dev.cli", "engines", "-n", NAMESPACE],
        "gateways": [
            "sparkllm_dev.cli",
            "gateways",
            "-n",
            NAMESPACE,
            "--tokenizer-dir",
            str(tokenizer_dir),
        ],
        # The benchmark and acceptance Jobs' pods (kwok runs no container), the front
        # door found in the gateways' endpoints file, as the tests' BenchJobs do.
        "jobs": ["sparkllm_dev.cli", "jobs", "-n", NAMESPACE],
    }


def _host_model_dir(cluster: DevCluster, node: str) -> Path:
    """Where the engine harness finds ``MODEL_PATH`` on simulated ``node`` (hostPath)."""
    return cluster.paths.state_dir / "hosts" / node / MODEL_PATH.lstrip("/")


def pid_file(cluster: DevCluster, name: str) -> Path:
    return cluster.paths.state_dir / f"demo-{name}.pid"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _gone(pid: int) -> bool:
    return not alive(pid)


def _start_background(
    cluster: DevCluster, name: str, args: list[str], extra_env: dict[str, str]
) -> Path:
    pid_path = pid_file(cluster, name)
    log = cluster.paths.state_dir / f"demo-{name}.log"
    if pid_path.exists() and alive(int(pid_path.read_text())):
        return log
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.paths.kubeconfig),
        PROFILE_ENV: cluster.paths.profile.name,
        **extra_env,
    }
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    pid_path.write_text(str(proc.pid))
    return log


def _existing_key(cluster: DevCluster) -> str | None:
    """The demo user's API key from its Secret, or None when there is none (yet)."""
    live = cluster.kubectl(
        "get", "secret", "llm-user-keys", "-n", NAMESPACE, "-o", "json", check=False
    )
    if live.returncode != 0:
        return None
    data = json.loads(live.stdout).get("data") or {}
    return base64.b64decode(data[DEMO_USER]).decode() if DEMO_USER in data else None


def _demo_key(cluster: DevCluster) -> str:
    """The demo user's API key (created once, then read back from the Secret)."""
    existing = _existing_key(cluster)
    if existing is not None:
        return existing
    key = secrets.token_hex(16)
    cluster.kubectl(
        "create",
        "secret",
        "generic",
        "llm-user-keys",
        "-n",
        NAMESPACE,
        f"--from-literal={DEMO_USER}={key}",
    )
    return key


@dataclass(frozen=True)
class DemoAccess:
    """How to reach the demo: kubectl and its kubeconfig, and the front door."""

    kubeconfig: Path
    kubectl: Path
    front_door: str | None  # the gateway pod's admission URL on this machine, once it runs
    key: str | None  # the demo user's API key, once its Secret exists
    metrics: str | None = None  # the front door's /metrics (its own port), once it runs


def _front_door_url(cluster: DevCluster, state: str = "gateways.json") -> str | None:
    """The demo's front door (or, from ``gateways-metrics.json``, its ``/metrics``), from
    the gateway harness's state files (None: not running)."""
    try:
        urls: dict[str, str] = json.loads((cluster.paths.state_dir / state).read_text())
    except (OSError, ValueError):
        return None
    return next((url for pod, url in urls.items() if pod.startswith(f"{NAMESPACE}/")), None)


def demo_access(cluster: DevCluster, *, key: str | None = None) -> DemoAccess:
    """What :func:`access_lines` prints, read from the running cluster and harness."""
    return DemoAccess(
        kubeconfig=cluster.paths.kubeconfig,
        kubectl=cluster.paths.binary("kubectl"),
        front_door=_front_door_url(cluster),
        key=key if key is not None else _existing_key(cluster),
        metrics=_front_door_url(cluster, metrics_file(Path("gateways.json")).name),
    )


def access_lines(access: DemoAccess) -> list[str]:
    """The lines that say where the demo is: kubectl to use, the front door, the key."""
    lines = [
        f"export KUBECONFIG={access.kubeconfig}",
        f"export PATH={access.kubectl.parent}:$PATH"
        f"   # kubectl {K8S_VERSION}, the cluster's own (an older one warns of version skew)",
    ]
    if access.front_door is not None:
        key = access.key or "<no key yet>"
        lines += [
            f"# front door: {access.front_door} (user {DEMO_USER}, API key {key})",
            f"curl -s {access.front_door}/v1/chat/completions -H 'Authorization: Bearer {key}' "
            "-H 'Content-Type: application/json' \\",
            '  -d \'{"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": '
            '"hi"}]}\'',
            # The demo user may not send ignore_eos; the operator's Jobs' identity may.
            f"# sparkllm bench by hand: the key the operator made for its Jobs (user {BENCH_USER})",
            f"export BENCH_KEY=$(kubectl -n {NAMESPACE} get secret {BENCH_KEY_SECRET} "
            "-o jsonpath='{.data.token}' | base64 -d)",
            f".venv/bin/sparkllm bench --base-url {access.front_door} --model deepseek-v4-flash "
            "--api-key-env BENCH_KEY --scenarios short-c1",
        ]
    if access.front_door is not None and access.metrics is not None:
        # The admission layer's own port (docs/monitoring.md: a Prometheus here scrapes it).
        lines.append(
            f"# front door metrics (the Governance panels' sparkllm_gateway_*): {access.metrics}"
        )
    return lines


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
    cluster.wait_established("inferenceclusters.sparkllm.io")
    if cluster.kubectl("get", "namespace", NAMESPACE, check=False).returncode != 0:
        cluster.kubectl("create", "namespace", NAMESPACE)
    # The printed KUBECONFIG's context defaults to the demo's namespace: `kubectl get icl`
    # without -n shows the sample (kwokctl writes the file anew when the cluster starts).
    cluster.kubectl("config", "set-context", "--current", f"--namespace={NAMESPACE}")
    key = _demo_key(cluster)
    # The administrator's policy of a default chart install: the API server refuses an
    # object outside it at apply, the operator checks it again before creating anything.
    policy = chart_default_policy()
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-",
        input=yaml.safe_dump_all(policy.documents),
    )  # fmt: skip
    # The sample's model directory on each Spark of group a: a tiny but real stand-in
    # (valid safetensors shards, index, config, tokenizer), so the integrity check runs
    # and the gateway counts tokens with a real tokenizer.
    for node in GROUP_A:
        write_toy_model(_host_model_dir(cluster, node), layers=43, shards=46)
    # Every Spark's /proc/meminfo and memory PSI (a Spark at rest), so the memory preflight
    # (spec.memoryPreflight) has something to read on the demo; a test writes less.
    for sim in spark_nodes():
        write_memory(cluster.paths.state_dir / "hosts" / sim.name)
    envs = {"operator": {POLICY_ENV: policy.env}}
    logs = [
        _start_background(cluster, n, a, envs.get(n, {})) for n, a in _processes(cluster).items()
    ]
    running = "operator, engine harness, gateway pods and Jobs' pods running"
    print(f"[demo] {running}; logs: {', '.join(map(str, logs))}")
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
    _front_door(cluster, key)
    for line in access_lines(demo_access(cluster, key=key)):
        print(line)
    print("kubectl -n llm get icl -o wide   # endpoint, reason, restarts (-o yaml: the status)")
    # Commands a fresh clone can paste: the venv is not on PATH, make knows where it is.
    down = "make demo-down"
    if cluster.paths.profile.name != "demo":
        down = f".venv/bin/sparkllm-dev --cluster {cluster.paths.profile.name} demo down"
    print(f"{down:<51} # stop everything")
    return 0


def restart_operator(cluster: DevCluster, env: dict[str, str]) -> Path:
    """Stop the demo's operator and start it again with ``env`` (a changed policy, as a
    ``helm upgrade`` rolls the operator's pod); its log."""
    _stop(cluster, "operator")
    return _start_background(cluster, "operator", _processes(cluster)["operator"], env)


def _front_door(cluster: DevCluster, key: str) -> None:
    """Send one chat request through admission -> smg -> a simulated rank 0, and show it."""
    state = cluster.paths.state_dir / "gateways.json"

    def endpoint() -> str | None:
        try:
            urls = json.loads(state.read_text())
        except (OSError, ValueError):
            return None
        return next(iter(urls.values()), None)

    url = str(wait_until(endpoint, timeout=120, interval=0.5, what="the gateway pod running"))
    wait_until(lambda: _ready_upstream(url), timeout=120, interval=0.5, what="front door ready")
    body = {
        "model": "deepseek-v4-flash",
        "messages": [{"role": "user", "content": "Say hello from the pipeline."}],
        "max_tokens": 16,
    }
    headers = {"Authorization": f"Bearer {key}"}
    answer = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=60)
    print(f"[demo] front door {url}: POST /v1/chat/completions -> {answer.status_code}")
    shown = answer.text if len(answer.text) <= 300 else answer.text[:300] + " … (cut)"
    print(f"       {shown}\n")


def _ready_upstream(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def stop_demo_processes(cluster: DevCluster) -> list[str]:
    """Stop the demo's background processes of ``cluster`` (from their pid files); the
    names of those that were alive. ``sparkllm-dev down`` calls it too: the control plane
    gone under them, they would otherwise run on, retrying an API server that never comes
    back."""
    return [name for name in _STOPPED if _stop(cluster, name)]


def _stop(cluster: DevCluster, name: str) -> bool:
    """Stop one background process (SIGTERM, then its exit awaited); whether it was alive."""
    path = pid_file(cluster, name)
    if not path.exists():
        return False
    pid = int(path.read_text())
    running = alive(pid)
    if running:
        os.kill(pid, signal.SIGTERM)
        wait_until(partial(_gone, pid), timeout=30, what=f"demo {name} exit")
    path.unlink()
    return running


def stopped_line(names: list[str]) -> str:
    """How ``down`` names the demo processes it stopped."""
    return ", ".join(_STOPPED[n] for n in names)


def demo_down(cluster: DevCluster | None = None) -> int:
    cluster = cluster or DevCluster()
    stop_demo_processes(cluster)
    cluster.down()
    print(f"[demo] stopped {stopped_line(list(_STOPPED))} and the dev cluster")
    return 0
