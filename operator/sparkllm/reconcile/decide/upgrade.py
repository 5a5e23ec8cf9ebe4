"""Why a replica's pods differ from the current rendering, and what that may restart. Pure.

Issue 32: an operator upgrade must restart no engine by itself. Each rank pod records its
making (``render/rank_stamp.py``); a pod whose template hash differs from the current
rendering is told apart here:

- the user's rank-shaping spec changed (spec digest differs): a rolling update, as before,
  cause ``spec changed (rolling update)``, or ``model staged: A -> B (rolling update)``
  when what differs is the staged copy the pods mount (spec.model.source: the replica's
  group now holds the new revision's copy, decide/staging.py);
- the same operator version rendered it from the same spec: what changed is the cluster
  around it (a node's address, a Secret's name, the operator's image settings): a rolling
  update, cause ``rank template changed (...)``;
- another operator version rendered it (or one that recorded no version): an **operator
  update**. It waits: condition ``UpdatePending`` names what changed and from which
  version to which, the StatefulSets (``OnDelete``) carry the new template already, and
  the replica takes it at its next restart that happens anyway (a crash, a node, a spec
  change), at ``sparkllm.io/restart=now`` (cause ``operator update A -> B (requested)``),
  or at once, drained and one replica at a time, when the administrator set
  ``upgrade.applyOperatorChanges: drained`` (env :data:`APPLY_ENV`).

Pods that record no spec digest (an operator before the stamp) get the current one
(:func:`adopt_patches`), so a user's later spec change is still told from an operator's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from sparkllm.api import ConditionType, Reason
from sparkllm.errors import SparkllmError
from sparkllm.keys import ANNOTATION_RESTART, ANNOTATION_SPEC_HASH, LABEL_GENERATION, LABEL_RANK
from sparkllm.reconcile.decide.actions import PodPatch
from sparkllm.reconcile.decide.restarts import UPDATE_CAUSE
from sparkllm.reconcile.decide.status import all_clear, condition
from sparkllm.render.rank_stamp import ENGINE_SECTIONS, SECTIONS, Stamp

JSON = dict[str, Any]

Apply = Literal["onRestart", "drained"]
APPLY_VALUES: Final[tuple[Apply, ...]] = ("onRestart", "drained")
APPLY_ENV: Final = "SPARKLLM_APPLY_OPERATOR_CHANGES"  # the chart's upgrade.applyOperatorChanges
TEMPLATE_CAUSE: Final = "rank template changed (node address, Secret or image settings)"
MODEL_CAUSE: Final = "model staged"  # a new revision's copy: the replica rolls onto it
UNKNOWN_VERSION: Final = "unrecorded"
# Operator versions whose rank-pod changes fix a security problem and should be applied
# at once: version -> what it fixes (the release notes' words). UpdatePending says so, so
# an administrator who waits for the next restart is told what waiting costs.
SECURITY_FIXES: Final[Mapping[str, str]] = {}


RESTART_NOW: Final = "now"


@dataclass(frozen=True)
class RestartRequest:
    """What the object's ``sparkllm.io/restart`` annotation asks, read once per pass."""

    force: bool = False  # "now": a planned, drained gang restart of every replica
    refusal: str | None = None  # any other value: the Warning Event's words

    @property
    def answered(self) -> bool:
        """The pass removes the annotation: acted on, or refused (with the Event)."""
        return self.force or self.refusal is not None


def restart_request(annotations: Mapping[str, Any] | None) -> RestartRequest:
    """``now`` restarts; any other value (``true``, ``Now``, ``yes``...) would otherwise
    sit on the object doing nothing while the user waits for a restart, so it is refused
    in words and removed."""
    value = (annotations or {}).get(ANNOTATION_RESTART)
    if value is None:
        return RestartRequest()
    if value == RESTART_NOW:
        return RestartRequest(force=True)
    return RestartRequest(
        refusal=f"annotation {ANNOTATION_RESTART}={str(value)!r} is not understood: only "
        f"{RESTART_NOW!r} restarts the replicas (drained); nothing was restarted and the "
        "annotation was removed"
    )


@dataclass(frozen=True)
class UpgradeSettings:
    """The administrator's choice for operator-side changes of running replicas."""

    apply: Apply = "onRestart"


DEFAULT_UPGRADE: Final = UpgradeSettings()


def upgrade_settings_from(environ: Mapping[str, str]) -> UpgradeSettings:
    """The operator's setting from its env (the chart's); unset: ``onRestart``."""
    value = environ.get(APPLY_ENV, "").strip() or "onRestart"
    for known in APPLY_VALUES:
        if value == known:
            return UpgradeSettings(apply=known)
    raise SparkllmError(f"{APPLY_ENV}: {value!r} is not one of {', '.join(APPLY_VALUES)}")


@dataclass(frozen=True)
class PendingUpdate:
    """An operator-side change a replica's running pods do not have yet."""

    from_version: str
    to_version: str
    sections: tuple[str, ...]  # keys of rank_stamp.SECTIONS, in their order

    @property
    def engine(self) -> bool:
        """Whether it changes the engine process (else only what runs before it)."""
        return any(s in ENGINE_SECTIONS for s in self.sections)

    @property
    def cause(self) -> str:
        return f"operator update {self.from_version} -> {self.to_version}"


@dataclass(frozen=True)
class Drift:
    """How the running generation's pods differ from the current rendering."""

    roll: str | None = None  # restart now, replica by replica, for this cause
    pending: PendingUpdate | None = None  # an operator update that waits


def _label(pod: Mapping[str, Any], key: str) -> str | None:
    value = (pod["metadata"].get("labels") or {}).get(key)
    return None if value is None else str(value)


def drift(pods: Sequence[JSON], generation: int, want: Mapping[int, Stamp]) -> Drift:
    """Compare each rank pod of ``generation`` with its rank's desired stamp."""
    roll: str | None = None
    pending: list[PendingUpdate] = []
    for pod in pods:
        rank = _label(pod, LABEL_RANK)
        if rank is None or not rank.isdigit() or int(rank) not in want:
            continue
        if _label(pod, LABEL_GENERATION) != str(generation):
            continue
        have, desired = Stamp.of(pod["metadata"].get("annotations")), want[int(rank)]
        if have.template == desired.template:
            continue
        if have.spec is not None and have.spec != desired.spec:
            roll = model_cause(have, desired) or UPDATE_CAUSE
        elif have.version == desired.version:
            roll = roll or TEMPLATE_CAUSE
        else:
            pending.append(
                PendingUpdate(
                    from_version=have.version or UNKNOWN_VERSION,
                    to_version=desired.version or UNKNOWN_VERSION,
                    sections=have.changed(desired),
                )
            )
    if roll is not None or not pending:
        return Drift(roll=roll)
    changed = {s for p in pending for s in p.sections}
    first = pending[0]
    merged = PendingUpdate(
        from_version=first.from_version,
        to_version=first.to_version,
        sections=tuple(s for s in SECTIONS if s in changed),
    )
    return Drift(pending=merged)


def model_cause(have: Stamp, want: Stamp) -> str | None:
    """The roll's cause when the pods run another staged copy than the one rendered."""
    if have.model is None or want.model is None or have.model == want.model:
        return None
    return f"{MODEL_CAUSE}: {have.model} -> {want.model} (rolling update)"


def adopt_patches(
    pods: Sequence[JSON], generation: int, want: Mapping[int, Stamp]
) -> list[PodPatch]:
    """Record the current spec digest on running rank pods that carry none (made by an
    operator from before the stamp), a metadata-only patch that restarts nothing.

    Why: without it such a pod's user spec change could not be told from the operator's
    own, so after an upgrade from that operator a user's spec change would wait as
    "operator update unrecorded -> ..." instead of rolling. The first pass of this
    operator takes the spec as the pods' own (the operator before it rolled every spec
    change it saw); a change made after that is seen, and rolls."""
    patches = []
    for pod in pods:
        rank = _label(pod, LABEL_RANK)
        meta = pod["metadata"]
        if rank is None or not rank.isdigit() or int(rank) not in want:
            continue
        if _label(pod, LABEL_GENERATION) != str(generation) or meta.get("deletionTimestamp"):
            continue
        spec = want[int(rank)].spec
        if spec is None or Stamp.of(meta.get("annotations")).spec is not None:
            continue
        patch = {"metadata": {"annotations": {ANNOTATION_SPEC_HASH: spec}}}
        patches.append(PodPatch(name=meta["name"], namespace=meta["namespace"], patch=patch))
    return patches


def requested_cause(update: PendingUpdate) -> str:
    """The restart cause when ``sparkllm.io/restart=now`` applies a pending update."""
    return f"{update.cause} (requested)"


def drained_cause(update: PendingUpdate) -> str:
    """The restart cause when the operator-wide setting applies it at once."""
    return f"{update.cause} (upgrade.applyOperatorChanges=drained)"


def update_pending_condition(
    pending: Sequence[tuple[int, PendingUpdate]],
    previous: Mapping[str, Any],
    *,
    generation: int,
    settings: UpgradeSettings,
    security: Mapping[str, str] = SECURITY_FIXES,
) -> tuple[JSON, ...]:
    """UpdatePending=True naming each pending operator update (and, for a version in
    ``security``, the fix it carries); False once none is left (absent while none ever
    was, like Exposed)."""
    kind = ConditionType.UPDATE_PENDING
    if not pending:
        message = "every running rank pod has the current operator's rendering"
        return all_clear(
            kind, previous, status=False, reason=Reason.RANK_PODS_CURRENT, message=message,
            generation=generation,
        )  # fmt: skip
    parts = []
    for cause in dict.fromkeys(p.cause for _, p in pending):
        which = [(i, p) for i, p in pending if p.cause == cause]
        replicas = ", ".join(str(i) for i, _ in which)
        sections = {s for _, p in which for s in p.sections}
        named = ", ".join(SECTIONS[s] for s in SECTIONS if s in sections)
        effect = (
            "a new engine process"
            if any(p.engine for _, p in which)
            else "no new engine process (only what runs before or around it)"
        )
        parts.append(f"{cause} changes the {named} of replica(s) {replicas}: {effect}")
        fix = security.get(which[0][1].to_version)
        if fix is not None:
            parts[-1] += f"; SECURITY FIX in {which[0][1].to_version} ({fix}): apply it now"
    when = (
        "being applied now, drained, one replica at a time (upgrade.applyOperatorChanges=drained)"
        if settings.apply == "drained"
        else "applied at each replica's next restart, or now, drained, with the annotation "
        "sparkllm.io/restart=now"
    )
    message = f"{'; '.join(parts)}; {when}"
    return (
        condition(kind, status=True, reason=Reason.OPERATOR_UPDATE_PENDING, message=message,
                  generation=generation),
    )  # fmt: skip
