"""Offline rendering for review and GitOps (``sparkllm render``): no cluster needed.

Why through ``decide``: a reviewer must see what the operator applies, not a second
rendering that could drift from it — so this builds the observation of a fresh object
(no live objects, no engine-key Secret yet, every node Ready) and calls the operator's
own ``decide``, printing every object the plan applies, in apply order: the gateway
(ServiceAccount, Role, RoleBinding, Deployment, Service) first, then each replica's
rank StatefulSets and Service. The engine-key Secret the operator would generate is
shown as a comment naming it and its key, never as an object or a value.

Reconcile learns node addresses and label-discovered groups from the API server;
offline there is none, so explicit node groups are required and each node's address is
taken from ``--node-ip NODE=IP`` or, failing that, the node's name (SGLang accepts a
resolvable host name in ``--dist-init-addr``). The operator's own image (the gateway's,
the init containers', the Jobs'), its pull policy and pull secrets are the chart's
``image`` values, which the operator reads from its env (``render/product_image.py``);
here they are flags of the same meaning (``--image``, ``--image-pull-policy``,
``--image-pull-secret``), the default image unless given. The operator's default
governance store (the chart's ``governance.redis``, which the operator reads from its
env) is given here as flags of the same names (``--governance-redis-address`` ...),
checked the same way and handed to the same decide: a spec naming no store then renders,
as in the cluster, a gateway on that Redis. The administrator's policy (the chart's
``policy``) is given as a file (``--admin-policy``, the chart's values or the ``policy``
mapping): a spec outside it is refused with the operator's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import yaml

from sparkllm.api import validate_inference_cluster
from sparkllm.api.admin_policy import AdminPolicy
from sparkllm.api.governance_store import RedisStoreSpec
from sparkllm.errors import SparkllmError, SpecError
from sparkllm.manifest_file import read_manifest
from sparkllm.reconcile.decide import decide, owned
from sparkllm.reconcile.decide.actions import Plan
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.decide.replicas import Observed
from sparkllm.reconcile.decide.secrets import EngineKeySeen, engine_key_ref
from sparkllm.render.governance_default import governance_default
from sparkllm.render.placement import NodeFacts
from sparkllm.render.product_image import DEFAULT_PRODUCT_IMAGE, ProductImage

RENDER_UID = "00000000-0000-0000-0000-000000000000"
# decide takes the time from its observation; nothing rendered depends on it.
RENDER_TIME = datetime(2026, 1, 1, tzinfo=UTC)
# The flags naming the operator's default store: the chart's governance.redis values.
STORE_FLAGS: Final = (
    "--governance-redis-address",
    "--governance-redis-password-secret",
    "--governance-redis-password-key",
    "--governance-redis-database",
)


def governance_default_from_flags(values: Mapping[str, str | int | None]) -> RedisStoreSpec | None:
    """The default store named by ``values`` (flag -> value, None when not given), checked
    as the operator checks its env; None when no flag is given."""
    given = {flag: str(value) for flag, value in values.items() if value is not None}
    if given and STORE_FLAGS[0] not in given:
        raise SparkllmError(f"{', '.join(sorted(given))} needs {STORE_FLAGS[0]}")
    return governance_default(given, names=STORE_FLAGS, where="given to sparkllm render")


def load_cluster(path: str, *, namespace: str | None) -> dict[str, Any]:
    """The InferenceCluster object in ``path``, with a namespace and a placeholder uid."""
    doc = read_manifest(path)
    doc.setdefault("metadata", {})
    if namespace is not None or "namespace" not in doc["metadata"]:
        doc["metadata"]["namespace"] = namespace or "default"
    doc["metadata"].setdefault("uid", RENDER_UID)
    return doc


def fresh_plan(
    obj: dict[str, Any],
    *,
    node_ips: Mapping[str, str],
    gateway_image: ProductImage = DEFAULT_PRODUCT_IMAGE,
    governance_default: RedisStoreSpec | None = None,
    admin_policy: AdminPolicy | None = None,
) -> Plan:
    """What the operator's first pass over ``obj`` plans, on Ready nodes at ``node_ips``,
    given the operator's settings (gateway image, default governance store, the
    administrator's policy: PolicyDeniedError, as the operator refuses it)."""
    ic = validate_inference_cluster(obj, policy=admin_policy)
    groups = ic.spec.placement.node_groups
    if groups is None:
        raise SpecError(
            "offline render needs spec.placement.nodeGroups: label-discovered groups are "
            "only known inside the cluster"
        )
    names = [node for group in groups for node in group]
    nodes = {n: NodeFacts(name=n, internal_ip=node_ips.get(n, n), ready=True) for n in names}
    empty = owned.empty()
    observation = Observation(
        key=(ic.metadata.namespace or "default", ic.metadata.name),
        obj=obj,
        now=RENDER_TIME,
        ic=ic,
        observed=Observed(nodes=nodes, pods=[], owned=empty.owned),
        engine_key=EngineKeySeen(ref=engine_key_ref(ic)),
        bench_key=False,  # a fresh cluster: the operator generates it
    )
    plan = decide(observation, gateway_image=gateway_image, governance_default=governance_default)
    if plan.status is not None and plan.status.get("phase") == "Failed":
        raise SpecError(str(plan.status["conditions"][0]["message"]))
    return plan


def render_file(
    path: str,
    *,
    node_ips: Mapping[str, str],
    namespace: str | None,
    gateway_image: ProductImage = DEFAULT_PRODUCT_IMAGE,
    governance_default: RedisStoreSpec | None = None,
    admin_policy: AdminPolicy | None = None,
) -> str:
    """The YAML stream of every object the operator applies for the object in ``path``."""
    plan = fresh_plan(
        load_cluster(path, namespace=namespace),
        node_ips=node_ips,
        gateway_image=gateway_image,
        governance_default=governance_default,
        admin_policy=admin_policy,
    )
    lines = [
        f"# Secret {s.name} (key {s.key!r}): generated by the operator, holds {s.holds}; "
        "not rendered"
        for s in plan.secrets
    ]
    header = "\n".join(lines) + "\n" if lines else ""
    return header + yaml.safe_dump_all(list(plan.apply), sort_keys=False)
