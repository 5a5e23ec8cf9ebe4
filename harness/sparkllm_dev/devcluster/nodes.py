"""The simulated DGX Spark nodes: pure manifests, no I/O.

Six nodes in two node groups of three, shaped like the documents' hardware: one GB10
GPU (``nvidia.com/gpu: 1``), 128 GB of unified memory, 20 Arm cores. Each gets an
InternalIP on loopback (127.0.0.11-13 for group ``a``, 127.0.0.21-23 for group ``b``)
so that a simulated SGLang engine can listen on "its node's" address, exactly where the
operator's ``--dist-init-addr`` and the router's discovery will look for it. A second
dev cluster beside the first (the tests' beside the demo's) shifts every address by its
profile's ``node_address_base`` (127.0.0.111-113, 127.0.0.121-123): the engines of two
clusters then never compete for one address and port.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkllm.keys import DEFAULT_NODE_GROUP_LABEL, NODE_RANK_LABEL

GROUP_LABEL = DEFAULT_NODE_GROUP_LABEL  # the keys label-based placement reads
RANK_LABEL = NODE_RANK_LABEL
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_PRODUCT = "NVIDIA-GB10"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class SimNode:
    """One simulated Spark: its name, node group, rank within the group and address."""

    name: str
    group: str
    rank: int
    ip: str


def spark_nodes(
    *, address_base: int = 0, groups: tuple[str, ...] = ("a", "b"), ranks: int = 3
) -> list[SimNode]:
    """The simulated Sparks: group ``a`` on 127.0.0.1x, group ``b`` on 127.0.0.2x, ...
    (plus ``address_base``)."""
    last = address_base + 10 * len(groups) + ranks
    if ranks > 9 or address_base < 0 or last > 254:
        raise ValueError(f"no loopback addresses for {len(groups)}x{ranks} nodes at {address_base}")
    return [
        SimNode(
            name=f"spark-{g}{k}",
            group=g,
            rank=k,
            ip=f"127.0.0.{address_base + 10 * (gi + 1) + k + 1}",
        )
        for gi, g in enumerate(groups)
        for k in range(ranks)
    ]


def node_manifest(node: SimNode) -> dict[str, Any]:
    """A Node object that kwok will manage, with status preset (kept by node-initialize)."""
    capacity = {
        "cpu": "20",
        "memory": "128Gi",
        "ephemeral-storage": "3726Gi",
        "nvidia.com/gpu": "1",
        "pods": "110",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "sparkllm.io/simulated": "true"},
            "labels": {
                "kubernetes.io/arch": "arm64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": node.name,
                "type": "kwok",
                GROUP_LABEL: node.group,
                RANK_LABEL: str(node.rank),
                GPU_PRODUCT_LABEL: GPU_PRODUCT,
                "nvidia.com/gpu.count": "1",
                "node.kubernetes.io/instance-type": "dgx-spark",
            },
        },
        "spec": {},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": node.ip},
                {"type": "Hostname", "address": node.name},
            ],
            "allocatable": capacity,
            "capacity": capacity,
            "nodeInfo": {
                "architecture": "arm64",
                "operatingSystem": "linux",
                "osImage": "DGX OS 7 (simulated by kwok)",
                "kernelVersion": "6.11.0-nvidia (simulated)",
                "containerRuntimeVersion": "kwok",
                "kubeletVersion": "kwok",
                "kubeProxyVersion": "kwok",
                "bootID": "",
                "machineID": "",
                "systemUUID": "",
            },
        },
    }
