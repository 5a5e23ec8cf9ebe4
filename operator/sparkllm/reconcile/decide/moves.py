"""A replica's move to a spare node group: what placement decided, as status and Event say.

Apart from ``failover.py`` (which reads pods and nodes through ``replicas.Observed``) so
that the replica's own pass (``replicas.py``) can carry a move without an import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sparkllm.render.placement import NodeGroup, describe_group


@dataclass(frozen=True)
class Move:
    """Replica ``index`` moved from group ``from_key`` (on ``from_nodes``) to ``to``."""

    index: int
    from_key: str
    from_nodes: Sequence[str]
    to: NodeGroup
    reason: str

    def message(self) -> str:
        nodes = f" ({', '.join(self.from_nodes)})" if self.from_nodes else ""
        return (
            f"replica {self.index}: {self.reason}; moved from node group "
            f"{self.from_key!r}{nodes} to the spare {describe_group(self.to)}"
        )

    def status(self, now: datetime) -> dict[str, Any]:
        """``replicaStatuses[].lastFailover`` for this move, made at ``now``."""
        return {"time": now, "from": self.from_key, "to": self.to.key, "reason": self.reason}
