"""spec.exposure's objects and the autoscaling samples, judged by a real API server with
the real CRDs (issue 21), and the InferencePool's endpoints through a gang restart.

The Gateway API (standard channel), Gateway API Inference Extension and KEDA CRDs, pinned
and fetched from the Go module proxy by hack/fetch-gateway-crds.sh, are installed on the
dev cluster for this module only. Every path's rendered objects — HTTPRoute, Ingress, the
TLS gateway Deployment, InferencePool — are created with a server-side dry run and strict
field validation (an unknown field is an error); controls show the schemas really apply.
The HPA (autoscaling/v2 is built in) and the KEDA ScaledObject samples are checked the
same way. Why not an HPA e2e: that needs a metrics pipeline (Prometheus and an adapter
serving external.metrics.k8s.io) the dev cluster does not run — see docs/exposure.md.

Then the real operator serves a cluster with an InferencePool: the pods its selector
picks are rank 0 only, Ready, and after a gang restart the new rank-0 pod, not the old.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm.api import validate_inference_cluster
from sparkllm.render.exposure import render_exposure
from sparkllm.render.gateway import render_gateway
from sparkllm.render.product_image import ProductImage
from sparkllm.render.ranks import EngineKeyRef
from sparkllm_dev.devcluster import DevCluster, FaultInjector, wait_until
from sparkllm_dev.devcluster.paths import cache_root
from sparkllm_dev.testing import OperatorProcess
from tests.integration.test_faults import GROUP_A, rank_pod, ready_at, start
from tests.integration.test_reconcile import NAME, apply, sample
from tests.unit.test_render_exposure import INGRESS, POOL, ROUTE, TLS
from tests.unit.tooling import filled

pytestmark = pytest.mark.cluster
ROOT = Path(__file__).resolve().parents[2]
# = hack/fetch-gateway-crds.sh
PINS = "gateway-api-v1.3.0-gie-v1.0.0-keda-v2.17.0"
GROUPS = ("gateway.networking.k8s.io", "inference.networking.k8s.io", "keda.sh")
AUTOSCALING = sorted((ROOT / "manifests" / "samples" / "autoscaling").glob("*.yaml"))


def crd_files() -> list[Path]:
    path = cache_root() / "front-door-crds" / PINS
    how = "run `bash hack/fetch-gateway-crds.sh` (setup-test-tools.sh does)"
    return sorted(filled(path, marker=".complete", how=how).glob("*.yaml"))


@pytest.fixture(scope="module")
def front_door_crds(devcluster: DevCluster) -> Iterator[None]:
    args = [a for path in crd_files() for a in ("-f", str(path))]
    try:  # removed even when setup fails half-way: later files assume a cluster without them
        devcluster.kubectl("apply", "--server-side", "--force-conflicts", *args)
        for path in crd_files():
            name = yaml.safe_load(path.read_text())["metadata"]["name"]
            devcluster.wait_established(name)
        yield
    finally:
        devcluster.kubectl("delete", "--wait=true", "--ignore-not-found", *args, timeout=120)

        def gone() -> bool:
            served = devcluster.kubectl("api-versions", check=False).stdout
            return not any(group in served for group in GROUPS)

        wait_until(gone, timeout=60, what="the front-door API groups to go away")


def dry_run(cluster: DevCluster, namespace: str, objs: list[dict[str, Any]]) -> tuple[int, str]:
    result = cluster.kubectl(
        "create", "--dry-run=server", "--validate=strict", "-o", "name", "-n", namespace,
        "-f", "-",
        input=yaml.safe_dump_all(objs),
        check=False,
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def rendered(namespace: str, exposure: dict[str, Any]) -> list[dict[str, Any]]:
    doc = sample(GROUP_A)
    doc["metadata"].update(namespace=namespace, uid="00000000-0000-0000-0000-000000000021")
    doc["spec"]["exposure"] = exposure
    ic = validate_inference_cluster(doc)
    key = EngineKeyRef(secret=f"{NAME}-engine-key", key="token")
    return [
        *render_gateway(ic, engine_key=key, gateway_image=ProductImage("sparkllm:test")),
        *render_exposure(ic),
    ]


@pytest.mark.parametrize(
    ("exposure", "kinds"),
    [
        (ROUTE, {"HTTPRoute"}),
        (INGRESS, {"Ingress"}),
        (TLS, set()),
        ({**ROUTE, **POOL}, {"HTTPRoute", "InferencePool"}),
    ],
    ids=["httproute", "ingress", "tls", "httproute-and-pool"],
)
def test_each_exposure_path_is_accepted_by_the_api_server(
    devcluster: DevCluster,
    front_door_crds: None,
    namespace: str,
    exposure: dict[str, Any],
    kinds: set[str],
) -> None:
    objs = rendered(namespace, exposure)
    assert kinds <= {o["kind"] for o in objs}
    code, output = dry_run(devcluster, namespace, objs)
    assert code == 0, output
    print(output)
    accepted = set(output.split())
    for obj in objs:
        group = obj["apiVersion"].rpartition("/")[0]
        resource = f"{obj['kind'].lower()}.{group}" if group else obj["kind"].lower()
        assert f"{resource}/{obj['metadata']['name']}" in accepted, output


def test_the_crd_schemas_really_apply(
    devcluster: DevCluster, front_door_crds: None, namespace: str
) -> None:
    """Controls: objects the real schemas must refuse are refused, naming the field."""
    by_kind = {o["kind"]: o for o in rendered(namespace, {**ROUTE, **POOL})}
    route = by_kind["HTTPRoute"]
    route["spec"]["rules"][0]["timeouts"]["request"] = "forever"
    pool = by_kind["InferencePool"]
    pool["spec"]["targetPorts"].append({"number": 8001})  # the pool takes one port
    scaled = yaml.safe_load(AUTOSCALING[-1].read_text())
    scaled["spec"]["cooldown"] = 3600  # a typo of cooldownPeriod
    for obj, field in (
        (route, "timeouts.request"),
        (pool, "targetPorts"),
        (scaled, "cooldown"),
    ):
        code, output = dry_run(devcluster, namespace, [obj])
        assert code != 0, f"{obj['kind']} was accepted: {output}"
        assert field in output, output


def test_the_autoscaling_samples_are_accepted(
    devcluster: DevCluster, front_door_crds: None, namespace: str
) -> None:
    objs = [yaml.safe_load(path.read_text()) for path in AUTOSCALING]
    assert sorted(o["kind"] for o in objs) == ["HorizontalPodAutoscaler", "ScaledObject"]
    for obj in objs:
        target = obj["spec"]["scaleTargetRef"]
        assert (target["apiVersion"], target["kind"]) == (
            "sparkllm.io/v1alpha1",
            "InferenceCluster",
        )
    code, output = dry_run(devcluster, namespace, objs)
    assert code == 0, output
    assert "horizontalpodautoscaler.autoscaling/deepseek-v4-flash" in output
    assert "scaledobject.keda.sh/deepseek-v4-flash" in output


def pool_members(cluster: DevCluster, namespace: str) -> list[dict[str, Any]]:
    """The pods the live InferencePool's selector picks, as an inference gateway lists them."""
    pool = cluster.kubectl_json("get", "inferencepools.inference.networking.k8s.io", NAME,
                                "-n", namespace)  # fmt: skip
    labels = pool["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    items: list[dict[str, Any]] = cluster.kubectl_json(
        "get", "pods", "-n", namespace, "-l", selector
    )["items"]
    return items


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_inference_pool_endpoints_follow_a_gang_restart(
    devcluster: DevCluster,
    front_door_crds: None,
    namespace: str,
    shared_operator: OperatorProcess,
    faults: FaultInjector,
) -> None:
    doc = sample(GROUP_A)
    doc["spec"]["exposure"] = POOL
    start(devcluster, namespace, doc)
    members = wait_until(
        lambda: [p for p in pool_members(devcluster, namespace) if is_ready(p)] or None,
        timeout=60,
        what="the InferencePool to select a Ready pod",
    )
    assert members is not None
    (before,) = members
    assert before["metadata"]["name"] == rank_pod(devcluster, namespace, 0)
    faults.delete_pod(namespace=namespace, pod=rank_pod(devcluster, namespace, 1))
    wait_until(ready_at(devcluster, namespace, 2), timeout=90, what="Ready at generation 2")
    (after,) = pool_members(devcluster, namespace)
    assert after["metadata"]["name"] == rank_pod(devcluster, namespace, 0)
    assert after["metadata"]["uid"] != before["metadata"]["uid"], "still the old rank 0"
    assert after["metadata"]["labels"]["sparkllm.io/restart-generation"] == "2"
    assert is_ready(after)
    # Not chosen any more: the pool is pruned like every owned object.
    apply(devcluster, namespace, sample(GROUP_A))
    wait_until(
        lambda: devcluster.kubectl(
            "get", "inferencepools.inference.networking.k8s.io", NAME, "-n", namespace,
            check=False,
        ).returncode != 0,
        timeout=60,
        what="the InferencePool to be pruned",
    )  # fmt: skip
