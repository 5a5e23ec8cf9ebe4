"""The memory preflight's init container in every rank pod (spec.memoryPreflight).

Why the last init container: free memory is read right before the engine starts, after
the model check and the launch check (minutes on a large model), on the rank's node. It
runs the operator's image (``sparkllm verify-memory``), reads the host's /proc read-only
(the same ``host-proc`` volume the network preflight mounts, added once), and is told
the rank's share of the capacity plan (``plan_capacity``: weights and KV pool), which it
compares with MemAvailable. Off (the default) adds nothing at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from sparkllm.api import InferenceCluster
from sparkllm.cli_args import command_line
from sparkllm.plan import plan_capacity
from sparkllm.preflight.args import VerifyMemoryArgs
from sparkllm.render.network_preflight import NODE_NAME_ENV
from sparkllm.render.objects import JSON
from sparkllm.render.pod_security import tools_container_security
from sparkllm.render.product_image import ProductImage

MEMORY_CONTAINER: Final = "verify-memory"
PROC_VOLUME: Final = "host-proc"  # the network preflight's name for the same hostPath
PROC_MOUNT: Final = "/host/proc"


def memory_args(ic: InferenceCluster, *, rank: int) -> VerifyMemoryArgs:
    """The check's options: the rank's plan figures when spec.model.weightsGB gives one."""
    spec = ic.spec
    args = VerifyMemoryArgs(
        rank=rank, proc_dir=Path(PROC_MOUNT), gate=spec.memory_preflight.mode == "gate"
    )
    if spec.model.weights_gb is None:
        return args
    plan = plan_capacity(spec, total_weight_gb=spec.model.weights_gb)
    ranks = {r.rank: r for r in plan.ranks}
    if rank not in ranks:
        return args
    mine = ranks[rank]
    return VerifyMemoryArgs(
        rank=rank,
        weights_gb=round(mine.weights_gb, 2),
        kv_pool_gb=round(max(mine.kv_pool_gb, 0.0), 2),
        proc_dir=args.proc_dir,
        gate=args.gate,
    )


def memory_preflight(
    ic: InferenceCluster, *, rank: int, image: ProductImage, volumes: list[JSON]
) -> list[JSON]:
    """The init container (none when off); ``volumes`` gains the host's /proc once."""
    if ic.spec.memory_preflight.mode == "off":
        return []
    if not any(v.get("name") == PROC_VOLUME for v in volumes):
        volumes.append({"name": PROC_VOLUME, "hostPath": {"path": "/proc", "type": "Directory"}})
    return [
        {
            "name": MEMORY_CONTAINER,
            "image": image.reference,
            "imagePullPolicy": image.pull_policy,
            "command": ["sparkllm"],
            "args": command_line(memory_args(ic, rank=rank)),
            "env": [NODE_NAME_ENV],
            "terminationMessagePolicy": "File",
            "volumeMounts": [{"name": PROC_VOLUME, "mountPath": PROC_MOUNT, "readOnly": True}],
            # Non-root without capabilities: /proc/meminfo and /proc/pressure/memory are
            # world-readable; no other user's process details are.
            "securityContext": tools_container_security(),
        }
    ]
