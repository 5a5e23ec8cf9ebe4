"""The environment of one rank: RoCE/NCCL settings, the layer partition, the user's env.

The rank's SGLang command line is the SGLang contract's business
(:mod:`sparkllm.sglang_contract.command`, built from the one field table); what is left
for the renderer is what SGLang takes from the environment: the NCCL/Gloo interface and
RDMA settings of ``spec.network``, the DGX Spark ring's routing switches, and the layer
partition, which has no flag in SGLang (``SGLANG_PP_LAYER_PARTITION``). The user's
``spec.engine.env`` comes last; the API refuses names the operator sets here.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from sparkllm.api import InferenceClusterSpec
from sparkllm.sglang_contract.fields import LAYER_PARTITION_ENV


def engine_env(spec: InferenceClusterSpec) -> list[dict[str, Any]]:
    """RoCE/NCCL environment, the layer partition, and the user's extra env (in order)."""
    net = spec.network
    env = [
        {"name": "NCCL_SOCKET_IFNAME", "value": net.socket_interface},
        {"name": "GLOO_SOCKET_IFNAME", "value": net.socket_interface},
        {"name": "NCCL_IB_HCA", "value": ",".join(net.ib_hcas)},
        {"name": "NCCL_IB_GID_INDEX", "value": str(net.ib_gid_index)},
    ]
    if net.topology == "ring":
        # DGX Spark three-node ring: point-to-point /24 links, no subnet spans all nodes.
        env += [
            {"name": "NCCL_IB_SUBNET_AWARE_ROUTING", "value": "1"},
            {"name": "NCCL_IB_MERGE_NICS", "value": "0"},
            {"name": "NCCL_NET_PLUGIN", "value": "none"},
        ]
    partition = spec.engine.layer_partition
    if partition is not None:
        env.append({"name": LAYER_PARTITION_ENV, "value": ",".join(str(n) for n in partition)})
    env += [{"name": e.name, "value": e.value} for e in spec.engine.env]
    return env
