"""One finding type for every network preflight check, and how findings are summarised.

Why one type: the per-node checks (interfaces, HCAs, routes, limits, nccl.conf, the
advertised address) and the cross-node bandwidth run in different places, but the
operator turns all of them into one condition, ``NetworkVerified``, whose message must
name the node and the check. A finding is that unit: which node, which check, how bad,
and a sentence an operator can act on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum


class Severity(StrEnum):
    """How a finding weighs: errors fail the preflight, warnings and info are reported."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Check(StrEnum):
    """The checks, named as they appear in findings, status and docs/network.md."""

    INTERFACE = "Interface"
    MTU = "MTU"
    HCA = "HCA"
    GID = "GID"
    DEFAULT_ROUTE = "DefaultRoute"
    MEMLOCK = "MemLock"
    CMA = "CMA"
    NCCL_CONF = "NCCLConf"
    ADVERTISED_ADDRESS = "AdvertisedAddress"
    BANDWIDTH = "Bandwidth"
    PREFLIGHT = "Preflight"  # the check itself gave no readable result
    # The memory preflight's (preflight/memory.py, condition MemoryVerified).
    MEM_AVAILABLE = "MemAvailable"
    SWAP = "Swap"
    MEMORY_PRESSURE = "MemoryPressure"


@dataclass(frozen=True, slots=True)
class Finding:
    """One result of one check on one node."""

    node: str
    check: Check
    severity: Severity
    message: str

    def line(self) -> str:
        """``node: Check (severity): message``, the form conditions and logs use."""
        return f"{self.node}: {self.check.value} ({self.severity.value}): {self.message}"


def failed(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that fail the preflight (severity error), in their order."""
    return [f for f in findings if f.severity is Severity.ERROR]


def summarize(findings: Sequence[Finding], *, limit: int = 5) -> str:
    """A condition message: the errors first (at most ``limit``), then how many warnings."""
    errors = failed(findings)
    warnings = [f for f in findings if f.severity is Severity.WARNING]
    if not errors and not warnings:
        return "all network checks passed"
    parts = [f.line() for f in errors[:limit]]
    if len(errors) > limit:
        parts.append(f"and {len(errors) - limit} more errors")
    if warnings:
        parts.append(f"{len(warnings)} warnings")
    return "; ".join(parts)


def to_json(findings: Sequence[Finding]) -> str:
    """Findings as compact JSON (a termination message; the operator parses it back)."""
    return json.dumps([asdict(f) for f in findings], separators=(",", ":"))


def from_json(text: str) -> list[Finding]:
    """Parse :func:`to_json`'s output; ValueError on anything else."""
    raw = json.loads(text)
    if not isinstance(raw, list):
        raise ValueError("findings must be a JSON list")
    out: list[Finding] = []
    for item in raw:
        if not isinstance(item, dict):
            raise ValueError("each finding must be a JSON object")
        out.append(
            Finding(
                node=str(item["node"]),
                check=Check(item["check"]),
                severity=Severity(item["severity"]),
                message=str(item["message"]),
            )
        )
    return out
