"""Offline rendering for review and GitOps (``sparkllm render``): no cluster needed.

Reconcile learns node addresses and label-discovered groups from the API server; offline
there is none, so explicit node groups are required and each node's address is taken
from ``--node-ip NODE=IP`` or, failing that, the node's name (SGLang accepts a resolvable
host name in ``--dist-init-addr``). Restart generation 1, every replica running: what
the operator applies on a fresh cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from sparkllm.api import validate_inference_cluster
from sparkllm.errors import SpecError
from sparkllm.reconcile.secrets import engine_key_ref
from sparkllm.render import ReplicaPlan, render_replica
from sparkllm.render.placement import assign_groups, discover_groups


def render_file(path: str, *, node_ips: Mapping[str, str], namespace: str | None) -> str:
    """The YAML stream of every object the InferenceCluster in ``path`` becomes."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"cannot read {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: expected one InferenceCluster object")
    doc.setdefault("metadata", {})
    if namespace is not None or "namespace" not in doc["metadata"]:
        doc["metadata"]["namespace"] = namespace or "default"
    doc["metadata"].setdefault("uid", "00000000-0000-0000-0000-000000000000")
    ic = validate_inference_cluster(doc)
    if ic.spec.placement.node_groups is None:
        raise SpecError(
            "offline render needs spec.placement.nodeGroups: label-discovered groups are "
            "only known inside the cluster"
        )
    groups = discover_groups(ic.spec, []).groups
    assignment = assign_groups(replicas=ic.spec.replicas, groups=groups, current={})
    objects = []
    for index, group in sorted(assignment.replicas.items()):
        plan = ReplicaPlan(
            index=index,
            group_key=group.key,
            nodes=group.nodes,
            rank0_ip=node_ips.get(group.nodes[0], group.nodes[0]),
            generation=1,
        )
        objects.extend(render_replica(ic, plan=plan, engine_key=engine_key_ref(ic)))
    return yaml.safe_dump_all(objects, sort_keys=False)
