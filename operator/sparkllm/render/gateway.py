"""The front door of one InferenceCluster ``N``: RBAC, Deployment and Service ``N``.

One pod, two containers. ``admission`` (``python -m sparkllm.gateway``) is the only thing
exposed: auth, the token cap, the window, the queue. Behind it on the pod's loopback,
``router`` (``smg launch``, the SGLang model gateway) routes over the replicas' rank-0
pods with the cache-aware policy, finding them by Kubernetes service discovery; ranks
> 0 never match its selector, so nothing routes to them. smg watches pods with its own
ServiceAccount ``N-gateway``, allowed get/list/watch on pods in this namespace only.

The router's own command line and the reasons for each of its knobs are in
``render/router.py``; this module builds the Kubernetes objects around the two containers.

Why the model directory is mounted: the admission layer counts tokens with the model's
own ``tokenizer.json`` and chat template, which live beside the weights. It is mounted
read-only exactly as the ranks mount it; with a hostPath, the pod is therefore kept on
this object's own nodes, which hold the model (``render/model_access.py``). Its security
settings (non-root 65532, no capabilities, read-only root) are ``render/pod_security.py``'s.

Who may call: the users' keys (``spec.admission.apiKeysSecretRef``) and one key the
operator generates for its own benchmark and acceptance Jobs (``N-bench-key``), mounted
together as one directory (``user_keys_volume``). That identity, ``sparkllm:bench``, is
the one the front door lets send what the runs need (``ignore_eos``) beyond the spec's
grants (``extension_grants``); no user gains an extension from it.

Pure: no I/O, no clock. Keys never appear in the output: ``$(VAR)`` in args, VAR from a
``secretKeyRef``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from sparkllm.api import GROUP, PLURAL, AdmissionSpec, InferenceCluster
from sparkllm.gateway_settings import (
    GATEWAY_HTTP_PORT,
    GATEWAY_METRICS_PORT,
    LISTEN_ALL_ADDRESSES,
    ROUTER_HOST,
    ROUTER_PORT,
    SETTINGS,
    Setting,
    env_var_name,
    governance_key_prefix,
)
from sparkllm.keys import ANNOTATION_MODEL_DIGEST, LABEL_CLUSTER
from sparkllm.render.exposure import (
    gateway_probe_scheme,
    gateway_tls_mounts,
    gateway_tls_settings,
    gateway_tls_volumes,
)
from sparkllm.render.model_access import model_node_affinity, model_tolerations, model_volume
from sparkllm.render.names import (
    BENCH_EXTENSIONS,
    BENCH_KEY,
    BENCH_USER,
    COMPONENT_GATEWAY,
    LABEL_COMPONENT,
    bench_key_secret_name,
    cluster_labels,
    gateway_name,
    owner_reference,
)
from sparkllm.render.objects import JSON, render_template, stamp_hash
from sparkllm.render.pod_security import RESTRICTED_CONTAINER_SECURITY, restricted_pod_security
from sparkllm.render.product_image import ProductImage
from sparkllm.render.ranks import EngineKeyRef
from sparkllm.render.router import (
    ROUTER_COMMAND,
    ROUTER_LIVENESS_COMMAND,
    ROUTER_METRICS_PORT,
    ROUTER_REQUEST_TIMEOUT_SECONDS,
    router_args,
)
from sparkllm.sglang_contract.fields import ENGINE_API_KEY_ENV
from sparkllm.sglang_contract.guarded import mirrored_settings

USER_KEYS_DIR: Final = "/etc/sparkllm/user-keys"
# The governance policy's ConfigMap, mounted as a directory (not subPath) so the kubelet
# swaps the file in place when the ConfigMap changes and the gateway re-reads it.
GOVERNANCE_DIR: Final = "/etc/sparkllm/governance"
GOVERNANCE_FILE: Final = "policy.yaml"
ADMISSION_COMMAND: Final = ("python", "-m", "sparkllm.gateway")
# Replicas: spec.gateway.replicas (default 1). More than one only with a shared
# governance store (api/governance_store.py), which keeps spec.admission's limits
# "across all replicas"; smg's cache-aware view stays per pod.
# A rollout waits this long after the new pod is Ready: smg lists the rank-0 pods and
# registers them in about a second; the old pod keeps serving meanwhile.
MIN_READY_SECONDS: Final = 5
# Longer than smg's and uvicorn's own drain (render/router.py: SHUTDOWN_GRACE_SECONDS).
TERMINATION_GRACE_SECONDS: Final = 300
PRE_STOP_SLEEP_SECONDS: Final = 5  # let the Service drop the pod before it stops accepting


def gateway_rbac_name(cluster: str) -> str:
    """ServiceAccount, Role and RoleBinding of the gateway."""
    return f"{cluster}-gateway"


def gateway_selector_labels(cluster: str) -> dict[str, str]:
    """The gateway Deployment's (immutable) selector and its Service's."""
    return {LABEL_CLUSTER: cluster, LABEL_COMPONENT: COMPONENT_GATEWAY}


def _secret_env(name: str, ref: EngineKeyRef) -> JSON:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}}


def admission_env(ic: InferenceCluster, *, engine_key: EngineKeyRef) -> list[JSON]:
    """``SPARKLLM_GATEWAY_*`` for the admission layer (names from GatewayConfig's fields).

    The router enforces its ``--api-key`` on its own clients too, so the admission layer
    presents the engine key upstream (``upstream_api_key``); users' keys never leave it.
    """
    spec = ic.spec
    admission = spec.admission
    settings = {
        "upstream_url": f"http://{ROUTER_HOST}:{ROUTER_PORT}",
        "listen_host": LISTEN_ALL_ADDRESSES,
        "listen_port": GATEWAY_HTTP_PORT,
        # /metrics only here (its series name users): a container port in no Service.
        "metrics_port": GATEWAY_METRICS_PORT,
        "served_model_name": spec.model.served_name,
        # The spec's settings, one row each in gateway_settings.SETTINGS (name, variable).
        **{row.field: value for row in SETTINGS if _rendered(row, value := row.read(spec))},
        "api_keys_dir": USER_KEYS_DIR,
        "tokenizer_dir": spec.model.path,
        # Read when the router has no replica, to say why in the 503 (gateway/serving.py).
        "cluster_name": ic.metadata.name,
        "cluster_namespace": ic.metadata.namespace or "default",
        # Silence before the admission layer gives up: longer than the router's own
        # request timeout, so the router's (clearer) timeout is the one that fires.
        "upstream_read_timeout_seconds": ROUTER_REQUEST_TIMEOUT_SECONDS + 60,
    }
    if spec.engine.tool_call_parser is not None:  # deepseekv4: count as SGLang encodes
        settings["tool_call_parser"] = spec.engine.tool_call_parser
    # Engine flags that change the prompt and are mirrored, not refused: the count uses
    # them as the engine does (--default-chat-template-kwargs; sglang_contract/guarded.py).
    settings.update(mirrored_settings(spec.engine.extra_args))
    settings.update(_request_policy(admission))
    settings["extensions"] = json.dumps(extension_grants(admission), separators=(",", ":"))
    if admission.governance.policy_config_map_ref is not None:
        settings["governance_policy_path"] = f"{GOVERNANCE_DIR}/{GOVERNANCE_FILE}"
    settings.update(gateway_tls_settings(ic))  # spec.exposure.type TLS
    settings.update(_governance_store(ic))
    env: list[JSON] = [{"name": env_var_name(k), "value": str(v)} for k, v in settings.items()]
    env.append(_secret_env(env_var_name("upstream_api_key"), engine_key))
    redis = spec.gateway.governance_store.redis
    if redis is not None and redis.password_secret_ref is not None:
        ref = redis.password_secret_ref
        password = EngineKeyRef(secret=ref.name, key=ref.key)
        env.append(_secret_env(env_var_name("governance_redis_password"), password))
    return env


def _governance_store(ic: InferenceCluster) -> dict[str, object]:
    """The shared governance store, when one is configured (default: none, in process).

    The key prefix carries the cluster's namespace and name (``governance_key_prefix``),
    so several InferenceClusters may share one Redis.
    """
    redis = ic.spec.gateway.governance_store.redis
    if redis is None:
        return {}
    namespace = ic.metadata.namespace or "default"
    settings: dict[str, object] = {
        "governance_redis_address": redis.address,
        "governance_key_prefix": governance_key_prefix(namespace, ic.metadata.name),
    }
    if redis.database:
        settings["governance_redis_database"] = redis.database
    return settings


def _rendered(row: Setting, value: object) -> bool:
    """Whether a setting's variable is written: always, or (``omit_default``) only when
    the spec differs from the default the gateway has too."""
    return not row.omit_default or value != row.default


def _request_policy(admission: AdmissionSpec) -> dict[str, object]:
    """The tool-calling features let through.

    Only what differs from the gateway's default (the same as the spec's: no tool-calling
    feature beyond plain tools), so a default spec renders as before.
    """
    settings: dict[str, object] = {}
    if admission.tool_calling:
        settings["tool_calling"] = ",".join(admission.tool_calling)
    return settings


def extension_grants(admission: AdmissionSpec) -> dict[str, list[str]]:
    """Extension -> the users it is enabled for ([]: every user): the spec's grants, plus
    what the operator's own benchmark and acceptance runs send, for their identity only.

    A grant to every user already covers the runs' identity; no other user gains anything.
    """
    grants = {grant.parameter: list(grant.users) for grant in admission.extensions}
    for parameter in BENCH_EXTENSIONS:
        if parameter not in grants:
            grants[parameter] = [BENCH_USER]
        elif grants[parameter]:  # named users ([] is every user, the runs' identity too)
            grants[parameter] = [*grants[parameter], BENCH_USER]
    return grants


def _http_probe(path: str, *, scheme: str, period: int, timeout: int, failures: int) -> JSON:
    return {
        "httpGet": {"path": path, "port": "http", "scheme": scheme},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }


def _admission(ic: InferenceCluster, *, engine_key: EngineKeyRef) -> JSON:
    model_path = ic.spec.model.path
    scheme = gateway_probe_scheme(ic)
    return {
        "command": list(ADMISSION_COMMAND),
        "env": admission_env(ic, engine_key=engine_key),
        "port": GATEWAY_HTTP_PORT,
        "metrics_port": GATEWAY_METRICS_PORT,
        "resources": {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"memory": "2Gi"},
        },
        # /health answers once config, tokenizer, template and keys are loaded. Readiness
        # does not follow the engines: with none up, users get the admission layer's 503
        # that says why (gateway/serving.py), not a connection refused by the Service.
        "probes": {
            "startup": _http_probe("/health", scheme=scheme, period=2, timeout=2, failures=90),
            "readiness": _http_probe("/health", scheme=scheme, period=5, timeout=2, failures=2),
            "liveness": _http_probe("/health", scheme=scheme, period=10, timeout=5, failures=6),
        },
        "volume_mounts": [
            {"name": "user-keys", "mountPath": USER_KEYS_DIR, "readOnly": True},
            {"name": "model", "mountPath": model_path, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
            *_governance_mounts(ic),
            *gateway_tls_mounts(ic),
        ],
    }


def _router(ic: InferenceCluster, *, engine_key: EngineKeyRef) -> JSON:
    return {
        "command": list(ROUTER_COMMAND),
        "args": router_args(ic),
        "env": [_secret_env(ENGINE_API_KEY_ENV, engine_key)],
        "metrics_port": ROUTER_METRICS_PORT,
        "resources": {
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "limits": {"memory": "2Gi"},
        },
        # smg listens on loopback only, where the kubelet's httpGet cannot reach: exec.
        "probes": {
            "liveness": {
                "exec": {"command": list(ROUTER_LIVENESS_COMMAND)},
                "initialDelaySeconds": 10,
                "periodSeconds": 10,
                "timeoutSeconds": 5,
                "failureThreshold": 3,
            }
        },
        "volume_mounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def _rbac(rbac: str, cluster: str, common: Mapping[str, object]) -> list[JSON]:
    """The gateway pod's ServiceAccount: smg gets/lists/watches pods here; the admission
    layer gets its own InferenceCluster (only that one), to say why no replica serves."""
    service_account = render_template("gateway_serviceaccount.yaml.j2", name=rbac, **common)
    rules: list[JSON] = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": [GROUP],
            "resources": [PLURAL],
            "resourceNames": [cluster],
            "verbs": ["get"],
        },
    ]
    role = render_template("gateway_role.yaml.j2", name=rbac, rules=rules, **common)
    binding = render_template(
        "gateway_rolebinding.yaml.j2", name=rbac, role=rbac, service_account=rbac, **common
    )
    return [service_account, role, binding]


def _governance_mounts(ic: InferenceCluster) -> list[JSON]:
    if ic.spec.admission.governance.policy_config_map_ref is None:
        return []
    return [{"name": "governance", "mountPath": GOVERNANCE_DIR, "readOnly": True}]


def user_keys_volume(ic: InferenceCluster) -> JSON:
    """The users' keys and the operator's own Jobs' key as one directory, one file per user.

    A projected volume: every data key of the users' Secret (file name = user id), and the
    key the operator generated for its benchmark and acceptance Jobs as ``BENCH_USER`` (a
    name no data key can take). The kubelet updates both in place; the gateway reloads.
    """
    users = {"secret": {"name": ic.spec.admission.api_keys_secret_ref.name}}
    bench = {
        "secret": {
            "name": bench_key_secret_name(ic.metadata.name),
            "items": [{"key": BENCH_KEY, "path": BENCH_USER}],
        }
    }
    return {"name": "user-keys", "projected": {"sources": [users, bench], "defaultMode": 0o440}}


def _volumes(ic: InferenceCluster, model_digest: str | None) -> list[JSON]:
    volumes = [
        user_keys_volume(ic),
        model_volume(ic, model_digest),
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        *gateway_tls_volumes(ic),
    ]
    ref = ic.spec.admission.governance.policy_config_map_ref
    if ref is not None:
        # optional: a missing ConfigMap must not hold the pod in ContainerCreating; the
        # gateway then answers 503 naming the missing policy (fail closed) until it exists.
        policy = {"name": ref.name, "items": [{"key": ref.key, "path": GOVERNANCE_FILE}]}
        volumes.append({"name": "governance", "configMap": {**policy, "optional": True}})
    return volumes


# A dead node should not hold the front door for the default five minutes.
NODE_FAILURE_TOLERATIONS: Final[list[JSON]] = [
    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
]


def gateway_tolerations(ic: InferenceCluster) -> list[JSON]:
    """The GPU taint only with a hostPath model (the pod must run on a Spark), then the
    shortened node-failure ones."""
    return [*model_tolerations(ic), *NODE_FAILURE_TOLERATIONS]


def _deployment(
    ic: InferenceCluster, *, rbac: str, common: Mapping[str, object], engine_key: EngineKeyRef,
    gateway_image: ProductImage, model_digest: str | None,
) -> JSON:  # fmt: skip
    name = ic.metadata.name
    deployment = render_template(
        "gateway_deployment.yaml.j2",
        name=gateway_name(name),
        replicas=ic.spec.gateway.replicas,
        min_ready_seconds=MIN_READY_SECONDS,
        selector=gateway_selector_labels(name),
        pod_labels=common["labels"],
        service_account=rbac,
        termination_grace_seconds=TERMINATION_GRACE_SECONDS,
        pod_security=restricted_pod_security(fs_group=True),
        container_security=RESTRICTED_CONTAINER_SECURITY,
        affinity=model_node_affinity(ic),
        tolerations=gateway_tolerations(ic),
        image=gateway_image.reference,
        pull_policy=gateway_image.pull_policy,
        pull_secrets=gateway_image.pod_pull_secrets(),
        admission=_admission(ic, engine_key=engine_key),
        router=_router(ic, engine_key=engine_key),
        pre_stop={"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_SECONDS}}},
        **common,
        volumes=_volumes(ic, model_digest),
    )
    if model_digest is not None and ic.spec.model.source is not None:
        deployment["metadata"]["annotations"] = {ANNOTATION_MODEL_DIGEST: model_digest}
    return deployment


def render_gateway(
    ic: InferenceCluster,
    *,
    engine_key: EngineKeyRef,
    gateway_image: ProductImage,
    model_digest: str | None = None,
) -> list[JSON]:
    """ServiceAccount, Role, RoleBinding, Deployment and Service of the gateway, stamped;
    both containers run ``gateway_image`` (the operator's own). With a source it mounts
    the copy of ``model_digest`` (one every replica's group holds: decide/staging.py),
    recorded on the Deployment; None: the current source's copy, not yet everywhere."""
    name, namespace = ic.metadata.name, ic.metadata.namespace or "default"
    labels = cluster_labels(name, COMPONENT_GATEWAY)
    owner = owner_reference(name=name, uid=ic.metadata.uid or "")
    rbac = gateway_rbac_name(name)
    common = {"namespace": namespace, "labels": labels, "owner": owner}
    deployment = _deployment(
        ic, rbac=rbac, common=common, engine_key=engine_key, gateway_image=gateway_image,
        model_digest=model_digest,
    )  # fmt: skip
    service = render_template(
        "gateway_service.yaml.j2",
        name=gateway_name(name),
        selector=gateway_selector_labels(name),
        port=GATEWAY_HTTP_PORT,
        **common,
    )
    return [stamp_hash(obj) for obj in (*_rbac(rbac, name, common), deployment, service)]


__all__ = [
    "GATEWAY_HTTP_PORT",
    "GATEWAY_METRICS_PORT",
    "admission_env",
    "extension_grants",
    "gateway_rbac_name",
    "gateway_selector_labels",
    "render_gateway",
    "user_keys_volume",
]
