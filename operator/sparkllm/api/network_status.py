"""``status.network``: the network preflight's findings and measurements, structured.

Why beside the condition: ``NetworkVerified``'s message is for humans and names at most
five errors; tools (dashboards, ``kubectl get -o jsonpath``, alerting) need every node's
findings as fields, and the measured bus bandwidth as a number to compare across runs.
Bounded: a large cluster's findings must not grow the object without limit.
"""

from typing import Annotated, Final, Literal

from pydantic import Field, StringConstraints

from sparkllm.api.common import NodeName
from sparkllm.api.rules import ApiModel

MAX_FINDINGS: Final = 32


class NetworkFinding(ApiModel):
    """One result of one preflight check on one node (docs/network.md lists the checks)."""

    node: NodeName = Field(description="node is where the check ran.")
    check: Annotated[str, StringConstraints(max_length=64)] = Field(
        description="check is the check's name, e.g. MTU, CMA, Bandwidth."
    )
    severity: Literal["error", "warning", "info"] = Field(
        description="severity is error (fails the preflight), warning or info (reported)."
    )
    message: Annotated[str, StringConstraints(max_length=1024)] = Field(
        description="message says what was found, for humans."
    )


class BandwidthMeasurement(ApiModel):
    """One replica's collective across its ranks (verify-bandwidth)."""

    replica: int = Field(ge=0, description="replica is the replica's index.")
    node: NodeName = Field(description="node is rank 0's node, which reports it.")
    op: Literal["all_reduce", "all_gather"] = Field(description="op is the collective timed.")
    ranks: int = Field(ge=0, description="ranks is how many ranks took part.")
    size_mib: int = Field(
        ge=0, alias="sizeMiB", description="sizeMiB is the message size compared (MiB)."
    )
    bus_bandwidth_gbps: float = Field(
        ge=0,
        description="busBandwidthGbps is the bus bandwidth at sizeMiB in Gb/s, as "
        "nccl-tests computes it (the slowest rank's time).",
    )
    threshold_gbps: float = Field(
        ge=0, description="thresholdGbps is spec.network.preflight.minBusBandwidthGbps then."
    )


class NetworkStatus(ApiModel):
    """What the network preflight found in the ranks of the current spec generation."""

    findings: tuple[NetworkFinding, ...] = Field(
        default=(),
        max_length=MAX_FINDINGS,
        description=f"findings are every node's findings, errors first, at most {MAX_FINDINGS}.",
    )
    omitted_findings: int = Field(
        default=0, ge=0, description="omittedFindings counts the findings left out."
    )
    bandwidth: tuple[BandwidthMeasurement, ...] = Field(
        default=(), max_length=64, description="bandwidth is one measurement per replica."
    )
