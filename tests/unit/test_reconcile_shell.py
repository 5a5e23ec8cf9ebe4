"""The shell around ``decide``: observe only reads, execute is the one writer, in order.

Both run against an in-memory API that records every call (and engines that answer from
a table), so the claims the pass rests on are pinned without a cluster: observe makes
no write; execute makes exactly the plan's writes, in the documented order; an empty
plan makes no call; the generated key gets its value only in execute; the status
written is the one planned, as it is (decide plans ``status.benchmark.requestedAt`` with
the Job, execute adds nothing); a failed Event does not fail the pass.
"""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import Mapping
from typing import Any, cast

from sparkllm.api import Reason
from sparkllm.errors import ClusterAPIError
from sparkllm.kube.client import KubeAPI
from sparkllm.kube.kinds import JSON, Kind
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.actions import GeneratedSecret, PendingEvent, Plan, PodPatch, Removal
from sparkllm.reconcile.engines import ConfigProbe, Engines, RunningRequests
from sparkllm.reconcile.execute import execute
from sparkllm.reconcile.observe import observe
from sparkllm.reconcile.reconciler import ClusterReconciler
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    IPS,
    NOW,
    cluster,
    gateway_objects,
    rank_pods,
    replica_objects,
    server_info,
)

WRITES = {"apply", "apply_status", "create", "delete", "merge_patch"}


class RecordingAPI:
    """The KubeAPI verbs a pass uses, over in-memory objects; every call is recorded."""

    def __init__(self, objects: list[JSON], *, fail_events: bool = False) -> None:
        self.objects = [copy.deepcopy(o) for o in objects]
        self.calls: list[tuple[str, str]] = []
        self.fail_events = fail_events
        self.created: list[JSON] = []
        self.status: JSON | None = None

    def _of(self, kind: str) -> list[JSON]:
        return [o for o in self.objects if o.get("kind") == kind]

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON | None:
        self.calls.append(("get", f"{kind.kind}/{name}"))
        return next((o for o in self._of(kind.kind) if o["metadata"]["name"] == name), None)

    async def list(
        self, kind: Kind, namespace: str | None = None, *, selector: str | None = None
    ) -> list[JSON]:
        self.calls.append(("list", kind.kind))
        if kind.kind == "Node":
            return [
                {"metadata": {"name": n}, "status": {
                    "addresses": [{"type": "InternalIP", "address": ip}],
                    "conditions": [{"type": "Ready", "status": "True"}]}}
                for n, ip in IPS.items()
            ]  # fmt: skip
        return self._of(kind.kind)

    async def kind_served(self, kind: Kind) -> bool:
        """API discovery (a GET): the optional APIs (Gateway API, PodMonitor) are not here."""
        self.calls.append(("get", f"discovery/{kind.kind}"))
        return False

    async def apply(self, obj: Mapping[str, Any]) -> JSON:
        self.calls.append(("apply", f"{obj['kind']}/{obj['metadata']['name']}"))
        return dict(obj)

    async def apply_status(self, kind: Kind, name: str, namespace: str, status: JSON) -> JSON:
        self.calls.append(("apply_status", f"{kind.kind}/{name}"))
        self.status = status
        return {}

    async def merge_patch(self, kind: Kind, name: str, namespace: str, patch: JSON) -> JSON:
        self.calls.append(("merge_patch", f"{kind.kind}/{name}"))
        return {}

    async def create(self, obj: Mapping[str, Any]) -> JSON | None:
        name = obj["metadata"].get("name") or obj["metadata"].get("generateName")
        self.calls.append(("create", f"{obj['kind']}/{name}"))
        if obj["kind"] == "Event" and self.fail_events:
            raise ClusterAPIError("events are forbidden")
        created = copy.deepcopy(dict(obj))
        created["metadata"]["creationTimestamp"] = "2026-11-30T12:00:05Z"
        self.created.append(created)
        return created

    async def delete(self, kind: Kind, name: str, namespace: str | None = None, **_: Any) -> bool:
        self.calls.append(("delete", f"{kind.kind}/{name}"))
        return True


class Probe(ConfigProbe):
    """Rank 0 answers with every setting right; the calls are counted."""

    def __init__(self) -> None:
        super().__init__()
        self.endpoints: list[str] = []

    async def read(self, **kwargs: Any) -> Mapping[str, Any] | str:
        self.endpoints.append(endpoint := str(kwargs["endpoint"]))
        return server_info(rank0_address=endpoint.split("//")[1].split(":", maxsplit=1)[0])


def serving_objects() -> list[JSON]:
    obj = cluster()
    replica = replica_objects(obj, 0)
    key = {"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "llm-engine-key", "namespace": "llm"},
           "data": {"token": base64.b64encode(b"k").decode()}}  # fmt: skip
    bench_key = {"apiVersion": "v1", "kind": "Secret",  # the Jobs' key, generated already
                 "metadata": {"name": "llm-bench-key", "namespace": "llm"},
                 "data": {"token": "Yg=="}}  # fmt: skip
    pods = [{**p, "kind": "Pod"} for p in rank_pods(replica)]
    return [obj, key, bench_key, *gateway_objects(obj), *replica, *pods]


def test_observe_only_reads() -> None:
    api = RecordingAPI(serving_objects())
    probe = Probe()
    engines = Engines(config_probe=probe, running_requests=RunningRequests())
    obs = asyncio.run(
        observe(cast(KubeAPI, api), ("llm", "llm"), engines=engines, clock=lambda: NOW)
    )
    assert {verb for verb, _ in api.calls} <= {"get", "list"}
    assert obs.ic is not None
    assert obs.engine_key is not None
    assert obs.engine_key.value == "k"
    assert probe.endpoints == ["http://10.0.0.10:30000"]  # rank 0's node, the engine port
    assert obs.server_info[0].generation == 1
    assert obs.server_info[0].address == "10.0.0.10"  # its dist-init address must name it


def test_a_gone_object_is_read_once_and_nothing_else() -> None:
    api = RecordingAPI([])
    engines = Engines(config_probe=Probe(), running_requests=RunningRequests())
    obs = asyncio.run(
        observe(cast(KubeAPI, api), ("llm", "llm"), engines=engines, clock=lambda: NOW)
    )
    assert api.calls == [("get", "InferenceCluster/llm")]
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    asyncio.run(execute(cast(KubeAPI, api), plan, clock=lambda: NOW))
    assert api.calls == [("get", "InferenceCluster/llm")]


def everything() -> Plan:
    secret = GeneratedSecret(
        manifest={"apiVersion": "v1", "kind": "Secret",
                  "metadata": {"name": "llm-engine-key", "namespace": "llm"}},
        key="token",
    )  # fmt: skip
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "llm-bench-1"}}
    return Plan(
        target=cluster(),
        gang_restarts=("container_exit",),
        secrets=(secret,),
        delete_jobs=(Removal("batch/v1", "Job", "llm-bench-0", "llm", "u0"),),
        create_jobs=(job,),
        pod_patches=(PodPatch("llm-r1-rank0-0", "llm", {"metadata": {}}),),
        apply=({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "llm"}},),
        prune=(Removal("apps/v1", "StatefulSet", "llm-r1-rank0", "llm", "u1"),),
        status={"phase": "Ready", "benchmark": {"job": "llm-bench-1", "phase": "Running"}},
        events=(PendingEvent(False, Reason.REPLICA_READY, "replica 0 serving"),),
        annotations={"metadata": {"annotations": {"sparkllm.io/restart": None}}},
    )


def test_execute_writes_the_plan_in_order() -> None:
    api = RecordingAPI([])
    plan = everything()
    asyncio.run(execute(cast(KubeAPI, api), plan, clock=lambda: NOW))
    assert api.calls == [
        ("create", "Secret/llm-engine-key"),
        ("delete", "Job/llm-bench-0"),
        ("create", "Job/llm-bench-1"),
        ("merge_patch", "Pod/llm-r1-rank0-0"),
        ("apply", "Service/llm"),
        ("delete", "StatefulSet/llm-r1-rank0"),
        ("apply_status", "InferenceCluster/llm"),
        ("create", "Event/llm."),
        ("merge_patch", "InferenceCluster/llm"),
    ]
    assert len(api.calls) == plan.writes
    # the key's value is made here, hex, never in the plan
    token = base64.b64decode(api.created[0]["data"]["token"]).decode()
    assert len(token) == 64
    int(token, 16)
    assert "data" not in plan.secrets[0].manifest
    # the status written is the plan's, unchanged (nothing stamped in at write time)
    assert api.status == plan.status


def test_an_event_that_cannot_be_posted_does_not_fail_the_pass() -> None:
    api = RecordingAPI([], fail_events=True)
    asyncio.run(execute(cast(KubeAPI, api), everything(), clock=lambda: NOW))
    assert api.calls[-1] == ("merge_patch", "InferenceCluster/llm")  # the pass went on


def test_an_empty_plan_makes_no_call() -> None:
    api = RecordingAPI([])
    asyncio.run(execute(cast(KubeAPI, api), Plan(target=cluster()), clock=lambda: NOW))
    assert api.calls == []
    assert not WRITES & {verb for verb, _ in api.calls}


def test_a_whole_pass_then_an_idle_one() -> None:
    """The reconciler's pass end to end on a serving cluster: status once, then nothing."""
    api = RecordingAPI(serving_objects())
    reconciler = ClusterReconciler(
        cast(KubeAPI, api), gateway_image=GATEWAY_IMAGE, clock=lambda: NOW
    )
    reconciler.config_probe = Probe()
    outcome = asyncio.run(reconciler.reconcile(("llm", "llm")))
    writes = [call for call in api.calls if call[0] in WRITES]
    assert writes == [
        ("apply_status", "InferenceCluster/llm"),
        ("create", "Event/llm."),  # ReplicaReady
    ]
    assert outcome.nodes == {"a0", "a1", "a2"}
    assert outcome.retry_after is None
    assert api.status is not None
    assert api.status["phase"] == "Ready"
    api.objects[0]["status"] = api.status
    api.calls.clear()
    asyncio.run(reconciler.reconcile(("llm", "llm")))
    assert not [call for call in api.calls if call[0] in WRITES]
