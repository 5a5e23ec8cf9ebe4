"""Start, stop and inspect the local control plane (the dev cluster).

Why kwokctl: it already knows how to run etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and the kwok controller as plain processes (its "binary" runtime), with
certificates and a kubeconfig of its own. We hand it only local binaries built by
``hack/build-binaries.sh`` — every binary path is given explicitly, so nothing is ever
downloaded — plus our kwok Stages (``stages.yaml``) and an audit policy that records
writes (tests use it to prove that an idle reconcile writes nothing).

``up`` on a running cluster does nothing; ``down`` deletes the cluster and then checks
that no process of ours is left behind. Each ``DevCluster`` is one profile's cluster
(``paths.py``): ``down`` of the tests' cluster leaves the demo's running, and back.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sparkllm_dev.devcluster.nodes import SimNode, node_manifest, spark_nodes
from sparkllm_dev.devcluster.paths import (
    CONTROL_PLANE_BINARIES,
    K8S_VERSION,
    DevPaths,
    default_paths,
)
from sparkllm_dev.devcluster.wait import wait_until
from sparkllm_dev.errors import DevClusterError

# Writes are logged at Metadata level (who, what, when); reads and the constant
# lease/heartbeat/event traffic are not, so the log stays small.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "resources": [{"group": "coordination.k8s.io"}]},
        {"level": "None", "verbs": ["get", "list", "watch"]},
        {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
    ],
}

# Every default controller but the three that publish Service endpoints. The simulated
# nodes' addresses are loopback ones (127.0.0.x: the engines listen there, and the
# operator and smg reach them there), so a hostNetwork rank pod's IP is loopback, and the
# API server refuses a loopback address in any Endpoints or EndpointSlice (a validation
# rule, no flag): each of these controllers could only fail, for every rank-0 Service, with
# a Warning (FailedToUpdateEndpointSlices, FailedToCreateEndpoint, "may not be in the
# loopback range") every resync. Nothing in the dev cluster reads endpoints (no
# kube-proxy; smg and the tests' Prometheus find pods directly), and a real cluster's node
# addresses are not loopback, so this hides no warning a real cluster would show.
ENDPOINT_CONTROLLERS = (
    "endpoints-controller",
    "endpointslice-controller",
    "endpointslice-mirroring-controller",
)
CONTROLLERS = ",".join(["*", *(f"-{name}" for name in ENDPOINT_CONTROLLERS)])

# `kubectl logs` (exec, port-forward) goes from the API server to the pod's node, which
# kwok serves on every node's address. The default order tries the node's Hostname first,
# and spark-a0 resolves nowhere ("lookup spark-a0: no such host"): the InternalIP
# (127.0.0.x, where kwok listens) is the address to use, as on clusters without node DNS.
KUBELET_ADDRESS_ARGS = [{"key": "kubelet-preferred-address-types", "value": "InternalIP"}]
KWOK_LOGS_KIND = "Logs"

_CONTROL_PLANE = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kwok-controller",
)


@dataclass(frozen=True)
class ClusterStatus:
    """What `devcluster status` reports."""

    running: bool
    kubeconfig: Path
    server: str | None
    nodes_ready: int
    processes: tuple[str, ...]


class DevCluster:
    """The dev cluster: a thin wrapper over kwokctl and kubectl with our paths."""

    def __init__(self, paths: DevPaths | None = None) -> None:
        self.paths = paths or default_paths()

    # --- commands -------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.paths.kwok_workdir)
        env["KWOK_RUNTIME"] = "binary"
        env["KWOK_KUBE_VERSION"] = K8S_VERSION
        return env

    def kwokctl(
        self, *args: str, check: bool = True, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        """Run kwokctl for our cluster; raise DevClusterError with its output on failure."""
        name = self.paths.profile.cluster_name
        cmd = [str(self.paths.binary("kwokctl")), "--name", name, *args]
        return _run(cmd, env=self._env(), check=check, timeout=timeout)

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the dev cluster (never the user's ~/.kube/config)."""
        cmd = [str(self.paths.binary("kubectl")), "--kubeconfig", str(self.paths.kubeconfig)]
        return _run([*cmd, *args], input=input, check=check, timeout=timeout)

    def kubectl_json(self, *args: str) -> Any:
        """kubectl ... -o json, parsed."""
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def wait_established(self, *crds: str, timeout: float = 90) -> None:
        """Wait until every named CRD has condition Established=True.

        Not `kubectl wait --for=condition=Established`: kubectl 1.35 fails at once
        (".status.conditions accessor error: <nil>") when it reads a just-created CRD
        before the apiextensions controller has written any condition, instead of
        waiting. Seen in CI on a busy first start; so poll the condition ourselves.
        """
        query = '{.status.conditions[?(@.type=="Established")].status}'

        def established(crd: str) -> bool:
            got = self.kubectl("get", f"crd/{crd}", "-o", f"jsonpath={query}", check=False)
            return got.stdout.strip() == "True"

        for crd in crds:
            wait_until(
                lambda: established(crd),  # noqa: B023 (called before crd changes)
                timeout=timeout,
                interval=0.5,
                what=f"CRD {crd} to be Established",
            )

    # --- lifecycle ------------------------------------------------------------------

    def is_running(self) -> bool:
        """True when the API server answers /readyz with our kubeconfig."""
        if not self.paths.kubeconfig.exists() or self.paths.missing_binaries(
            CONTROL_PLANE_BINARIES
        ):
            return False
        probe = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
        return probe.returncode == 0 and probe.stdout.strip() == "ok"

    def up(self, *, log: bool = True) -> bool:
        """Start the cluster and register the Spark nodes. False when already running."""
        self.paths.require_binaries()
        if self.is_running():
            self.register_nodes()  # idempotent: apply, so a deleted node comes back
            return False
        started = time.monotonic()
        self._delete_leftovers()
        self._require_free_ports()
        self._write_config()
        _say(log, "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok")
        self.kwokctl(
            "create",
            "cluster",
            "--config",
            str(self.paths.kwokctl_config),
            "--kubeconfig",
            str(self.paths.kubeconfig),
            "--wait",
            "120s",
            timeout=300,
        )
        wait_until(self.is_running, timeout=60, interval=0.2, what="kube-apiserver /readyz")
        self.register_nodes()
        wait_until(
            lambda: self.nodes_ready() == len(self.nodes()),
            timeout=60,
            interval=0.2,
            what="six simulated Spark nodes Ready",
        )
        _say(log, f"dev cluster up in {time.monotonic() - started:.1f} s")
        return True

    def down(self) -> None:
        """Delete the cluster and make sure none of its processes survive."""
        if self.paths.binary("kwokctl").exists() and self._cluster_dir().exists():
            self.kwokctl("delete", "cluster", check=False, timeout=120)
        self._kill_leftover_processes()
        self.paths.kubeconfig.unlink(missing_ok=True)

    def status(self) -> ClusterStatus:
        running = self.is_running()
        server = None
        if self.paths.kubeconfig.exists():
            config = yaml.safe_load(self.paths.kubeconfig.read_text()) or {}
            clusters = config.get("clusters") or []
            if clusters:
                server = clusters[0].get("cluster", {}).get("server")
        return ClusterStatus(
            running=running,
            kubeconfig=self.paths.kubeconfig,
            server=server,
            nodes_ready=self.nodes_ready() if running else 0,
            processes=tuple(name for name, _ in self._our_processes()),
        )

    def audit_log(self) -> Path:
        """The API server's audit log (writes only, Metadata level; see AUDIT_POLICY)."""
        return self._cluster_dir() / "logs" / "audit.log"

    def audit_writes(self, *, namespace: str | None = None) -> list[dict[str, Any]]:
        """Audit events of writes, optionally only those on objects in ``namespace``."""
        events = []
        with self.audit_log().open(encoding="utf-8") as fh:
            for line in fh:
                event = json.loads(line)
                ref = event.get("objectRef") or {}
                if namespace is None or ref.get("namespace") == namespace:
                    events.append(event)
        return events

    # --- nodes ----------------------------------------------------------------------

    def nodes(self) -> list[SimNode]:
        """This cluster's simulated Sparks (their addresses are its profile's)."""
        return spark_nodes(address_base=self.paths.profile.node_address_base)

    def node_ip(self, name: str) -> str:
        """The InternalIP of simulated node ``name`` in this cluster."""
        found = [node.ip for node in self.nodes() if node.name == name]
        if not found:
            raise DevClusterError(f"no simulated node {name!r} in the dev cluster")
        return found[0]

    def register_nodes(self) -> None:
        """Create (or re-create) the six simulated Spark nodes."""
        docs = [node_manifest(n) for n in self.nodes()]
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))

    def nodes_ready(self) -> int:
        result = self.kubectl("get", "nodes", "-o", "json", check=False, timeout=10)
        if result.returncode != 0:
            return 0
        items = json.loads(result.stdout).get("items", [])
        return sum(1 for item in items if _node_ready(item))

    # --- internals ------------------------------------------------------------------

    def _cluster_dir(self) -> Path:
        return self.paths.cluster_dir

    def _write_config(self) -> None:
        self.paths.state_dir.mkdir(parents=True, exist_ok=True)
        self.paths.audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        b = self.paths.binary
        kwokctl_config = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "options": {
                "runtime": "binary",
                "kubeVersion": K8S_VERSION,
                "etcdBinary": str(b("etcd")),
                "kubeApiserverBinary": str(b("kube-apiserver")),
                "kubeControllerManagerBinary": str(b("kube-controller-manager")),
                "kubeSchedulerBinary": str(b("kube-scheduler")),
                "kubectlBinary": str(b("kubectl")),
                "kwokControllerBinary": str(b("kwok")),
                "kubeAuditPolicy": str(self.paths.audit_policy),
                "nodeLeaseDurationSeconds": 40,
                # kwok serves `kubectl logs` from the files named by a Logs object per pod
                # (namespace and name of the pod), which the harnesses create (pod_logs.py).
                "enableCRDs": [KWOK_LOGS_KIND],
                **self.paths.profile.ports(),
            },
            "componentsPatches": [
                # etcd's fsync dominates write latency on a shared disk; this cluster is
                # disposable, so trade durability for speed.
                {"name": "etcd", "extraArgs": [{"key": "unsafe-no-fsync", "value": "true"}]},
                {
                    "name": "kube-controller-manager",
                    "extraArgs": [{"key": "controllers", "value": CONTROLLERS}],
                },
                {"name": "kube-apiserver", "extraArgs": KUBELET_ADDRESS_ARGS},
            ],
        }
        stages = resources.files("sparkllm_dev.devcluster").joinpath("stages.yaml").read_text()
        self.paths.kwokctl_config.write_text(
            yaml.safe_dump(kwokctl_config, sort_keys=False) + "---\n" + stages
        )

    def _require_free_ports(self) -> None:
        """A clear error when another process holds one of this cluster's ports."""
        profile = self.paths.profile
        for option, port in profile.ports().items():
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind(("0.0.0.0", port))
                except OSError as exc:
                    raise DevClusterError(
                        f"port {port} ({option} of the {profile.name} dev cluster) is in use: "
                        f"{exc.strerror}; stop what holds it (`ss -ltnp sport = :{port}`)"
                    ) from None

    def _delete_leftovers(self) -> None:
        if self._cluster_dir().exists():
            self.kwokctl("delete", "cluster", check=False, timeout=120)
        self._kill_leftover_processes()

    def _our_processes(self) -> list[tuple[str, int]]:
        """(binary name, pid) of this cluster's control-plane processes.

        kwokctl copies the binaries into its cluster directory and runs them from there; a
        process run from the shared bin directory is ours only when its command line names
        our cluster directory. Another profile's cluster (the demo's beside the tests') is
        never matched.
        """
        found = []
        ours = f"{self.paths.cluster_dir}{os.sep}"
        shared = f"{self.paths.bin_dir}{os.sep}"
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                exe = os.readlink(proc / "exe").removesuffix(" (deleted)")  # rebuilt binary
                if Path(exe).name not in _CONTROL_PLANE:
                    continue
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if exe.startswith(ours) or (exe.startswith(shared) and ours in cmdline):
                found.append((Path(exe).name, int(proc.name)))
        return found

    def _kill_leftover_processes(self) -> None:
        for _, pid in self._our_processes():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        wait_until(lambda: not self._our_processes(), timeout=30, what="control plane exit")


def _node_ready(node: dict[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _say(enabled: bool, message: str) -> None:
    if enabled:
        print(f"[devcluster] {message}", flush=True)


def _run(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    input: str | None = None,
    check: bool = True,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(
            list(cmd),
            check=False,
            env=env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DevClusterError(f"{Path(cmd[0]).name} failed to run: {exc}") from exc
    if check and result.returncode != 0:
        raise DevClusterError(
            f"{Path(cmd[0]).name} {' '.join(cmd[1:])} exited {result.returncode}: "
            f"{result.stderr.strip() or result.stdout.strip()}"
        )
    return result
