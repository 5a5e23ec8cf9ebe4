"""Which staged copy each replica and the gateway run, read from their live objects.

Why: a new revision is staged BESIDE the copy in use (render/model_layout.py), and each
replica keeps serving on its old copy until its own group holds the new one, then rolls
over (one replica at a time, the rolling update's rule). So the step must know, per
replica, the copy its rank StatefulSets mount — recorded on them as
``sparkllm.io/model-digest`` only once that copy was staged, so a held replica's
StatefulSets (at 0, nothing on disk yet) never count — and, before anything is cleaned,
that every rank pod and the gateway's pods have moved to the current copy. The objects
are the record: no state of the operator's own, and a restarted operator reads the same.

A copy counts for a replica only on the group its StatefulSets were made for (a replica
moved to a spare group finds no copy there) and at the path its volume names (a changed
``spec.model.path`` is another layout). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkllm.api import InferenceCluster
from sparkllm.keys import ANNOTATION_MODEL_DIGEST, LABEL_NODE_GROUP, LABEL_RANK, LABEL_REPLICA
from sparkllm.render.model_layout import copy_dir
from sparkllm.render.names import gateway_name

JSON = dict[str, Any]


@dataclass(frozen=True)
class LiveCopies:
    """The copies in use, as this pass read them."""

    statefulsets: Mapping[int, str] = field(default_factory=dict)  # replica -> staged copy
    pods: Mapping[int, str] = field(default_factory=dict)  # replica -> every rank pod's copy
    ready: frozenset[int] = frozenset()  # replicas whose rank pods are all Ready
    gateway: str | None = None  # the copy the gateway's Deployment mounts
    gateway_rolled: bool = False  # ... and every gateway pod is of that template


def _annotation(obj: Mapping[str, Any]) -> str | None:
    value = (obj["metadata"].get("annotations") or {}).get(ANNOTATION_MODEL_DIGEST)
    return None if value is None else str(value)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = obj["metadata"].get("labels") or {}
    return labels


def _host_path(sts: Mapping[str, Any]) -> str | None:
    for volume in sts["spec"]["template"]["spec"].get("volumes") or []:
        if volume.get("name") == "model" and "hostPath" in volume:
            return str(volume["hostPath"].get("path"))
    return None


def _one(values: Sequence[str | None]) -> str | None:
    """The one value every item carries, else None."""
    distinct = set(values)
    return values[0] if values and len(distinct) == 1 else None


def statefulset_copies(
    ic: InferenceCluster, statefulsets: Sequence[JSON], group_keys: Mapping[int, str]
) -> dict[int, str]:
    """Replica -> the staged copy all its rank StatefulSets mount, on the group it is
    placed on (``group_keys``) and at the path the current layout gives that copy."""
    size = ic.spec.engine.nodes_per_replica
    out: dict[int, str] = {}
    for replica, key in group_keys.items():
        own = [s for s in statefulsets if _labels(s).get(LABEL_REPLICA) == str(replica)]
        digest = _one([_annotation(s) for s in own])
        if len(own) != size or digest is None:
            continue
        if any(_labels(s).get(LABEL_NODE_GROUP) != key for s in own):
            continue
        if any(_host_path(s) != copy_dir(ic.spec.model.path, digest) for s in own):
            continue
        out[replica] = digest
    return out


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_copies(
    ic: InferenceCluster, pods: Sequence[JSON], replicas: Sequence[int]
) -> tuple[dict[int, str], frozenset[int]]:
    """Replica -> the copy every one of its rank pods mounts (each rank present, none
    going away), and the replicas whose rank pods are all Ready."""
    size = ic.spec.engine.nodes_per_replica
    copies: dict[int, str] = {}
    ready: set[int] = set()
    for replica in replicas:
        own = [
            p
            for p in pods
            if _labels(p).get(LABEL_REPLICA) == str(replica)
            and not p["metadata"].get("deletionTimestamp")
        ]
        ranks = {_labels(p).get(LABEL_RANK) for p in own}
        if len(own) != size or len(ranks) != size:
            continue
        digest = _one([_annotation(p) for p in own])
        if digest is not None:
            copies[replica] = digest
        if all(_ready(p) for p in own):
            ready.add(replica)
    return copies, frozenset(ready)


def gateway_copy(ic: InferenceCluster, deployments: Sequence[JSON]) -> tuple[str | None, bool]:
    """The copy the gateway's Deployment mounts, and whether its rollout is done (every
    pod of the current template, none of an older one left)."""
    name = gateway_name(ic.metadata.name)
    live = next((d for d in deployments if d["metadata"]["name"] == name), None)
    if live is None:
        return None, False
    status = live.get("status") or {}
    want = int(live["spec"].get("replicas", 1))
    observed = int(status.get("observedGeneration", 0)) >= int(
        live["metadata"].get("generation", 0)
    )
    updated = int(status.get("updatedReplicas", 0))
    total = int(status.get("replicas", 0))
    available = int(status.get("availableReplicas", 0))
    rolled = observed and updated == total == want and available >= want
    return _annotation(live), rolled


def live_copies(
    ic: InferenceCluster,
    *,
    statefulsets: Sequence[JSON],
    pods: Sequence[JSON],
    deployments: Sequence[JSON],
    group_keys: Mapping[int, str],
) -> LiveCopies:
    """Everything above, for the replicas placed this pass (an object without a source
    reads nothing)."""
    if ic.spec.model.source is None:
        return LiveCopies()
    on_pods, ready = pod_copies(ic, pods, sorted(group_keys))
    gateway, rolled = gateway_copy(ic, deployments)
    return LiveCopies(
        statefulsets=statefulset_copies(ic, statefulsets, group_keys),
        pods=on_pods,
        ready=ready,
        gateway=gateway,
        gateway_rolled=rolled,
    )
