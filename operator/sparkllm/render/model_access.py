"""Where a pod that reads the model may run, and how it mounts it.

The ranks load the weights; the gateway counts tokens with the model's own tokenizer and
chat template; the benchmark and acceptance Jobs size prompts with that tokenizer. All of
them mount the model directory read-only, the same way (one volume definition here).

With a PersistentVolumeClaim the storage follows the pod: the gateway and the Jobs may run
on any node, and need neither the DGX Sparks nor their GPU taint. With a hostPath the files
are only on the nodes that hold them, which are this InferenceCluster's own nodes:

- explicit ``placement.nodeGroups``: the nodes the spec lists (the object says its model is
  there, whether or not a replica runs on them now);
- ``placement.nodeGroupLabel``, or any placement with ``spec.model.source``: the nodes of
  the groups its replicas were given, i.e. the nodes where its rank pods run (required
  pod affinity to them, per node). Any node with the label is not enough: another
  InferenceCluster's group carries it too and holds another model (issue 25: the front
  door landed on the demo's group). The affinity needs a rank pod to be scheduled; an
  object without a running replica has no model node, and its gateway (or Job) waits
  Pending until one is. With a source the operator stages the copies only on the groups
  a replica runs on, so a listed group without a replica holds nothing: the affinity to
  the rank pods then applies with explicit groups too.

With a source the host directory is the staged copy of one digest
(``render/model_layout.py``), mounted at ``spec.model.path``: callers name the digest they
run (a replica its own, the gateway and Jobs the one every group holds).

Only the pods that must run on a Spark tolerate the GPU taint (``nvidia.com/gpu``).

Pure: values only.
"""

from __future__ import annotations

from typing import Final

from sparkllm.api import InferenceCluster
from sparkllm.keys import LABEL_CLUSTER
from sparkllm.render.model_layout import host_model_dir
from sparkllm.render.names import COMPONENT_ENGINE, LABEL_COMPONENT
from sparkllm.render.objects import JSON

# The taint DGX Spark nodes may carry (the NVIDIA GPU operator's convention).
GPU_TOLERATION: Final[JSON] = {
    "key": "nvidia.com/gpu",
    "operator": "Exists",
    "effect": "NoSchedule",
}
NODE_TOPOLOGY_KEY: Final = "kubernetes.io/hostname"


def on_host(ic: InferenceCluster) -> bool:
    """Whether the model is a hostPath (only on the object's nodes) rather than a PVC."""
    return ic.spec.model.persistent_volume_claim is None


def model_volume(ic: InferenceCluster, digest: str | None = None) -> JSON:
    """The volume ``model``: the PVC read-only, or the host directory (must exist): with
    a source, the copy of ``digest`` (default: the current source's)."""
    model = ic.spec.model
    if model.persistent_volume_claim is not None:
        claim = {"claimName": model.persistent_volume_claim.claim_name, "readOnly": True}
        return {"name": "model", "persistentVolumeClaim": claim}
    return {"name": "model", "hostPath": {"path": host_model_dir(ic, digest), "type": "Directory"}}


def rank_pod_selector(cluster: str) -> JSON:
    """This InferenceCluster's rank pods (not its gateway or Jobs: the engine component)."""
    return {"matchLabels": {LABEL_CLUSTER: cluster, LABEL_COMPONENT: COMPONENT_ENGINE}}


def model_node_affinity(ic: InferenceCluster) -> JSON | None:
    """With a hostPath model, only this object's own nodes hold the files (module doc)."""
    if not on_host(ic):
        return None
    placement = ic.spec.placement
    if placement.node_groups is None or ic.spec.model.source is not None:
        term = {
            "labelSelector": rank_pod_selector(ic.metadata.name),
            "topologyKey": NODE_TOPOLOGY_KEY,
        }
        return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    # A node-name field selector takes one value per term; terms are ORed.
    nodes = sorted({node for group in placement.node_groups for node in group})
    terms: list[JSON] = [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        for node in nodes
    ]
    required = {"nodeSelectorTerms": terms}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def model_tolerations(ic: InferenceCluster) -> list[JSON]:
    """The GPU taint, only when the pod must run on the Sparks (a hostPath model)."""
    return [dict(GPU_TOLERATION)] if on_host(ic) else []


__all__ = [
    "GPU_TOLERATION",
    "NODE_TOPOLOGY_KEY",
    "model_node_affinity",
    "model_tolerations",
    "model_volume",
    "on_host",
    "rank_pod_selector",
]
