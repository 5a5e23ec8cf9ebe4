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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sparkllm.api import (
    API_VERSION,
    KIND,
    LABEL_REPLICA,
    InferenceCluster,
    Phase,
    Reason,
    validate_inference_cluster,
)
from sparkllm.errors import ClusterAPIError, SpecError
from sparkllm.reconcile import metrics, owned
from sparkllm.reconcile.benchmark import reconcile_benchmark
from sparkllm.reconcile.drain import RunningRequests, drain_removed_replicas
from sparkllm.reconcile.events import PendingEvent, event_manifest
from sparkllm.reconcile.kube import JSON, KubeAPI, kind_of, lookup_kind
from sparkllm.reconcile.proofs import (
    ConfigProbe,
    capacity_condition,
    config_condition,
)
from sparkllm.reconcile.replicas import (
    Observed,
    ReplicaInputs,
    cause_class,
    label,
    model_verdict,
    plan_replica,
)
from sparkllm.reconcile.secrets import ensure_engine_key
from sparkllm.reconcile.status import ClusterReport, ReplicaReport, cluster_phase, derive_status
from sparkllm.render.benchmark import ANNOTATION_BENCHMARK
from sparkllm.render.gateway import DEFAULT_GATEWAY_IMAGE, render_gateway
from sparkllm.render.names import (
    ANNOTATION_RESTART,
    LABEL_NODE_GROUP,
    cluster_selector,
)
from sparkllm.render.placement import assign_groups, discover_groups

logger = logging.getLogger(__name__)
IC = lookup_kind(API_VERSION, KIND)

Key = tuple[str, str]


def utcnow() -> datetime:
    """Now, in UTC, to the millisecond (restart times and backoffs need sub-second care)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


@dataclass
class PassOutcome:
    """What the pass wants from its caller: when to look again, which nodes it uses."""

    retry_after: float | None = None
    nodes: set[str] = field(default_factory=set)
    waiting_for_nodes: bool = False


def obj_generation(obj: Mapping[str, Any]) -> int:
    return int(obj["metadata"].get("generation") or 0)


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
        self.running_requests = RunningRequests()
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
        observed = await owned.observe(self.api, ic)
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
        benchmark = await reconcile_benchmark(
            self.api,
            ic,
            obj,
            ready=cluster_phase(report) is Phase.READY and report.desired_replicas > 0,
            image=self.gateway_image,
            now=now,
        )
        for warning, reason, message in benchmark.events:
            self._event(obj, warning=warning, reason=reason, message=message)
        draining, drain_retry, drain_events = await drain_removed_replicas(
            self.api, ic, observed, now=now, running=self.running_requests
        )
        for event in drain_events:
            self._event(obj, warning=event.warning, reason=event.reason, message=event.message)
        if drain_retry is not None:
            outcome.retry_after = min(outcome.retry_after or drain_retry, drain_retry)
        await owned.apply_desired(self.api, desired, observed)
        await owned.prune(self.api, desired, keep | draining, observed)
        await self._write_status(
            obj, report, previous_status, now, benchmark=benchmark.status_value(previous_status)
        )
        await self._post_events(obj)
        consumed: dict[str, None] = {}
        if (obj["metadata"].get("annotations") or {}).get(ANNOTATION_RESTART) == "now":
            consumed[ANNOTATION_RESTART] = None
        if benchmark.remove_annotation:
            consumed[ANNOTATION_BENCHMARK] = None
        if consumed:
            patch = {"metadata": {"annotations": consumed}}
            await self.api.merge_patch(IC, name, namespace, patch)
            metrics.WRITES.labels(verb="patch", kind=KIND).inc()
        metrics.record_replica_phases(namespace, name, [r.phase for r in report.replicas])
        return outcome

    # --- steps ----------------------------------------------------------------------

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
            if (r := label(sts, LABEL_REPLICA)) is not None
            and r.isdigit()
            and (g := label(sts, LABEL_NODE_GROUP)) is not None
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
        model = model_verdict(
            observed, previous_status, generation=obj_generation(obj), force=force
        )
        blocked = (
            f"model copies disagree: {model['message']}" if model["status"] == "False" else None
        )
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
            result = plan_replica(
                ic,
                observed,
                ReplicaInputs(
                    index=index,
                    group_key=group.key,
                    nodes=group.nodes,
                    previous=previous.get(index),
                    reset_budget=reset_budget,
                    force=force,
                    others_ready=others_ready,
                    blocked=blocked,
                    engine_key=engine_key,
                    tools_image=self.gateway_image,
                    now=now,
                ),
            )
            replica_report, objects, retry = result.report, result.objects, result.retry_after
            for event in result.events:
                self._event(obj, warning=event.warning, reason=event.reason, message=event.message)
            if result.restart_cause is not None:
                metrics.GANG_RESTARTS.labels(
                    namespace=ic.metadata.namespace or "default",
                    cluster=ic.metadata.name,
                    cause=cause_class(result.restart_cause),
                ).inc()
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

    async def _write_status(
        self,
        obj: JSON,
        report: ClusterReport,
        previous: Mapping[str, Any],
        now: datetime,
        *,
        benchmark: JSON | None = None,
    ) -> None:
        status = derive_status(report, previous, now)
        # status.benchmark is written by the benchmark step; every status write carries it
        # (server-side apply drops a field our manager stops sending).
        kept = benchmark if benchmark is not None else previous.get("benchmark")
        if kept is not None:
            status["benchmark"] = kept
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


__all__ = ["ClusterReconciler", "PassOutcome", "kind_of"]
