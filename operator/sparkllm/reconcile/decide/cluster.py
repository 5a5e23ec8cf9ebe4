"""The decide step of a pass: an observation in, the plan of every write out. Pure.

Why pure: every behaviour of the operator — gang restarts, backoff and budget, node
failure, scale up and drain, rolling updates, the proofs, refusals — is a function of
what one pass read, so it is tested as a table of observations without a cluster, and
``sparkllm render`` prints what the operator would apply by calling this same function
on a fresh observation. No I/O, no clock (``observation.now``), no metrics (the plan
lists the increments), no randomness (the generated key is named, ``execute`` makes it).
The operator's settings come in as arguments: its own image (``gateway_image``: the
gateway's, the init containers' and the Jobs', with its pull policy and pull secrets, the
chart's ``image`` values), and the default governance store (the chart's
``governance.redis``) acted on for a spec that names none.
It reads as a list of steps: refuse what cannot be acted on, the engine key, the
replicas, the proofs, the benchmark, the drain, then the status and the annotations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from sparkllm.api import ConditionType, InferenceCluster, InferenceClusterSpec, Phase, Reason
from sparkllm.api.engine_status import ReplicaEngineStatus
from sparkllm.api.governance_store import GatewayStatus, RedisStoreSpec, gateway_status
from sparkllm.api.memory import MemoryStatus
from sparkllm.api.network_status import NetworkStatus
from sparkllm.api.staging_status import ModelStagingStatus
from sparkllm.api.status import FrontDoorStatus
from sparkllm.configcheck import compare_server_info
from sparkllm.errors import SpecError
from sparkllm.keys import ANNOTATION_LIFT_QUARANTINE, ANNOTATION_RESTART
from sparkllm.reconcile.decide import owned
from sparkllm.reconcile.decide.acceptance import STATUS_FIELD as ACCEPTANCE_FIELD
from sparkllm.reconcile.decide.acceptance import acceptance_keep, decide_acceptance
from sparkllm.reconcile.decide.actions import JSON, GeneratedSecret, PendingEvent, Plan, earliest
from sparkllm.reconcile.decide.all_replicas import (
    PassFacts,
    cluster_report,
    decide_replicas,
)
from sparkllm.reconcile.decide.benchmark import BenchmarkOutcome, decide_benchmark
from sparkllm.reconcile.decide.drain import plan_drain
from sparkllm.reconcile.decide.failover import lost_pods
from sparkllm.reconcile.decide.memory_proof import memory_report, memory_verdict
from sparkllm.reconcile.decide.monitoring import decide_monitors
from sparkllm.reconcile.decide.network_proof import network_report, network_verdict
from sparkllm.reconcile.decide.observation import Observation
from sparkllm.reconcile.decide.proofs import (
    ConfigResult,
    capacity_condition,
    config_condition,
    model_verdict,
)
from sparkllm.reconcile.decide.replica_state import unschedulable
from sparkllm.reconcile.decide.secrets import (
    EngineKeySeen,
    engine_key_ref,
    generated_bench_key,
    generated_key_secret,
)
from sparkllm.reconcile.decide.spares import Placement, place
from sparkllm.reconcile.decide.staging import decide_staging
from sparkllm.reconcile.decide.staging_copies import live_copies
from sparkllm.reconcile.decide.start_stages import decide_starts, with_starts
from sparkllm.reconcile.decide.status import (
    ClusterReport,
    StatusParts,
    all_clear,
    cluster_phase,
    condition,
    derive_status,
    progressing_verdict,
)
from sparkllm.reconcile.decide.upgrade import (
    DEFAULT_UPGRADE,
    UpgradeSettings,
    restart_request,
    update_pending_condition,
)
from sparkllm.reconcile.decide.versions import decide_versions
from sparkllm.render.front_door import front_door_status
from sparkllm.render.governance_default import with_governance_default
from sparkllm.render.names import cluster_selector
from sparkllm.render.placement import node_holders
from sparkllm.render.product_image import ProductImage


def decide(
    observation: Observation,
    *,
    gateway_image: ProductImage,
    governance_default: RedisStoreSpec | None = None,
    upgrade: UpgradeSettings = DEFAULT_UPGRADE,
) -> Plan:
    """Every write of this pass, and when to look again; ``governance_default`` is the
    store acted on when the spec names none (the spec wins); ``upgrade`` the chart's
    ``upgrade.applyOperatorChanges`` (decide/upgrade.py)."""
    obj, ic = observation.obj, observation.ic
    if obj is None:
        return Plan()  # gone: garbage collection removes what it owned
    generation = int(obj["metadata"].get("generation") or 0)
    if ic is None:
        message = observation.spec_error or "invalid spec"
        return _blocked(observation, obj, message, reason=observation.spec_error_reason)
    defaulted = with_governance_default(ic, governance_default)  # ``ic`` itself: unchanged
    gateway = gateway_status(defaulted.spec.gateway, from_default=defaulted is not ic)
    ic = defaulted
    try:
        capacity, fits = capacity_condition(ic.spec, generation=generation)
        if not fits:
            message = capacity["message"]
            return _blocked(
                observation, obj, message, reason=Reason.CAPACITY_EXCEEDED, extra=(capacity,)
            )
        return _act(
            observation, obj, ic, capacity=capacity, gateway_image=gateway_image,
            gateway=gateway, upgrade=upgrade,
        )  # fmt: skip
    except SpecError as exc:  # valid, but cannot be realised (rendered, planned)
        return _blocked(observation, obj, str(exc))


def _act(
    observation: Observation,
    obj: JSON,
    ic: InferenceCluster,
    *,
    capacity: JSON,
    gateway_image: ProductImage,
    gateway: JSON,
    upgrade: UpgradeSettings,
) -> Plan:
    """The pass of a valid spec whose memory plan fits (``gateway``: its status.gateway)."""
    observed, now = observation.observed, observation.now
    previous: Mapping[str, Any] = obj.get("status") or {}
    generation = int(obj["metadata"].get("generation") or 0)
    key_seen, secret, events = _engine_key(ic, observation)
    bench_key = observation.bench_key
    restart = restart_request(obj["metadata"].get("annotations"))
    force = restart.force
    if restart.refusal is not None:
        events.append(PendingEvent(True, Reason.RESTART_ANNOTATION_REFUSED, restart.refusal))
    model = model_verdict(observed, previous, generation=generation, force=force)
    network = network_verdict(ic, observed, previous, generation=generation, force=force)
    net_status = None if network is None else network_report(ic, observed, previous, network)
    memory = memory_verdict(ic, observed, previous, generation=generation, force=force)
    mem_status = None if memory is None else memory_report(ic, observed, previous, memory)
    phases = {int(r["index"]): str(r.get("phase")) for r in previous.get("replicaStatuses") or []}
    versions = decide_versions(
        ic, observed, previous, generation=generation, force=force, phases=phases
    )
    facts = PassFacts(
        previous_status=previous,
        generation=generation,
        force=force,
        blocked=_blocking(ic, model=model, network=network, launch=versions.launch, memory=memory),
        engine_key=key_seen.ref,
        gateway_image=gateway_image,
        now=now,
        running=observation.running_requests,
        absent_apis=observation.absent_apis,
        upgrade=upgrade,
        pins=versions.pins,
    )
    placement = place(
        ic, observed, previous=previous, annotations=obj["metadata"].get("annotations"),
        holders=node_holders(obj, observation.others), now=now,
    )  # fmt: skip
    assignment, problems = placement.assignment, placement.problems
    placed = {i: g for i, g in assignment.replicas.items() if i < ic.spec.replicas}
    copies = live_copies(
        ic, statefulsets=observed.statefulsets, pods=observed.pods,
        deployments=observed.owned.get("Deployment", []),
        group_keys={i: g.key for i, g in placed.items()},
    )  # fmt: skip
    staging = decide_staging(
        ic,
        groups={i: g.nodes for i, g in placed.items()},
        addresses={name: node.internal_ip for name, node in observed.nodes.items()},
        jobs=observation.staging, previous=previous.get("modelStaging"), force=force,
        image=gateway_image, generation=generation,
        had_condition=any(
            c.get("type") == ConditionType.MODEL_STAGED for c in previous.get("conditions") or []
        ),
        copies=copies,
    )  # fmt: skip
    facts = replace(
        facts,
        moves=placement.moves,
        quarantined=placement.quarantine.nodes,
        settle_after=placement.retry_after,
        staging_holds=staging.holds,
        staging_waits=staging.waits,
        model_digests=staging.digests,
        gateway_digest=staging.gateway_digest,
    )
    events.extend((*placement.events, *staging.events))
    replicas = decide_replicas(ic, observed, assignment, facts)
    events.extend(replicas.events)
    report = cluster_report(
        ic, decision=replicas, assignment=assignment, problems=problems, generation=generation
    )
    stuck = unschedulable(observed.pods, now=now)
    report = replace(report, in_use=assignment.in_use, unschedulable=stuck.messages)
    starts = decide_starts(
        ic, observed, report.replicas, previous=previous, logs=observation.start_logs, now=now
    )
    report = with_starts(report, starts)
    # While a group stages its ranks have not started: the Start column says how far.
    report = replace(report, start_summary=staging.column or report.start_summary)
    events.extend(starts.events)
    config = config_condition(_config_results(observation, ic.spec, report), generation=generation)
    exposed = exposed_condition(observation.absent_apis, previous, generation=generation)
    pending = update_pending_condition(
        replicas.pending, previous, generation=generation, settings=upgrade
    )
    monitors = decide_monitors(
        ic, observed, served=observation.pod_monitors_served, previous=previous,
        generation=generation,
    )  # fmt: skip
    desired = [*replicas.desired, *monitors.objects]  # the PodMonitors last
    events.extend(
        _proof_events(
            previous, model, config, versions.launch, versions.images,
            *_stuck(report, generation), *exposed, *(() if memory is None else (memory,)),
        )
    )  # fmt: skip
    ready = cluster_phase(report) is Phase.READY and report.desired_replicas > 0
    benchmark = decide_benchmark(
        ic, obj, observation.benchmark, ready=ready, image=gateway_image, now=now,
        model_digest=staging.gateway_digest,
    )  # fmt: skip
    acceptance = decide_acceptance(
        ic, obj, observation.acceptance, ready=ready, image=gateway_image, now=now,
        model_digest=staging.gateway_digest,
    )  # fmt: skip
    runs = (benchmark, acceptance)
    events.extend(PendingEvent(e.warning, e.reason, e.message) for r in runs for e in r.events)
    running = observation.running_requests
    drain = plan_drain(observed, replicas=ic.spec.replicas, running=running, now=now)
    events.extend(drain.events)
    proofs = (
        capacity, model, config, *(() if network is None else (network,)),
        *(() if memory is None else (memory,)), *exposed,
        *monitors.conditions, *pending, versions.launch, versions.images,
        *(() if staging.condition is None else (staging.condition,)),
    )  # fmt: skip
    proven = replace(report, extra_conditions=proofs)
    return Plan(
        target=obj,
        gang_restarts=tuple(replicas.gang_restarts),
        secrets=tuple(s for s in (secret, generated_bench_key(ic, exists=bench_key)) if s),
        delete_jobs=benchmark.delete_jobs + acceptance.delete_jobs + staging.delete_jobs,
        create_jobs=benchmark.create_jobs + acceptance.create_jobs + staging.create_jobs,
        pod_patches=(*replicas.pod_patches, *drain.patches),
        apply=owned.to_apply(desired, observed),
        prune=owned.to_prune(desired, replicas.keep | drain.keep | acceptance_keep(ic), observed),
        status=_status(
            proven,
            previous,
            now,
            network=net_status,
            memory=mem_status,
            gateway=gateway,
            runs=runs,
            front_door=front_door_status(ic),
            placement=placement,
            engines=versions.engines,
            staging=staging.status,
        ),
        events=tuple(events),
        annotations=_consumed(obj, runs, lifted=placement.lifted),
        replica_phases=tuple(r.phase for r in report.replicas),
        delete_pods=lost_pods(observed, ic.metadata.namespace or "default"),
        quarantined_nodes=len(placement.quarantine.entries),
        failovers=len(placement.moves),
        retry_after=earliest(
            replicas.retry_after,
            drain.retry_after,
            stuck.retry_after,
            starts.retry_after,
            staging.retry_after,
        ),
        nodes=frozenset(replicas.nodes),
        # a replica held for a node looks again at any node change: a spare may free up
        waiting_for_nodes=bool(assignment.unplaced) or any(r.node_down for r in report.replicas),
    )


def _stuck(report: ClusterReport, generation: int) -> tuple[JSON, ...]:
    """Progressing=False for a reason the user must act on (a Warning Event when new)."""
    status, reason, message = progressing_verdict(report)
    if status or reason not in {Reason.NODE_GROUP_IN_USE, Reason.UNSCHEDULABLE}:
        return ()
    kind = ConditionType.PROGRESSING
    return (condition(kind, status=False, reason=reason, message=message, generation=generation),)


# Which CRDs to install for an optional API group spec.exposure uses.
_INSTALL = {
    "gateway.networking.k8s.io/": "the Gateway API CRDs",
    "inference.networking.k8s.io/": "the Gateway API Inference Extension CRDs",
}


def exposed_condition(
    absent: frozenset[tuple[str, str]], previous: Mapping[str, Any], *, generation: int
) -> tuple[JSON, ...]:
    """Exposed=False naming each kind spec.exposure needs that the cluster does not serve;
    Exposed=True once they are served again (no condition when none was ever missing)."""
    kind = ConditionType.EXPOSED
    if not absent:
        message = "the cluster serves every API spec.exposure needs"
        return all_clear(
            kind, previous, status=True, reason=Reason.API_SERVED, message=message,
            generation=generation,
        )  # fmt: skip
    missing = sorted(absent)
    named = ", ".join(f"{kind_name} ({api_version})" for api_version, kind_name in missing)
    installs = sorted(
        {i for prefix, i in _INSTALL.items() for v, _ in missing if v.startswith(prefix)}
    )
    message = (
        f"this cluster does not serve {named}, which spec.exposure asks for: install "
        f"{' and '.join(installs)}, or change spec.exposure; not created until then "
        "(the front door and the replicas are applied as usual)"
    )
    return (
        condition(kind, status=False, reason=Reason.API_NOT_SERVED, message=message,
                  generation=generation),
    )  # fmt: skip


def _blocking(
    ic: InferenceCluster,
    *,
    model: JSON,
    network: JSON | None,
    launch: JSON | None = None,
    memory: JSON | None = None,
) -> str | None:
    """Why the replicas must not run: model copies disagree, the image's SGLang refuses the
    command line (decide/versions.py), or a gate-mode preflight (network, memory) failed."""
    if model["status"] == "False":
        return f"model copies disagree: {model['message']}"
    if launch is not None and launch["status"] == "False":
        return f"launch refused: {launch['message']}"
    gate = ic.spec.network.preflight.mode == "gate"
    if gate and network is not None and network["status"] == "False":
        return f"network preflight failed: {network['message']}"
    gate = ic.spec.memory_preflight.mode == "gate"
    if gate and memory is not None and memory["status"] == "False":
        return f"memory preflight failed: {memory['message']}"
    return None


def _engine_key(
    ic: InferenceCluster, observation: Observation
) -> tuple[EngineKeySeen, GeneratedSecret | None, list[PendingEvent]]:
    """The key's Secret: generate it when ours is absent; a missing user key is reported."""
    seen = observation.engine_key or EngineKeySeen(ref=engine_key_ref(ic))
    secret = generated_key_secret(ic, seen)
    if secret is None and seen.value is None:
        message = f"Secret {seen.ref.secret} has no key {seen.ref.key}"
        return seen, None, [PendingEvent(True, Reason.SECRET_MISSING, message)]
    return seen, secret, []


def _config_results(
    observation: Observation, spec: InferenceClusterSpec, report: ClusterReport
) -> dict[int, ConfigResult]:
    """ConfigApplied's evidence for each serving replica: rank 0's server_info, read at
    its generation, against the spec; or why it could not be read."""
    results: dict[int, ConfigResult] = {}
    for replica in report.replicas:
        if replica.phase is not Phase.READY or replica.endpoint is None:
            continue
        seen = observation.server_info.get(replica.index)
        if seen is not None and seen.generation == replica.generation:
            results[replica.index] = (
                seen.reply
                if isinstance(seen.reply, str)
                else compare_server_info(spec, seen.reply, rank0_address=seen.address)
            )
        else:
            results[replica.index] = "rank 0's /get_server_info was not read for this generation"
    return results


def _proof_events(previous: Mapping[str, Any], *conditions: JSON) -> list[PendingEvent]:
    """A Warning when a proof turns False, or its False message changes."""
    before = {c["type"]: c for c in previous.get("conditions") or []}
    events = []
    for cond in conditions:
        old = before.get(cond["type"], {})
        if cond["status"] == "False" and (old.get("status"), old.get("message")) != (
            "False",
            cond["message"],
        ):
            events.append(PendingEvent(True, Reason(cond["reason"]), cond["message"]))
    return events


def _status(
    report: ClusterReport,
    previous: Mapping[str, Any],
    now: datetime,
    *,
    network: JSON | None = None,
    memory: JSON | None = None,
    gateway: JSON | None = None,
    runs: tuple[BenchmarkOutcome, ...],
    front_door: JSON | None = None,
    engines: tuple[ReplicaEngineStatus, ...] = (),
    placement: Placement | None = None,
    staging: ModelStagingStatus | None = None,
) -> JSON | None:
    """The status to write, or None when it equals the live one (no write). The other
    steps' JSON becomes the typed status here, the one place it is assembled."""
    # status.benchmark and status.acceptance are written by their steps; every status
    # write carries them (server-side apply drops a field our manager stops sending).
    kept = {run.status_field: run.status_value(previous) for run in runs}
    parts = StatusParts(
        front_door=None if front_door is None else FrontDoorStatus.model_validate(front_door),
        network=None if network is None else NetworkStatus.model_validate(network),
        memory=None if memory is None else MemoryStatus.model_validate(memory),
        gateway=None if gateway is None else GatewayStatus.model_validate(gateway),
        benchmark=kept.get("benchmark"),
        acceptance=kept.get(ACCEPTANCE_FIELD),
        engines=engines,
        quarantine=None if placement is None else placement.quarantine_status,
        node_failures=None if placement is None else placement.failures_status,
        model_staging=staging,
    )
    status = derive_status(report, previous, now, parts)
    return None if all(previous.get(k) == v for k, v in status.items()) else status


def _consumed(
    obj: JSON, runs: tuple[BenchmarkOutcome, ...], *, lifted: bool = False
) -> JSON | None:
    """The merge patch removing the request annotations this pass answered (and setting
    what a run asked for: an accepted baseline)."""
    consumed: dict[str, str | None] = {}
    if restart_request(obj["metadata"].get("annotations")).answered:
        consumed[ANNOTATION_RESTART] = None
    if lifted:  # the quarantine lift it asked for is in this pass's status
        consumed[ANNOTATION_LIFT_QUARANTINE] = None
    for run in runs:
        consumed.update(run.annotation_patch)
    return {"metadata": {"annotations": consumed}} if consumed else None


def _blocked(
    observation: Observation,
    obj: JSON,
    message: str,
    *,
    reason: Reason = Reason.INVALID_SPEC,
    extra: tuple[JSON, ...] = (),
) -> Plan:
    """The spec cannot be acted on (invalid, or the memory plan does not fit)."""
    previous: Mapping[str, Any] = obj.get("status") or {}
    generation = int(obj["metadata"].get("generation") or 0)
    events: tuple[PendingEvent, ...] = ()
    if (
        previous.get("phase") != Phase.FAILED.value
        or previous.get("observedGeneration") != generation
    ):
        events = (PendingEvent(True, reason, message),)
    report = ClusterReport(
        generation=generation,
        desired_replicas=0,
        selector=cluster_selector(obj["metadata"]["name"]),
        replicas=(),
        spec_error=message,
        spec_error_reason=reason,
        extra_conditions=extra,
    )
    kept = (BenchmarkOutcome(), BenchmarkOutcome(status_field=ACCEPTANCE_FIELD))
    status = _status(report, previous, observation.now, runs=kept)
    return Plan(target=obj, status=status, events=events)
