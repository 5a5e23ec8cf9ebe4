"""The memory preflight: is the memory the plan counts on free on this node right now?

Why: a DGX Spark's 128 GB are shared by the CPU, the OS and the GPU. When an engine
starts on a node where something else already holds memory (a crashed engine's pinned
pages, another job, a page cache that will not shrink), loading the weights pushes the
host into unified-memory pressure: the driver logs ``NV_ERR_NO_MEMORY``, no OOM kill
happens and the node stops answering until it is power-cycled (issue 28). SGLang itself
sizes its pool from the memory free when it starts (``mem_fraction_static`` x free, less
the weights; ``kv_cache_configurator``), so a short node also serves a smaller KV cache
than planned, or fails after minutes of loading. Checked before the engine starts, from
what the kernel says:

- ``MemAvailable`` (/proc/meminfo: what can be allocated without swapping) against the
  rank's need from the capacity plan: its weights and KV pool (SGLang's static budget)
  plus :data:`RUNTIME_RESERVE_GB` for what SGLang takes outside it; below it: an error;
- swap in use (``SwapTotal - SwapFree``): a warning, the kernel is already paging;
- memory pressure (/proc/pressure/memory, PSI): ``full avg10`` at or above
  :data:`FULL_AVG10_LIMIT` % (every task stalled on memory for that share of the last
  10 s: the node is thrashing now) an error; ``some avg10`` at or above
  :data:`SOME_AVG10_LIMIT` % a warning.

Pure: texts in, findings out (the init container reads the files, ``verify_memory``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sparkllm.preflight.findings import Check, Finding, Severity
from sparkllm.preflight.host import parse_meminfo_kb

KB: Final = 1024
GB: Final = 10**9
# What SGLang allocates outside its static budget (the CUDA context, one prefill chunk's
# activations, CUDA graphs, NCCL buffers: capacity.py's headroom list without the OS,
# whose share MemAvailable has already taken away).
RUNTIME_RESERVE_GB: Final = 4.0
FULL_AVG10_LIMIT: Final = 1.0  # percent of the last 10 s with every task stalled
SOME_AVG10_LIMIT: Final = 10.0  # percent of the last 10 s with some task stalled


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    """One rank's memory in the capacity plan (GB of 10**9 bytes); None without a plan."""

    rank: int
    weights_gb: float
    kv_pool_gb: float
    reserve_gb: float = RUNTIME_RESERVE_GB

    @property
    def total_gb(self) -> float:
        return self.weights_gb + max(self.kv_pool_gb, 0.0) + self.reserve_gb


@dataclass(frozen=True, slots=True)
class Pressure:
    """One line of a PSI file: ``some`` or ``full``, its 10 s average in percent."""

    some_avg10: float | None
    full_avg10: float | None


_PSI_LINE = re.compile(r"^(some|full)\s+avg10=([\d.]+)", re.MULTILINE)


def parse_pressure(text: str) -> Pressure:
    """/proc/pressure/memory (``some avg10=0.00 avg60=0.00 avg300=0.00 total=0``, then
    ``full ...``); a line that is absent is None."""
    found = {kind: float(value) for kind, value in _PSI_LINE.findall(text)}
    return Pressure(some_avg10=found.get("some"), full_avg10=found.get("full"))


def _gb(kb: int) -> float:
    return kb * KB / GB


def check_memory_available(
    meminfo: str | None, pressure: str | None, *, node: str, need: MemoryNeed | None
) -> list[Finding]:
    """Every memory finding for one node (docs/monitoring.md "Before the node wedges")."""

    def finding(check: Check, severity: Severity, message: str) -> Finding:
        return Finding(node=node, check=check, severity=severity, message=message)

    available = parse_meminfo_kb(meminfo or "", "MemAvailable")
    out: list[Finding] = []
    if available is None:
        text = "MemAvailable is not readable in /proc/meminfo: memory not checked"
        out.append(finding(Check.MEM_AVAILABLE, Severity.ERROR, text))
    elif need is None:
        text = (
            f"MemAvailable {_gb(available):.2f} GB; no capacity plan to compare it with "
            "(spec.model.weightsGB is not set)"
        )
        out.append(finding(Check.MEM_AVAILABLE, Severity.INFO, text))
    elif _gb(available) < need.total_gb:
        text = (
            f"MemAvailable {_gb(available):.2f} GB is below the {need.total_gb:.2f} GB rank "
            f"{need.rank} needs (plan: {need.weights_gb:.2f} GB weights + "
            f"{max(need.kv_pool_gb, 0.0):.2f} GB KV pool + {need.reserve_gb:g} GB runtime); "
            "something else holds the node's memory: loading the weights would push it "
            "into unified-memory pressure"
        )
        out.append(finding(Check.MEM_AVAILABLE, Severity.ERROR, text))
    total = parse_meminfo_kb(meminfo or "", "SwapTotal")
    free = parse_meminfo_kb(meminfo or "", "SwapFree")
    if total and free is not None and total > free:
        text = (
            f"{_gb(total - free):.2f} GB of swap in use: the kernel is already paging "
            "before the engine starts"
        )
        out.append(finding(Check.SWAP, Severity.WARNING, text))
    out += _pressure_findings(pressure, finding)
    return out


def _pressure_findings(
    pressure: str | None, finding: Callable[[Check, Severity, str], Finding]
) -> list[Finding]:
    if pressure is None:
        text = "/proc/pressure/memory is absent (kernel without PSI): pressure not checked"
        return [finding(Check.MEMORY_PRESSURE, Severity.INFO, text)]
    psi = parse_pressure(pressure)
    if psi.full_avg10 is not None and psi.full_avg10 >= FULL_AVG10_LIMIT:
        text = (
            f"memory pressure full avg10={psi.full_avg10:.2f} % (at or above "
            f"{FULL_AVG10_LIMIT:g} %): every task stalled on memory, the node is thrashing now"
        )
        return [finding(Check.MEMORY_PRESSURE, Severity.ERROR, text)]
    if psi.some_avg10 is not None and psi.some_avg10 >= SOME_AVG10_LIMIT:
        text = (
            f"memory pressure some avg10={psi.some_avg10:.2f} % (at or above "
            f"{SOME_AVG10_LIMIT:g} %): tasks are waiting for memory"
        )
        return [finding(Check.MEMORY_PRESSURE, Severity.WARNING, text)]
    return []
