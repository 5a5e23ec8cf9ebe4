"""Fault injection for the dev cluster: the failures a DGX Spark replica really sees.

Each helper drives one of the kwok Stages in ``stages.yaml`` by putting a label (and
annotations for the details) on the object, or deletes the object outright. kwok then
writes the status a real kubelet would have written. Nothing here fakes the operator's
view: the operator sees the same watch events it would see in production.

``hang_engine`` is the one fault no kubelet writes: a pipeline that stalls with every
process alive (an NCCL wait between stages). It goes to the engine itself — SIGUSR1 to
rank 0's simulator, which stops generating and answers ``/health`` as SGLang's does (503
after 20 s without output) — and the operator must find it from rank 0's readiness alone.
The simulator has no real link between ranks, so the stall is injected where it shows.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence
from enum import Enum
from pathlib import Path

from sparkllm_dev.devcluster.cluster import DevCluster
from sparkllm_dev.devcluster.engines import EngineInfo
from sparkllm_dev.errors import DevClusterError
from sparkllm_dev.sim.launch_check import IMAGE_FACTS_PATH

NODE_NOT_READY_LABEL = "node-not-ready.stage.kwok.x-k8s.io"
POD_FAILED_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"
POD_RESTART_LABEL = "fault.sparkllm.io/container-restart"
EXIT_CODE_ANNOTATION = "fault.sparkllm.io/exit-code"
REASON_ANNOTATION = "fault.sparkllm.io/reason"
MESSAGE_ANNOTATION = "fault.sparkllm.io/message"


class ContainerFault(Enum):
    """How a container failure shows in the pod status."""

    RESTART = "restart"  # restartPolicy Always: restartCount 1, lastState.terminated, not Ready
    FAILED = "failed"  # the pod ends in phase Failed with the container terminated


class FaultInjector:
    """Inject failures into pods and nodes of a running dev cluster."""

    def __init__(self, cluster: DevCluster) -> None:
        self.cluster = cluster

    def fail_container(
        self,
        *,
        namespace: str,
        pod: str,
        exit_code: int = 137,
        reason: str = "OOMKilled",
        message: str = "container exited (injected)",
        mode: ContainerFault = ContainerFault.RESTART,
    ) -> None:
        """Make the pod's containers exit with ``exit_code`` and ``reason``."""
        self.cluster.kubectl(
            "annotate",
            "--overwrite",
            "-n",
            namespace,
            f"pod/{pod}",
            f"{EXIT_CODE_ANNOTATION}={exit_code}",
            f"{REASON_ANNOTATION}={reason}",
            f"{MESSAGE_ANNOTATION}={message}",
        )
        label = POD_RESTART_LABEL if mode is ContainerFault.RESTART else POD_FAILED_LABEL
        self.cluster.kubectl("label", "--overwrite", "-n", namespace, f"pod/{pod}", f"{label}=true")

    def delete_pod(self, *, namespace: str, pod: str) -> None:
        """Delete a pod as someone else would (kwok removes it at once)."""
        self.cluster.kubectl("delete", "-n", namespace, f"pod/{pod}", "--wait=false")

    def node_not_ready(self, node: str, *, reason: str = "KubeletNotReady") -> None:
        """Make the node report Ready=False (the kubelet stopped being healthy)."""
        self.cluster.kubectl(
            "annotate", "--overwrite", f"node/{node}", f"{REASON_ANNOTATION}={reason}"
        )
        self.cluster.kubectl("label", "--overwrite", f"node/{node}", f"{NODE_NOT_READY_LABEL}=true")

    def node_ready(self, node: str) -> None:
        """Bring a NotReady node back: kwok's node-initialize stage marks it Ready."""
        self.cluster.kubectl("label", f"node/{node}", f"{NODE_NOT_READY_LABEL}-")

    def delete_node(self, node: str) -> None:
        """Remove the Node object, as when a machine is decommissioned or lost."""
        self.cluster.kubectl("delete", f"node/{node}", "--wait=false")

    def skew_image(
        self,
        node: str,
        *,
        version: str | None = None,
        digest: str | None = None,
        without: Sequence[str] = (),
        hosts_root: Path | None = None,
    ) -> None:
        """Give ``node``'s image store another build of the engine image: its SGLang
        reports ``version`` and does not know the flags ``without`` (an older SGLang), its
        pulls of a tag resolve to ``digest`` (``sha256:...``), as when a tag is re-pushed
        between two nodes' pulls. Read by the engine harness when
        a pod starts there (``devcluster/launch_step.py``); a reference pinned by digest
        pulls that digest anyway. ``hosts_root``: the harness's simulated node files (a
        test's engine harness has its own), by default the cluster's."""
        path = self._image_file(node, hosts_root)
        path.parent.mkdir(parents=True, exist_ok=True)
        facts = {"version": version, "digest": digest, "without": list(without)}
        path.write_text(json.dumps({k: v for k, v in facts.items() if v}))

    def restore_image(self, node: str, *, hosts_root: Path | None = None) -> None:
        """Give ``node`` the same build as every other node again."""
        self._image_file(node, hosts_root).unlink(missing_ok=True)

    def _image_file(self, node: str, hosts_root: Path | None) -> Path:
        root = hosts_root or self.cluster.paths.state_dir / "hosts"
        return root / node / IMAGE_FACTS_PATH

    def restore_nodes(self) -> None:
        """Re-register every simulated Spark (after delete_node), clear NotReady labels and
        give every node the same engine image build again (after skew_image)."""
        for facts in (self.cluster.paths.state_dir / "hosts").glob(f"*/{IMAGE_FACTS_PATH}"):
            facts.unlink(missing_ok=True)
        self.cluster.register_nodes()
        self.cluster.kubectl("label", "nodes", "--all", f"{NODE_NOT_READY_LABEL}-")


def hang_engine(engine: EngineInfo) -> None:
    """Hang the pipeline behind this rank-0 engine: its process stays alive, nothing is
    generated again, ``/health`` turns 503 after SGLang's window (``sim/health.py``)."""
    if engine.pid is None:
        raise DevClusterError(f"engine {engine.namespace}/{engine.pod} has no running process")
    os.kill(engine.pid, signal.SIGUSR1)
