"""The network preflight's init containers in every rank pod (docs/network.md).

Why two containers: the per-node checks (``sparkllm verify-network``) read the host's
/sys, /proc and /etc and need only the operator's image; the cross-node bandwidth needs
torch and NCCL, which only the engine image has, while the module that measures it lives
in ``sparkllm``. So verify-network also copies the (stdlib-only) bandwidth module into
an emptyDir, and ``verify-bandwidth`` runs it with the engine image's Python, NCCL and
the engine's NCCL environment, one process per rank, rendezvousing at rank 0's node
address on :data:`BANDWIDTH_PORT` before SGLang binds anything. Both leave their
results in their termination messages; the operator turns them into NetworkVerified
and ``status.network``. Off (the default) adds nothing at all.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Final

from sparkllm.api import InferenceCluster
from sparkllm.cli_args import command_line
from sparkllm.preflight.args import VerifyNetworkArgs
from sparkllm.preflight.bandwidth import BandwidthArgs
from sparkllm.render.engine import engine_env
from sparkllm.render.objects import JSON
from sparkllm.render.pod_security import (
    engine_container_security,
    tools_container_security,
    uses_rdma,
)
from sparkllm.render.product_image import ProductImage

NETWORK_CONTAINER: Final = "verify-network"
BANDWIDTH_CONTAINER: Final = "verify-bandwidth"
# The host's /sys, /proc and /etc, read-only, where verify-network reads them.
HOST_DIRS: Final = ("sys", "proc", "etc")
# What SGLang advertises (utils.get_ip); the node's InternalIP, which --dist-init-addr uses.
HOST_IP_ENV: Final[JSON] = {
    "name": "SGLANG_HOST_IP",
    "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}},
}
NODE_NAME_ENV: Final[JSON] = {
    "name": "NODE_NAME",
    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
}
# The collective's rendezvous on rank 0's node: torch's usual MASTER_PORT, not one of
# SGLang's (distInitPort and the ports after it, the API port); free again before the
# engine starts.
BANDWIDTH_PORT: Final = 29500
CODE_VOLUME: Final = "preflight-code"
CODE_DIR: Final = "/opt/sparkllm-preflight"
# Every rank's node address: a change of ANY of them changes the pod template, so the
# replica rolls and the checks run again (not only rank 0's, which --dist-init-addr has).
RANK_ADDRESSES_ENV: Final = "SPARKLLM_RANK_ADDRESSES"


def network_init_container(
    ic: InferenceCluster, *, image: ProductImage, env: list[JSON], addresses: tuple[str, ...]
) -> JSON:
    """The per-node checks before SGLang on every rank; also ships the bandwidth module.

    It sees the node's network (hostNetwork) and the engine's environment, and writes its
    findings to its termination message; in gate mode an error fails it, so the engine
    does not start. ``addresses``: the replica's node addresses, rank 0's first.
    """
    net = ic.spec.network
    checks = VerifyNetworkArgs(
        socket_interface=net.socket_interface,
        gid_index=net.ib_gid_index,
        roce_mtu=net.roce_mtu,
        ib_hca=tuple(net.ib_hcas),
        socket_mtu=net.socket_mtu,
        sys_dir=Path("/host/sys"),  # HOST_DIRS, mounted below
        proc_dir=Path("/host/proc"),
        etc_dir=Path("/host/etc"),
        gate=net.preflight.mode == "gate",
    )
    mounts = [
        {"name": f"host-{part}", "mountPath": f"/host/{part}", "readOnly": True}
        for part in HOST_DIRS
    ]
    if _measures(ic, ranks=len(addresses)):
        checks = replace(checks, copy_bandwidth_module=Path(CODE_DIR))
        mounts.append({"name": CODE_VOLUME, "mountPath": CODE_DIR})
    addresses_env = {"name": RANK_ADDRESSES_ENV, "value": ",".join(addresses)}
    return {
        "name": NETWORK_CONTAINER,
        "image": image.reference,
        "imagePullPolicy": image.pull_policy,
        "command": ["sparkllm"],
        "args": command_line(checks),
        "env": [*env, NODE_NAME_ENV, addresses_env],
        "terminationMessagePolicy": "File",
        "volumeMounts": mounts,
        # Non-root without capabilities: of the host's /etc it reads what any user may
        # (nccl.conf), never e.g. /etc/shadow; of /proc, no other user's environment.
        "securityContext": tools_container_security(),
    }


def bandwidth_init_container(
    ic: InferenceCluster, *, rank: int, addresses: tuple[str, ...], env: list[JSON]
) -> JSON:
    """The collective across the replica's ranks, in the engine image (NCCL, its GPU)."""
    preflight = ic.spec.network.preflight
    collective = BandwidthArgs(
        backend="nccl",
        op="all_reduce",
        threshold_gbps=preflight.min_bus_bandwidth_gbps,
        termination_log=Path("/dev/termination-log"),
        gate=preflight.mode == "gate",
    )
    rendezvous = [
        {"name": "RANK", "value": str(rank)},
        {"name": "WORLD_SIZE", "value": str(len(addresses))},
        {"name": "MASTER_ADDR", "value": addresses[0]},
        {"name": "MASTER_PORT", "value": str(BANDWIDTH_PORT)},
        {"name": "PYTHONPATH", "value": CODE_DIR},
    ]
    mounts: list[JSON] = [
        {"name": CODE_VOLUME, "mountPath": CODE_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    if uses_rdma(ic):
        mounts.append({"name": "infiniband", "mountPath": "/dev/infiniband", "readOnly": True})
    return {
        "name": BANDWIDTH_CONTAINER,
        "image": ic.spec.engine.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-m", "sparkllm.preflight.bandwidth"],
        "args": command_line(collective),
        "env": [*env, NODE_NAME_ENV, *rendezvous],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        # The engine's GPU (a pod's request is the larger of init and app containers', so
        # this claims nothing more) and, as the engine, its user and locked-memory
        # capability for RDMA.
        "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
        "securityContext": engine_container_security(ic),
        "volumeMounts": mounts,
    }


def _measures(ic: InferenceCluster, *, ranks: int) -> bool:
    """The collective runs when the preflight is on, a threshold is set (0: not run) and
    the replica has more than one rank."""
    preflight = ic.spec.network.preflight
    return preflight.mode != "off" and preflight.min_bus_bandwidth_gbps > 0 and ranks > 1


def network_preflight(
    ic: InferenceCluster,
    *,
    rank: int,
    addresses: tuple[str, ...],
    image: ProductImage,
    env: list[JSON],
    volumes: list[JSON],
) -> list[JSON]:
    """The init containers the preflight adds (none when off); ``env`` and ``volumes`` grow.

    ``addresses`` are the replica's node addresses in rank order (rank 0's first).
    """
    if ic.spec.network.preflight.mode == "off":
        return []
    env.append(HOST_IP_ENV)
    volumes.extend(
        {"name": f"host-{part}", "hostPath": {"path": f"/{part}", "type": "Directory"}}
        for part in HOST_DIRS
    )
    # The engine's environment without the API key, which the checks have no use for.
    check_env = [*engine_env(ic.spec), HOST_IP_ENV]
    containers = [network_init_container(ic, image=image, env=check_env, addresses=addresses)]
    if _measures(ic, ranks=len(addresses)):
        volumes.append({"name": CODE_VOLUME, "emptyDir": {"sizeLimit": "16Mi"}})
        containers.append(
            bandwidth_init_container(ic, rank=rank, addresses=addresses, env=check_env)
        )
    return containers
