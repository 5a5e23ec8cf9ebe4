"""Cross-node bandwidth: one collective across a replica's ranks, as nccl-tests measures it.

Why: the per-node checks cannot see a slow path that NCCL picks silently (one PCIe half
of the QSFP port missing from NCCL_IB_HCA gave ~3 GB/s all_gather bus bandwidth instead
of ~23.7 GB/s). Only moving bytes between the ranks shows it. This module times an
all_reduce or all_gather from 8 MiB to 128 MiB (modest: a 16 GiB nccl-tests size
exhausted a Spark's unified memory and froze the node), turns each time into bus
bandwidth with nccl-tests' factors, and compares the largest size's with the spec's
threshold (docs/network.md has the arithmetic).

The timing loop takes the collective as a callable, so it is the same code under NCCL
on the nodes (torch.distributed from the engine image) and under Gloo across local
processes; :func:`torch_collective` builds that callable and imports torch only when
called, since the operator's own image has no torch.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from sparkllm.cli_args import add_options, from_namespace, option
from sparkllm.preflight.findings import Check, Finding, Severity, failed, from_json, to_json

Collective = Literal["all_reduce", "all_gather"]
MIB = 1 << 20
# nccl-tests `-b 8M -e 128M -f 2`: the hand-run verify-fabric range.
DEFAULT_SIZES: tuple[int, ...] = (8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB, 128 * MIB)
# Gb/s: 183.50 (the documents' slowest link) x 0.82 ~ 150, 6x the ~24 Gb/s of a missing
# PCIe half (docs/network.md, "The threshold").
DEFAULT_THRESHOLD_GBPS = 150.0
Clock = Callable[[], float]
RunOnce = Callable[[], None]


def bus_factor(op: Collective, *, ranks: int) -> float:
    """nccl-tests' busbw / algbw: all_reduce 2(n-1)/n, all_gather (n-1)/n."""
    if ranks < 2:
        raise ValueError("a collective bandwidth needs at least two ranks")
    if op == "all_reduce":
        return 2 * (ranks - 1) / ranks
    return (ranks - 1) / ranks


@dataclass(frozen=True, slots=True)
class Sample:
    """One message size's average time over ``iterations`` collectives."""

    op: Collective
    nbytes: int
    ranks: int
    seconds: float

    @property
    def algbw_gbps(self) -> float:
        """Algorithm bandwidth in Gb/s (bits): bytes / time, as nccl-tests' algbw x 8."""
        return self.nbytes * 8 / self.seconds / 1e9

    @property
    def busbw_gbps(self) -> float:
        """Bus bandwidth in Gb/s: algbw times :func:`bus_factor`."""
        return self.algbw_gbps * bus_factor(self.op, ranks=self.ranks)


def time_collective(
    run: RunOnce, *, warmup: int, iterations: int, clock: Clock = time.perf_counter
) -> float:
    """Average seconds of ``run`` over ``iterations`` after ``warmup`` untimed calls."""
    if iterations < 1:
        raise ValueError("iterations must be at least 1")
    for _ in range(warmup):
        run()
    start = clock()
    for _ in range(iterations):
        run()
    return (clock() - start) / iterations


def measure(
    make_run: Callable[[int], RunOnce],
    *,
    op: Collective,
    ranks: int,
    sizes: Sequence[int] = DEFAULT_SIZES,
    warmup: int = 2,
    iterations: int = 5,
    clock: Clock = time.perf_counter,
) -> list[Sample]:
    """One :class:`Sample` per size; ``make_run(nbytes)`` allocates and returns the call."""
    samples = []
    for nbytes in sizes:
        run = make_run(nbytes)
        seconds = time_collective(run, warmup=warmup, iterations=iterations, clock=clock)
        samples.append(Sample(op=op, nbytes=nbytes, ranks=ranks, seconds=seconds))
    return samples


def evaluate(samples: Sequence[Sample], *, node: str, threshold_gbps: float) -> list[Finding]:
    """The largest size's bus bandwidth against the threshold (small sizes are latency)."""
    if not samples:
        return [Finding(node, Check.BANDWIDTH, Severity.ERROR, "no bandwidth was measured")]
    largest = max(samples, key=lambda s: s.nbytes)
    text = (
        f"{largest.op} bus bandwidth {largest.busbw_gbps:.1f} Gb/s at "
        f"{largest.nbytes // MIB} MiB across {largest.ranks} ranks"
    )
    if largest.busbw_gbps < threshold_gbps:
        message = f"{text}, below the threshold {threshold_gbps:g} Gb/s"
        return [Finding(node, Check.BANDWIDTH, Severity.ERROR, message)]
    return [Finding(node, Check.BANDWIDTH, Severity.INFO, text)]


def torch_collective(
    dist: Any, torch: Any, *, op: Collective, device: str
) -> Callable[[int], RunOnce]:
    """``make_run`` for :func:`measure` over an initialised torch.distributed group.

    ``nbytes`` is nccl-tests' size: the buffer all_reduce reduces, or all_gather's
    whole output (each rank contributes nbytes / n). float32 elements; on CUDA every
    call waits for the stream, as nccl-tests times to completion.
    """
    ranks = int(dist.get_world_size())

    def make_run(nbytes: int) -> RunOnce:
        count = nbytes // 4
        if op == "all_reduce":
            buffer = torch.ones(count, dtype=torch.float32, device=device)

            def collective() -> None:
                dist.all_reduce(buffer)
        else:
            part = torch.ones(count // ranks, dtype=torch.float32, device=device)
            output = torch.empty(count // ranks * ranks, dtype=torch.float32, device=device)

            def collective() -> None:
                dist.all_gather_into_tensor(output, part)

        def run() -> None:
            collective()
            if device.startswith("cuda"):
                torch.cuda.synchronize()

        return run

    return make_run


def table(samples: Sequence[Sample]) -> str:
    """nccl-tests' columns that matter here: size, time, algbw and busbw (GB/s and Gb/s)."""
    lines = [
        f"{'size':>12} {'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'busbw(Gb/s)':>12}"
    ]
    for s in samples:
        lines.append(
            f"{s.nbytes:>12} {s.seconds * 1e6:>10.1f} {s.algbw_gbps / 8:>12.2f} "
            f"{s.busbw_gbps / 8:>12.2f} {s.busbw_gbps:>12.1f}"
        )
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class BandwidthResult:
    """What one rank leaves in its termination message: the measurement and the findings.

    Every rank times the collective; the ranks agree on the slowest rank's time per size
    (so all of them decide alike), and only rank 0 reports the finding, so a replica's
    measurement is named once, on rank 0's node. ``busbw_gbps`` is None when nothing was
    measured (the rendezvous failed).
    """

    rank: int
    op: Collective
    ranks: int
    nbytes: int
    busbw_gbps: float | None
    threshold_gbps: float
    findings: tuple[Finding, ...]

    def to_json(self) -> str:
        """Compact JSON (the operator reads it back with :func:`result_from_json`)."""
        body = {
            "rank": self.rank,
            "op": self.op,
            "ranks": self.ranks,
            "bytes": self.nbytes,
            "busBandwidthGbps": None if self.busbw_gbps is None else round(self.busbw_gbps, 2),
            "thresholdGbps": self.threshold_gbps,
            "findings": json.loads(to_json(self.findings)),
        }
        return json.dumps(body, separators=(",", ":"))


def result_from_json(text: str) -> BandwidthResult:
    """Parse :meth:`BandwidthResult.to_json`; ValueError (or KeyError/TypeError) otherwise."""
    raw = json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError("a bandwidth result must be a JSON object")
    op = str(raw["op"])
    if op not in ("all_reduce", "all_gather"):
        raise ValueError(f"unknown collective {op!r}")
    busbw = raw["busBandwidthGbps"]
    return BandwidthResult(
        rank=int(raw["rank"]),
        op="all_reduce" if op == "all_reduce" else "all_gather",
        ranks=int(raw["ranks"]),
        nbytes=int(raw["bytes"]),
        busbw_gbps=None if busbw is None else float(busbw),
        threshold_gbps=float(raw["thresholdGbps"]),
        findings=tuple(from_json(json.dumps(raw["findings"]))),
    )


@dataclass(frozen=True, kw_only=True)
class BandwidthArgs:
    """The collective to time, in the order the rank pods' init container writes them
    (``render/network_preflight.py``); the module's parser is built from the same fields."""

    COMMAND: ClassVar[tuple[str, ...]] = ()  # run as ``python -m sparkllm.preflight.bandwidth``

    backend: Literal["nccl", "gloo"] = option("--backend", default="nccl", always=True)
    op: Collective = option("--op", default="all_reduce", always=True)
    threshold_gbps: float = option("--threshold-gbps", default=DEFAULT_THRESHOLD_GBPS, always=True)
    termination_log: Path | None = option("--termination-log", default=None)
    gate: bool = option("--gate", default=False, help="exit 1 below the threshold")
    node: str = option("--node", default="", help="node name (default: $NODE_NAME)")
    max_mib: int = option("--max-mib", default=128, help="largest size (8 MiB up)")
    warmup: int = option("--warmup", default=2)
    iterations: int = option("--iterations", default=5)
    timeout_seconds: float = option("--timeout-seconds", default=600.0, help="rendezvous wait")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparkllm-preflight-bandwidth",
        description="Time a collective across the ranks of a torch.distributed group "
        "(env:// rendezvous: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).",
    )
    add_options(parser, BandwidthArgs)
    return parser


def _slowest(dist: Any, torch: Any, samples: list[Sample], *, device: str) -> list[Sample]:
    """The samples with every rank's slowest time per size (all ranks decide alike)."""
    seconds = torch.tensor([s.seconds for s in samples], dtype=torch.float64, device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    return [
        Sample(op=s.op, nbytes=s.nbytes, ranks=s.ranks, seconds=float(t))
        for s, t in zip(samples, seconds.tolist(), strict=True)
    ]


def _collect(args: BandwidthArgs) -> tuple[int, int, list[Sample]]:
    """Rendezvous, time every size, agree on the times: (rank, world size, samples)."""
    # The engine image's torch; the operator's image has none, hence no static import.
    torch: Any = importlib.import_module("torch")
    dist: Any = importlib.import_module("torch.distributed")
    timeout = importlib.import_module("datetime").timedelta(seconds=args.timeout_seconds)
    dist.init_process_group(backend=args.backend, timeout=timeout)
    try:
        device = f"cuda:{torch.cuda.current_device()}" if args.backend == "nccl" else "cpu"
        sizes = [s for s in DEFAULT_SIZES if s <= args.max_mib * MIB]
        make_run = torch_collective(dist, torch, op=args.op, device=device)
        ranks = int(dist.get_world_size())
        bus_factor(args.op, ranks=ranks)  # ValueError for a group of one
        samples = measure(
            make_run,
            op=args.op,
            ranks=ranks,
            sizes=sizes,
            warmup=args.warmup,
            iterations=args.iterations,
        )
        samples = _slowest(dist, torch, samples, device=device)
        return int(dist.get_rank()), ranks, samples
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the collective; rank 0 prints the table and the finding (exit 1 below threshold)."""
    args = from_namespace(BandwidthArgs, _parser().parse_args(argv))
    node = args.node or os.environ.get("NODE_NAME", "unknown")
    rank = int(os.environ.get("RANK", "0"))
    ranks = int(os.environ.get("WORLD_SIZE", "0"))
    try:
        rank, ranks, samples = _collect(args)
    except Exception as exc:  # a peer that never came, a refused port: a finding, no traceback
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        text = f"rank {rank} of {ranks}: no collective with rank 0 at {where}: {exc}"
        findings = [Finding(node, Check.BANDWIDTH, Severity.ERROR, text[:600])]
        samples = []
    else:
        findings = evaluate(samples, node=node, threshold_gbps=args.threshold_gbps)
    largest = max(samples, key=lambda s: s.nbytes, default=None)
    result = BandwidthResult(
        rank=rank,
        op=args.op,
        ranks=ranks,
        nbytes=largest.nbytes if largest else 0,
        busbw_gbps=largest.busbw_gbps if largest else None,
        threshold_gbps=args.threshold_gbps,
        # Every rank's measurement is the same (the slowest); rank 0 names it once.
        findings=tuple(findings) if rank == 0 or not samples else (),
    )
    if rank == 0 and samples:
        print(table(samples))
    for finding in findings:
        print(finding.line(), flush=True)
    if args.termination_log is not None:
        args.termination_log.write_text(result.to_json(), encoding="utf-8")
    return 1 if failed(findings) and args.gate else 0


if __name__ == "__main__":
    sys.exit(main())
