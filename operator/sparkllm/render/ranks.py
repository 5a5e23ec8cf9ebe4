"""A replica's rank StatefulSets and its Service: the engine side of DESIGN.md.

Each rank is a one-pod StatefulSet pinned by REQUIRED node affinity to its node (the
scheduler still places it and checks the GPU is free; nodeName would bypass both). Why
StatefulSets with ``updateStrategy: OnDelete``: the operator, not the StatefulSet
controller, decides when pods go away, because a pipeline must restart all its ranks
together; the restart generation label on the pod template tells old ranks from new.
Only rank 0 gets HTTP probes: ranks > 0 run SGLang's dummy health server that always
answers 200, so their health is read from container state. What each container may do
(users, capabilities, seccomp) is ``render/pod_security.py``'s; the host's devices and
the model are mounted read-only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from sparkllm.api import ENGINE_HTTP_PORT, InferenceCluster
from sparkllm.cli_args import command_line
from sparkllm.integrity.args import VerifyModelArgs
from sparkllm.keys import (
    ANNOTATION_MODEL_DIGEST,
    ANNOTATION_TEMPLATE_HASH,
    LABEL_GENERATION,
    LABEL_NODE_GROUP,
    LABEL_SERVING,
)
from sparkllm.render.engine import engine_env
from sparkllm.render.engine_cache import engine_cache_pieces
from sparkllm.render.memory_preflight import memory_preflight
from sparkllm.render.model_access import model_volume
from sparkllm.render.model_layout import staging_digest
from sparkllm.render.names import (
    owner_reference,
    rank_labels,
    rank_selector_labels,
    rank_statefulset_name,
    replica_labels,
    replica_service_name,
)
from sparkllm.render.network_preflight import network_preflight
from sparkllm.render.objects import JSON, render_template, stamp_hash
from sparkllm.render.pod_security import (
    engine_container_security,
    rank_pod_security,
    tools_container_security,
    uses_rdma,
)
from sparkllm.render.product_image import DEFAULT_PRODUCT_IMAGE, ProductImage
from sparkllm.render.rank_stamp import stamp
from sparkllm.sglang_contract.command import ENGINE_COMMAND, engine_args
from sparkllm.sglang_contract.fields import ENGINE_API_KEY_ENV
from sparkllm.sglang_contract.launch_check import LAUNCH_CHECK_COMMAND, LAUNCH_CHECK_CONTAINER

# A NotReady/unreachable node must not hold a pipeline rank for the default 300 s: the
# replica is already broken and the operator restarts it as a whole when the node is back.
NODE_FAILURE_TOLERATION_SECONDS: Final = 5
SHM_SIZE: Final = "16Gi"
HEALTH_PATH: Final = "/health"
# SGLang's /health runs a one-token generation and answers 503 when no output at all
# (any request's) arrived within 20 s (SGLANG_HEALTH_CHECK_TIMEOUT); the probe waits 25 s.
SGLANG_HEALTH_WINDOW_SECONDS: Final = 20
HEALTH_TIMEOUT_SECONDS: Final = 25
PROBE_PERIOD_SECONDS: Final = 10
# A failing probe takes the whole 20 s window and the next starts at once, so NotReady
# means 6 x 20 = 120 s without one token. The documents' 8K prompt (44 s to its first
# token, p95) fails at most 2 in a row: rank 0 stays Ready and routed through it.
READINESS_FAILURE_THRESHOLD: Final = 6


@dataclass(frozen=True)
class ReplicaPlan:
    """What reconcile decided for one replica: where, which generation, running or not."""

    index: int
    group_key: str
    nodes: tuple[str, ...]
    rank0_ip: str
    generation: int
    running: bool = True
    node_ips: tuple[str, ...] = ()  # every rank's node address, in rank order
    # The engine image pinned to one digest (``repo@sha256:...``) after the ranks pulled
    # different ones (reconcile/decide/versions.py); None: spec.engine.image as written.
    engine_image: str | None = None
    # With spec.model.source: the digest of the staged copy the replica runs (the current
    # source's, or the one before while its group stages a new revision: decide/staging.py);
    # None: the current source's copy, not staged yet (the replica is held at 0).
    model_digest: str | None = None

    @property
    def addresses(self) -> tuple[str, ...]:
        """The ranks' node addresses (rank 0's first); node names where none is known."""
        if len(self.node_ips) == len(self.nodes):
            return self.node_ips
        return (self.rank0_ip, *self.nodes[1:])


@dataclass(frozen=True)
class EngineKeyRef:
    """Where rank 0's --api-key comes from (a Secret key, never a literal)."""

    secret: str
    key: str


def _probes(ic: InferenceCluster) -> dict[str, Any]:
    http = {"path": HEALTH_PATH, "port": ENGINE_HTTP_PORT, "scheme": "HTTP"}
    grace = ic.spec.restart_policy.startup_grace_seconds
    return {
        "startup": {
            "httpGet": http,
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": HEALTH_TIMEOUT_SECONDS,
            "failureThreshold": max(1, math.ceil(grace / PROBE_PERIOD_SECONDS)),
        },
        # A hung pipeline (every rank alive, no output) shows as rank 0 NotReady; the
        # operator restarts the whole replica 60 s later (reconcile/hang.py). No liveness
        # probe: a kubelet kill would restart rank 0 alone (its peers stay stuck) and
        # read as "container exited" (docs/operator.md, "Probes and hung pipelines").
        "readiness": {
            "httpGet": http,
            "periodSeconds": PROBE_PERIOD_SECONDS,
            "timeoutSeconds": HEALTH_TIMEOUT_SECONDS,
            "failureThreshold": READINESS_FAILURE_THRESHOLD,
        },
    }


# The RDMA device nodes, read-only: the kernel's read-only mount check covers regular
# files, directories and links, not device nodes, so NCCL still opens uverbs read-write;
# what it prevents is a root engine removing or adding nodes in the host's /dev/infiniband.
INFINIBAND_MOUNT: Final[JSON] = {
    "name": "infiniband",
    "mountPath": "/dev/infiniband",
    "readOnly": True,
}


def _volumes(ic: InferenceCluster, *, model_digest: str | None) -> tuple[list[JSON], list[JSON]]:
    model = ic.spec.model
    volumes: list[JSON] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_SIZE}},
        model_volume(ic, model_digest),
    ]
    mounts: list[JSON] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "model", "mountPath": model.path, "readOnly": True},
    ]
    if uses_rdma(ic):
        volumes.append(
            {"name": "infiniband", "hostPath": {"path": "/dev/infiniband", "type": "Directory"}}
        )
        mounts.append(dict(INFINIBAND_MOUNT))
    return volumes, mounts


VERIFY_CONTAINER: Final = "verify-model"
CHECKSUMS_MOUNT: Final = "/etc/sparkllm/checksums"


def _verify_init_container(
    ic: InferenceCluster, *, image: ProductImage, mounts: list[JSON]
) -> JSON:
    """The integrity check that runs before SGLang on every rank (condition ModelVerified).

    It reads the model directory read-only and writes a compact summary to its
    termination message, which the operator compares across ranks.
    """
    model = ic.spec.model
    checks = VerifyModelArgs(
        model_dir=Path(model.path),
        expected_shards=model.expected_shards,
        expected_layers=model.num_layers,
    )
    model_mounts = [m for m in mounts if m["name"] == "model"]
    if model.checksums is not None:
        key = model.checksums.config_map_ref.key
        checks = replace(checks, checksums=Path(CHECKSUMS_MOUNT) / key)
        model_mounts.append({"name": "checksums", "mountPath": CHECKSUMS_MOUNT, "readOnly": True})
    return {
        "name": VERIFY_CONTAINER,
        "image": image.reference,
        "imagePullPolicy": image.pull_policy,
        "command": ["sparkllm"],
        "args": command_line(checks),
        "terminationMessagePolicy": "File",
        "volumeMounts": model_mounts,
        "securityContext": tools_container_security(),
    }


def launch_check_container(ic: InferenceCluster, *, image: str, args: list[str]) -> JSON:
    """The last init container: the engine image's own SGLang checks the engine's exact
    arguments (``sglang_contract/launch_check.py``) and reports its version.

    The engine's image, arguments and environment, without the engine key (SGLang reads
    it as one ``--api-key=`` word that only has to be a string; the check never needs the
    Secret); no volumes, no capabilities: it reads nothing but its own image.
    """
    security = engine_container_security(ic)
    security["capabilities"] = {"drop": ["ALL"]}  # not even the engine's IPC_LOCK
    return {
        "name": LAUNCH_CHECK_CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(LAUNCH_CHECK_COMMAND),
        "args": list(args),
        "env": engine_env(ic.spec),
        "terminationMessagePolicy": "File",
        "securityContext": security,
    }


# A failed node's pods are evicted soon (a gang restart follows); Spark nodes may carry
# the GPU taint, and a rank must run on its Spark.
RANK_TOLERATIONS: Final[list[JSON]] = [
    *(
        {
            "key": key,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": NODE_FAILURE_TOLERATION_SECONDS,
        }
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ),
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
]


def _rank_env(ic: InferenceCluster, *, engine_key: EngineKeyRef, serves_api: bool) -> list[JSON]:
    """The rank's environment; rank 0 also gets the engine key, from its Secret."""
    env = engine_env(ic.spec)
    if serves_api:
        key_ref = {"secretKeyRef": {"name": engine_key.secret, "key": engine_key.key}}
        env.append({"name": ENGINE_API_KEY_ENV, "valueFrom": key_ref})
    return env


def render_rank_statefulset(
    ic: InferenceCluster,
    *,
    plan: ReplicaPlan,
    rank: int,
    engine_key: EngineKeyRef,
    tools_image: ProductImage = DEFAULT_PRODUCT_IMAGE,
) -> JSON:
    """The StatefulSet of ``rank`` in replica ``plan.index``; its init containers run
    ``tools_image`` (the operator's own), whose pull secrets the pod carries."""
    name, namespace, uid = _identity(ic)
    labels = {**rank_labels(name, plan.index, rank), LABEL_NODE_GROUP: plan.group_key}
    serves_api = rank == 0
    env = _rank_env(ic, engine_key=engine_key, serves_api=serves_api)
    volumes, mounts = _volumes(ic, model_digest=plan.model_digest)
    init_containers = network_preflight(
        ic, rank=rank, addresses=plan.addresses, image=tools_image, env=env, volumes=volumes
    )
    init_containers.append(_verify_init_container(ic, image=tools_image, mounts=mounts))
    args = engine_args(ic.spec, rank=rank, rank0_ip=plan.rank0_ip)
    engine_image = plan.engine_image or ic.spec.engine.image
    init_containers.append(launch_check_container(ic, image=engine_image, args=args))
    cache = engine_cache_pieces(
        tools_image.engine_cache, namespace=namespace, image=engine_image,
        tools_image=tools_image.reference, pull_policy=tools_image.pull_policy,
        owner=_engine_owner(ic),
    )  # fmt: skip
    engine_env, engine_mounts = env, mounts
    if cache is not None:  # the first init container: it prunes before anything starts
        init_containers.insert(0, cache.init_container)
        volumes.extend(cache.volumes)
        engine_env, engine_mounts = [*env, *cache.env], [*mounts, cache.mount]
    init_containers += memory_preflight(ic, rank=rank, image=tools_image, volumes=volumes)
    if ic.spec.model.checksums is not None:
        volumes.append(
            {
                "name": "checksums",
                "configMap": {"name": ic.spec.model.checksums.config_map_ref.name},
            }
        )
    host_network = ic.spec.network.host_network
    obj = render_template(
        "rank_statefulset.yaml.j2",
        name=rank_statefulset_name(name, plan.index, rank),
        namespace=namespace,
        labels=labels,
        owner=owner_reference(name=name, uid=uid),
        replicas=1 if plan.running else 0,
        service_name=replica_service_name(name, plan.index),
        selector=rank_selector_labels(name, plan.index, rank),
        pod_labels={**labels, LABEL_GENERATION: str(plan.generation), LABEL_SERVING: "true"},
        host_network=host_network,
        dns_policy="ClusterFirstWithHostNet" if host_network else "ClusterFirst",
        node=plan.nodes[rank],
        tolerations=RANK_TOLERATIONS,
        pod_security=rank_pod_security(),
        engine_security=engine_container_security(ic),
        image=engine_image,
        pull_secrets=tools_image.pod_pull_secrets(),
        command=list(ENGINE_COMMAND),
        args=args,
        env=engine_env,
        port=ENGINE_HTTP_PORT,
        probes=_probes(ic) if serves_api else None,
        volume_mounts=engine_mounts,
        volumes=volumes,
        init_containers=init_containers,
    )
    template = obj["spec"]["template"]
    copy = None
    if ic.spec.model.source is not None:
        copy = plan.model_digest or staging_digest(ic)
    template["metadata"]["annotations"] = stamp(
        template, spec=ic.spec, image=tools_image, model_digest=copy,
        staged=plan.model_digest is not None,
    )  # fmt: skip
    if plan.model_digest is not None and copy is not None:  # what the cleaning rule keeps
        obj["metadata"]["annotations"] = {ANNOTATION_MODEL_DIGEST: copy}
    return stamp_hash(obj)


def _engine_owner(ic: InferenceCluster) -> tuple[int, int] | None:
    """The engine's user and group when the spec names its user (the cache is made theirs)."""
    engine = ic.spec.engine
    if engine.run_as_user is None:
        return None
    group = engine.run_as_group if engine.run_as_group is not None else engine.run_as_user
    return engine.run_as_user, group


def pod_template_hash(statefulset: JSON) -> str | None:
    """The template hash a rank StatefulSet (desired or live) stamps on its pods."""
    annotations = statefulset["spec"]["template"]["metadata"].get("annotations") or {}
    value = annotations.get(ANNOTATION_TEMPLATE_HASH)
    return str(value) if value is not None else None


def render_replica_service(ic: InferenceCluster, *, replica: int) -> JSON:
    """The Service in front of replica ``replica``'s rank 0."""
    name, namespace, uid = _identity(ic)
    obj = render_template(
        "replica_service.yaml.j2",
        name=replica_service_name(name, replica),
        namespace=namespace,
        labels=replica_labels(name, replica),
        owner=owner_reference(name=name, uid=uid),
        selector=rank_selector_labels(name, replica, 0),
        port=ENGINE_HTTP_PORT,
    )
    return stamp_hash(obj)


def _identity(ic: InferenceCluster) -> tuple[str, str, str]:
    meta = ic.metadata
    return meta.name, meta.namespace or "default", meta.uid or ""
