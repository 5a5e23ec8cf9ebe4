"""Small builders of what a reconcile pass observes, for the ``decide`` tables.

An observation is built the way the cluster would show it: the InferenceCluster object
(the sample spec on explicit node groups), Ready nodes with addresses, the objects the
operator applied (rendered by the operator's own code, as live copies with uids), and
the rank pods their StatefulSets made (labels and annotations from the pod template,
Running and Ready unless a test says otherwise). ``settled`` runs ``decide`` until the
status it writes is the one it reads, as passes on a quiet cluster do.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from sparkllm.api import validate_inference_cluster
from sparkllm.configcheck import expected_server_args
from sparkllm.integrity import ModelSummary
from sparkllm.keys import LABEL_NODE_GROUP, LABEL_RANK
from sparkllm.reconcile.decide import decide, owned
from sparkllm.reconcile.decide.actions import Plan
from sparkllm.reconcile.decide.benchmark import BenchmarkSeen
from sparkllm.reconcile.decide.observation import Observation, ServerInfo
from sparkllm.reconcile.decide.replicas import Observed
from sparkllm.reconcile.decide.secrets import EngineKeySeen, engine_key_ref
from sparkllm.render import ReplicaPlan, render_replica
from sparkllm.render.gateway import render_gateway
from sparkllm.render.placement import NodeFacts
from sparkllm.render.product_image import ProductImage
from sparkllm.render.ranks import VERIFY_CONTAINER

JSON = dict[str, Any]
SAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "samples" / "deepseek-v4-flash.yaml"
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
NAME, NAMESPACE, UID = "llm", "llm", "uid-llm"
GATEWAY_IMAGE = ProductImage("registry.example/sparkllm:test")
GROUPS = (("a0", "a1", "a2"), ("b0", "b1", "b2"), ("c0", "c1", "c2"))
GROUP_INDEX = {key: i for i, name in enumerate("abc") for key in (name, f"group-{i}")}
IPS = {node: f"10.0.{g}.{10 + r}" for g, group in enumerate(GROUPS) for r, node in enumerate(group)}


def cluster(
    *,
    replicas: int = 1,
    groups: int = 2,
    generation: int = 1,
    annotations: Mapping[str, str] | None = None,
    status: JSON | None = None,
    **spec_changes: Mapping[str, Any],
) -> JSON:
    """The InferenceCluster object as the API server returns it."""
    doc: JSON = copy.deepcopy(yaml.safe_load(SAMPLE.read_text()))
    doc["metadata"] = {
        "name": NAME, "namespace": NAMESPACE, "uid": UID, "generation": generation,
        "resourceVersion": "7", "annotations": dict(annotations or {}),
    }  # fmt: skip
    doc["spec"]["replicas"] = replicas
    doc["spec"]["placement"]["nodeGroups"] = [list(g) for g in GROUPS[:groups]]
    for section, changes in spec_changes.items():
        doc["spec"].setdefault(section, {}).update(changes)
    if status is not None:
        doc["status"] = status
    return doc


def nodes(*, not_ready: Iterable[str] = (), missing: Iterable[str] = ()) -> dict[str, NodeFacts]:
    """Every node of the three groups, Ready, at its address (less the missing ones)."""
    down, gone = set(not_ready), set(missing)
    return {
        n: NodeFacts(name=n, internal_ip=ip, ready=n not in down)
        for n, ip in IPS.items()
        if n not in gone
    }


def _live(obj: JSON, uid: str) -> JSON:
    live = copy.deepcopy(obj)
    live["metadata"]["uid"] = uid
    return live


def replica_objects(
    obj: JSON, index: int, *, generation: int = 1, running: bool = True, group_key: str = ""
) -> list[JSON]:
    """A replica's StatefulSets and Service as the operator rendered and applied them."""
    ic = validate_inference_cluster(obj)
    group_key = group_key or f"group-{index}"
    members = GROUPS[GROUP_INDEX[group_key]]
    plan = ReplicaPlan(
        index=index,
        group_key=group_key,
        nodes=members,
        rank0_ip=IPS[members[0]],
        generation=generation,
        running=running,
        node_ips=tuple(IPS[m] for m in members),
    )
    rendered = render_replica(
        ic, plan=plan, engine_key=engine_key_ref(ic), tools_image=GATEWAY_IMAGE
    )
    return [_live(o, f"uid-{o['metadata']['name']}") for o in rendered]


def gateway_objects(obj: JSON) -> list[JSON]:
    ic = validate_inference_cluster(obj)
    rendered = render_gateway(ic, engine_key=engine_key_ref(ic), gateway_image=GATEWAY_IMAGE)
    return [_live(o, f"uid-{o['kind']}-{o['metadata']['name']}") for o in rendered]


def rank_pods(
    replica: Sequence[JSON], *, ready: bool = True, verified: ModelSummary | None = None
) -> list[JSON]:
    """The pods a replica's running StatefulSets made (none for a stopped one)."""
    pods = []
    for sts in replica:
        if sts["kind"] != "StatefulSet" or sts["spec"].get("replicas", 1) == 0:
            continue
        template = sts["spec"]["template"]
        meta_labels = sts["metadata"]["labels"]
        group = GROUP_INDEX[meta_labels[LABEL_NODE_GROUP]]
        node = GROUPS[group][int(meta_labels[LABEL_RANK])]
        labels = dict(template["metadata"].get("labels") or {})
        name = f"{sts['metadata']['name']}-0"
        status: JSON = {
            "phase": "Running",
            "hostIP": IPS[node],
            "containerStatuses": [{"name": "engine", "restartCount": 0, "state": {"running": {}}}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        }
        if verified is not None:
            term = {"exitCode": 0, "reason": "Completed", "message": verified.to_message()}
            status["initContainerStatuses"] = [
                {"name": VERIFY_CONTAINER, "state": {"terminated": term}}
            ]
        pods.append(
            {
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "uid": f"uid-{name}-g{labels.get('sparkllm.io/restart-generation')}",
                    "labels": labels,
                    "annotations": dict(template["metadata"].get("annotations") or {}),
                },
                "spec": {"nodeName": node},
                "status": status,
            }
        )
    return pods


def observation(
    obj: JSON,
    *,
    objects: Sequence[JSON] = (),
    pods: Sequence[JSON] = (),
    node_facts: Mapping[str, NodeFacts] | None = None,
    key_exists: bool = True,
    server_info: Mapping[int, ServerInfo] | None = None,
    running: Mapping[int, int | None] | None = None,
    benchmark: BenchmarkSeen | None = None,
    now: datetime = NOW,
) -> Observation:
    """What observe would return for this cluster state."""
    ic = validate_inference_cluster(obj)
    by_kind = owned.empty().owned
    for o in objects:
        by_kind[o["kind"]].append(o)
    ref = engine_key_ref(ic)
    return Observation(
        key=(NAMESPACE, NAME),
        obj=obj,
        now=now,
        ic=ic,
        observed=Observed(
            nodes=dict(nodes() if node_facts is None else node_facts),
            pods=list(pods),
            owned=by_kind,
        ),
        engine_key=EngineKeySeen(ref=ref, exists=key_exists, value="k" if key_exists else None),
        benchmark=benchmark or BenchmarkSeen(),
        running_requests=dict(running or {}),
        server_info=dict(server_info or {}),
    )


def server_info(
    obj: JSON | None = None, *, rank0_address: str | None = None, **changes: Any
) -> dict[str, Any]:
    """What rank 0 at ``rank0_address`` reports when it runs with every setting ``obj``'s
    spec (default: the sample's) asks for, changed by ``changes`` (server_info keys)."""
    spec = validate_inference_cluster(obj or cluster()).spec
    return {**expected_server_args(spec, rank0_address=rank0_address), **changes}


def matching(*replicas: int, generation: int = 1, obj: JSON | None = None) -> dict[int, ServerInfo]:
    """Rank 0 of each replica runs with every setting the spec asks for."""
    return {i: ServerInfo(generation=generation, reply=server_info(obj)) for i in replicas}


def mismatching(replica: int, *, generation: int = 1) -> dict[int, ServerInfo]:
    """Rank 0 of ``replica`` runs with a 4096-token window (the spec asks for 12288)."""
    wrong = server_info(context_length=4096)
    return {replica: ServerInfo(generation=generation, reply=wrong)}


def with_status(obs: Observation, status: JSON | None) -> Observation:
    """The same observation after a pass wrote ``status``."""
    assert obs.obj is not None
    if status is None:
        return obs
    return replace(obs, obj={**obs.obj, "status": status})


def with_obj(obs: Observation, obj: JSON) -> Observation:
    """The same observation of a changed object (spec, metadata)."""
    return replace(obs, obj=obj, ic=validate_inference_cluster(obj))


def settled(obs: Observation, *, passes: int = 4) -> Observation:
    """Run passes (status written back, nothing else changes) until the status holds."""
    for _ in range(passes):
        plan = decide(obs, gateway_image=GATEWAY_IMAGE)
        if plan.status is None:
            return obs
        obs = with_status(obs, plan.status)
    raise AssertionError("the status did not settle")


def serving(
    *, replicas: int = 1, groups: int = 2, obj: JSON | None = None, **cluster_args: Any
) -> Observation:
    """A cluster whose replicas all serve, after its passes settled."""
    obj = obj or cluster(replicas=replicas, groups=groups, **cluster_args)
    objects = gateway_objects(obj)
    pods: list[JSON] = []
    for index in range(replicas):
        replica = replica_objects(obj, index)
        objects += replica
        pods += rank_pods(replica)
    return settled(
        observation(obj, objects=objects, pods=pods, server_info=matching(*range(replicas)))
    )


def later(obs: Observation, seconds: float) -> Observation:
    return replace(obs, now=obs.now + timedelta(seconds=seconds))


def status_of(obs: Observation, plan: Plan) -> JSON:
    """The status after the pass: the one it writes, else the live one."""
    assert obs.obj is not None
    return plan.status if plan.status is not None else dict(obs.obj.get("status") or {})
