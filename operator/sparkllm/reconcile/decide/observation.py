"""What one pass observed: the whole input of ``decide``. Pure data.

Why a module of its own: it is one side of the seam between the steps of a pass, as
``actions.Plan`` is the other. ``observe`` (in ``reconcile/``) fills it from the API
server and the engines, raw facts only; ``decide`` reads nothing else; a unit test
builds one by hand. Frozen, so a decision cannot change what the pass saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sparkllm.api import InferenceCluster, Reason
from sparkllm.kube.kinds import JSON
from sparkllm.reconcile.decide import owned
from sparkllm.reconcile.decide.benchmark import BenchmarkSeen
from sparkllm.reconcile.decide.replicas import Observed
from sparkllm.reconcile.decide.secrets import EngineKeySeen
from sparkllm.reconcile.decide.staging_seen import StagingJob

Key = tuple[str, str]
ApiKind = tuple[str, str]  # (apiVersion, kind)


@dataclass(frozen=True)
class ServerInfo:
    """Rank 0's ``/get_server_info`` as read, for one restart generation: the reply
    (secrets redacted), or why it could not be read; and rank 0's node address, which its
    dist-init address must name (decide compares it all with the spec)."""

    generation: int
    reply: Mapping[str, Any] | str
    address: str | None = None


@dataclass(frozen=True)
class Observation:
    """What one pass read. ``obj`` None: the InferenceCluster is gone or being deleted.

    ``ic`` is None when the spec is invalid (``spec_error`` says why); the other reads
    are then not made. ``others`` are the other InferenceClusters (for their nodes).
    """

    key: Key
    obj: JSON | None
    now: datetime
    ic: InferenceCluster | None = None
    spec_error: str | None = None
    spec_error_reason: Reason = Reason.INVALID_SPEC  # PolicyDenied: outside the admin policy
    observed: Observed = field(default_factory=owned.empty)
    engine_key: EngineKeySeen | None = None
    bench_key: bool | None = None  # the Jobs' key Secret exists (None: not read)
    benchmark: BenchmarkSeen = field(default_factory=BenchmarkSeen)
    acceptance: BenchmarkSeen = field(default_factory=BenchmarkSeen)
    running_requests: Mapping[int, int | None] = field(default_factory=dict)
    server_info: Mapping[int, ServerInfo] = field(default_factory=dict)
    others: tuple[JSON, ...] = ()
    absent_apis: frozenset[ApiKind] = frozenset()  # optional kinds the cluster lacks
    pod_monitors_served: bool = False  # the cluster serves PodMonitor (asked when wanted)
    start_logs: Mapping[str, str] = field(default_factory=dict)  # starting pods' log, by uid
    staging: tuple[StagingJob, ...] = ()  # model staging Jobs (spec.model.source only)
