"""Local I/O helpers of the dev cluster's gateway pods: ports, Secret volumes, credentials.

Also the pure rewrites of the router's rendered args for running it on this machine
(``localize_router_args``, ``with_worker_url``), shared by the harness, tests and benches.

Split from ``gateway_pods`` (the supervisor) because these are the kubelet-like chores —
free loopback ports for the pod's listeners, a Secret volume in the kubelet's atomic
``..data`` layout, a kubeconfig that authenticates as the pod's ServiceAccount, and the
API calls behind them — and each can be tested on its own.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkllm.errors import ClusterAPIError
from sparkllm.sglang_contract.argv import flag_name, option_value, replace_option_values
from sparkllm_dev.devcluster import engine_io
from sparkllm_dev.devcluster.kubelet import JSON
from sparkllm_dev.errors import DevClusterError

SELECTOR = "app.kubernetes.io/component=gateway"
TOKEN_SECONDS = 2 * 3600
# Router flags whose values are the pod's own ports and addresses: rewritten to free
# loopback ports (several gateway pods, and other engineers, share this machine).
ROUTER_PORT_FLAGS = ("--port", "--health-check-port", "--prometheus-port")
ROUTER_HOST_FLAGS = ("--host", "--prometheus-host")
# Router flags of its Kubernetes discovery (a flag and the values that follow it).
ROUTER_DISCOVERY_FLAGS = frozenset(
    {
        "--service-discovery",
        "--selector",
        "--service-discovery-namespace",
        "--service-discovery-port",
    }
)


def free_port(host: str) -> int:
    """A port nothing listens on at ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def localize_router_args(args: Sequence[str], *, ports: Mapping[str, int]) -> list[str]:
    """The router's args with its listeners on 127.0.0.1 and the given ports.

    ``ports`` maps each flag of ``ROUTER_PORT_FLAGS`` present in ``args`` to a port. A flag
    may be written ``--port 1`` or ``--port=1``; the rewrite keeps the form, and a value
    attached to another flag (``--api-key=--port``) is never taken for a flag.
    """
    present = [flag for flag in ROUTER_PORT_FLAGS if option_value(args, flag) is not None]
    missing = [flag for flag in present if flag not in ports]
    if missing:
        raise DevClusterError(f"no local port for router flag {missing[0]}")
    values = {flag: "127.0.0.1" for flag in ROUTER_HOST_FLAGS}
    values |= {flag: str(ports[flag]) for flag in present}
    return replace_option_values(args, values)


def with_worker_url(args: Sequence[str], *, url: str) -> list[str]:
    """The router's args with Kubernetes discovery swapped for one fixed worker URL.

    For running smg outside a cluster (tests, benchmarks): each discovery flag is dropped
    with the values after it, in either form (``--selector a=b`` or ``--selector=a=b``).
    """
    out: list[str] = []
    skipping = False
    for word in args:
        name = flag_name(word)
        if name is not None:
            skipping = name in ROUTER_DISCOVERY_FLAGS
        if not skipping:
            out.append(word)
    return [*out, "--worker-urls", url]


def write_secret_volume(directory: Path, data: Mapping[str, bytes]) -> None:
    """Lay ``data`` out as the kubelet does: ``..data`` -> a timestamped dir, key -> ..data/key.

    The swap of ``..data`` is one atomic rename, so a reader never sees a half-written set.
    """
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    payload = Path(tempfile.mkdtemp(prefix=stamp, dir=directory))
    for key, value in data.items():
        (payload / key).write_bytes(value)
    link = directory / "..data_tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(payload.name)
    previous = os.readlink(directory / "..data") if (directory / "..data").is_symlink() else None
    os.replace(link, directory / "..data")
    for key in data:
        if not (directory / key).is_symlink():
            (directory / key).symlink_to(Path("..data") / key)
    for entry in directory.iterdir():
        if not entry.name.startswith("..") and entry.name not in data:
            entry.unlink()  # a key removed from the Secret
    if previous is not None:
        shutil.rmtree(directory / previous, ignore_errors=True)


def service_account_kubeconfig(dev_kubeconfig: Mapping[str, Any], *, token: str) -> JSON:
    """A kubeconfig for the dev cluster's API server that authenticates with ``token``."""
    contexts = {c["name"]: c["context"] for c in dev_kubeconfig.get("contexts") or []}
    current = contexts.get(str(dev_kubeconfig.get("current-context")))
    clusters = {c["name"]: c["cluster"] for c in dev_kubeconfig.get("clusters") or []}
    if current is None or current.get("cluster") not in clusters:
        raise DevClusterError("dev cluster kubeconfig has no usable current context")
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "gateway",
        "clusters": [{"name": "dev", "cluster": clusters[current["cluster"]]}],
        "users": [{"name": "gateway", "user": {"token": token}}],
        "contexts": [{"name": "gateway", "context": {"cluster": "dev", "user": "gateway"}}],
    }  # fmt: skip


class GatewayKube(engine_io.KubeClient):
    """The engine harness's API client, plus the calls a gateway pod needs."""

    def secret_data(self, name: str, *, namespace: str) -> dict[str, bytes] | None:
        try:
            secret = self._json(self.core.read_namespaced_secret, name, namespace)
        except ClusterAPIError as exc:
            if exc.status == 404:
                return None
            raise
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    def service_account_token(self, name: str, *, namespace: str) -> str:
        body = {"spec": {"audiences": [], "expirationSeconds": TOKEN_SECONDS}}
        create = self.core.create_namespaced_service_account_token
        return str(self._json(create, name, namespace, body)["status"]["token"])
