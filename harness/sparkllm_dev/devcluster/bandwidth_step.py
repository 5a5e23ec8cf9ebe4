"""The rank pods' ``verify-bandwidth`` init container, run for real on the dev cluster.

Why: on the nodes the bandwidth preflight is ``python3 -m sparkllm.preflight.bandwidth``
in the engine image, NCCL across the replica's ranks. The dev cluster has no engine
image and no GPU, but the same module runs under Gloo: the harness runs the container
like a kubelet would, with the torch venv's interpreter (``hack/setup-torch.sh``),
``--backend gloo`` and Gloo over loopback, importing the module from the emptyDir that
the pod's ``verify-network`` copied it into (the real hand-over, not the repo's copy).
What a kubelet would not do, and why:

- ``GLOO_SOCKET_IFNAME=lo``: the spec's socket interface does not exist on this machine.
- ``MASTER_PORT`` is replaced by a port derived from the replica and its generation: all
  simulated nodes share this machine's ports, and torch's store listens on every
  address, so two replicas' rank 0s would both take the spec's port.

Without a torch venv the container is not run (kwok's status stands, no message), and
the operator reports that the collective left no result.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from sparkllm.keys import LABEL_CLUSTER, LABEL_GENERATION, LABEL_REPLICA
from sparkllm_dev.devcluster import hostpaths, kubelet
from sparkllm_dev.gloo_bandwidth import TORCH_SETUP, torch_python

MODULE: Final = "sparkllm.preflight.bandwidth"
PORT_BASE: Final = 41000
PORT_SPAN: Final = 8000


def is_bandwidth(words: Sequence[str]) -> bool:
    """Whether the container runs the bandwidth module (``python* -m sparkllm.preflight...``)."""
    return (
        len(words) >= 3
        and words[0].rsplit("/", 1)[-1].startswith("python")
        and list(words[1:3]) == ["-m", MODULE]
    )


def rendezvous_port(pod: Mapping[str, Any], *, master_addr: str) -> int:
    """One port per (namespace, cluster, replica, generation, rank 0's address)."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    key = "/".join(
        [str(meta.get("namespace")), master_addr]
        + [str(labels.get(k, "")) for k in (LABEL_CLUSTER, LABEL_REPLICA, LABEL_GENERATION)]
    )
    digest = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
    return PORT_BASE + digest % PORT_SPAN


def plan_init_step(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    env: Mapping[str, str],
    mounts: Sequence[hostpaths.LocalMount],
    scratch: Path,
    python: str,
    log_path: Path,
) -> tuple[hostpaths.InitStep | None, str]:
    """One init container the harness runs: our CLI (``hostpaths.plan_step``) or this
    module's collective; (step, why it is None)."""
    words = kubelet.command_line(container, env)
    if not is_bandwidth(words):
        step = hostpaths.plan_step(
            pod, container, env=env, mounts=mounts, scratch=scratch, python=python,
            log_path=log_path,
        )  # fmt: skip
        return step, "" if step is not None else "its command is not the sparkllm CLI"
    torch = torch_python()
    if torch is None:
        return None, f"no torch venv: {TORCH_SETUP}"
    name = str(container["name"])
    termination_file = scratch / "termination" / name
    message_path = str(container.get("terminationMessagePath") or "/dev/termination-log")
    file_mount = hostpaths.LocalMount(mount_path=message_path, local=termination_file, kind="file")
    local_args = hostpaths.translate_args(words[3:], [*mounts, file_mount])
    if "--termination-log" not in words:
        local_args += ["--termination-log", str(termination_file)]
    local_env = dict(env)
    local_env.update(
        GLOO_SOCKET_IFNAME="lo",
        PYTHONPATH=hostpaths.translate_path(env.get("PYTHONPATH", ""), mounts),
        MASTER_PORT=str(rendezvous_port(pod, master_addr=env.get("MASTER_ADDR", ""))),
        PYTHONWARNINGS="ignore",  # torch warns that numpy is absent (not needed)
    )
    written = [*(container.get("command") or []), *(container.get("args") or [])]
    step = hostpaths.InitStep(
        name=name,
        argv=(str(torch), "-m", MODULE, *local_args, "--backend", "gloo"),
        env=local_env,
        termination_file=termination_file,
        log_path=log_path,
        policy=str(container.get("terminationMessagePolicy") or "File"),
        as_written=shlex.join(written),
    )
    return step, ""
