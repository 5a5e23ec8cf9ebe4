"""What every pod the operator makes may do: users, capabilities, seccomp, root filesystem.

One module, so the least privilege of each pod kind is decided in one place and
docs/pod-security.md can be checked against it. Two kinds of container:

- **The operator's own image** (``sparkllm``: the gateway's admission and router, the
  benchmark and acceptance Jobs, and the ranks' ``verify-model`` / ``verify-network``
  init containers) runs as the image's non-root user 65532 (see the Dockerfile), with no
  capabilities, no privilege escalation and a read-only root filesystem: it writes only
  to emptyDirs (/tmp) and its termination message. This is Pod Security ``restricted``
  at the container level.
- **The engine image** (the user's SGLang image: the ``engine`` container and the
  preflight's ``verify-bandwidth``) keeps only what SGLang on a DGX Spark needs:
  ``IPC_LOCK`` when it uses RDMA (host networking: NCCL registers its buffers with the
  ConnectX-7, and the kernel lets a process lock memory beyond ``ulimit -l`` only with
  that capability), every other capability dropped, no privilege escalation. It runs as
  the image's own user unless ``spec.engine.runAsUser`` says otherwise, because the
  SGLang images users run (nvcr.io/nvidia/sglang, lmsysorg/sglang) are built to run as
  root and keep their kernel caches under root's home. Its root filesystem stays
  writable: SGLang 0.5.23 and the libraries it loads compile kernels at run time into
  caches under ``$HOME`` (``SGLANG_CACHE_DIR``: triton, inductor, CUDA, tilelang,
  flashinfer; DeepGEMM, torch extensions) and put its ZMQ sockets and Prometheus
  multiprocess directory under the temp directory, paths that depend on the image.

Every pod runs under the container runtime's default seccomp profile
(``RuntimeDefault``): the Docker recipes for SGLang on DGX Spark run the engine without
``--privileged``, that is under the same default profile.

Pure: values only.
"""

from __future__ import annotations

from typing import Final

from sparkllm.api import InferenceCluster
from sparkllm.render.objects import JSON

TOOLS_USER: Final = 65532  # the sparkllm image's non-root user and group (Dockerfile)
RUNTIME_DEFAULT_SECCOMP: Final[JSON] = {"type": "RuntimeDefault"}
# Locking memory beyond RLIMIT_MEMLOCK for RDMA registration (ib_umem_get checks it).
RDMA_CAPABILITY: Final = "IPC_LOCK"

# The restricted Pod Security profile for the sparkllm image's containers, where the pod
# already sets the user (gateway, benchmark and acceptance Jobs).
RESTRICTED_CONTAINER_SECURITY: Final[JSON] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def restricted_pod_security(*, fs_group: bool = False) -> JSON:
    """Pod-level settings of a pod made only of the sparkllm image's containers.

    ``fs_group``: the pod's Secret/ConfigMap volumes are group-readable by 65532 (the
    gateway's user keys are mounted 0440).
    """
    security: JSON = {
        "runAsNonRoot": True,
        "runAsUser": TOOLS_USER,
        "runAsGroup": TOOLS_USER,
    }
    if fs_group:
        security["fsGroup"] = TOOLS_USER
    security["seccompProfile"] = dict(RUNTIME_DEFAULT_SECCOMP)
    return security


def tools_container_security() -> JSON:
    """A sparkllm-image container in a pod whose user is the engine's (the rank pods)."""
    return {
        **RESTRICTED_CONTAINER_SECURITY,
        "runAsNonRoot": True,
        "runAsUser": TOOLS_USER,
        "runAsGroup": TOOLS_USER,
    }


def uses_rdma(ic: InferenceCluster) -> bool:
    """The RoCE devices are only there with host networking (/dev/infiniband, the HCAs'
    netdevs in the host's network namespace); without it NCCL uses sockets."""
    return ic.spec.network.host_network


def engine_container_security(ic: InferenceCluster) -> JSON:
    """The engine image's containers (engine, verify-bandwidth): the module docstring says
    why each setting is what it is."""
    engine = ic.spec.engine
    capabilities: JSON = {"drop": ["ALL"]}
    if uses_rdma(ic):
        capabilities["add"] = [RDMA_CAPABILITY]
    security: JSON = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": False,
        "capabilities": capabilities,
    }
    if engine.run_as_user is not None:
        security["runAsNonRoot"] = True
        security["runAsUser"] = engine.run_as_user
    if engine.run_as_group is not None:
        security["runAsGroup"] = engine.run_as_group
    return security


def rank_pod_security() -> JSON:
    """Pod-level settings of a rank pod; users are set per container (two images)."""
    return {"seccompProfile": dict(RUNTIME_DEFAULT_SECCOMP)}


__all__ = [
    "RDMA_CAPABILITY",
    "RESTRICTED_CONTAINER_SECURITY",
    "RUNTIME_DEFAULT_SECCOMP",
    "TOOLS_USER",
    "engine_container_security",
    "rank_pod_security",
    "restricted_pod_security",
    "tools_container_security",
    "uses_rdma",
]
