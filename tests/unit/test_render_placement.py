"""Placement, pure: Node objects -> facts, specs + facts -> node groups, groups -> replicas.

Which Sparks form a replica is physical (they are cabled together), so these functions
decide where every rank runs. The tables pin: what is read from a Node, which labelled
groups are complete and the exact words used for the ones that are not, and that
assignment is sticky (a running replica never moves) while new replicas take the first
free group.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkllm.api import InferenceClusterSpec, validate_inference_cluster
from sparkllm.render.placement import (
    Assignment,
    GroupDiscovery,
    NodeFacts,
    NodeGroup,
    NodeHolder,
    assign_groups,
    discover_groups,
    node_facts,
    node_holders,
)

GROUP_LABEL = "sparkllm.io/node-group"
RANK_LABEL = "sparkllm.io/rank"

BASE: dict[str, Any] = {
    "apiVersion": "sparkllm.io/v1alpha1",
    "kind": "InferenceCluster",
    "metadata": {"name": "llm", "namespace": "llm"},
    "spec": {
        "replicas": 1,
        "model": {"path": "/models/m", "servedName": "m"},
        "engine": {"image": "nvcr.io/nvidia/sglang:26.07-py3"},
        "admission": {"apiKeysSecretRef": {"name": "keys"}},
    },
}


def spec(
    *, placement: Mapping[str, Any], pp: int = 3, replicas: int = 1, tp: int = 1
) -> InferenceClusterSpec:
    doc = copy.deepcopy(BASE)
    doc["spec"]["placement"] = dict(placement)
    doc["spec"]["replicas"] = replicas
    doc["spec"]["engine"]["pipelineParallel"] = pp
    doc["spec"]["engine"]["tensorParallel"] = tp
    return validate_inference_cluster(doc).spec


def labelled(name: str, group: str | None, rank: str | None, **extra: str) -> NodeFacts:
    labels = dict(extra)
    if group is not None:
        labels[GROUP_LABEL] = group
    if rank is not None:
        labels[RANK_LABEL] = rank
    return NodeFacts(name=name, internal_ip=None, ready=True, labels=labels)


def group_of(prefix: str, pp: int = 3) -> list[NodeFacts]:
    return [labelled(f"spark-{prefix}{k}", prefix, str(k)) for k in range(pp)]


# --- node_facts -------------------------------------------------------------------------


READY = {"type": "Ready", "status": "True"}


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        pytest.param(
            {
                "metadata": {"name": "spark-a0", "labels": {GROUP_LABEL: "a", RANK_LABEL: "0"}},
                "spec": {"unschedulable": True},
                "status": {
                    "addresses": [
                        {"type": "Hostname", "address": "spark-a0"},
                        {"type": "InternalIP", "address": "10.0.0.10"},
                        {"type": "InternalIP", "address": "10.0.0.99"},
                    ],
                    "conditions": [{"type": "MemoryPressure", "status": "False"}, READY],
                },
            },
            NodeFacts(
                name="spark-a0",
                internal_ip="10.0.0.10",
                ready=True,
                labels={GROUP_LABEL: "a", RANK_LABEL: "0"},
                unschedulable=True,
            ),
            id="everything-first-internal-ip-wins",
        ),
        pytest.param(
            {"metadata": {"name": "bare"}},
            NodeFacts(name="bare", internal_ip=None, ready=False, labels={}, unschedulable=False),
            id="no-status-no-spec",
        ),
        pytest.param(
            {"metadata": {"name": "n", "labels": None}, "spec": None, "status": None},
            NodeFacts(name="n", internal_ip=None, ready=False, labels={}, unschedulable=False),
            id="explicit-nulls",
        ),
        pytest.param(
            {
                "metadata": {"name": "n"},
                "status": {
                    "addresses": [{"type": "ExternalIP", "address": "1.2.3.4"}],
                    "conditions": [{"type": "Ready", "status": "False"}],
                },
            },
            NodeFacts(name="n", internal_ip=None, ready=False),
            id="external-ip-only-and-not-ready",
        ),
        pytest.param(
            {"metadata": {"name": "n"},
             "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
            NodeFacts(name="n", internal_ip=None, ready=False, heartbeat_lost=True),
            id="ready-unknown-is-not-ready-and-heartbeat-lost",
        ),
        pytest.param(
            {"metadata": {"name": "n"},
             "status": {"conditions": [{"type": "Ready", "status": "True",
                                        "lastTransitionTime": "2026-12-01T10:00:00Z"}]}},
            NodeFacts(name="n", internal_ip=None, ready=True,
                      ready_changed=datetime(2026, 12, 1, 10, 0, tzinfo=UTC)),
            id="ready-since-its-last-transition",
        ),
        pytest.param(
            {
                "metadata": {"name": "n"},
                "status": {"conditions": [{"type": "DiskPressure", "status": "True"}]},
            },
            NodeFacts(name="n", internal_ip=None, ready=False),
            id="another-condition-true-is-not-ready",
        ),
        pytest.param(
            {"metadata": {"name": "n"}, "spec": {"unschedulable": False},
             "status": {"conditions": [READY]}},
            NodeFacts(name="n", internal_ip=None, ready=True),
            id="schedulable-ready",
        ),
    ],
)  # fmt: skip
def test_node_facts(node: dict[str, Any], expected: NodeFacts) -> None:
    assert node_facts(node) == expected


def test_node_facts_copies_the_labels() -> None:
    labels = {GROUP_LABEL: "a"}
    facts = node_facts({"metadata": {"name": "n", "labels": labels}})
    labels[GROUP_LABEL] = "changed"
    assert facts.labels == {GROUP_LABEL: "a"}


# --- discover_groups: explicit ---------------------------------------------------------


def test_explicit_groups_keep_their_order_and_ignore_the_nodes_seen() -> None:
    explicit = spec(placement={"nodeGroups": [["z2", "z0", "z1"], ["a0", "a1", "a2"]]}, replicas=2)
    expected = GroupDiscovery(
        groups=(
            NodeGroup(key="group-0", nodes=("z2", "z0", "z1")),
            NodeGroup(key="group-1", nodes=("a0", "a1", "a2")),
        )
    )
    assert discover_groups(explicit, []) == expected
    # Node labels do not matter for explicit groups, and neither does a missing node.
    assert discover_groups(explicit, [*group_of("x"), labelled("a0", "q", "7")]) == expected


# --- discover_groups: labels -----------------------------------------------------------


def discovered(
    nodes: Sequence[NodeFacts], *, pp: int = 3, label: str = GROUP_LABEL, tp: int = 1
) -> GroupDiscovery:
    return discover_groups(spec(placement={"nodeGroupLabel": label}, pp=pp, tp=tp), nodes)


def problem(key: str, have: str, *, pp: int = 3, label: str = GROUP_LABEL, tp: int = 1) -> str:
    size = tp * pp
    return (
        f"node group {key!r} ({label}) needs exactly one node per {RANK_LABEL} "
        f"0..{size - 1} (tensorParallel x pipelineParallel = {size} nodes); has {{{have}}}"
    )


@pytest.mark.parametrize(
    ("nodes", "groups", "problems"),
    [
        pytest.param(
            [*group_of("b")[::-1], *group_of("a")[::-1]],
            [("a", ("spark-a0", "spark-a1", "spark-a2")),
             ("b", ("spark-b0", "spark-b1", "spark-b2"))],
            [],
            id="sorted-by-key-nodes-in-rank-order",
        ),
        pytest.param(
            [*group_of("a"), labelled("spark-x", None, "0"), labelled("spark-y", None, None)],
            [("a", ("spark-a0", "spark-a1", "spark-a2"))],
            [],
            id="unlabelled-nodes-are-ignored",
        ),
        pytest.param(
            [*group_of("a"), labelled("spark-c0", "c", "0"), labelled("spark-c1", "c", "1")],
            [("a", ("spark-a0", "spark-a1", "spark-a2"))],
            [problem("c", "0: ['spark-c0'], 1: ['spark-c1']")],
            id="incomplete-group",
        ),
        pytest.param(
            [*group_of("a"), labelled("spark-a9", "a", "1")],
            [],
            [problem("a", "0: ['spark-a0'], 1: ['spark-a1', 'spark-a9'], 2: ['spark-a2']")],
            id="duplicate-rank",
        ),
        pytest.param(
            [labelled("n-z", "g", "1"), labelled("n-b", "g", "1"), labelled("n-0", "g", "0"),
             labelled("n-2", "g", "2")],
            [],
            [problem("g", "0: ['n-0'], 1: ['n-b', 'n-z'], 2: ['n-2']")],
            id="duplicate-names-listed-sorted",
        ),
        pytest.param(
            [*group_of("a")[:2], labelled("spark-a2", "a", None)],
            [],
            [problem("a", "0: ['spark-a0'], 1: ['spark-a1'], no sparkllm.io/rank: ['spark-a2']")],
            id="missing-rank-label",
        ),
        pytest.param(
            [*group_of("a")[:2], labelled("spark-a2", "a", "two")],
            [],
            [problem("a", "0: ['spark-a0'], 1: ['spark-a1'], "
                     "sparkllm.io/rank 'two' (not a number): ['spark-a2']")],
            id="non-numeric-rank",
        ),
        pytest.param(
            [*group_of("a"), labelled("spark-a3", "a", "3")],
            [],
            [problem("a", "0: ['spark-a0'], 1: ['spark-a1'], 2: ['spark-a2'], 3: ['spark-a3']")],
            id="rank-beyond-the-pipeline",
        ),
        pytest.param(
            [*group_of("a")[:2], labelled("spark-a2", "a", "02")],
            [("a", ("spark-a0", "spark-a1", "spark-a2"))],
            [],
            id="leading-zero-is-the-same-rank",
        ),
        pytest.param(
            [labelled("c1", "c", "1"), *group_of("b"), labelled("a2", "a", "2")],
            [("b", ("spark-b0", "spark-b1", "spark-b2"))],
            [problem("a", "2: ['a2']"), problem("c", "1: ['c1']")],
            id="problems-in-key-order-valid-groups-kept",
        ),
        pytest.param(
            [*group_of("a"), labelled("spark-a9", "a", None), labelled("spark-a8", "a", "x")],
            [],
            [problem("a", "0: ['spark-a0'], 1: ['spark-a1'], 2: ['spark-a2'], "
                     "no sparkllm.io/rank: ['spark-a9'], "
                     "sparkllm.io/rank 'x' (not a number): ['spark-a8']")],
            id="extra-nodes-without-a-usable-rank-are-named",
        ),
        pytest.param([], [], [], id="no-nodes"),
    ],
)  # fmt: skip
def test_label_discovery(
    nodes: list[NodeFacts], groups: list[tuple[str, tuple[str, ...]]], problems: list[str]
) -> None:
    result = discovered(nodes)
    assert [(g.key, g.nodes) for g in result.groups] == groups
    assert list(result.problems) == problems


def test_label_discovery_follows_the_pipeline_size_and_the_label_key() -> None:
    rack = "example.com/rack"
    nodes = [
        labelled("r1-0", None, "0", **{rack: "r1"}),
        labelled("r1-1", None, "1", **{rack: "r1"}),
        labelled("r2-0", None, "0", **{rack: "r2"}),
        *group_of("a", pp=2),  # labelled with the default key: not this spec's groups
    ]
    result = discovered(nodes, pp=2, label=rack)
    assert [(g.key, g.nodes) for g in result.groups] == [("r1", ("r1-0", "r1-1"))]
    assert result.problems == (problem("r2", "0: ['r2-0']", pp=2, label=rack),)
    single = discovered([labelled("solo", "s", "0"), labelled("x", "x", "1")], pp=1)
    assert [(g.key, g.nodes) for g in single.groups] == [("s", ("solo",))]
    assert single.problems == (problem("x", "1: ['x']", pp=1),)


def test_label_discovery_groups_tensor_parallel_times_pipeline_nodes() -> None:
    """TP=2 x PP=2: a group is four nodes, node ranks 0..3; three are not a group."""
    full = group_of("a", pp=4)
    short = group_of("b", pp=3)
    result = discovered([*full, *short], pp=2, tp=2)
    assert [(g.key, g.nodes) for g in result.groups] == [
        ("a", ("spark-a0", "spark-a1", "spark-a2", "spark-a3"))
    ]
    have = "0: ['spark-b0'], 1: ['spark-b1'], 2: ['spark-b2']"
    assert result.problems == (problem("b", have, pp=2, tp=2),)


# --- assign_groups ----------------------------------------------------------------------


A, B, C = (NodeGroup(key=k, nodes=(f"{k}0", f"{k}1", f"{k}2")) for k in "abc")


@pytest.mark.parametrize(
    ("replicas", "groups", "current", "assigned", "unplaced"),
    [
        pytest.param(2, [A, B, C], {}, {0: "a", 1: "b"}, (), id="fresh-first-free-groups"),
        pytest.param(2, [A, B, C], {0: "b"}, {0: "b", 1: "a"}, (), id="sticky-then-free"),
        pytest.param(1, [A, B, C], {0: "c"}, {0: "c"}, (), id="keeps-a-later-group"),
        pytest.param(3, [A, B, C], {1: "a"}, {0: "b", 1: "a", 2: "c"}, (), id="taken-not-reused"),
        pytest.param(3, [A, B], {}, {0: "a", 1: "b"}, (2,), id="more-replicas-than-groups"),
        pytest.param(2, [A], {0: "gone"}, {1: "a"}, (0,), id="vanished-group-not-moved"),
        pytest.param(1, [A, B], {0: "a", 1: "b"}, {0: "a"}, (), id="scaled-down"),
        pytest.param(2, [A, B], {0: "a", 1: "b"}, {0: "a", 1: "b"}, (), id="steady"),
        pytest.param(0, [A, B], {0: "a"}, {}, (), id="zero-replicas"),
        pytest.param(2, [], {}, {}, (0, 1), id="no-groups"),
        pytest.param(2, [], {0: "a"}, {}, (0, 1), id="no-groups-left"),
    ],
)  # fmt: skip
def test_assign_groups(
    replicas: int,
    groups: list[NodeGroup],
    current: dict[int, str],
    assigned: dict[int, str],
    unplaced: tuple[int, ...],
) -> None:
    result = assign_groups(replicas=replicas, groups=groups, current=current)
    assert {index: group.key for index, group in result.replicas.items()} == assigned
    assert result.unplaced == unplaced
    by_key = {g.key: g for g in groups}
    assert all(group is by_key[group.key] for group in result.replicas.values())


def test_a_new_group_sorting_first_does_not_move_running_replicas() -> None:
    first = assign_groups(replicas=2, groups=[B, C], current={})
    current = {index: group.key for index, group in first.replicas.items()}
    assert current == {0: "b", 1: "c"}
    # Group "a" appears (labelled later) and sorts first: nothing moves, a 3rd replica gets it.
    later = assign_groups(replicas=3, groups=[A, B, C], current=current)
    assert {i: g.key for i, g in later.replicas.items()} == {0: "b", 1: "c", 2: "a"}
    assert later == Assignment(replicas={0: B, 1: C, 2: A}, unplaced=())


@given(
    replicas=st.integers(min_value=0, max_value=5),
    group_count=st.integers(min_value=0, max_value=5),
    held=st.lists(st.integers(min_value=0, max_value=6), max_size=5, unique=True),
    data=st.data(),
)
def test_assignment_is_sticky_distinct_and_complete(
    replicas: int, group_count: int, held: list[int], data: st.DataObject
) -> None:
    keys = [f"g{i}" for i in range(7)]  # g5, g6 never exist: vanished groups
    groups = [NodeGroup(key=keys[i], nodes=(keys[i],)) for i in range(group_count)]
    # Distinct replicas hold distinct groups, as live StatefulSets do.
    chosen = data.draw(st.permutations(keys))[: len(held)]
    current = dict(zip(held, chosen, strict=True))
    result = assign_groups(replicas=replicas, groups=groups, current=current)
    assert set(result.replicas) | set(result.unplaced) == set(range(replicas))
    assert not set(result.replicas) & set(result.unplaced)
    assigned = [g.key for g in result.replicas.values()]
    assert len(assigned) == len(set(assigned))  # never two replicas on one group
    existing = {g.key for g in groups}
    for index in range(replicas):
        key = current.get(index)
        if key is not None:  # a replica with a group keeps it, or waits for it
            if key in existing:
                assert result.replicas[index].key == key
            else:
                assert index in result.unplaced
    if any(i not in current for i in result.unplaced):  # a new replica waits only if full
        in_use = {k for i, k in current.items() if i < replicas}
        assert existing <= in_use | set(assigned)


# --- node groups other InferenceClusters hold (issue 16) ----------------------------------


def holder(owner: str, *nodes: str, older: bool = True) -> NodeHolder:
    return NodeHolder(owner=owner, nodes=frozenset(nodes), older=older)


def test_label_discovery_skips_a_group_another_object_holds() -> None:
    result = assign_groups(replicas=1, groups=[A, B], current={}, holders=[holder("llm/x", "a1")])
    assert result == Assignment(replicas={0: B}, unplaced=())


def test_no_free_group_names_the_holders() -> None:
    holders = [holder("llm/x", "a0"), holder("team/y", "b2", older=False)]
    result = assign_groups(replicas=2, groups=[A, B], current={}, holders=holders)
    assert result.replicas == {}
    assert result.unplaced == (0, 1)
    assert result.in_use == (
        f"node group 'a' ({', '.join(A.nodes)}) is in use by InferenceCluster llm/x",
        f"node group 'b' ({', '.join(B.nodes)}) is in use by InferenceCluster team/y",
    )


def test_a_held_group_is_named_only_when_a_replica_waits() -> None:
    result = assign_groups(replicas=1, groups=[A, B], current={}, holders=[holder("llm/x", "b0")])
    assert result == Assignment(replicas={0: A}, unplaced=())


@pytest.mark.parametrize(("older", "keeps"), [(False, True), (True, False)])
def test_a_running_replica_yields_its_group_only_to_an_older_claim(
    older: bool, keeps: bool
) -> None:
    result = assign_groups(
        replicas=1, groups=[A], current={0: "a"}, holders=[holder("llm/x", "a0", older=older)]
    )
    assert (result.replicas == {0: A}) is keeps
    assert (result.unplaced == (0,)) is not keeps


def test_node_holders_read_the_other_objects_status() -> None:
    me = {
        "metadata": {"name": "m", "namespace": "llm", "creationTimestamp": "2026-11-30T10:00:00Z"}
    }
    others = [
        {
            "metadata": {
                "name": "old",
                "namespace": "llm",
                "creationTimestamp": "2026-11-29T10:00:00Z",
            },
            "status": {"replicaStatuses": [{"index": 0, "nodes": ["a0", "a1"]}, {"index": 1}]},
        },
        {
            "metadata": {
                "name": "new",
                "namespace": "b",
                "creationTimestamp": "2026-12-01T10:00:00Z",
            },
            "status": {"replicaStatuses": [{"index": 0, "nodes": ["b0"]}]},
        },
        {"metadata": {"name": "none", "namespace": "llm"}, "status": {"phase": "Stopped"}},
        {"metadata": {"name": "fresh", "namespace": "llm"}},
        {
            "metadata": {
                "name": "leaving",
                "namespace": "x",
                "deletionTimestamp": "2026-12-01T10:00:00Z",
            },
            "status": {"replicaStatuses": [{"index": 0, "nodes": ["c0"]}]},
        },
    ]
    assert node_holders(me, others) == [
        NodeHolder(owner="llm/old", nodes=frozenset({"a0", "a1"}), older=True),
        NodeHolder(owner="b/new", nodes=frozenset({"b0"}), older=False),
    ]
