"""Quarantine: a node that keeps failing replicas is kept from them until it settles. Pure.

Why: a flapping Spark restarted onto again and again costs a full model load each time,
and a wedged one (heartbeat lost while its engine never exited: unified memory exhausted)
comes back only after a power cycle. So each failure of a node under one of this object's
replicas is recorded in ``status.nodeFailures`` (once per failure: a NotReady spell that
many passes see counts once, by when it began), and a node with more than
``restartPolicy.quarantine.maxNodeFailures`` in ``windowSeconds``, or a wedged one, is
quarantined: ``status.quarantine`` says since when and why, placement gives no replica a
group with it (``failover.py`` skips such spares; a replica still on it waits, as for a
NotReady node). It is used again once Ready for ``settleSeconds`` without a break (the
node's Ready condition's last transition), or when the annotation
``sparkllm.io/lift-quarantine: <node>[,<node>]`` (or ``all``) names it; the operator then
removes the annotation. Either clears the node's failures: it starts afresh.

Everything lives in this object's status, so an operator restart loses nothing, and the
quarantine binds this object's placement only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sparkllm.api import Reason
from sparkllm.api.quarantine import QuarantineSpec
from sparkllm.keys import ANNOTATION_LIFT_QUARANTINE
from sparkllm.reconcile.decide.actions import JSON, PendingEvent
from sparkllm.reconcile.decide.failover import NodeFault
from sparkllm.render.placement import NodeFacts

LIFT_ALL = "all"


@dataclass(frozen=True)
class Entry:
    """One quarantined node."""

    node: str
    since: datetime
    reason: str


@dataclass(frozen=True)
class Quarantine:
    """The object's quarantined nodes, and the failures counted toward quarantine."""

    entries: tuple[Entry, ...] = ()
    failures: Mapping[str, tuple[datetime, ...]] = field(default_factory=dict)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(e.node for e in self.entries)

    def status(self, policy: QuarantineSpec) -> tuple[list[JSON], list[JSON]]:
        """``status.quarantine`` and ``status.nodeFailures``, in node order."""
        until = (
            f"Ready for {policy.settle_seconds} s without a break, or the annotation "
            f"{ANNOTATION_LIFT_QUARANTINE}"
        )
        quarantine = [
            {"node": e.node, "since": e.since, "reason": e.reason, "until": until}
            for e in sorted(self.entries, key=lambda e: e.node)
        ]
        failures = [
            {"node": node, "times": list(times)}
            for node, times in sorted(self.failures.items())
            if times
        ]
        return quarantine, failures


def _time(text: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


def lift_request(annotations: Mapping[str, str] | None) -> frozenset[str] | None:
    """The nodes the lift annotation names (``all``: every one); None without it."""
    text = (annotations or {}).get(ANNOTATION_LIFT_QUARANTINE)
    if text is None:
        return None
    return frozenset(n.strip() for n in text.split(",") if n.strip())


def carry(
    previous: Mapping[str, Any],
    *,
    policy: QuarantineSpec,
    nodes: Mapping[str, NodeFacts],
    lift: frozenset[str] | None,
    now: datetime,
) -> tuple[Quarantine, list[PendingEvent]]:
    """Last pass's quarantine and failures, minus what settled, was lifted or left the
    window, with an Event for each node used again."""
    window = timedelta(seconds=policy.window_seconds)
    failures: dict[str, tuple[datetime, ...]] = {}
    for entry in previous.get("nodeFailures") or []:
        times = tuple(t for t in map(_time, entry.get("times") or []) if t and now - t < window)
        if times:
            failures[str(entry["node"])] = times
    kept: list[Entry] = []
    events: list[PendingEvent] = []
    for raw in previous.get("quarantine") or []:
        entry = Entry(str(raw["node"]), _time(raw.get("since")) or now, str(raw.get("reason")))
        why = _freed(entry, nodes.get(entry.node), policy=policy, lift=lift, now=now)
        if why is None:
            kept.append(entry)
            continue
        failures.pop(entry.node, None)
        message = f"node {entry.node} is used again: {why}"
        events.append(PendingEvent(False, Reason.QUARANTINE_LIFTED, message))
    events.extend(
        _unmatched(lift, quarantined={str(raw["node"]) for raw in previous.get("quarantine") or []})
    )
    return Quarantine(entries=tuple(kept), failures=failures), events


def _unmatched(lift: frozenset[str] | None, *, quarantined: set[str]) -> list[PendingEvent]:
    """A Warning for lift names that match no quarantined node (a typo, or a node already
    free): the annotation is consumed either way, so without it a mistake looks like success."""
    names = sorted((lift or frozenset()) - quarantined - {LIFT_ALL})
    if not names:
        return []
    held = ", ".join(sorted(quarantined)) or "none"
    message = (
        f"{ANNOTATION_LIFT_QUARANTINE} names {', '.join(names)}, not quarantined "
        f"(quarantined: {held}); nothing was lifted for them and the annotation was removed"
    )
    return [PendingEvent(True, Reason.LIFT_QUARANTINE_UNMATCHED, message)]


def _freed(
    entry: Entry,
    facts: NodeFacts | None,
    *,
    policy: QuarantineSpec,
    lift: frozenset[str] | None,
    now: datetime,
) -> str | None:
    """Why a quarantined node is used again now (lifted, or settled), or None."""
    if lift is not None and (entry.node in lift or LIFT_ALL in lift):
        return f"quarantine lifted ({ANNOTATION_LIFT_QUARANTINE})"
    if facts is None or not facts.ready or facts.ready_changed is None:
        return None
    ready_from = max(facts.ready_changed, entry.since)
    if now - ready_from >= timedelta(seconds=policy.settle_seconds):
        return f"Ready since {ready_from:%H:%M:%S}, longer than {policy.settle_seconds} s"
    return None


def settles_at(
    quarantine: Quarantine, nodes: Mapping[str, NodeFacts], policy: QuarantineSpec
) -> datetime | None:
    """When the next Ready quarantined node settles (the pass to look again then)."""
    due = [
        max(f.ready_changed, e.since) + timedelta(seconds=policy.settle_seconds)
        for e in quarantine.entries
        if (f := nodes.get(e.node)) is not None and f.ready and f.ready_changed is not None
    ]
    return min(due) if due else None


def record(
    quarantine: Quarantine,
    faults: Sequence[NodeFault],
    *,
    policy: QuarantineSpec,
    seen_before: frozenset[str],
    now: datetime,
) -> tuple[Quarantine, list[PendingEvent]]:
    """Count this pass's new node failures; quarantine a node past the limit, or wedged.

    A failure with a start time counts once (a later pass sees the same start, not after
    the last recorded time); one without (a node gone) counts unless ``seen_before``
    names the node (its replica already reported the node down last pass)."""
    failures = dict(quarantine.failures)
    entries = list(quarantine.entries)
    events: list[PendingEvent] = []
    for fault in faults:
        times = failures.get(fault.node, ())
        if fault.since is None and fault.node in seen_before:
            continue
        if fault.since is not None and times and fault.since <= max(times):
            continue
        times = (*times, now)
        failures[fault.node] = times
        if fault.node in {e.node for e in entries}:
            continue
        if fault.wedged:
            reason = f"wedged: {fault.why}"
        elif len(times) > policy.max_node_failures:
            reason = (
                f"failed a replica {len(times)} times within {policy.window_seconds} s "
                f"(more than maxNodeFailures {policy.max_node_failures}); last: {fault.why}"
            )
        else:
            continue
        entries.append(Entry(node=fault.node, since=now, reason=reason))
        message = f"node {fault.node} quarantined: {reason}; no replica is placed on it"
        events.append(PendingEvent(True, Reason.NODE_QUARANTINED, message))
    return Quarantine(entries=tuple(entries), failures=failures), events
