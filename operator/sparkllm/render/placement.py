"""Which nodes run which replica: node facts, node groups, and replica assignment.

Pure: the Node objects are read by reconcile and handed in. Kubernetes cannot choose a
replica's nodes — which Sparks are cabled together is physical — so a replica's ranks
are pinned to the nodes of one group, in rank order. Groups are explicit in the spec or
discovered from node labels; assignment is sticky (a running replica keeps its group
even if a new group would sort first) and new replicas take the first free complete
group, so scaling never moves a running replica.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkllm.api import NODE_RANK_LABEL, InferenceClusterSpec


@dataclass(frozen=True)
class NodeFacts:
    """What the operator needs to know about one node."""

    name: str
    internal_ip: str | None
    ready: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False


def node_facts(node: Mapping[str, Any]) -> NodeFacts:
    """Extract NodeFacts from a Node object (as returned by the API server)."""
    status = node.get("status") or {}
    addresses = status.get("addresses") or []
    internal = next((a["address"] for a in addresses if a.get("type") == "InternalIP"), None)
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return NodeFacts(
        name=node["metadata"]["name"],
        internal_ip=internal,
        ready=ready,
        labels=dict(node["metadata"].get("labels") or {}),
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
    )


@dataclass(frozen=True)
class NodeGroup:
    """One replica's worth of nodes, in rank order. ``key`` names the group stably."""

    key: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class GroupDiscovery:
    """Complete groups, plus why any labelled group is unusable."""

    groups: tuple[NodeGroup, ...]
    problems: tuple[str, ...] = ()


def discover_groups(spec: InferenceClusterSpec, nodes: Sequence[NodeFacts]) -> GroupDiscovery:
    """The node groups a spec can use, in a stable order."""
    explicit = spec.placement.node_groups
    if explicit is not None:
        return GroupDiscovery(
            groups=tuple(
                NodeGroup(key=f"group-{i}", nodes=tuple(g)) for i, g in enumerate(explicit)
            )
        )
    label = spec.placement.node_group_label
    assert label is not None  # the API guarantees exactly one of the two
    pp = spec.engine.pipeline_parallel
    by_group: dict[str, dict[int, list[str]]] = {}
    for node in nodes:
        group = node.labels.get(label)
        if group is None:
            continue
        rank_text = node.labels.get(NODE_RANK_LABEL, "")
        rank = int(rank_text) if rank_text.isdigit() else -1
        by_group.setdefault(group, {}).setdefault(rank, []).append(node.name)
    groups: list[NodeGroup] = []
    problems: list[str] = []
    for key in sorted(by_group):
        ranks = by_group[key]
        wanted = set(range(pp))
        if set(ranks) != wanted or any(len(names) != 1 for names in ranks.values()):
            have = ", ".join(f"{r}: {sorted(n)}" for r, n in sorted(ranks.items()))
            problems.append(
                f"node group {key!r} ({label}) needs exactly one node per "
                f"{NODE_RANK_LABEL} 0..{pp - 1}; has {{{have}}}"
            )
            continue
        groups.append(NodeGroup(key=key, nodes=tuple(ranks[r][0] for r in range(pp))))
    return GroupDiscovery(groups=tuple(groups), problems=tuple(problems))


@dataclass(frozen=True)
class Assignment:
    """Replica index -> its node group; replicas no group is free for."""

    replicas: Mapping[int, NodeGroup]
    unplaced: tuple[int, ...]


def assign_groups(
    *, replicas: int, groups: Sequence[NodeGroup], current: Mapping[int, str]
) -> Assignment:
    """Give each replica 0..replicas-1 a group, keeping the groups replicas already hold.

    ``current`` maps replica index to the group key it runs on now (from the live
    StatefulSets). A replica whose group vanished is left unplaced rather than moved: its
    ranks' nodes are physical and a move would be a different replica.
    """
    by_key = {g.key: g for g in groups}
    taken = {key for index, key in current.items() if index < replicas and key in by_key}
    assigned: dict[int, NodeGroup] = {}
    unplaced: list[int] = []
    free = [g for g in groups if g.key not in taken]
    for index in range(replicas):
        key = current.get(index)
        if key is not None:
            if key in by_key:
                assigned[index] = by_key[key]
            else:
                unplaced.append(index)
            continue
        if free:
            assigned[index] = free.pop(0)
        else:
            unplaced.append(index)
    return Assignment(replicas=assigned, unplaced=tuple(unplaced))
