"""``spec.placement``: which nodes form each replica, and in which rank order.

A replica is a gang of ``tensorParallel x pipelineParallel`` nodes wired to each other
over RoCE; the scheduler cannot pick such a gang, because which nodes are cabled together is not
something Kubernetes knows. The user says it, in one of two ways (exactly one):

- ``nodeGroups``: explicit lists of node names, one list per replica, in rank order.
  Replica ``r`` runs on group ``r``; ``replicas`` may not exceed the number of groups.
- ``nodeGroupLabel``: a node label key whose value names a node's group; the rank inside
  a group comes from the node label ``sparkllm.io/rank``. Groups are discovered at
  reconcile time, so scaling up needs only labelled nodes, not a spec edit.

Rules that need the engine's parallelism or ``replicas`` live on the spec
(:mod:`sparkllm.api.spec`); the ones here need only the placement itself.
"""

from typing import Annotated, Final

from pydantic import Field

from sparkllm.api.common import LabelKey, NodeName
from sparkllm.api.engine import MAX_REPLICA_NODES
from sparkllm.api.rules import ApiModel, Rule
from sparkllm.keys import DEFAULT_NODE_GROUP_LABEL, NODE_RANK_LABEL

MAX_REPLICAS: Final = 16


def _no_node_in_two_groups(groups: tuple[tuple[str, ...], ...]) -> bool:
    seen: set[str] = set()
    for group in groups:
        members = set(group)
        if members & seen:
            return False
        seen |= members
    return True


NodeGroup = Annotated[
    tuple[NodeName, ...],
    Field(min_length=1, max_length=MAX_REPLICA_NODES),
    Rule(
        cel="self.all(n, self.exists_one(m, m == n))",
        message="nodes in a node group must be distinct: each rank needs its own node",
        check=lambda group: len(set(group)) == len(group),
    ),
]

NodeGroups = Annotated[
    tuple[NodeGroup, ...],
    Field(min_length=1, max_length=MAX_REPLICAS),
    Rule(
        cel="self.all(g, g.all(n, self.exists_one(h, n in h)))",
        message="a node may belong to only one node group",
        check=_no_node_in_two_groups,
    ),
]


class PlacementSpec(ApiModel):
    """Where replicas run: explicit node groups, or groups discovered from node labels."""

    cel_rules = (
        Rule(
            cel="has(self.nodeGroups) != has(self.nodeGroupLabel)",
            message="placement must set exactly one of nodeGroups or nodeGroupLabel",
            check=lambda p: (p.node_groups is None) != (p.node_group_label is None),
        ),
    )

    node_groups: NodeGroups | None = Field(
        default=None,
        description="nodeGroups lists, per replica, the names of the nodes that form it, "
        "in node-rank order (the first node runs rank 0 and serves the API; SGLang gives "
        "node rank n pipeline stage n div tensorParallel). Optional; exactly "
        "one of nodeGroups and nodeGroupLabel. 1 to "
        f"{MAX_REPLICAS} groups, each of exactly engine.tensorParallel x "
        "engine.pipelineParallel distinct nodes; "
        "no node in two groups; replicas may not exceed the number of groups. Example: "
        "[[spark-a0, spark-a1, spark-a2]].",
    )
    node_group_label: LabelKey | None = Field(
        default=None,
        description="nodeGroupLabel is a node label key; nodes with the same value form "
        f"one group, ordered by their {NODE_RANK_LABEL} label (0 to "
        "tensorParallel x pipelineParallel - 1). "
        "Optional; exactly one of nodeGroups and nodeGroupLabel. When placement itself is "
        f"absent it defaults to nodeGroupLabel: {DEFAULT_NODE_GROUP_LABEL}. A qualified "
        "label key of at most 317 characters.",
    )


DEFAULT_PLACEMENT: Final = PlacementSpec(node_group_label=DEFAULT_NODE_GROUP_LABEL)
