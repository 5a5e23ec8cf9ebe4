"""The condition registry: every condition type, its reasons, who sets it, what it does to Ready.

Why one table: a condition is an API (alerts, ``kubectl wait --for=condition=...``,
dashboards), and before this table it was spelled in ten places — the enum, the status
docstring, the CRD's description, docs/api.md, the merge order, Ready's derivation. Now a
new condition is one ``ConditionType`` value and one row here; the order conditions are
written in, the CRD's description of ``status.conditions[].type``, docs/api.md's
conditions table (a unit test compares them) and Ready's rule
(:func:`ready_blockers`) all come from the rows (a unit test checks every type has one).

The one setter (``sparkllm.api.status.set_condition``, beside the Condition model) is
apimachinery's ``meta.SetStatusCondition``:
``lastTransitionTime`` moves only when the status flips, and it says whether anything
changed, so a pass that changes nothing writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from sparkllm.api.reasons import Reason


class ConditionType(StrEnum):
    """The condition types an InferenceCluster reports: one row each in ``CONDITIONS``."""

    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    MODEL_VERIFIED = "ModelVerified"
    CONFIG_APPLIED = "ConfigApplied"
    CAPACITY_PLANNED = "CapacityPlanned"
    NETWORK_VERIFIED = "NetworkVerified"
    MEMORY_VERIFIED = "MemoryVerified"
    EXPOSED = "Exposed"
    MONITORED = "Monitored"
    UPDATE_PENDING = "UpdatePending"
    LAUNCH_CHECKED = "LaunchChecked"
    IMAGES_CONSISTENT = "ImagesConsistent"
    MODEL_STAGED = "ModelStaged"


class ReadyEffect(StrEnum):
    """What a condition does to ``Ready``."""

    DERIVED = "derived"  # Ready itself: every desired replica serves
    BLOCKS = "blocks"  # False holds the replicas (nothing serves), so Ready is False too
    INFORMATIONAL = "informational"  # reported; Ready does not depend on it


# The reasons an unusable spec gives Ready and Progressing (decide/cluster.py's _blocked).
_REFUSED: Final = (Reason.INVALID_SPEC, Reason.POLICY_DENIED, Reason.CAPACITY_EXCEEDED)


@dataclass(frozen=True)
class ConditionKind:
    """One row: a condition type and everything said about it once."""

    type: ConditionType
    meaning: str  # what True means (one sentence, for the docs and the CRD)
    reasons: tuple[Reason, ...]  # every reason it may carry
    producer: str  # the module (under operator/sparkllm/) that decides it
    ready: ReadyEffect


CONDITIONS: Final[tuple[ConditionKind, ...]] = (
    ConditionKind(
        ConditionType.READY,
        "every desired replica serves (rank 0 /health passes, all ranks running)",
        (
            Reason.ALL_REPLICAS_READY,
            Reason.REPLICAS_NOT_READY,
            Reason.SCALED_TO_ZERO,
            *_REFUSED,
        ),
        "reconcile/decide/status.py",
        ReadyEffect.DERIVED,
    ),
    ConditionKind(
        ConditionType.PROGRESSING,
        "the operator is moving towards the spec (creating, rolling, scaling), False with "
        "a reason when it cannot",
        (
            Reason.RANKS_STARTING,
            Reason.GANG_RESTART,
            Reason.RECONCILED,
            Reason.REPLICA_DEGRADED,
            Reason.INSUFFICIENT_NODE_GROUPS,
            Reason.NODE_GROUP_IN_USE,
            Reason.UNSCHEDULABLE,
            *_REFUSED,
        ),
        "reconcile/decide/status.py",
        ReadyEffect.INFORMATIONAL,
    ),
    ConditionKind(
        ConditionType.DEGRADED,
        "a replica stopped being restarted (restart budget spent, node down, model files) "
        "or cannot be placed",
        (
            Reason.REPLICA_DEGRADED,
            Reason.INSUFFICIENT_NODE_GROUPS,
            Reason.NODE_GROUP_IN_USE,
            Reason.NOT_DEGRADED,
        ),
        "reconcile/decide/status.py",
        ReadyEffect.INFORMATIONAL,
    ),
    ConditionKind(
        ConditionType.MODEL_VERIFIED,
        "every rank's model files passed the integrity check and agree",
        (
            Reason.MODEL_FILES_VERIFIED,
            Reason.VERIFICATION_PENDING,
            Reason.MODEL_INCOMPLETE,
            Reason.CHECKSUM_MISMATCH,
        ),
        "reconcile/decide/proofs.py",
        ReadyEffect.BLOCKS,
    ),
    ConditionKind(
        ConditionType.CONFIG_APPLIED,
        "rank 0's /get_server_info matches the spec, nothing ignored",
        (Reason.CONFIG_MATCHES, Reason.VERIFICATION_PENDING, Reason.CONFIG_MISMATCH),
        "reconcile/decide/proofs.py",
        ReadyEffect.INFORMATIONAL,
    ),
    ConditionKind(
        ConditionType.CAPACITY_PLANNED,
        "the memory plan fits every rank in a node's memory",
        (Reason.CAPACITY_FITS, Reason.CAPACITY_EXCEEDED, Reason.CAPACITY_UNKNOWN),
        "reconcile/decide/proofs.py",
        ReadyEffect.BLOCKS,
    ),
    ConditionKind(
        ConditionType.NETWORK_VERIFIED,
        "every rank's node passed the network preflight (spec.network.preflight.mode not "
        "off; gate mode holds the replicas while False)",
        (
            Reason.NETWORK_CHECKS_PASSED,
            Reason.VERIFICATION_PENDING,
            Reason.NETWORK_CHECK_FAILED,
        ),
        "reconcile/decide/network_proof.py",
        ReadyEffect.INFORMATIONAL,
    ),
    ConditionKind(
        ConditionType.MEMORY_VERIFIED,
        "every rank's node had the memory its plan needs free, without swap in use or memory "
        "pressure, right before the engine started (spec.memoryPreflight.mode not off; gate "
        "mode holds the replicas while False)",
        (
            Reason.MEMORY_AVAILABLE,
            Reason.VERIFICATION_PENDING,
            Reason.MEMORY_CHECK_FAILED,
        ),
        "reconcile/decide/memory_proof.py",
        ReadyEffect.INFORMATIONAL,
    ),
    ConditionKind(
        ConditionType.EXPOSED,
        "the cluster serves every API spec.exposure needs (HTTPRoute, InferencePool), "
        "reported only once one was missing",
        (Reason.API_SERVED, Reason.API_NOT_SERVED),
        "reconcile/decide/cluster.py",
        ReadyEffect.INFORMATIONAL,
    ),
    ConditionKind(
        ConditionType.MONITORED,
        "the PodMonitors spec.monitoring asks for are applied (absent while it never was on)",
        (
            Reason.MONITORS_APPLIED,
            Reason.MONITORING_UNAVAILABLE,
            Reason.MONITORING_DISABLED,
        ),
        "reconcile/decide/monitoring.py",
        ReadyEffect.INFORMATIONAL,
    ),
    ConditionKind(
        ConditionType.UPDATE_PENDING,
        "a new operator version renders the rank pods otherwise (the message names what, "
        "from which version to which); running engines keep going until their next restart, "
        "sparkllm.io/restart=now or upgrade.applyOperatorChanges=drained (absent while none "
        "ever was)",
        (Reason.OPERATOR_UPDATE_PENDING, Reason.RANK_PODS_CURRENT),
        "reconcile/decide/upgrade.py",
        ReadyEffect.INFORMATIONAL,
    ),
    ConditionKind(
        ConditionType.LAUNCH_CHECKED,
        "every rank's own SGLang (the engine image's) accepts the rank's exact command line; "
        "False stops the replicas until the spec changes",
        (Reason.LAUNCH_ACCEPTED, Reason.VERIFICATION_PENDING, Reason.LAUNCH_REFUSED),
        "reconcile/decide/versions.py",
        ReadyEffect.BLOCKS,
    ),
    ConditionKind(
        ConditionType.IMAGES_CONSISTENT,
        "every rank of each replica runs one image digest and one SGLang version, and the "
        "replicas agree (status.engines); a split replica is restarted pinned to one digest",
        (
            Reason.IMAGES_MATCH,
            Reason.VERIFICATION_PENDING,
            Reason.DIGEST_SPLIT,
            Reason.REPLICAS_DIFFER,
        ),
        "reconcile/decide/versions.py",
        ReadyEffect.INFORMATIONAL,
    ),
    ConditionKind(
        ConditionType.MODEL_STAGED,
        "every replica's node group holds a verified copy of spec.model.source (absent "
        "while no source was ever set); a replica's ranks are held until its group is staged",
        (
            Reason.STAGED,
            Reason.STAGING,
            Reason.UNAUTHORIZED,
            Reason.NOT_FOUND,
            Reason.DISK_FULL,
            Reason.HASH_MISMATCH,
            Reason.CONNECTION_LOST,
            Reason.VERIFICATION_FAILED,
            Reason.INVALID_SOURCE,
            Reason.PEER_UNAVAILABLE,
            Reason.STAGE_FAILED,
            Reason.VERIFICATION_PENDING,
        ),
        "reconcile/decide/staging.py",
        ReadyEffect.INFORMATIONAL,
    ),
)

BY_TYPE: Final[dict[str, ConditionKind]] = {row.type.value: row for row in CONDITIONS}
ORDER: Final[tuple[str, ...]] = tuple(row.type.value for row in CONDITIONS)


def ready_blockers(conditions: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """The types among ``(type, status)`` pairs that hold Ready False: a BLOCKS row False."""
    return tuple(
        kind
        for kind, status in conditions
        if status == "False" and kind in BY_TYPE and BY_TYPE[kind].ready is ReadyEffect.BLOCKS
    )


def conditions_table() -> str:
    """docs/api.md's conditions table (Markdown), from the rows."""
    lines = [
        "| Type | True means | Reasons | Set by | Effect on Ready |",
        "|---|---|---|---|---|",
    ]
    for row in CONDITIONS:
        reasons = ", ".join(f"`{r.value}`" for r in row.reasons)
        lines.append(
            f"| `{row.type.value}` | {row.meaning} | {reasons} | `{row.producer}` "
            f"| {row.ready.value} |"
        )
    return "\n".join(lines)


def type_description() -> str:
    """The CRD's description of ``status.conditions[].type``: every type and its meaning."""
    kinds = "; ".join(f"{row.type.value}: {row.meaning}" for row in CONDITIONS)
    return f"type of the condition, one of: {kinds}."
