"""The setup every e2e test starts from: an InferenceCluster served through its front door.

Why one helper: each e2e test needs the same arrangement before it can show anything — a
users' Secret with alice's key, the InferenceCluster applied, ``GatewayPods`` running the
gateway pod's router and admission containers here, every replica Ready and smg routing
to every rank 0 — and two copies of those waits drifted apart once already.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.gateway_pods import GatewayInfo, GatewayPods
from tests.unit.gateway_fixtures import MODEL

DEADLINE = 180  # seconds; generous, the machine is busy
USERS_SECRET = "user-keys"
ENGINE_IMAGE = "nvcr.io/nvidia/sglang:26.07-py3"


@dataclass(frozen=True)
class Serving:
    """A served InferenceCluster: the gateway pods run here, the one gateway, alice's key."""

    gateways: GatewayPods
    gateway: GatewayInfo
    alice: str


def inference_cluster(
    name: str,
    *,
    model_dir: Path,
    groups: Sequence[Sequence[str]],
    engine: dict[str, Any] | None = None,
    admission: dict[str, Any] | None = None,
    monitoring: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An InferenceCluster of one replica per node group, PP 3, behind the admission layer.

    ``engine`` and ``admission`` add to (or replace) the fields of those sections;
    ``monitoring`` is ``spec.monitoring`` (the defaults when None).
    """
    return {
        "apiVersion": "sparkllm.io/v1alpha1",
        "kind": "InferenceCluster",
        "metadata": {"name": name},
        "spec": {
            "replicas": len(groups),
            "model": {"path": str(model_dir), "servedName": MODEL},
            "engine": {"image": ENGINE_IMAGE, "pipelineParallel": 3, **(engine or {})},
            "admission": {
                "apiKeysSecretRef": {"name": USERS_SECRET},
                "maxInputTokens": 8192,
                # `sparkllm bench` run by hand as alice sends ignore_eos (exact lengths);
                # the operator's Jobs present its own key, granted it without this
                "extensions": [{"parameter": "ignore_eos", "users": ["alice"]}],
                **(admission or {}),
            },
            "placement": {"nodeGroups": [list(group) for group in groups]},
            **({"monitoring": monitoring} if monitoring is not None else {}),
        },
    }


def ready_replicas(cluster: DevCluster, namespace: str, name: str) -> int:
    obj = cluster.kubectl_json("get", "icl", name, "-n", namespace)
    return int((obj.get("status") or {}).get("readyReplicas") or 0)


@contextmanager
def serve(
    cluster: DevCluster,
    namespace: str,
    *,
    name: str,
    model_dir: Path,
    groups: Sequence[Sequence[str]],
    log_dir: Path,
    engine: dict[str, Any] | None = None,
    admission: dict[str, Any] | None = None,
    monitoring: dict[str, Any] | None = None,
) -> Iterator[Serving]:
    """Apply ``name`` and wait until its front door routes to every replica.

    Needs the operator (and its engine harness) running for ``namespace``. The gateway
    containers' log tails are printed on the way out, shown when the test failed.
    """
    alice = secrets.token_urlsafe(24)
    cluster.kubectl(
        "create", "secret", "generic", USERS_SECRET, "-n", namespace,
        f"--from-literal=alice={alice}",
    )  # fmt: skip
    manifest = inference_cluster(
        name, model_dir=model_dir, groups=groups, engine=engine, admission=admission,
        monitoring=monitoring,
    )  # fmt: skip
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    replicas = len(groups)
    with GatewayPods(
        cluster, tokenizer_dir=model_dir, namespace=namespace, log_dir=log_dir
    ) as gateways:
        wait_until(
            lambda: ready_replicas(cluster, namespace, name) == replicas,
            timeout=DEADLINE,
            what=f"{replicas} ready replica(s)",
        )
        # The operator created the front door (Deployment, Service, RBAC) with the ranks.
        gateway: GatewayInfo = wait_until(
            lambda: next(iter(gateways.gateways()), None), timeout=DEADLINE, what="gateway pod run"
        )
        wait_until(
            lambda: httpx.get(f"{gateway.admission_url}/health", timeout=5).status_code == 200,
            timeout=DEADLINE,
            what="admission layer up",
        )
        wait_until(
            lambda: httpx.get(f"{gateway.router_url}/readiness", timeout=5).json().get(
                "healthy_workers"
            ) == replicas,
            timeout=DEADLINE,
            what="smg to discover every rank-0 engine",
        )  # fmt: skip
        try:
            yield Serving(gateways=gateways, gateway=gateway, alice=alice)
        finally:
            for log in sorted(gateway.log_dir.glob("*.log")):
                print(f"--- {log.name} (tail)\n" + "\n".join(log.read_text().splitlines()[-40:]))
