"""Operator HA as the chart runs it: two operators, kopf peering, one active, takeover.

Two real operator processes watch one namespace with ``--peering sparkllm`` and the
priorities the chart's StatefulSet gives its pods (pod index: 1 and 0), authenticated
with the chart's ServiceAccount (so the kopfpeerings permissions are exercised too). The
InferenceCluster names nodes that do not exist, so a reconcile is a status write and
nothing else — cheap, and visible per process in its log. Only the higher priority
reconciles; after it is SIGKILLed (no goodbye to the peering object) the other resumes
when the dead keep-alive expires (kopf's lifetime: 60 s), which this test measures.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.testing import ROOT, OperatorProcess
from tests.integration.test_rbac import FORBIDDEN, chart_identity, token_kubeconfig

pytestmark = pytest.mark.cluster

NAME = "ha-probe"
PEERING_LIFETIME = 60  # kopf's default settings.peering.lifetime (seconds)
HANDLED = "Handler 'on_cluster' succeeded"


def probe_cluster(namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(
        (ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml").read_text()
    )
    doc["metadata"] = {"name": NAME, "namespace": namespace}
    doc["spec"]["placement"] = {"nodeGroups": [["ha-none-0", "ha-none-1", "ha-none-2"]]}
    return doc


def observed_generation(cluster: DevCluster, namespace: str) -> int:
    obj = cluster.kubectl_json("get", "icl", NAME, "-n", namespace)
    return int((obj.get("status") or {}).get("observedGeneration") or 0)


def bump(cluster: DevCluster, namespace: str, value: int) -> int:
    """Change the spec; the new generation."""
    patch = {"spec": {"restartPolicy": {"maxRestartsPerHour": value}}}
    out = cluster.kubectl(
        "patch", "icl", NAME, "-n", namespace, "--type=merge", "-p", json.dumps(patch),
        "-o", "json",
    ).stdout  # fmt: skip
    return int(json.loads(out)["metadata"]["generation"])


def peers(cluster: DevCluster, namespace: str) -> dict[str, int]:
    """Live peers of the kopf peering object: identity -> priority."""
    obj = cluster.kubectl_json("get", "kopfpeerings.kopf.dev", "sparkllm", "-n", namespace)
    return {peer: info["priority"] for peer, info in (obj.get("status") or {}).items()}


def handled(operator: OperatorProcess) -> int:
    return operator.log().count(HANDLED)


def test_one_operator_acts_and_the_other_takes_over(
    devcluster: DevCluster, namespace: str, tmp_path: Path
) -> None:
    devcluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    with chart_identity(devcluster, namespace, values={"replicas": 2}) as identity:
        kubeconfig = str(token_kubeconfig(devcluster, identity, tmp_path / "kubeconfig"))
        active = OperatorProcess(devcluster, [namespace], str(tmp_path / "active.log"))
        standby = OperatorProcess(devcluster, [namespace], str(tmp_path / "standby.log"))
        peering = ("--kubeconfig", kubeconfig, "--peering", "sparkllm")
        try:
            active.start(*peering, "--priority", "1")
            devcluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(probe_cluster(namespace)))
            wait_until(
                lambda: observed_generation(devcluster, namespace) == 1 and handled(active),
                timeout=90,
                interval=0.5,
                what="the first operator reconciles generation 1",
            )
            standby.start(*peering, "--priority", "0")
            # Both keep-alives in the peering object: the second operator started paused
            # (mandatory peering) and stays so while a higher priority is alive.
            wait_until(
                lambda: sorted(peers(devcluster, namespace).values()) == [0, 1],
                timeout=90,
                interval=0.5,
                what="both operators in the peering object",
            )
            generation = bump(devcluster, namespace, 5)
            # The handler writes the status before kopf logs its success: wait for both.
            wait_until(
                lambda: (
                    observed_generation(devcluster, namespace) == generation
                    and handled(active) >= 2
                ),
                timeout=90,
                interval=0.5,
                what=f"generation {generation} reconciled by the first operator",
            )
            assert handled(standby) == 0, "the standby reconciled while the active one ran"

            active.stop(kill=True)  # SIGKILL: its keep-alive stays until it expires
            killed_at = time.monotonic()
            generation = bump(devcluster, namespace, 4)
            wait_until(
                lambda: (
                    observed_generation(devcluster, namespace) == generation
                    and handled(standby) >= 1
                ),
                timeout=PEERING_LIFETIME + 60,
                interval=0.5,
                what=f"the standby reconciles generation {generation} after the kill",
            )
            takeover = time.monotonic() - killed_at
            print(f"[ha] takeover {takeover:.1f} s after SIGKILL (lifetime {PEERING_LIFETIME} s)")
            assert "Resuming operations" in standby.log()
            assert takeover <= PEERING_LIFETIME + 30
        finally:
            devcluster.kubectl("delete", "icl", "--all", "-n", namespace, "--wait=false")
            standby.stop()
            active.stop()
        for operator in (active, standby):
            denied = [line for line in operator.log().splitlines() if FORBIDDEN.search(line)]
            assert not denied, "\n".join(denied[:20])
