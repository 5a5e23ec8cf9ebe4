"""What one reconcile pass will do: the plan ``decide`` returns and ``execute`` carries out.

Why a module of plain data: the pass is split at this seam. Everything above it (the
observation, the decision) is read or computed; everything below it is a write. A plan
can be printed (``sparkllm render``), compared in a unit test, or executed, and an empty
plan — a pass with nothing to do — makes no write. The order of the fields is the order
``execute`` writes them in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparkllm.api import Phase, Reason

JSON = dict[str, Any]


@dataclass(frozen=True)
class PendingEvent:
    """An Event the pass will post about its InferenceCluster (``events.event_manifest``
    makes the object at write time: the clock and the host are the writer's)."""

    warning: bool
    reason: Reason
    message: str


@dataclass(frozen=True)
class Removal:
    """An object to delete, only while its uid is still the one observed."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str | None


@dataclass(frozen=True)
class GeneratedSecret:
    """A Secret whose one key holds a random token generated at write time.

    The plan names it (``manifest`` has no ``data``); ``execute`` makes the value, so
    nothing pure ever sees, prints or compares a secret value.
    """

    manifest: JSON
    key: str
    holds: str = "the engine API key"  # what the token is, for ``sparkllm render``'s note

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


@dataclass(frozen=True)
class PodPatch:
    """A merge patch on one pod (a draining replica's rank 0 leaves routing)."""

    name: str
    namespace: str
    patch: JSON


@dataclass(frozen=True)
class Plan:
    """Every write of one pass, in the order ``execute`` makes them, and what comes next.

    ``target`` is the InferenceCluster as observed (Events name it; status and the
    annotation patch go to it); None when it is gone and there is nothing to do.
    """

    target: JSON | None = None
    gang_restarts: tuple[str, ...] = ()  # metric: one cause class per restart begun
    secrets: tuple[GeneratedSecret, ...] = ()
    delete_jobs: tuple[Removal, ...] = ()
    create_jobs: tuple[JSON, ...] = ()
    pod_patches: tuple[PodPatch, ...] = ()
    delete_pods: tuple[Removal, ...] = ()  # rank pods stuck on a lost node (failover.py)
    apply: tuple[JSON, ...] = ()  # only objects whose live copy differs, in apply order
    prune: tuple[Removal, ...] = ()  # in reverse apply order
    status: JSON | None = None  # the full status to write; None when unchanged
    events: tuple[PendingEvent, ...] = ()
    annotations: JSON | None = None  # merge patch of metadata.annotations (None: none)
    replica_phases: tuple[Phase, ...] | None = None  # metric gauge; None: leave it
    quarantined_nodes: int | None = None  # metric gauge; None: leave it
    failovers: int = 0  # metric: replicas moved to a spare group
    retry_after: float | None = None
    nodes: frozenset[str] = field(default_factory=frozenset)
    waiting_for_nodes: bool = False

    @property
    def writes(self) -> int:
        """How many API writes executing the plan makes (Events included)."""
        return (
            len(self.secrets)
            + len(self.delete_jobs)
            + len(self.create_jobs)
            + len(self.pod_patches)
            + len(self.delete_pods)
            + len(self.apply)
            + len(self.prune)
            + (self.status is not None)
            + len(self.events)
            + (self.annotations is not None)
        )


def earliest(*delays: float | None) -> float | None:
    """The soonest of several "look again in" delays (None: no need)."""
    known = [d for d in delays if d is not None]
    return min(known) if known else None
