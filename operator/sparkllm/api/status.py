"""``status``: what the operator observed, as an API other tools can rely on.

Status is written only by the operator, so its models validate shape, not policy, and
the CRD gives its fields no defaults (an absent field means "not observed yet", which a
default would hide). Condition types are documented constants; ``Ready`` is derived from
the others. Reasons come from :mod:`sparkllm.api.reasons`. ``benchmark`` is left open:
its summary follows the benchmark's report (docs/proof-of-service.md). ``frontDoor`` says
where clients reach the object (its Service, port and URLs), so nobody has to know the
naming rule; ``kubectl get icl -o wide`` shows its URL, the Ready reason and ``restarts``.

Condition types, what True means, their reasons, who sets them and what they do to
``Ready`` are one table, :mod:`sparkllm.api.conditions`; ``set_condition`` here is the
one way a condition enters a status (apimachinery's ``SetStatusCondition``).
"""

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_serializer,
    model_serializer,
)

from sparkllm.api.common import LABEL_KEY_PATTERN, MAX_LABEL_KEY, NodeName
from sparkllm.api.conditions import ORDER, type_description
from sparkllm.api.engine_status import MAX_REPLICAS, ReplicaEngineStatus
from sparkllm.api.governance_store import GatewayStatus
from sparkllm.api.memory import MemoryStatus
from sparkllm.api.network_status import NetworkStatus
from sparkllm.api.quarantine import MAX_TRACKED_NODES, Failover, NodeFailures, QuarantinedNode
from sparkllm.api.rules import ApiModel
from sparkllm.api.staging_status import ModelStagingStatus
from sparkllm.api.start_status import ReplicaStart

# metav1.Condition's reason format: CamelCase, starting with a letter.
REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


class Phase(StrEnum):
    """A one-word summary of an InferenceCluster or of one replica, for humans.

    Pending: nothing started (waiting for nodes or checks). Starting: ranks are loading.
    Ready: serving. Degraded: serving below the desired level, or a replica gave up
    restarting. Restarting: a gang restart is in progress. Failed: cannot progress
    without a spec or cluster change (e.g. invalid spec, no node groups). Stopped:
    ``spec.replicas`` is 0 — nothing runs and nothing serves, on purpose (objects only).
    """

    PENDING = "Pending"
    STARTING = "Starting"
    READY = "Ready"
    DEGRADED = "Degraded"
    RESTARTING = "Restarting"
    FAILED = "Failed"
    STOPPED = "Stopped"


PhaseName = Literal["Pending", "Starting", "Ready", "Degraded", "Restarting", "Failed"]
ClusterPhaseName = Literal[
    "Pending", "Starting", "Ready", "Degraded", "Restarting", "Failed", "Stopped"
]


class Condition(ApiModel):
    """One observation of one aspect of the object (the metav1.Condition shape)."""

    type: Annotated[
        str, StringConstraints(min_length=1, max_length=MAX_LABEL_KEY, pattern=LABEL_KEY_PATTERN)
    ] = Field(description=type_description())
    status: Literal["True", "False", "Unknown"] = Field(
        description="status of the condition: True, False or Unknown."
    )
    reason: Annotated[
        str, StringConstraints(min_length=1, max_length=1024, pattern=REASON_PATTERN)
    ] = Field(description="reason is a CamelCase word for the last transition, for machines.")
    message: Annotated[str, StringConstraints(max_length=32768)] = Field(
        default="", description="message explains the last transition, for humans."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="observedGeneration is the spec generation observed."
    )
    last_transition_time: datetime = Field(
        description="lastTransitionTime is when status last changed (RFC 3339)."
    )


def set_condition(conditions: list[Condition], new: Condition) -> bool:
    """Put ``new`` into ``conditions`` (one per type); True when anything changed.

    apimachinery's ``meta.SetStatusCondition``: a condition whose status did not flip
    keeps its ``lastTransitionTime`` (alerts key on it); reason, message and
    ``observedGeneration`` follow ``new``. The list is reordered into the registry's order
    (types it does not know last), so the written list never moves for nothing.
    """
    at = next((i for i, old in enumerate(conditions) if old.type == new.type), None)
    if at is None:
        conditions.append(new)
        changed = True
    else:
        old = conditions[at]
        if old.status == new.status:
            new = new.model_copy(update={"last_transition_time": old.last_transition_time})
        changed = new != old
        conditions[at] = new
    conditions.sort(key=lambda c: ORDER.index(c.type) if c.type in ORDER else len(ORDER))
    return changed


class LastRestart(ApiModel):
    """When and why a replica was last restarted as a whole."""

    time: datetime = Field(description="time of the restart (RFC 3339).")
    reason: Annotated[str, StringConstraints(max_length=1024)] = Field(
        description="reason is what triggered it, e.g. 'rank 1 container exited (code 137, "
        "OOMKilled)'."
    )


class ReplicaStatus(ApiModel):
    """The observed state of one replica (one pipeline of ranks)."""

    index: int = Field(ge=0, description="index of the replica, from 0.")
    nodes: tuple[NodeName, ...] = Field(
        default=(), description="nodes running the replica's ranks, in rank order."
    )
    phase: PhaseName = Field(description="phase of the replica (see status.phase).")
    ready_ranks: int = Field(default=0, ge=0, description="readyRanks is how many ranks run.")
    restarts: int = Field(
        default=0, ge=0, description="restarts counts gang restarts since the replica was made."
    )
    generation: int = Field(
        default=0,
        ge=0,
        description="generation is the restart generation: incremented at each gang "
        "restart, stamped on the ranks' pods so stale ranks are recognised.",
    )
    last_restart: LastRestart | None = Field(
        default=None, description="lastRestart is the latest gang restart, if any."
    )
    endpoint: str | None = Field(
        default=None, description="endpoint is rank 0's API URL, e.g. http://10.0.0.10:30000."
    )
    message: Annotated[str, StringConstraints(max_length=4096)] | None = Field(
        default=None, description="message says, for humans, what the replica is doing or why."
    )
    restart_times: tuple[datetime, ...] = Field(
        default=(),
        description="restartTimes are the gang restarts of the last hour that count "
        "against restartPolicy.maxRestartsPerHour (RFC 3339).",
    )
    members: tuple[Annotated[str, StringConstraints(max_length=64)], ...] = Field(
        default=(),
        description="members are the uids of the rank pods of the current generation, in "
        "rank order, recorded once every rank exists; a rank pod with another uid was "
        "replaced behind the operator's back, so the replica restarts.",
    )
    budget_exhausted: bool | None = Field(
        default=None,
        description="budgetExhausted is true when the replica spent its restart budget "
        "and is held stopped until the spec changes or sparkllm.io/restart=now is set.",
    )
    node_down: bool | None = Field(
        default=None,
        description="nodeDown is true while a node of the replica is NotReady or missing; "
        "the replica restarts when the node is back.",
    )
    start: ReplicaStart | None = Field(
        default=None,
        description="start is, while the replica starts, each rank's stage (from its pod, "
        "then SGLang's own log lines), the time since the start against "
        "startupGraceSeconds and the last start's duration as the estimate.",
    )
    last_start_seconds: int | None = Field(
        default=None,
        ge=0,
        description="lastStartSeconds is how long the replica's last completed start took, "
        "from its first rank pod's creation to rank 0 Ready.",
    )
    node_group: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        default=None,
        description="nodeGroup is the node group the replica is placed on (group-<i> for "
        "spec.placement.nodeGroups[i], else the nodeGroupLabel value); kept across "
        "operator restarts, it changes only by a failover to a spare group.",
    )
    last_failover: Failover | None = Field(
        default=None,
        description="lastFailover is the replica's latest move to a spare node group.",
    )

    @field_serializer("restart_times")
    def _milliseconds(self, times: tuple[datetime, ...]) -> list[str]:
        """RFC 3339 in UTC, with milliseconds when the time has a fraction: restart times
        feed the backoff, which counts in seconds (an unchanged list dumps unchanged)."""
        return [_rfc3339(t) for t in times]

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``restartTimes`` or ``members`` while there are none (as ever written)."""
        out: dict[str, Any] = handler(self)
        for name in ("restart_times", "restartTimes", "members"):
            if name in out and not out[name]:
                del out[name]
        return out


def _rfc3339(moment: datetime) -> str:
    """``2026-03-01T12:00:00.250Z``; no fraction when there is none."""
    timespec = "milliseconds" if moment.microsecond else "seconds"
    return moment.astimezone(UTC).isoformat(timespec=timespec).removesuffix("+00:00") + "Z"


class FrontDoorStatus(ApiModel):
    """Where clients reach the model: the front door's Service, and its URLs."""

    service: Annotated[str, StringConstraints(min_length=1, max_length=253)] = Field(
        description="service is the front door's Service in the object's namespace (the "
        "admission layer, then the router, then the replicas' rank 0), e.g. "
        "deepseek-v4-flash."
    )
    port: int = Field(ge=1, le=65535, description="port of that Service: the OpenAI API.")
    cluster_url: Annotated[str, StringConstraints(max_length=1024)] = Field(
        alias="clusterURL",
        description="clusterURL is the front door as a pod in the cluster reaches it, "
        "e.g. http://deepseek-v4-flash.llm.svc:8000 (https with spec.exposure.type TLS).",
    )
    url: Annotated[str, StringConstraints(max_length=1024)] = Field(
        description="url is where clients reach it: https://<host> for spec.exposure.type "
        "Ingress (its host) or HTTPRoute (its first host name that is not a wildcard), else "
        "clusterURL. Add /v1 for the OpenAI API.",
    )


class InferenceClusterStatus(ApiModel):
    """The observed state of an InferenceCluster."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="observedGeneration is the spec generation acted on."
    )
    phase: ClusterPhaseName | None = Field(
        default=None,
        description="phase summarises the object: Pending, Starting, Ready, Degraded, "
        "Restarting, Failed, or Stopped (spec.replicas is 0: nothing runs, on purpose).",
    )
    replicas: int | None = Field(
        default=None, ge=0, description="replicas is how many replicas exist (scale subresource)."
    )
    ready_replicas: int | None = Field(
        default=None, ge=0, description="readyReplicas is how many replicas serve."
    )
    selector: str | None = Field(
        default=None,
        description="selector is the label selector of the ranks' pods (scale subresource), "
        "e.g. sparkllm.io/cluster=deepseek-v4-flash.",
    )
    conditions: tuple[Condition, ...] = Field(
        default=(),
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="conditions are the latest observations, one per type.",
    )
    replica_statuses: tuple[ReplicaStatus, ...] = Field(
        default=(), description="replicaStatuses is one entry per existing replica, by index."
    )
    network: NetworkStatus | None = Field(
        default=None,
        description="network is what the network preflight found (spec.network.preflight "
        "not off): every node's findings and each replica's measured bus bandwidth.",
    )
    memory: MemoryStatus | None = Field(
        default=None,
        description="memory is what the memory preflight found (spec.memoryPreflight not "
        "off): every node's MemAvailable, swap and memory-pressure findings.",
    )
    engines: tuple[ReplicaEngineStatus, ...] | None = Field(
        default=None,
        max_length=MAX_REPLICAS,
        description="engines is, per replica, each rank's image digest, SGLang version and "
        "model digest, and the image the replica is pinned to after a digest split "
        "(condition ImagesConsistent).",
    )
    front_door: FrontDoorStatus | None = Field(
        default=None,
        description="frontDoor is where clients reach the model (the Service, its port, its "
        "URLs); written once the spec is valid.",
    )
    quarantine: tuple[QuarantinedNode, ...] | None = Field(
        default=None,
        max_length=MAX_TRACKED_NODES,
        description="quarantine lists the nodes no replica of this object is placed on, "
        "since when and why (restartPolicy.quarantine).",
    )
    node_failures: tuple[NodeFailures, ...] | None = Field(
        default=None,
        max_length=MAX_TRACKED_NODES,
        description="nodeFailures are, per node, the times it failed a replica within "
        "restartPolicy.quarantine.windowSeconds (what quarantine counts).",
    )
    restarts: int | None = Field(
        default=None,
        ge=0,
        description="restarts is the gang restarts of every replica, summed "
        "(replicaStatuses[*].restarts).",
    )
    gateway: GatewayStatus | None = Field(
        default=None,
        description="gateway is the front door's replicas and where their governance state "
        "(budgets, the usage ledger) lives: InProcess or Redis, and who named the Redis "
        "(the spec or the operator's default store).",
    )
    benchmark: dict[str, Any] | None = Field(
        default=None,
        description="benchmark is the latest acceptance benchmark run on demand (annotation "
        "sparkllm.io/benchmark=<user>): job, user, phase (Waiting, Running, Succeeded, "
        "Failed, Cancelled), succeeded, requestedAt, completedAt, message, and summary "
        "(TTFT, TPOT, end-to-end latency and throughput per scenario, each with its basis: "
        "input/output tokens, concurrency, cache state); the summary's keys are open.",
    )
    acceptance: dict[str, Any] | None = Field(
        default=None,
        description="acceptance is the latest acceptance checklist run on demand (annotation "
        "sparkllm.io/acceptance=<user>): job, user, phase (Waiting, Running, Succeeded, "
        "Failed, Cancelled), succeeded, requestedAt, completedAt, message (why it failed), "
        "baseline (set or not, when asked for), and summary (pass/fail/notMeasured counts, "
        "each row's verdict, why failed rows failed, startedAt/endedAt, the stress figures); "
        "the summary's keys are open.",
    )
    model_staging: ModelStagingStatus | None = Field(
        default=None,
        description="modelStaging is, per replica's node group and node, where the copy of "
        "spec.model.source is (stage, bytes, rate, ETA, or why it failed); only with a "
        "source (docs/model-staging.md).",
    )
    start: Annotated[str, StringConstraints(max_length=256)] | None = Field(
        default=None,
        description="start is the printer column's summary of the least advanced starting "
        "rank, one word: stage[:shards]:elapsed/grace[~estimate] (e.g. "
        "LoadingWeights:12/46:95s/1200s~300s), or Ready:<seconds the last start took>.",
    )
