"""The environment of one rank: RoCE/NCCL settings, the layer partition, the user's env.

The rank's SGLang command line is the SGLang contract's business
(:mod:`sparkllm.sglang_contract.command`, built from the one field table); what is left
for the renderer is what SGLang takes from the environment: the NCCL/Gloo interface and
RDMA settings of ``spec.network``, the DGX Spark ring's routing switches, and the layer
partition, which has no flag in SGLang (``SGLANG_PP_LAYER_PARTITION``). The user's
``spec.engine.env`` comes last; the API refuses names the operator sets in any of the
rank pod's containers (``OPERATOR_OWNED_ENV``) and repeated names, and so does this
module, for an object the API server stored before those rules (issue 25: such a spec
could never be applied, and the apply was retried every 5 s without a word in the
status): a SpecError becomes the InvalidSpec status.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from sparkllm.api import OPERATOR_OWNED_ENV, EnvVar, InferenceClusterSpec
from sparkllm.errors import SpecError
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
    env += [{"name": e.name, "value": e.value} for e in _user_env(spec)]
    return env


def _user_env(spec: InferenceClusterSpec) -> tuple[EnvVar, ...]:
    """``spec.engine.env``, checked: a name the operator sets, or one given twice, would
    make a container's env list hold it twice, which the API server refuses."""
    names = [var.name for var in spec.engine.env]
    owned = [name for name in names if name in OPERATOR_OWNED_ENV]
    if owned:
        raise SpecError(f"spec.engine.env: {owned[0]} is set by the operator itself")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise SpecError(f"spec.engine.env: {repeated[0]} is given more than once")
    return spec.engine.env
