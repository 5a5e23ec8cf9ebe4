"""Network preflight: is the fabric what the spec says, before a replica serves?

The fabric is where multi-Spark deployments fail in practice, and usually silently
(issue 18, docs/network.md). Split so the part that needs a node runs on the node and
the arithmetic is pure:

- ``findings``: the one result type (node, check, severity, message) and its summary.
- ``host``: /sys, /proc and /etc read through a configurable root (fixture trees in tests).
- ``checks``: the per-node checks over a :class:`HostView`.
- ``bandwidth``: bus bandwidth as nccl-tests computes it, and the collective's timing
  loop (torch.distributed with NCCL on the nodes, Gloo across local processes).
"""

from sparkllm.preflight.checks import NodeExpectations, check_node
from sparkllm.preflight.findings import Check, Finding, Severity, failed, summarize
from sparkllm.preflight.host import HostView

__all__ = [
    "Check",
    "Finding",
    "HostView",
    "NodeExpectations",
    "Severity",
    "check_node",
    "failed",
    "summarize",
]
