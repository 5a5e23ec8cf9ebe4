"""A simulated node's memory as the kernel shows it: /proc/meminfo and PSI.

Why: the memory preflight (``sparkllm verify-memory``) reads the host's /proc through a
mount, and on the dev cluster a kwok node's /proc is a directory under the harness's
hosts root (``hostpaths``). Each test writes the memory it wants a node to have: a
DGX Spark at rest by default (128 GB, about 120 GB available, no swap in use, no
pressure), or one whose memory something else holds, so the preflight can be shown to
name that node. Written next to the network fabric's files (``fabric.py`` writes
meminfo too; this one rewrites it with the memory keys and keeps CmaTotal).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkllm.preflight.host import parse_meminfo_kb

GB_KB = 10**9 // 1024  # kB per GB (10**9 bytes)


@dataclass(frozen=True)
class SparkMemory:
    """What to write: figures in kB as /proc/meminfo prints them, PSI averages in %."""

    total_kb: int = 125_000_000  # what a Spark's kernel reports of its 128 GB
    available_kb: int = 117_000_000
    swap_total_kb: int = 0
    swap_free_kb: int = 0
    some_avg10: float = 0.0
    full_avg10: float = 0.0


def write_memory(root: Path, memory: SparkMemory | None = None) -> Path:
    """Write ``root/proc/meminfo`` and ``root/proc/pressure/memory``; return ``root``."""
    memory = memory or SparkMemory()
    meminfo = root / "proc/meminfo"
    old = meminfo.read_text(encoding="utf-8") if meminfo.is_file() else ""
    cma = parse_meminfo_kb(old, "CmaTotal")
    rows = [
        f"MemTotal:       {memory.total_kb} kB",
        f"MemFree:        {memory.available_kb // 2} kB",
        f"MemAvailable:   {memory.available_kb} kB",
        f"SwapTotal:      {memory.swap_total_kb} kB",
        f"SwapFree:       {memory.swap_free_kb} kB",
    ]
    if cma is not None:
        rows.append(f"CmaTotal:       {cma} kB")
    meminfo.parent.mkdir(parents=True, exist_ok=True)
    meminfo.write_text("\n".join(rows) + "\n", encoding="utf-8")
    pressure = root / "proc/pressure/memory"
    pressure.parent.mkdir(parents=True, exist_ok=True)
    pressure.write_text(
        f"some avg10={memory.some_avg10:.2f} avg60=0.00 avg300=0.00 total=0\n"
        f"full avg10={memory.full_avg10:.2f} avg60=0.00 avg300=0.00 total=0\n",
        encoding="utf-8",
    )
    return root
