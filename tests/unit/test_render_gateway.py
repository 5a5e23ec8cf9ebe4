"""The gateway's objects as rendered: each test pins one property a reviewer cares about.

Rather than a frozen YAML file (rewritten on every knob change, then proving nothing):
the router's selector reaches rank 0 only, no key value anywhere, the admission env is
one the real config loader accepts with the spec's numbers, only the admission port is
exposed, and every router flag parses with smg 1.13.0's own argument parser.
"""

from __future__ import annotations

import copy
import re
from typing import Any
from unittest.mock import ANY

import pytest
from smg.launch_router import parse_router_args

from sparkllm.api import InferenceCluster, validate_inference_cluster
from sparkllm.errors import SpecError
from sparkllm.gateway.config import MaxTokensPolicy, load_gateway_config
from sparkllm.gateway_settings import ROUTER_PORT
from sparkllm.keys import ANNOTATION_HASH
from sparkllm.render import ReplicaPlan, render_replica
from sparkllm.render.gateway import (
    GATEWAY_HTTP_PORT,
    GATEWAY_METRICS_PORT,
    admission_env,
    render_gateway,
)
from sparkllm.render.names import BENCH_USER
from sparkllm.render.objects import desired_hash
from sparkllm.render.product_image import ProductImage
from sparkllm.render.ranks import EngineKeyRef
from sparkllm.render.router import ROUTER_LAUNCHER_CODE, engine_discovery_selector, router_args
from sparkllm.sglang_contract.command import launched_args
from sparkllm.sglang_contract.fields import ENGINE_API_KEY_ENV
from sparkllm_dev.devcluster.kubelet import expand_references

NAME, NAMESPACE, UID = "llm", "serving", "uid-123"
ENGINE_KEY = EngineKeyRef(secret="llm-engine-key", key="token")
IMAGE = ProductImage("registry.example/sparkllm:9.9.9")

BASE: dict[str, Any] = {
    "apiVersion": "sparkllm.io/v1alpha1",
    "kind": "InferenceCluster",
    "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": UID},
    "spec": {
        "replicas": 2,
        "model": {"path": "/models/DeepSeek-V4-Flash-NVFP4", "servedName": "deepseek-v4-flash"},
        "engine": {"image": "nvcr.io/nvidia/sglang:26.07-py3", "pipelineParallel": 3},
        "admission": {"apiKeysSecretRef": {"name": "llm-user-keys"}},
        "placement": {
            "nodeGroups": [
                ["spark-a0", "spark-a1", "spark-a2"],
                ["spark-b0", "spark-b1", "spark-b2"],
            ]
        },
    },
}


def cluster(**spec_changes: Any) -> InferenceCluster:
    doc = copy.deepcopy(BASE)
    for dotted, value in spec_changes.items():
        section, _, field = dotted.partition("__")
        if field:
            doc["spec"].setdefault(section, {})[field] = value
        else:
            doc["spec"][section] = value
    return validate_inference_cluster(doc)


def render(ic: InferenceCluster | None = None) -> dict[str, dict[str, Any]]:
    objects = render_gateway(ic or cluster(), engine_key=ENGINE_KEY, gateway_image=IMAGE)
    return {obj["kind"]: obj for obj in objects}


def pod_spec(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = objects["Deployment"]["spec"]["template"]["spec"]
    return spec


def container(objects: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    return next(c for c in pod_spec(objects)["containers"] if c["name"] == name)


def parsed_router(ic: InferenceCluster) -> Any:
    """The router's args, as its launcher hands them to smg with the key in its env,
    through smg 1.13.0's own parser (an unknown flag exits)."""
    environ = {ENGINE_API_KEY_ENV: "engine-key"}
    args = [expand_references(arg, environ) for arg in router_args(ic)]
    parsed = parse_router_args(launched_args(args, environ))
    parsed._validate_router_args()
    return parsed


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


# --- the objects ------------------------------------------------------------------------


def test_objects_in_apply_order_with_their_names() -> None:
    objects = render_gateway(cluster(), engine_key=ENGINE_KEY, gateway_image=IMAGE)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("ServiceAccount", f"{NAME}-gateway"),
        ("Role", f"{NAME}-gateway"),
        ("RoleBinding", f"{NAME}-gateway"),
        ("Deployment", NAME),
        ("Service", NAME),
    ]


def test_every_object_is_labelled_owned_and_stamped() -> None:
    for obj in render().values():
        meta = obj["metadata"]
        assert meta["namespace"] == NAMESPACE
        assert meta["labels"]["sparkllm.io/cluster"] == NAME
        assert meta["labels"]["app.kubernetes.io/component"] == "gateway"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "sparkllm.io/v1alpha1",
                "kind": "InferenceCluster",
                "name": NAME,
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        unstamped = copy.deepcopy(obj)
        del unstamped["metadata"]["annotations"]  # the gateway's objects carry no others
        assert meta["annotations"] == {ANNOTATION_HASH: desired_hash(unstamped)}


def test_rendering_is_deterministic_and_the_image_changes_only_the_deployment() -> None:
    first, again = render(), render()
    assert first == again
    other = {
        o["kind"]: o
        for o in render_gateway(
            cluster(), engine_key=ENGINE_KEY, gateway_image=ProductImage("other:1")
        )
    }
    changed = sorted(
        kind
        for kind in first
        if first[kind]["metadata"]["annotations"][ANNOTATION_HASH]
        != other[kind]["metadata"]["annotations"][ANNOTATION_HASH]
    )
    assert changed == ["Deployment"]


def test_rbac_allows_reading_pods_and_its_own_cluster_in_this_namespace_only() -> None:
    objects = render()
    # Issue 16: the admission layer reads its own InferenceCluster (and no other) to say
    # why no replica serves.
    assert objects["Role"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["sparkllm.io"],
            "resources": ["inferenceclusters"],
            "resourceNames": [NAME],
            "verbs": ["get"],
        },
    ]
    binding = objects["RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": f"{NAME}-gateway",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{NAME}-gateway", "namespace": NAMESPACE}
    ]
    spec = pod_spec(objects)
    assert spec["serviceAccountName"] == f"{NAME}-gateway"
    assert spec["automountServiceAccountToken"] is True  # smg's in-cluster config
    assert objects["ServiceAccount"]["automountServiceAccountToken"] is False  # opt-in per pod


# --- what the router routes to ---------------------------------------------------------


def test_router_discovers_rank_zero_engines_of_this_cluster_only() -> None:
    ic = cluster()
    router = parsed_router(ic)
    assert router.selected_discovery_provider() == "kubernetes"
    assert router.selector == engine_discovery_selector(NAME)
    assert router.service_discovery_namespace == NAMESPACE
    assert router.service_discovery_port == 30000
    assert router.policy == "cache_aware"
    plan = ReplicaPlan(
        index=1, group_key="b", nodes=("spark-b0", "spark-b1", "spark-b2"), rank0_ip="127.0.0.21",
        generation=1,
    )  # fmt: skip
    rank_pods = {
        int(o["spec"]["template"]["metadata"]["labels"]["sparkllm.io/rank"]): o["spec"]["template"]
        for o in render_replica(ic, plan=plan, engine_key=ENGINE_KEY)
        if o["kind"] == "StatefulSet"
    }
    labels = {rank: pod["metadata"]["labels"] for rank, pod in rank_pods.items()}
    assert [rank for rank in labels if matches(router.selector, labels[rank])] == [0]
    gateway_pod_labels = render()["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert not matches(router.selector, gateway_pod_labels)
    other_cluster = {**rank_pods[0]["metadata"]["labels"], "sparkllm.io/cluster": "other"}
    assert not matches(router.selector, other_cluster)


def test_router_listens_on_loopback_and_authenticates_to_engines_from_the_secret() -> None:
    router = parsed_router(cluster())
    assert (router.host, router.port) == ("127.0.0.1", ROUTER_PORT)
    assert router.health_check_port is not None
    assert router.api_key == "engine-key"  # what the launcher adds from the env
    ref = {"secretKeyRef": {"name": ENGINE_KEY.secret, "key": ENGINE_KEY.key}}
    assert container(render(), "router")["env"] == [{"name": ENGINE_API_KEY_ENV, "valueFrom": ref}]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {},
            {"max_concurrent_requests": 8, "queue_size": 32, "queue_timeout_secs": 60,
             "max_buffered_request_bytes": 1_048_576 + 65_536, "balance_abs_threshold": 2},
        ),
        (
            {"admission__maxConcurrentRequests": 3, "admission__queueSize": 0,
             "admission__queueTimeoutSeconds": 5, "admission__maxBodyBytes": 8_388_608,
             "engine__maxRunningRequests": 32},
            {"max_concurrent_requests": 3, "queue_size": 0, "queue_timeout_secs": 5,
             "max_buffered_request_bytes": 8_388_608 + 65_536, "balance_abs_threshold": 8},
        ),
        ({"engine__maxRunningRequests": 1}, {"balance_abs_threshold": 1}),
    ],
)  # fmt: skip
def test_router_limits_follow_the_spec(changes: dict[str, Any], expected: dict[str, int]) -> None:
    router = parsed_router(cluster(**changes))
    assert {field: getattr(router, field) for field in expected} == expected


def test_router_knobs_for_few_slow_replicas() -> None:
    router = parsed_router(cluster())
    assert router.retry_max_retries == 3  # attempts in total: another replica gets a try
    assert not router.disable_retries
    assert not router.disable_circuit_breaker
    assert router.cb_failure_threshold == 5
    assert router.health_check_endpoint == "/health"
    assert router.health_check_timeout_secs == 25  # SGLang's /health generates a token
    assert router.request_timeout_secs >= 1800  # 8K prompt: 44 s TTFT, long answers
    assert router.disable_tokenizer_autoload


# --- the admission layer ----------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"admission__maxInputTokens": 2048, "admission__maxTokensPolicy": "reject",
         "admission__maxConcurrentRequests": 2, "admission__queueSize": 4,
         "admission__queueTimeoutSeconds": 7, "admission__maxBodyBytes": 65_536,
         "engine__contextLength": 4096},
    ],
)  # fmt: skip
def test_admission_env_is_accepted_by_the_gateway_config_with_the_spec_numbers(
    changes: dict[str, Any],
) -> None:
    ic = cluster(**changes)
    env = admission_env(ic, engine_key=ENGINE_KEY)
    environ = {e["name"]: e.get("value", "resolved-by-kubelet") for e in env}
    config = load_gateway_config([], environ=environ)
    admission = ic.spec.admission
    assert config.served_model_name == "deepseek-v4-flash"
    assert config.max_input_tokens == admission.max_input_tokens
    assert config.context_length == ic.spec.engine.context_length
    assert config.max_tokens_policy is MaxTokensPolicy(admission.max_tokens_policy)
    assert config.max_concurrent_requests == admission.max_concurrent_requests
    assert config.queue_size == admission.queue_size
    assert config.queue_timeout_seconds == admission.queue_timeout_seconds
    assert config.max_body_bytes == admission.max_body_bytes
    assert str(config.tokenizer_dir) == ic.spec.model.path
    assert config.upstream_url == f"http://127.0.0.1:{ROUTER_PORT}"
    assert config.listen_port == GATEWAY_HTTP_PORT
    assert config.metrics_port == GATEWAY_METRICS_PORT  # the metrics' own port (issue 25)
    assert config.upstream_read_timeout_seconds > parsed_router(ic).request_timeout_secs
    # the object read to say why no replica serves (gateway/serving.py)
    assert (config.cluster_namespace, config.cluster_name) == (
        ic.metadata.namespace,
        ic.metadata.name,
    )


def test_the_engines_template_defaults_are_mirrored_into_the_admission_layer() -> None:
    """Issue 25: --default-chat-template-kwargs reaches the engine (extraArgs) AND the
    gateway's config, which counts with it; a value neither could use is InvalidSpec."""
    args = ["--default-chat-template-kwargs", '{"thinking": true, "reasoning_effort": "high"}']
    ic = cluster(engine__extraArgs=args)
    environ = {e["name"]: e.get("value", "x") for e in admission_env(ic, engine_key=ENGINE_KEY)}
    config = load_gateway_config([], environ=environ)
    assert config.default_chat_template_kwargs == {"thinking": True, "reasoning_effort": "high"}
    unset = {e["name"] for e in admission_env(cluster(), engine_key=ENGINE_KEY)}
    assert "SPARKLLM_GATEWAY_DEFAULT_CHAT_TEMPLATE_KWARGS" not in unset
    for value, problem in (
        ('["thinking"]', "must be a JSON object"),
        ('{"chat_template": "{{ 1 }}"}', "may not set 'chat_template'"),
        ("{thinking}", "is not JSON"),
    ):
        bad = cluster(engine__extraArgs=["--default-chat-template-kwargs", value])
        with pytest.raises(SpecError, match=f"spec.engine.extraArgs: .*{re.escape(problem)}"):
            admission_env(bad, engine_key=ENGINE_KEY)


def test_admission_mounts_keys_and_model_read_only_and_presents_the_engine_key() -> None:
    objects = render()
    admission = container(objects, "admission")
    mounts = {m["name"]: m for m in admission["volumeMounts"]}
    env = {e["name"]: e for e in admission["env"]}
    keys_dir = env["SPARKLLM_GATEWAY_API_KEYS_DIR"]["value"]
    assert mounts["user-keys"] == {"name": "user-keys", "mountPath": keys_dir, "readOnly": True}
    assert mounts["model"]["readOnly"] is True
    assert mounts["model"]["mountPath"] == env["SPARKLLM_GATEWAY_TOKENIZER_DIR"]["value"]
    volumes = {v["name"]: v for v in pod_spec(objects)["volumes"]}
    # The users' keys, and the operator's own Jobs' key as user sparkllm:bench, one file each.
    assert volumes["user-keys"]["projected"]["sources"] == [
        {"secret": {"name": "llm-user-keys"}},
        {"secret": {"name": f"{NAME}-bench-key", "items": [{"key": "token", "path": BENCH_USER}]}},
    ]
    assert env["SPARKLLM_GATEWAY_UPSTREAM_API_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": ENGINE_KEY.secret, "key": ENGINE_KEY.key}
    }


# --- where keys may and may not appear --------------------------------------------------


def _walk(node: Any, key: str) -> list[Any]:
    """Every value stored under ``key`` anywhere in ``node``."""
    if isinstance(node, dict):
        found = [node[key]] if key in node else []
        return found + [v for child in node.values() for v in _walk(child, key)]
    if isinstance(node, list):
        return [v for child in node for v in _walk(child, key)]
    return []


def test_keys_are_only_referenced_never_written() -> None:
    objects = list(render().values())
    engine_ref = {"name": ENGINE_KEY.secret, "key": ENGINE_KEY.key}
    assert _walk(objects, "secretKeyRef") == [engine_ref, engine_ref]  # admission, router
    assert _walk(objects, "secret") == [
        {"name": "llm-user-keys"},
        {"name": f"{NAME}-bench-key", "items": [{"key": "token", "path": BENCH_USER}]},
    ]
    assert _walk(objects, "projected") == [{"sources": ANY, "defaultMode": 0o440}]
    for name in ("admission", "router"):
        for env_var in container(render(), name)["env"]:
            if "valueFrom" in env_var:
                assert set(env_var) == {"name", "valueFrom"}
            else:
                assert isinstance(env_var["value"], str)  # Kubernetes wants strings
                assert not env_var["name"].endswith("_KEY")  # a key is never a literal
    router = container(render(), "router")
    assert router["command"] == ["python", "-c", ROUTER_LAUNCHER_CODE, "launch"]
    words = [router["command"][-1], *router["args"]]  # [2] is the launcher's code
    assert not [word for word in words if "api-key" in word or "$(" in word]  # issue 25


# --- exposure, placement, hardening ----------------------------------------------------


def test_only_the_admission_layer_is_exposed() -> None:
    objects = render()
    service = objects["Service"]["spec"]
    assert service["ports"] == [
        {"name": "http", "port": GATEWAY_HTTP_PORT, "targetPort": "http", "protocol": "TCP"}
    ]
    assert service["selector"] == objects["Deployment"]["spec"]["selector"]["matchLabels"]
    assert matches(
        service["selector"], objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    )
    admission = container(objects, "admission")
    assert admission["ports"] == [
        {"name": "http", "containerPort": GATEWAY_HTTP_PORT, "protocol": "TCP"},
        # /metrics (series per user, issue 25): on the pod for Prometheus, in no Service
        {"name": "metrics", "containerPort": GATEWAY_METRICS_PORT, "protocol": "TCP"},
    ]
    router_ports = [p["name"] for p in container(objects, "router")["ports"]]
    assert router_ports == ["router-metrics"]  # scraped by Prometheus, not in the Service
    assert objects["Deployment"]["spec"]["replicas"] == 1


@pytest.mark.parametrize(
    ("changes", "expected_terms"),
    [
        (
            {},
            [[("metadata.name", node)] for node in
             ["spark-a0", "spark-a1", "spark-a2", "spark-b0", "spark-b1", "spark-b2"]],
        ),
        ({"model__persistentVolumeClaim": {"claimName": "weights"}}, None),
    ],
)  # fmt: skip
def test_hostpath_model_keeps_the_gateway_on_model_nodes(
    changes: dict[str, Any], expected_terms: list[list[tuple[str, str | None]]] | None
) -> None:
    spec = pod_spec(render(cluster(**changes)))
    model = next(v for v in spec["volumes"] if v["name"] == "model")
    if expected_terms is None:
        assert "affinity" not in spec
        assert model["persistentVolumeClaim"] == {"claimName": "weights", "readOnly": True}
        return
    assert model["hostPath"] == {"path": "/models/DeepSeek-V4-Flash-NVFP4", "type": "Directory"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    seen = [
        [(req["key"], (req.get("values") or [None])[0]) for req in term.get("matchFields", [])]
        + [(req["key"], None) for req in term.get("matchExpressions", [])]
        for term in terms
    ]
    assert seen == expected_terms


def test_label_placement_keeps_the_gateway_on_nodes_running_its_own_ranks() -> None:
    """Issue 25: "any node with the group label" let the front door land on another
    object's group, which holds another model. Only nodes where this object's rank pods
    run qualify; the selector matches those pods and no other object's."""
    ic = cluster(placement={"nodeGroupLabel": "example.com/group"})
    spec = pod_spec(render(ic))
    assert list(spec["affinity"]) == ["podAffinity"]
    (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    selector = term["labelSelector"]["matchLabels"]
    plan = ReplicaPlan(index=0, group_key="a", nodes=("n0", "n1", "n2"), rank0_ip="10.0.0.1",
                       generation=1)  # fmt: skip
    ranks = [o for o in render_replica(ic, plan=plan, engine_key=ENGINE_KEY)
             if o["kind"] == "StatefulSet"]  # fmt: skip
    assert len(ranks) == 3
    assert all(matches(selector, r["spec"]["template"]["metadata"]["labels"]) for r in ranks)
    doc = copy.deepcopy(BASE)
    doc["metadata"]["name"] = "other"
    doc["spec"]["placement"] = {"nodeGroupLabel": "example.com/group"}
    other = validate_inference_cluster(doc)
    other_ranks = render_replica(other, plan=plan, engine_key=ENGINE_KEY)
    assert not any(
        matches(selector, r["spec"]["template"]["metadata"]["labels"])
        for r in other_ranks
        if r["kind"] == "StatefulSet"
    )
    gateway_labels = render(ic)["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert not matches(selector, gateway_labels)  # not satisfied by itself


def test_containers_run_non_root_with_read_only_root() -> None:
    spec = pod_spec(render())
    assert spec["securityContext"]["runAsNonRoot"] is True
    for item in spec["containers"]:
        security = item["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert item["image"] == IMAGE.reference
        assert "livenessProbe" in item
        assert item["resources"]["limits"]["memory"]
        assert "nvidia.com/gpu" not in item["resources"]["requests"]
    assert "hostNetwork" not in spec
