"""The engine that runs is the contract: LaunchChecked, ImagesConsistent, status.engines. Pure.

Why: the operator's flag table is one SGLang's, but the image decides (its own SGLang,
its own version), and a tag re-pushed between two nodes' pulls splits a replica into two
builds that may not talk to each other. Every rank pod reports both before its engine
starts: the ``launch-check`` init container, run in the engine image, leaves its SGLang's
verdict on the exact command line and that SGLang's version in its termination message
(``sglang_contract/launch_check.py``), and the kubelet shows the digest it pulled in the
container status (``imageID``). This module reads them:

- **LaunchChecked** (blocks Ready): False, reason LaunchRefused, names the replica, rank,
  node, the refused flag and value, the SGLang version and the image. ``cluster.py``
  stops every replica while it is False (the engine would only crash: no restart loop),
  and the verdict outlives the stopped pods until the spec changes or a restart is
  requested (``proofs.keep_failed``, as ModelVerified). A refusal by a rank whose replica
  runs two digests is not final: the digest repair comes first, then the check runs again
  on one build.
- **ImagesConsistent**: per replica, every rank on one digest and one version. A split
  replica is restarted with every rank pinned to one digest — the majority's, ties broken
  by rank 0's (``pin_for``) — written ``<spec.engine.image>@sha256:...``; the pin is kept in
  ``status.engines[].pinnedImage`` and rendered by every later pass
  (``ReplicaPlan.engine_image``) until spec.engine.image changes, so the pinned template
  does not flip back. The restart itself is the template change's rolling update (one
  replica at a time, while the others serve). Replicas on different digests while every
  replica serves (no rolling update under way) are reported (ReplicasDiffer), not acted
  on: which build is wanted is the user's call.
- the model's identity: ModelVerified already compares every rank's model digest across
  every replica (``proofs.model_condition``); ``status.engines`` shows it per rank beside
  the image digest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkllm.api import ConditionType, InferenceCluster, Phase, Reason
from sparkllm.api.engine_status import EngineRankStatus, ReplicaEngineStatus
from sparkllm.integrity import ModelSummary
from sparkllm.integrity.summary import SummaryError
from sparkllm.keys import LABEL_REPLICA
from sparkllm.reconcile.decide.proofs import (
    init_container_result,
    keep_failed,
    kept,
    previous_condition,
    rank_pods,
)
from sparkllm.reconcile.decide.replica_state import pods_by_rank
from sparkllm.reconcile.decide.replicas import Observed, label
from sparkllm.reconcile.decide.status import condition
from sparkllm.render.ranks import VERIFY_CONTAINER
from sparkllm.sglang_contract.launch_check import (
    LAUNCH_CHECK_CONTAINER,
    LaunchResult,
    parse_result,
)

JSON = dict[str, Any]
SHORT = 19  # "sha256:" and 12 hex digits: enough to tell builds apart in a message


@dataclass(frozen=True)
class RankEngine:
    """What one rank pod reported of its build."""

    replica: int
    rank: int
    node: str
    image_id: str | None
    launch: LaunchResult | None
    model_digest: str | None = None

    @property
    def digest(self) -> str | None:
        """The pulled digest (``sha256:...``) of ``imageID``; None while unknown."""
        if not self.image_id or "@" not in self.image_id:
            return None
        return self.image_id.rsplit("@", 1)[1] or None

    @property
    def version(self) -> str | None:
        return None if self.launch is None else self.launch.version

    def where(self) -> str:
        return f"replica {self.replica} rank {self.rank} on {self.node}"


@dataclass
class VersionsOutcome:
    """The two conditions, status.engines, and the image each replica is to render."""

    launch: JSON
    images: JSON
    engines: tuple[ReplicaEngineStatus, ...] = ()
    pins: dict[int, str] = field(default_factory=dict)


def _image_id(pod: Mapping[str, Any]) -> str | None:
    """The launch check's imageID (it ran in the engine image), else the engine's."""
    status = pod.get("status") or {}
    for key, name in (
        ("initContainerStatuses", LAUNCH_CHECK_CONTAINER),
        ("containerStatuses", "engine"),
    ):
        for entry in status.get(key) or []:
            if entry.get("name") == name and entry.get("imageID"):
                return str(entry["imageID"])
    return None


def _model_digest(pod: Mapping[str, Any]) -> str | None:
    message, _ = init_container_result(pod, VERIFY_CONTAINER)
    if not message:
        return None
    try:
        summary = ModelSummary.from_message(message)
    except SummaryError:
        return None
    return summary.digest[:16] or None if summary.ok else None


def rank_engines(observed: Observed) -> list[RankEngine]:
    """Every rank pod's report, by replica then rank (a live pod before a deleted one)."""
    pods, _ = rank_pods(observed)
    indexes = sorted({int(r) for p in pods if (r := label(p, LABEL_REPLICA) or "").isdigit()})
    out = []
    for index in indexes:
        for rank, pod in sorted(pods_by_rank(observed.by_replica(pods, index)).items()):
            message, code = init_container_result(pod, LAUNCH_CHECK_CONTAINER)
            out.append(
                RankEngine(
                    replica=index,
                    rank=rank,
                    node=str((pod.get("spec") or {}).get("nodeName") or pod["metadata"]["name"]),
                    image_id=_image_id(pod),
                    launch=parse_result(message, code),
                    model_digest=_model_digest(pod),
                )
            )
    return out


def pin_for(image: str, ranks: Sequence[RankEngine]) -> str | None:
    """``image`` pinned to the digest most ranks pulled (ties: rank 0's), when the ranks
    pulled more than one; None when they agree (or ``image`` is pinned already)."""
    digests = [r.digest for r in ranks if r.digest]
    if "@" in image or len(set(digests)) < 2:
        return None
    counts = Counter(digests)
    top = max(counts.values())
    rank0 = next((r.digest for r in sorted(ranks, key=lambda r: r.rank) if r.digest), None)
    chosen = rank0 if counts.get(rank0 or "", 0) == top else counts.most_common(1)[0][0]
    return f"{image}@{chosen}"


def _split(ranks: Sequence[RankEngine]) -> bool:
    """More than one digest, or more than one SGLang version, among one replica's ranks."""
    digests = {r.digest for r in ranks if r.digest}
    versions = {r.version for r in ranks if r.version}
    return len(digests) > 1 or len(versions) > 1


def _build(r: RankEngine) -> str:
    digest = (r.digest or "digest unknown")[:SHORT]
    version = f" (SGLang {r.version})" if r.version else ""  # reported once its check ran
    return f"rank {r.rank} on {r.node} {digest}{version}"


def _kept_pins(ic: InferenceCluster, previous: Mapping[str, Any]) -> dict[int, str]:
    """Pins of earlier passes that still name spec.engine.image."""
    image = ic.spec.engine.image
    pins = {}
    for entry in previous.get("engines") or []:
        pinned = entry.get("pinnedImage")
        if isinstance(pinned, str) and pinned.startswith(image + "@sha256:"):
            pins[int(entry.get("replica", 0))] = pinned
    return pins


def decide_versions(
    ic: InferenceCluster,
    observed: Observed,
    previous: Mapping[str, Any],
    *,
    generation: int,
    force: bool,
    phases: Mapping[int, str] | None = None,
) -> VersionsOutcome:
    """LaunchChecked, ImagesConsistent, status.engines and the pins, from the rank pods.

    ``phases`` are the replicas' phases of the last status (replicas that all serve and
    still differ are reported; while one does not, a rolling update may be under way).
    """
    ranks = rank_engines(observed)
    by_replica: dict[int, list[RankEngine]] = {}
    for r in ranks:
        by_replica.setdefault(r.replica, []).append(r)
    replicas = range(ic.spec.replicas)
    pins = {i: p for i, p in _kept_pins(ic, previous).items() if i in replicas}
    split = {i for i, rs in by_replica.items() if _split(rs)}
    for index in sorted(split):
        pin = pin_for(ic.spec.engine.image, by_replica[index])
        if pin is not None and index in replicas:
            pins.setdefault(index, pin)
    _, expected = rank_pods(observed)
    launch = _launch_condition(ic, ranks, split, expected=expected, generation=generation)
    launch = keep_failed(
        launch, previous, ConditionType.LAUNCH_CHECKED, generation=generation, force=force
    )
    launch = _keep_refusal(launch, previous, generation=generation, force=force)
    images = _images_condition(by_replica, split, pins, phases or {}, generation=generation)
    engines = tuple(
        ReplicaEngineStatus(
            replica=index,
            pinned_image=pins.get(index),
            ranks=tuple(
                EngineRankStatus(
                    rank=r.rank,
                    node=r.node,
                    image_id=r.image_id,
                    sglang_version=r.version,
                    model_digest=r.model_digest,
                )
                for r in by_replica.get(index, [])
            ),
        )
        for index in sorted(set(by_replica) | set(pins))
    )
    return VersionsOutcome(launch=launch, images=images, engines=engines, pins=pins)


def _keep_refusal(
    now: JSON, previous_status: Mapping[str, Any], *, generation: int, force: bool
) -> JSON:
    """This generation's LaunchRefused verdict, once made, is not re-worded: while the
    stopped replica's rank pods terminate, a pass sees fewer of the same refusals and would
    name another first rank and a smaller count (the verdict churned in CI)."""
    previous = previous_condition(previous_status, ConditionType.LAUNCH_CHECKED)
    if (
        not force
        and previous is not None
        and now.get("reason") == Reason.LAUNCH_REFUSED
        and previous.get("reason") == Reason.LAUNCH_REFUSED
        and previous.get("observedGeneration") == generation
    ):
        return kept(previous)
    return now


def _launch_condition(
    ic: InferenceCluster,
    ranks: Sequence[RankEngine],
    split: set[int],
    *,
    expected: int,
    generation: int,
) -> JSON:
    kind = ConditionType.LAUNCH_CHECKED
    image = ic.spec.engine.image
    refused = [r for r in ranks if r.launch is not None and not r.launch.ok]
    final = [r for r in refused if r.replica not in split]
    if final:
        first = final[0]
        assert first.launch is not None
        more = f" (and {len(final) - 1} more ranks)" if len(final) > 1 else ""
        message = (
            f"{first.where()}: {first.launch.describe(image=image)}{more}; the replicas are "
            "stopped until the spec changes (spec.engine.extraArgs, or spec.engine.image)"
        )
        return condition(kind, status=False, reason=Reason.LAUNCH_REFUSED, message=message,
                         generation=generation)  # fmt: skip
    reported = [r for r in ranks if r.launch is not None]
    total = max(expected, len(ranks))
    if refused or len(reported) < total or not reported:
        waiting = f"{len(reported)} of {total} ranks reported their launch check"
        if refused:
            waiting += (
                f"; {refused[0].where()} refused on a replica split across builds: "
                "checked again once every rank runs one digest"
            )
        return condition(kind, status=None, reason=Reason.VERIFICATION_PENDING,
                         message=waiting, generation=generation)  # fmt: skip
    versions = sorted({r.version or "unknown" for r in reported})
    message = (
        f"{len(reported)} ranks: SGLang {', '.join(versions)} accepts each rank's command line"
    )
    return condition(kind, status=True, reason=Reason.LAUNCH_ACCEPTED, message=message,
                     generation=generation)  # fmt: skip


def _images_condition(
    by_replica: Mapping[int, Sequence[RankEngine]],
    split: set[int],
    pins: Mapping[int, str],
    phases: Mapping[int, str],
    *,
    generation: int,
) -> JSON:
    kind = ConditionType.IMAGES_CONSISTENT
    if split:
        parts = []
        for index in sorted(split):
            seen = ", ".join(_build(r) for r in by_replica[index])
            pin = pins.get(index)
            repair = (
                f"restarting every rank on {pin} (the majority's digest, ties: rank 0's)"
                if pin
                else "every rank pulls the digest in spec.engine.image: restart it to repair"
            )
            parts.append(f"replica {index}: {seen}; {repair}")
        return condition(kind, status=False, reason=Reason.DIGEST_SPLIT,
                         message="; ".join(parts), generation=generation)  # fmt: skip
    builds: dict[int, tuple[str, str | None]] = {}
    for index, ranks in sorted(by_replica.items()):
        digests = {r.digest for r in ranks if r.digest}
        if digests:
            versions = {r.version for r in ranks if r.version}
            builds[index] = (min(digests), min(versions) if versions else None)
    if not builds:
        message = "no rank reported its image yet"
        return condition(kind, status=None, reason=Reason.VERIFICATION_PENDING,
                         message=message, generation=generation)  # fmt: skip
    if len(set(builds.values())) > 1:
        text = "; ".join(
            f"replica {i} on {d[:SHORT]} (SGLang {v or 'unknown'})" for i, (d, v) in builds.items()
        )
        if all(phases.get(i) == Phase.READY.value for i in builds):
            message = (
                f"replicas run different builds: {text}; pin spec.engine.image to one "
                "digest (image@sha256:...) to choose"
            )
            return condition(kind, status=False, reason=Reason.REPLICAS_DIFFER,
                             message=message, generation=generation)  # fmt: skip
        message = f"replicas run different builds while one is (re)starting: {text}"
        return condition(kind, status=None, reason=Reason.VERIFICATION_PENDING,
                         message=message, generation=generation)  # fmt: skip
    digest, version = next(iter(builds.values()))
    pinned = "".join(f"; replica {i} pinned to {p}" for i, p in sorted(pins.items()))
    message = (
        f"{len(builds)} replica(s), every rank on {digest[:SHORT]} "
        f"(SGLang {version or 'unknown'}){pinned}"
    )
    return condition(kind, status=True, reason=Reason.IMAGES_MATCH, message=message,
                     generation=generation)  # fmt: skip
