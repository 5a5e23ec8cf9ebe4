"""``spec.memoryPreflight`` and ``status.memory``: the memory guard before a rank starts.

Why its own section and condition (MemoryVerified), not findings of NetworkVerified: the
two preflights fail differently and are turned on for different reasons. A network
finding is a node's configuration and stays until someone fixes it; free memory is a
fact of the moment (a leftover process, a page cache) that the next start may not see.
The network preflight also needs the GPU and a rendezvous across the ranks when it
measures; the memory check is one small read of /proc per rank, worth running where the
network preflight is not. The finding type and the way both reach status are the same
(``sparkllm.preflight.findings``, ``NetworkFinding``).
"""

from typing import Literal

from pydantic import Field

from sparkllm.api.network_status import MAX_FINDINGS, NetworkFinding
from sparkllm.api.rules import ApiModel


class MemoryPreflightSpec(ApiModel):
    """The memory check every rank runs right before its engine (docs/monitoring.md)."""

    mode: Literal["gate", "warn", "off"] = Field(
        default="off",
        description="mode is what the memory preflight does. Each rank's last init container "
        "verify-memory reads its node's /proc/meminfo and /proc/pressure/memory: "
        "MemAvailable against the rank's weights and KV pool in the capacity plan (with "
        "spec.model.weightsGB) plus a 4 GB runtime reserve, swap in use, and memory "
        "pressure (PSI full avg10 >= 1 % an error, some avg10 >= 10 % a warning). gate: an "
        "error fails the init container, so the engine does not start, and the replica "
        "stays stopped with condition MemoryVerified False until the spec changes or "
        "sparkllm.io/restart=now; warn: the same checks, reported in MemoryVerified, the "
        "engine starts anyway; off: no check, no condition. Default off (existing replicas "
        "keep their pods unchanged; the check mounts the host's /proc read-only).",
    )


class MemoryStatus(ApiModel):
    """What the memory preflight found in the ranks of the current spec generation."""

    findings: tuple[NetworkFinding, ...] = Field(
        default=(),
        max_length=MAX_FINDINGS,
        description="findings are every node's memory findings (check MemAvailable, Swap "
        f"or MemoryPressure), errors first, at most {MAX_FINDINGS}.",
    )
    omitted_findings: int = Field(
        default=0, ge=0, description="omittedFindings counts the findings left out."
    )
