"""One level-based reconcile pass of an InferenceCluster: read, decide, apply, report.

The same pass runs for every trigger — operator start, create, spec change, a rank pod
or node changing, a timer — and reads everything fresh, so it converges from any state,
including a half-finished restart left by an operator that died. It reads as a list of
steps: load and validate the object, observe nodes and owned objects, place replicas on
node groups, decide per replica (run, gang-restart, wait, hold), render the desired
objects, apply only those that differ, prune what is no longer desired, and write status
only when it changed. A pass with nothing to do makes no write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sparkllm.api import (
    API_VERSION,
    KIND,
    LABEL_RANK,
    LABEL_REPLICA,
    ConditionType,
    InferenceCluster,
    Phase,
    Reason,
    validate_inference_cluster,
)
from sparkllm.errors import ClusterAPIError, SpecError
from sparkllm.reconcile import metrics
from sparkllm.reconcile.events import PendingEvent, event_manifest
from sparkllm.reconcile.kube import JSON, KubeAPI, kind_of, lookup_kind
from sparkllm.reconcile.observe import observe_replica
from sparkllm.reconcile.proofs import (
    ConfigProbe,
    capacity_condition,
    config_condition,
    model_condition,
)
from sparkllm.reconcile.restarts import Action, Decision, History, decide
from sparkllm.reconcile.secrets import ensure_engine_key
from sparkllm.reconcile.status import ClusterReport, ReplicaReport, derive_status
from sparkllm.render import EngineKeyRef, ReplicaPlan, render_replica
from sparkllm.render.gateway import DEFAULT_GATEWAY_IMAGE, render_gateway
from sparkllm.render.names import (
    ANNOTATION_RESTART,
    ANNOTATION_TEMPLATE_HASH,
    LABEL_GENERATION,
    LABEL_NODE_GROUP,
    cluster_selector,
)
from sparkllm.render.objects import is_current
from sparkllm.render.placement import NodeFacts, assign_groups, discover_groups, node_facts
from sparkllm.render.ranks import pod_template_hash

logger = logging.getLogger(__name__)
IC = lookup_kind(API_VERSION, KIND)
STS = lookup_kind("apps/v1", "StatefulSet")
SVC = lookup_kind("v1", "Service")
POD = lookup_kind("v1", "Pod")
NODE = lookup_kind("v1", "Node")
DEPLOY = lookup_kind("apps/v1", "Deployment")
SA = lookup_kind("v1", "ServiceAccount")
ROLE = lookup_kind("rbac.authorization.k8s.io/v1", "Role")
ROLE_BINDING = lookup_kind("rbac.authorization.k8s.io/v1", "RoleBinding")
# Everything the operator applies for a cluster, in apply order; pruned by label.
OWNED = (SA, ROLE, ROLE_BINDING, STS, SVC, DEPLOY)

Key = tuple[str, str]


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


@dataclass
class Observed:
    """Everything one pass reads from the API server."""

    nodes: dict[str, NodeFacts]
    pods: list[JSON]
    owned: dict[str, list[JSON]]  # kind -> live objects of that kind with our label

    @property
    def statefulsets(self) -> list[JSON]:
        return self.owned["StatefulSet"]

    @property
    def services(self) -> list[JSON]:
        return self.owned["Service"]

    def by_replica(self, items: Sequence[JSON], index: int) -> list[JSON]:
        return [o for o in items if _label(o, LABEL_REPLICA) == str(index)]


@dataclass
class PassOutcome:
    """What the pass wants from its caller: when to look again, which nodes it uses."""

    retry_after: float | None = None
    nodes: set[str] = field(default_factory=set)
    waiting_for_nodes: bool = False


def obj_generation(obj: Mapping[str, Any]) -> int:
    return int(obj["metadata"].get("generation") or 0)


def _label(obj: Mapping[str, Any], key: str) -> str | None:
    value = (obj["metadata"].get("labels") or {}).get(key)
    return None if value is None else str(value)


def _template_generation(sts: Mapping[str, Any]) -> int:
    labels = sts["spec"]["template"]["metadata"].get("labels") or {}
    value = str(labels.get(LABEL_GENERATION, "0"))
    return int(value) if value.isdigit() else 0


def _parse_times(values: Sequence[str]) -> tuple[datetime, ...]:
    return tuple(datetime.fromisoformat(v.replace("Z", "+00:00")) for v in values)


def _history(previous: Mapping[str, Any] | None, *, reset_budget: bool) -> History:
    if not previous:
        return History()
    return History(
        restarts=int(previous.get("restarts", 0)),
        restart_times=() if reset_budget else _parse_times(previous.get("restartTimes") or []),
        members=tuple(previous.get("members") or ()),
        exhausted=False if reset_budget else bool(previous.get("budgetExhausted", False)),
        node_down=bool(previous.get("nodeDown", False)),
    )


class ClusterReconciler:
    """Reconcile InferenceClusters through one KubeAPI, posting Events to ``events``."""

    def __init__(
        self,
        api: KubeAPI,
        *,
        gateway_image: str = DEFAULT_GATEWAY_IMAGE,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.api = api
        self.gateway_image = gateway_image
        self.clock = clock
        self._keys: dict[Key, str | None] = {}  # engine key per cluster, for ConfigApplied
        self.config_probe = ConfigProbe()
        # Passes of different clusters run concurrently: Events are kept per cluster.
        self._events: dict[Key, list[PendingEvent]] = {}

    async def reconcile(self, key: Key) -> PassOutcome:
        namespace, name = key
        obj = await self.api.get(IC, name, namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return PassOutcome()  # garbage collection removes what it owned
        previous_status: Mapping[str, Any] = obj.get("status") or {}
        generation = int(obj["metadata"].get("generation") or 0)
        try:
            ic = validate_inference_cluster(obj)
        except SpecError as exc:
            await self._blocked(obj, previous_status, generation, str(exc))
            return PassOutcome()
        capacity, fits = capacity_condition(ic.spec, generation=generation)
        if not fits:
            await self._blocked(
                obj,
                previous_status,
                generation,
                capacity["message"],
                reason=Reason.CAPACITY_EXCEEDED,
                extra=(capacity,),
            )
            return PassOutcome()
        observed = await self._observe(ic)
        now = self.clock()
        outcome, report, desired, keep = await self._plan(ic, obj, observed, previous_status, now)
        report = await self._with_proofs(
            ic=ic,
            obj=obj,
            report=report,
            observed=observed,
            previous_status=previous_status,
            capacity=capacity,
        )
        await self._apply(desired, observed)
        await self._prune(desired, keep, observed)
        await self._write_status(obj, report, previous_status, now)
        await self._post_events(obj)
        if (obj["metadata"].get("annotations") or {}).get(ANNOTATION_RESTART) == "now":
            patch = {"metadata": {"annotations": {ANNOTATION_RESTART: None}}}
            await self.api.merge_patch(IC, name, namespace, patch)
            metrics.WRITES.labels(verb="patch", kind=KIND).inc()
        metrics.record_replica_phases(namespace, name, [r.phase for r in report.replicas])
        return outcome

    # --- steps ----------------------------------------------------------------------

    async def _observe(self, ic: InferenceCluster) -> Observed:
        namespace = ic.metadata.namespace or "default"
        selector = cluster_selector(ic.metadata.name)
        nodes = {f.name: f for f in map(node_facts, await self.api.list(NODE))}
        owned = {
            kind.kind: [
                _with_kind(o, kind.kind)
                for o in await self.api.list(kind, namespace, selector=selector)
            ]
            for kind in OWNED
        }
        pods = await self.api.list(POD, namespace, selector=selector)
        return Observed(nodes=nodes, pods=pods, owned=owned)

    async def _plan(
        self,
        ic: InferenceCluster,
        obj: JSON,
        observed: Observed,
        previous_status: Mapping[str, Any],
        now: datetime,
    ) -> tuple[PassOutcome, ClusterReport, list[JSON], set[str]]:
        spec = ic.spec
        current_groups = {
            int(r): g
            for sts in observed.statefulsets
            if (r := _label(sts, LABEL_REPLICA)) is not None
            and r.isdigit()
            and (g := _label(sts, LABEL_NODE_GROUP)) is not None
        }
        discovery = discover_groups(spec, list(observed.nodes.values()))
        assignment = assign_groups(
            replicas=spec.replicas, groups=discovery.groups, current=current_groups
        )
        engine_key, key_value = await ensure_engine_key(self.api, ic)
        self._keys[(ic.metadata.namespace or "default", ic.metadata.name)] = key_value
        if key_value is None:
            self._event(
                obj,
                warning=True,
                reason=Reason.SECRET_MISSING,
                message=f"Secret {engine_key.secret} has no key {engine_key.key}",
            )
        previous = {int(r["index"]): r for r in previous_status.get("replicaStatuses") or []}
        reset_budget = int(obj["metadata"].get("generation") or 0) != previous_status.get(
            "observedGeneration"
        )
        force = (obj["metadata"].get("annotations") or {}).get(ANNOTATION_RESTART) == "now"
        model = self._model_verdict(
            observed, previous_status, generation=obj_generation(obj), force=force
        )
        blocked = model["message"] if model["status"] == "False" else None
        outcome = PassOutcome(waiting_for_nodes=bool(assignment.unplaced))
        reports: list[ReplicaReport] = []
        # A replica rolls for an update only while every other one serves; decisions made
        # earlier in this pass count, so two replicas never stop in the same pass.
        phases = {i: str(p.get("phase")) for i, p in previous.items()}
        desired: list[JSON] = []
        keep: set[str] = set()
        for index in range(spec.replicas):
            group = assignment.replicas.get(index)
            if group is None:
                continue
            outcome.nodes.update(group.nodes)
            others_ready = all(
                phases.get(i) == Phase.READY.value for i in range(spec.replicas) if i != index
            )
            replica_report, objects, retry = self._plan_replica(
                ic,
                obj,
                observed,
                index=index,
                group_key=group.key,
                nodes=group.nodes,
                previous=previous.get(index),
                reset_budget=reset_budget,
                force=force,
                others_ready=others_ready,
                engine_key=engine_key,
                now=now,
                blocked=blocked,
            )
            reports.append(replica_report)
            phases[index] = replica_report.phase.value  # later replicas see this pass's view
            if objects is None:  # cannot render (rank 0 node gone): keep what exists
                keep.update(
                    o["metadata"]["name"]
                    for o in observed.by_replica(observed.statefulsets + observed.services, index)
                )
            else:
                desired.extend(objects)
            if retry is not None:
                outcome.retry_after = min(outcome.retry_after or retry, retry)
        # The front door (admission layer + router) goes first in apply order, before
        # the ranks: a Role must exist before the router's pod watch needs it.
        desired[:0] = render_gateway(ic, engine_key=engine_key, gateway_image=self.gateway_image)
        report = ClusterReport(
            generation=int(obj["metadata"].get("generation") or 0),
            desired_replicas=spec.replicas,
            selector=cluster_selector(ic.metadata.name),
            replicas=tuple(reports),
            unplaced=assignment.unplaced,
            placement_problems=discovery.problems,
            extra_conditions=(model,),
        )
        return outcome, report, desired, keep

    def _plan_replica(
        self,
        ic: InferenceCluster,
        obj: JSON,
        observed: Observed,
        *,
        index: int,
        group_key: str,
        nodes: tuple[str, ...],
        previous: Mapping[str, Any] | None,
        reset_budget: bool,
        force: bool,
        others_ready: bool,
        engine_key: EngineKeyRef,
        now: datetime,
        blocked: str | None,
    ) -> tuple[ReplicaReport, list[JSON] | None, float | None]:
        live = observed.by_replica(observed.statefulsets, index)
        generation = max((_template_generation(s) for s in live), default=0)
        if generation == 0:
            generation = int((previous or {}).get("generation", 0)) + 1
        # A replica with no (or not all) rank StatefulSets is not running: it starts
        # through the same path as a restart, so two generations never mix.
        stopped = len(live) < ic.spec.engine.pipeline_parallel or any(
            s["spec"].get("replicas", 1) == 0 for s in live
        )
        pods = observed.by_replica(observed.pods, index)
        state = observe_replica(index=index, nodes=nodes, pods=pods, node_facts=observed.nodes)
        history = _history(previous, reset_budget=reset_budget)
        rank0 = observed.nodes.get(nodes[0])
        rank0_ip = rank0.internal_ip if rank0 is not None else None
        want: dict[int, str | None] = {}
        if rank0_ip is not None:
            probe = ReplicaPlan(
                index=index,
                group_key=group_key,
                nodes=nodes,
                rank0_ip=rank0_ip,
                generation=generation,
            )
            for rank, sts in enumerate(
                render_replica(
                    ic, plan=probe, engine_key=engine_key, tools_image=self.gateway_image
                )
            ):
                if sts["kind"] == "StatefulSet":
                    want[rank] = pod_template_hash(sts)
        outdated = _outdated(pods, generation, want)
        decision = decide(
            state=state,
            generation=generation,
            stopped=stopped,
            history=history,
            policy=ic.spec.restart_policy,
            now=now,
            force_restart=force,
            outdated=outdated,
            others_ready=others_ready,
            blocked=blocked,
        )
        restarts = history.restarts
        last_restart = (previous or {}).get("lastRestart")
        if decision.action is Action.STOP:
            generation += 1
            restarts += 1
            last_restart = {"time": _ts(now), "reason": decision.cause or ""}
            self._event(
                obj,
                warning=True,
                reason=Reason.GANG_RESTART,
                message=f"replica {index}: {decision.cause}",
            )
            metrics.GANG_RESTARTS.labels(
                namespace=ic.metadata.namespace or "default",
                cluster=ic.metadata.name,
                cause=_cause_class(decision.cause or ""),
            ).inc()
        self._transition_events(obj, index, previous, decision)
        report = ReplicaReport(
            index=index,
            nodes=nodes,
            phase=decision.phase,
            ready_ranks=state.ready_ranks(generation),
            generation=generation,
            endpoint=f"http://{rank0_ip}:30000" if rank0_ip else None,
            restarts=restarts,
            last_restart=last_restart,
            recent_restarts=tuple(_ts(t) for t in decision.restart_times),
            members=decision.members,
            budget_exhausted=decision.exhausted,
            node_down=decision.node_down,
            message=decision.message,
        )
        retry = (decision.retry_at - now).total_seconds() if decision.retry_at else None
        if rank0_ip is None:
            return report, None, retry
        plan = ReplicaPlan(
            index=index,
            group_key=group_key,
            nodes=nodes,
            rank0_ip=rank0_ip,
            generation=generation,
            running=decision.action is Action.RUN,
        )
        return (
            report,
            render_replica(ic, plan=plan, engine_key=engine_key, tools_image=self.gateway_image),
            retry,
        )

    async def _with_proofs(
        self,
        *,
        ic: InferenceCluster,
        obj: JSON,
        report: ClusterReport,
        observed: Observed,
        previous_status: Mapping[str, Any],
        capacity: JSON,
    ) -> ClusterReport:
        """Add CapacityPlanned, ModelVerified and ConfigApplied to the report."""
        generation = report.generation
        key = (ic.metadata.namespace or "default", ic.metadata.name)
        (model,) = report.extra_conditions  # set by _plan, which acts on it
        results = {}
        for replica in report.replicas:
            if replica.phase is not Phase.READY or replica.endpoint is None:
                continue
            cache_key = (*key, str(replica.index), str(replica.generation), str(generation))
            results[replica.index] = await self.config_probe.check(
                ic.spec,
                cache_key=cache_key,
                endpoint=replica.endpoint,
                api_key=self._keys.get(key),
                rank0_ip=replica.endpoint.split("//")[1].split(":")[0],
            )
        config = config_condition(results, generation=generation)
        before = {c["type"]: c for c in previous_status.get("conditions") or []}
        for cond, reason in ((model, model["reason"]), (config, config["reason"])):
            old = before.get(cond["type"], {})
            if cond["status"] == "False" and (old.get("status"), old.get("message")) != (
                "False",
                cond["message"],
            ):
                self._event(obj, warning=True, reason=Reason(reason), message=cond["message"])
        return replace(report, extra_conditions=(capacity, model, config))

    def _model_verdict(
        self,
        observed: Observed,
        previous_status: Mapping[str, Any],
        *,
        generation: int,
        force: bool,
    ) -> JSON:
        """ModelVerified now; a failed verdict of this spec generation outlives its pods.

        When the ranks' copies disagree the replica is stopped, and the init containers'
        messages go with the pods; the verdict is kept until the spec changes or a
        restart is requested, so the replica does not start again on bad files.
        """
        engine_pods = [p for p in observed.pods if _label(p, LABEL_RANK) is not None]
        model = model_condition(engine_pods, generation=generation)
        previous = next(
            (
                c
                for c in previous_status.get("conditions") or []
                if c.get("type") == ConditionType.MODEL_VERIFIED.value
            ),
            None,
        )
        if (
            model["status"] == "Unknown"
            and previous is not None
            and previous.get("status") == "False"
            and previous.get("observedGeneration") == generation
            and not force
        ):
            return {
                k: previous[k]
                for k in ("type", "status", "reason", "message", "observedGeneration")
            }
        return model

    def _transition_events(
        self, obj: JSON, index: int, previous: Mapping[str, Any] | None, decision: Decision
    ) -> None:
        before = (previous or {}).get("phase")
        if decision.phase.value == before:
            return
        if decision.phase is Phase.READY:
            self._event(
                obj, warning=False, reason=Reason.REPLICA_READY, message=f"replica {index} serving"
            )
        elif decision.exhausted and not (previous or {}).get("budgetExhausted"):
            self._event(
                obj,
                warning=True,
                reason=Reason.RESTART_BUDGET_EXHAUSTED,
                message=f"replica {index}: {decision.message}",
            )
        elif decision.node_down and decision.action is not Action.STOP:
            self._event(
                obj,
                warning=True,
                reason=Reason.NODE_NOT_READY,
                message=f"replica {index}: {decision.message}",
            )

    async def _apply(self, desired: Sequence[JSON], observed: Observed) -> None:
        live = {
            (o["kind"], o["metadata"]["name"]): o
            for items in observed.owned.values()
            for o in items
        }
        for obj in desired:
            if is_current(live.get((obj["kind"], obj["metadata"]["name"])), obj):
                continue
            await self.api.apply(obj)
            metrics.WRITES.labels(verb="apply", kind=obj["kind"]).inc()

    async def _prune(self, desired: Sequence[JSON], keep: set[str], observed: Observed) -> None:
        wanted = {(o["kind"], o["metadata"]["name"]) for o in desired}
        for kind in reversed(OWNED):
            for item in observed.owned[kind.kind]:
                name = item["metadata"]["name"]
                if (kind.kind, name) in wanted or name in keep:
                    continue
                await self.api.delete(
                    kind, name, item["metadata"]["namespace"], uid=item["metadata"].get("uid")
                )
                metrics.WRITES.labels(verb="delete", kind=kind.kind).inc()

    async def _write_status(
        self, obj: JSON, report: ClusterReport, previous: Mapping[str, Any], now: datetime
    ) -> None:
        status = derive_status(report, previous, now)
        if all(previous.get(k) == v for k, v in status.items()):
            return
        meta = obj["metadata"]
        await self.api.apply_status(IC, meta["name"], meta["namespace"], status)
        metrics.WRITES.labels(verb="apply", kind="InferenceCluster/status").inc()

    async def _blocked(
        self,
        obj: JSON,
        previous: Mapping[str, Any],
        generation: int,
        message: str,
        *,
        reason: Reason = Reason.INVALID_SPEC,
        extra: tuple[JSON, ...] = (),
    ) -> None:
        """The spec cannot be acted on (invalid, or the memory plan does not fit)."""
        if (
            previous.get("phase") != Phase.FAILED.value
            or previous.get("observedGeneration") != generation
        ):
            self._event(obj, warning=True, reason=reason, message=message)
        report = ClusterReport(
            generation=generation,
            desired_replicas=0,
            selector=cluster_selector(obj["metadata"]["name"]),
            replicas=(),
            spec_error=message,
            spec_error_reason=reason,
            extra_conditions=extra,
        )
        await self._write_status(obj, report, previous, self.clock())
        await self._post_events(obj)

    def _event(self, obj: JSON, *, warning: bool, reason: Reason, message: str) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        event = PendingEvent(warning=warning, reason=reason, message=message)
        self._events.setdefault(key, []).append(event)

    async def _post_events(self, obj: JSON) -> None:
        pending = self._events.pop((obj["metadata"]["namespace"], obj["metadata"]["name"]), [])
        for event in pending:
            try:
                await self.api.create(event_manifest(obj, event, now=self.clock()))
            except ClusterAPIError as exc:  # Events are best effort; status carries the facts
                logger.warning("could not post Event %s: %s", event.reason.value, exc)
                continue
            metrics.WRITES.labels(verb="create", kind="Event").inc()


def _outdated(pods: Sequence[JSON], generation: int, want: Mapping[int, str | None]) -> bool:
    """A rank pod of the running generation was made from an older spec."""
    for pod in pods:
        rank = _label(pod, LABEL_RANK)
        if rank is None or not rank.isdigit() or want.get(int(rank)) is None:
            continue
        annotations = pod["metadata"].get("annotations") or {}
        have = annotations.get(ANNOTATION_TEMPLATE_HASH)
        if _label(pod, LABEL_GENERATION) == str(generation) and have != want[int(rank)]:
            return True
    return False


def _with_kind(obj: JSON, kind: str) -> JSON:
    """List items come without apiVersion/kind; add the kind for lookups."""
    return {**obj, "kind": kind}


def _ts(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cause_class(cause: str) -> str:
    """A bounded metric label from a free-text cause."""
    for word, label in (
        ("container exited", "container_exit"),
        ("init container", "init_failed"),
        ("pod failed", "pod_failed"),
        ("pod deleted", "pod_deleted"),
        ("pod replaced", "pod_deleted"),
        ("being deleted", "pod_deleted"),
        ("node", "node_failure"),
        ("spec changed", "update"),
        ("requested", "manual"),
    ):
        if word in cause:
            return label
    return "other"


__all__ = ["ClusterReconciler", "PassOutcome", "kind_of"]
