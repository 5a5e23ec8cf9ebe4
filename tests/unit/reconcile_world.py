"""A few moves of the world between passes, for multi-pass ``decide`` cases.

``advance`` plays the controllers' part after a pass: the applied objects become the
live ones, pruned ones vanish, the status and annotation patch are written, and each
StatefulSet's pod follows its template (a stopped one has none; a new restart
generation gets new pods, Ready). The pod edits below are the faults the operator
documents: a container that exits, a pod deleted or replaced, a failed init container.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from sparkllm.keys import LABEL_GENERATION
from sparkllm.reconcile.decide.actions import Plan
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.decide.replicas import Observed
from sparkllm.render.names import rank_statefulset_name
from tests.unit.reconcile_fixtures import NAME, matching, rank_pods

JSON = dict[str, Any]


def pod_name(replica: int, rank: int) -> str:
    return f"{rank_statefulset_name(NAME, replica, rank)}-0"


def edit_pod(
    obs: Observation, replica: int, rank: int, edit: Callable[[JSON], JSON | None]
) -> Observation:
    """The same observation with one rank pod changed (``edit`` returning None: deleted)."""
    pods = []
    for pod in obs.observed.pods:
        if pod["metadata"]["name"] == pod_name(replica, rank):
            changed = edit(copy.deepcopy(pod))
            if changed is not None:
                pods.append(changed)
        else:
            pods.append(pod)
    return replace(obs, observed=replace(obs.observed, pods=pods))


def exited(code: int = 137, reason: str = "OOMKilled") -> Callable[[JSON], JSON]:
    def edit(pod: JSON) -> JSON:
        term = {"exitCode": code, "reason": reason}
        pod["status"]["containerStatuses"] = [
            {"name": "engine", "restartCount": 0, "state": {"terminated": term}}
        ]
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        return pod

    return edit


def gone(pod: JSON) -> None:
    return None


def replaced(pod: JSON) -> JSON:
    pod["metadata"]["uid"] += "-new"
    return pod


def init_failed(pod: JSON) -> JSON:
    term = {"exitCode": 1, "reason": "Error"}
    pod["status"]["initContainerStatuses"] = [
        {"name": "verify-model", "state": {"waiting": {}}, "lastState": {"terminated": term}}
    ]
    pod["status"]["containerStatuses"] = []
    pod["status"]["phase"] = "Pending"
    return pod


def not_ready(pod: JSON) -> JSON:
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return pod


def _generation(obj: JSON) -> str:
    labels = obj["spec"]["template"]["metadata"].get("labels") or {}
    return str(labels.get(LABEL_GENERATION))


def _follow(objects: dict[str, list[JSON]], pods: list[JSON]) -> list[JSON]:
    """Each StatefulSet's pod as its controller would leave it."""
    by_name = {p["metadata"]["name"]: p for p in pods}
    out = []
    for sts in objects["StatefulSet"]:
        name = f"{sts['metadata']['name']}-0"
        old = by_name.get(name)
        if sts["spec"].get("replicas", 1) == 0:
            continue
        labels = (old or {}).get("metadata", {}).get("labels") or {}
        if old is not None and labels.get(LABEL_GENERATION) == _generation(sts):
            out.append(old)
        else:
            out.extend(rank_pods([sts]))
    return out


def advance(
    obs: Observation, plan: Plan, *, seconds: float = 1.0, pods: bool = True
) -> Observation:
    """The next pass's observation: the plan's writes made, the clock moved."""
    assert obs.obj is not None
    objects = {kind: list(items) for kind, items in obs.observed.owned.items()}
    for removal in plan.prune:
        objects[removal.kind] = [
            o for o in objects[removal.kind] if o["metadata"]["name"] != removal.name
        ]
    for obj in plan.apply:
        live = copy.deepcopy(obj)
        live["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
        items = objects[obj["kind"]]
        names = [o["metadata"]["name"] for o in items]
        if obj["metadata"]["name"] in names:
            items[names.index(obj["metadata"]["name"])] = live
        else:
            items.append(live)
    target = copy.deepcopy(obs.obj)
    if plan.status is not None:
        target["status"] = plan.status
    for key, value in (
        (plan.annotations or {}).get("metadata", {}).get("annotations") or {}
    ).items():
        if value is None:
            target["metadata"]["annotations"].pop(key, None)
    new_pods = _follow(objects, obs.observed.pods) if pods else obs.observed.pods
    observed = Observed(nodes=obs.observed.nodes, pods=new_pods, owned=objects)
    ready = {
        int(p["metadata"]["labels"]["sparkllm.io/replica"]): int(_pod_generation(p))
        for p in new_pods
        if p["metadata"]["labels"].get("sparkllm.io/rank") == "0"
    }
    info = {i: matching(i, generation=g)[i] for i, g in ready.items()}
    return replace(
        obs,
        obj=target,
        observed=observed,
        now=obs.now + timedelta(seconds=seconds),
        server_info=info,
    )


def _pod_generation(pod: JSON) -> str:
    return str(pod["metadata"]["labels"].get(LABEL_GENERATION))
