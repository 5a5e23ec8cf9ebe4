"""``spec.exposure`` as rendered (issue 21): each path's objects route to the admission
layer's Service, the TLS path changes only the gateway pod, the InferencePool selects the
serving rank-0 pods only, and every new kind is owned (pruned when no longer chosen).

The objects are checked against the real Gateway API, Ingress and Inference Extension
schemas by the API server in tests/integration/test_exposure_crds.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from sparkllm.api import InferenceCluster
from sparkllm.gateway.config import load_gateway_config
from sparkllm.keys import ANNOTATION_HASH, LABEL_SERVING
from sparkllm.offline import fresh_plan
from sparkllm.reconcile.decide.owned import OWNED, empty, to_prune
from sparkllm.render import ReplicaPlan, render_replica
from sparkllm.render.exposure import PROXY_TIMEOUT_SECONDS, TLS_DIR, render_exposure
from sparkllm.render.gateway import GATEWAY_HTTP_PORT, admission_env, render_gateway
from sparkllm.render.router import ROUTER_REQUEST_TIMEOUT_SECONDS, engine_discovery_selector
from sparkllm.sglang_contract.fields import ENGINE_HTTP_PORT
from tests.unit.reconcile_fixtures import SAMPLE
from tests.unit.test_render_gateway import ENGINE_KEY, IMAGE, NAME, NAMESPACE, UID, cluster

ROUTE = {"type": "HTTPRoute", "httpRoute": {
    "parentRefs": [{"name": "public", "namespace": "gateways", "sectionName": "https"}],
    "hostnames": ["llm.example.com"]}}  # fmt: skip
INGRESS = {"type": "Ingress", "ingress": {
    "className": "nginx", "host": "llm.example.com", "tlsSecretName": "llm-tls",
    "certManagerIssuer": {"name": "letsencrypt"}}}  # fmt: skip
TLS = {"type": "TLS", "tls": {"secretName": "llm-tls"}}
POOL = {"inferencePool": {"endpointPicker": {"name": "llm-epp"}}}


def objects(exposure: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    ic = cluster(exposure=exposure) if exposure is not None else cluster()
    rendered = render_gateway(ic, engine_key=ENGINE_KEY, gateway_image=IMAGE)
    return {o["kind"]: o for o in [*rendered, *render_exposure(ic)]}


def assert_owned(obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    assert (meta["name"], meta["namespace"]) == (NAME, NAMESPACE)
    assert meta["labels"]["sparkllm.io/cluster"] == NAME
    assert meta["ownerReferences"][0]["uid"] == UID
    assert ANNOTATION_HASH in meta["annotations"]


def test_cluster_ip_is_the_default_and_adds_nothing() -> None:
    kinds = set(objects())
    assert kinds == {"ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"}
    assert cluster().spec.exposure.type == "ClusterIP"


def test_http_route_sends_the_api_to_the_front_door_service() -> None:
    route = objects(ROUTE)["HTTPRoute"]
    assert_owned(route)
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["spec"]["parentRefs"] == ROUTE["httpRoute"]["parentRefs"]
    assert route["spec"]["hostnames"] == ["llm.example.com"]
    (rule,) = route["spec"]["rules"]
    assert rule["backendRefs"] == [{"name": NAME, "port": GATEWAY_HTTP_PORT}]
    # the API only (issue 25): not /health, /ready, nor anything else the port may serve
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/v1"}}]
    # a long generation is not cut by the proxy before the router's own timeout
    assert rule["timeouts"]["request"] == f"{PROXY_TIMEOUT_SECONDS}s"
    assert PROXY_TIMEOUT_SECONDS > ROUTER_REQUEST_TIMEOUT_SECONDS


def test_http_route_without_hostnames_takes_the_listeners() -> None:
    bare = {"type": "HTTPRoute", "httpRoute": {"parentRefs": [{"name": "public"}]}}
    route = objects(bare)["HTTPRoute"]
    assert "hostnames" not in route["spec"]
    assert route["spec"]["parentRefs"] == [{"name": "public"}]


def test_ingress_serves_tls_for_its_host_to_the_front_door() -> None:
    ingress = objects(INGRESS)["Ingress"]
    assert_owned(ingress)
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [{"hosts": ["llm.example.com"], "secretName": "llm-tls"}]
    (rule,) = spec["rules"]
    assert rule["host"] == "llm.example.com"
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/v1", "Prefix")  # the API only (issue 25)
    assert path["backend"]["service"] == {"name": NAME, "port": {"number": GATEWAY_HTTP_PORT}}
    annotations = ingress["metadata"]["annotations"]
    assert annotations["cert-manager.io/cluster-issuer"] == "letsencrypt"
    assert "cert-manager.io/issuer" not in annotations
    nginx = "nginx.ingress.kubernetes.io/"
    assert int(annotations[f"{nginx}proxy-read-timeout"]) > ROUTER_REQUEST_TIMEOUT_SECONDS
    assert annotations[f"{nginx}proxy-buffering"] == "off"
    # above the gateway's own cap: an oversized body gets the gateway's 413, not nginx's
    body_cap = int(annotations[f"{nginx}proxy-body-size"].removesuffix("m")) * 1024 * 1024
    assert body_cap > cluster().spec.admission.max_body_bytes


def test_ingress_with_a_namespaced_issuer_or_none() -> None:
    issuer = {**INGRESS["ingress"], "certManagerIssuer": {"kind": "Issuer", "name": "local"}}
    annotations = objects({"type": "Ingress", "ingress": issuer})["Ingress"]["metadata"][
        "annotations"
    ]
    assert annotations["cert-manager.io/issuer"] == "local"
    own = {
        k: v for k, v in INGRESS["ingress"].items() if k not in ("certManagerIssuer", "className")
    }
    plain = objects({"type": "Ingress", "ingress": own})["Ingress"]
    assert not any(k.startswith("cert-manager.io/") for k in plain["metadata"]["annotations"])
    assert "ingressClassName" not in plain["spec"]


def test_tls_changes_only_the_gateway_pod() -> None:
    rendered = objects(TLS)
    assert set(rendered) == set(objects())
    pod = rendered["Deployment"]["spec"]["template"]["spec"]
    (admission,) = [c for c in pod["containers"] if c["name"] == "admission"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert admission[probe]["httpGet"]["scheme"] == "HTTPS"
    assert {"name": "tls", "mountPath": TLS_DIR, "readOnly": True} in admission["volumeMounts"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "llm-tls"
    assert "subPath" not in str(admission["volumeMounts"])  # renewals must reach the pod
    # the env the pod gets is accepted by the gateway's own loader, as one pair
    ic = cluster(exposure=TLS)
    environ = {
        e["name"]: e.get("value", "from-a-secret") for e in admission_env(ic, engine_key=ENGINE_KEY)
    }
    config = load_gateway_config([], environ=environ)
    assert str(config.tls_cert_file) == f"{TLS_DIR}/tls.crt"
    assert str(config.tls_key_file) == f"{TLS_DIR}/tls.key"


def test_without_tls_the_probes_stay_http_and_no_tls_env() -> None:
    pod = objects()["Deployment"]["spec"]["template"]["spec"]
    (admission,) = [c for c in pod["containers"] if c["name"] == "admission"]
    assert admission["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
    assert not any("TLS" in e["name"] for e in admission["env"])


def rank_pod_labels(ic: InferenceCluster) -> dict[int, dict[str, str]]:
    plan = ReplicaPlan(
        index=0, group_key="a", nodes=("spark-a0", "spark-a1", "spark-a2"), rank0_ip="127.0.0.11",
        generation=3,
    )  # fmt: skip
    return {
        int(labels["sparkllm.io/rank"]): labels
        for o in render_replica(ic, plan=plan, engine_key=ENGINE_KEY)
        if o["kind"] == "StatefulSet"
        for labels in [o["spec"]["template"]["metadata"]["labels"]]
    }


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("exposure", [POOL, {**ROUTE, **POOL}], ids=["alone", "with-route"])
def test_inference_pool_selects_serving_rank_zero_only(exposure: dict[str, Any]) -> None:
    ic = cluster(exposure=exposure)
    pool = objects(exposure)["InferencePool"]
    assert_owned(pool)
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    selector = pool["spec"]["selector"]["matchLabels"]
    assert selector == engine_discovery_selector(NAME)  # what the front door's router sees
    pods = rank_pod_labels(ic)
    assert sorted(pods) == [0, 1, 2]
    assert [rank for rank, labels in pods.items() if matches(selector, labels)] == [0]
    draining = {**pods[0], LABEL_SERVING: "false"}  # a replica being scaled away
    assert not matches(selector, draining)
    assert pool["spec"]["targetPorts"] == [{"number": ENGINE_HTTP_PORT}]
    picker = pool["spec"]["endpointPickerRef"]
    assert picker == {"kind": "Service", "name": "llm-epp", "port": {"number": 9002},
                      "failureMode": "FailClose"}  # fmt: skip


@pytest.mark.parametrize("exposure", [ROUTE, INGRESS, POOL])
def test_every_exposure_kind_is_owned_and_pruned_when_no_longer_chosen(
    exposure: dict[str, Any],
) -> None:
    owned_kinds = {kind.kind for kind in OWNED}
    rendered = objects(exposure)
    extra = [o for kind, o in rendered.items() if kind not in objects()]
    assert extra
    assert {o["kind"] for o in extra} <= owned_kinds
    observed = empty()
    for obj in extra:
        observed.owned[obj["kind"]].append(obj)
    desired = list(objects().values())  # back to ClusterIP
    pruned = to_prune(desired, set(), observed)
    assert sorted((r.kind, r.name) for r in pruned) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in extra
    )


def test_a_pass_applies_the_exposure_last_after_the_ranks() -> None:
    """Where a CRD is missing only these objects fail to apply, not the replicas."""
    doc = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"]["namespace"] = NAMESPACE
    doc["spec"]["exposure"] = {**ROUTE, **POOL}
    plan = fresh_plan(doc, node_ips={})
    kinds = [obj["kind"] for obj in plan.apply]
    assert kinds[-2:] == ["HTTPRoute", "InferencePool"]
    assert "StatefulSet" in kinds[:-2]
