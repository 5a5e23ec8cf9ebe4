"""``make bench``: run the benchmarks, one table each, then a summary. Numbers, not verdicts.

    .venv/bin/python -m tests.bench [--only NAME]... [--quick] [--list]

Benchmarks (in this order; ``--only`` picks some, ``--list`` shows them):

* ``admission``  token counting and the admission decision (bench_admission.py), a
                 subprocess; no cluster.
* ``front_door`` simulator alone vs smg vs admission + smg (bench_front_door.py), a
                 subprocess running its own local servers; no cluster.
* ``governance`` per-user governance's cost on the admission path at concurrency 1, and
                 a heavy and a light user's queue waits behind 8 slots
                 (bench_governance.py), a subprocess; no cluster.
* ``fair_tokens`` a long-prompt and a short-prompt user's shares ordered by requests
                 and by tokens (Jain's index), and interactive TTFT alone and beside a
                 batch flood (bench_fair_tokens.py), a subprocess; no cluster.
* ``engine_cache`` a rank's start with a cold vs a warm engine cache on the simulator's
                 start model, really slept at 2 % and scaled back (bench_engine_cache.py),
                 a subprocess; no cluster.
* ``reconcile``  create -> StatefulSets -> Ready -> garbage collected, and the
                 operator's memory with many InferenceClusters (bench_reconcile.py).
* ``faults``     gang restart after a container exit or a pod deletion
                 (bench_faults.py).
* ``failover``   node failure -> replica serving on the spare group, and the quarantine
                 decision time (bench_failover.py).

The last three run the real operator and the engine harness against the shared dev
cluster (started if it is not running, never stopped; every object lives in a namespace
of the benchmark's own, deleted at the end). On two cores a full run takes about five
minutes (up to ten when the machine is busy), ``--quick`` about two. A benchmark that
crashes is reported and the rest still run; the exit status is 1 then. Timing never
fails a run. What each measures, and on what basis: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sparkllm_dev.devcluster import DevCluster
from tests.bench import bench_failover, bench_faults, bench_reconcile
from tests.bench.common import ROOT, machine_facts, percentile, print_table

Row = list[str]  # benchmark, figure, value, basis or goal
BACKOFF_NOTE = (
    "* faults: every restart but the first includes 0-1 s of backoff (backoffSeconds [1])."
)


@dataclass(frozen=True)
class Options:
    quick: bool


def _subprocess(module: str, *args: str) -> list[str]:
    """Run ``python -m module args`` from the repository root, echoing its output live."""
    command = [sys.executable, "-m", module, *args]
    print(f"$ {' '.join(['python', '-m', module, *args])}", flush=True)
    lines: list[str] = []
    with subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            print(f"   {line}", end="", flush=True)
            lines.append(line.rstrip("\n"))
    if process.returncode != 0:
        raise RuntimeError(f"{module} exited {process.returncode}")
    return lines


ADMISSION_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(count|render\+count|decide exact|decide bounded|v4 encode"
    r"|v4 decide exact|v4 decide bounded)\s+([\d.]+)\s+([\d.]+)"
)


def run_admission(options: Options) -> list[Row]:
    runs = "50" if options.quick else "200"
    print("\n== admission: what admission costs per request (in-process, perf_counter)")
    lines = _subprocess("tests.bench.bench_admission", "--runs", runs)
    rows: list[Row] = []
    for line in lines:
        match = ADMISSION_ROW.match(line)
        if match and match[3] in ("render+count", "decide exact", "v4 encode"):
            tokens, step, p50, p99 = match[1], match[3], match[4], match[5]
            goal = "goal < 10 ms at 8K" if step != "decide exact" else f"{runs} runs"
            rows.append(["admission", f"{step}, {tokens}-token prompt", f"{p50} / {p99} ms", goal])
    return rows


FRONT_ROW = re.compile(
    r"^\s*(\d+)\s+(direct|smg|admission)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
)
GOAL_ROW = re.compile(
    r"^\s*(TTFT|E2E)\s+p50 ([+-][\d.]+) ms\s+p99 ([+-][\d.]+) ms\s+median .* ([+-][\d.]+) ms"
)
LONG_ROW = re.compile(r"^\s*(2048|8192)\s+([\d.]+)\s+([\d.]+)\s+(-?[\d.]+)\s+([\d.]+)\s*$")


def run_front_door(options: Options) -> list[Row]:
    scale = "0.15" if options.quick else "1.0"
    print("\n== front_door: direct vs smg vs admission + smg (local processes, streamed chat)")
    lines = _subprocess("tests.bench.bench_front_door", "--scale", scale)
    e2e: dict[tuple[str, str], float] = {}
    decisions: list[Row] = []
    for line in lines:
        if match := FRONT_ROW.match(line):
            e2e[(match[1], match[2])] = float(match[5])
        elif match := GOAL_ROW.match(line):
            figure = f"c=1 {match[1]}: admission over smg, p50 / p99 (paired median)"
            value = f"{match[2]} / {match[3]} ms ({match[4]})"
            decisions.append(["front_door", figure, value, "goal <= 1 / 3 ms"])
        elif match := LONG_ROW.match(line):
            figure = f"admission decision, {match[1]}-token prompt"
            decisions.append(["front_door", figure, f"{match[5]} ms", "mean, its histogram"])
    rows: list[Row] = []
    for concurrency in sorted({c for c, _ in e2e}, key=int):
        direct, gated = e2e.get((concurrency, "direct")), e2e.get((concurrency, "admission"))
        if direct is not None and gated is not None:
            figure = f"E2E p50 direct -> admission+smg, c={concurrency}"
            rows.append(["front_door", figure, f"{direct:.0f} -> {gated:.0f} ms", f"scale {scale}"])
    return rows + decisions


GOVERNANCE_ADDS = re.compile(r"^\s*governance adds \((.+)\): ([+-][\d.]+) ms p50")
REDIS_OVER = re.compile(r"^\s*redis over in-process \((.+)\): ([+-][\d.]+) ms p50")
REDIS_TRIP = re.compile(r"^\s*redis round trip beside it \((.+)\): ([\d.]+) ms p50")
GOVERNANCE_WAIT = re.compile(r"^(heavy|light)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")


def run_governance(options: Options) -> list[Row]:
    runs, seconds = ("300", "3") if options.quick else ("2000", "6")
    print("\n== governance: its cost per request, and fair queuing between two users")
    lines = _subprocess("tests.bench.bench_governance", "--runs", runs, "--seconds", seconds)
    rows: list[Row] = []
    for line in lines:
        if match := GOVERNANCE_ADDS.match(line):
            figure = f"c=1 admission path, {match[1]}: governance adds"
            rows.append(["governance", figure, f"{match[2]} ms p50", "goal <= 0.2 ms"])
        elif match := REDIS_OVER.match(line):
            figure = f"c=1 admission path, {match[1]}: redis over in-process"
            rows.append(["governance", figure, f"{match[2]} ms p50", "goal <= 0.3 ms"])
        elif match := REDIS_TRIP.match(line):
            figure = f"redis round trip beside it ({match[1]})"
            rows.append(["governance", figure, f"{match[2]} ms p50", "bare PING, same runs"])
        elif match := GOVERNANCE_WAIT.match(line):
            figure = f"{match[1]} user's mean queue wait ({match[2]} requests)"
            rows.append(["governance", figure, f"{match[3]} ms", "one slot turnover 250 ms"])
    return rows


JAIN_ROW = re.compile(
    r"^\s*order by (\w+): Jain's index over requests \(slots\) ([\d.]+), "
    r"over weighted tokens ([\d.]+)"
)
SHARE_ROW = re.compile(r"^(requests|tokens)\s+(long|short)\s+\d+\s+[\d.]+%\s+\d+\s+([\d.]+%)")
TTFT_ROW = re.compile(r"^TTFT (.+?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s*$")


def run_fair_tokens(options: Options) -> list[Row]:
    seconds = "6" if options.quick else "12"
    print("\n== fair_tokens: shares by requests vs by tokens, and interactive over batch")
    lines = _subprocess("tests.bench.bench_fair_tokens", "--seconds", seconds)
    rows: list[Row] = []
    shares: dict[str, list[str]] = {}
    for line in lines:
        if match := SHARE_ROW.match(line):
            shares.setdefault(match[1], []).append(f"{match[2]} {match[3]}")
        elif match := JAIN_ROW.match(line):
            figure = f"ordered by {match[1]}: Jain's index, slots / tokens"
            share = ", ".join(shares.get(match[1], []))
            rows.append(["fair_tokens", figure, f"{match[2]} / {match[3]}", f"token share {share}"])
        elif match := TTFT_ROW.match(line):
            figure = f"interactive TTFT {match[1]}"
            rows.append(["fair_tokens", figure, f"{match[3]} / {match[4]} ms", "p50 / p95"])
    return rows


ENGINE_CACHE_ROUND = re.compile(
    r"^ROUND \d+ cold ([\d.]+) s \((\d+) s real\) warm ([\d.]+) s \((\d+) s real\) ratio ([\d.]+)"
)


def run_engine_cache(options: Options) -> list[Row]:
    rounds = "1" if options.quick else "2"
    print("\n== engine_cache: a restart with warm vs cold caches, on the simulator's model")
    lines = _subprocess("tests.bench.bench_engine_cache", "--rounds", rounds)
    found = [m for line in lines if (m := ENGINE_CACHE_ROUND.match(line))]
    cold = [float(m[2]) for m in found]
    warm = [float(m[4]) for m in found]
    ratio = [float(m[5]) for m in found]
    basis = f"simulator's start model (sim/start.py), {len(found)} round(s), real seconds"
    return [
        ["engine_cache", "rank start, cold cache (JIT compiles)", f"{max(cold):.0f} s", basis],
        ["engine_cache", "rank start, warm cache (restart)", f"{max(warm):.0f} s", basis],
        ["engine_cache", "warm / cold", f"{max(ratio):.2f}", "measured at scale 0.02, slept"],
    ]


def _ms(samples: Sequence[float]) -> str:
    if not samples:
        return "-"
    return f"{percentile(samples, 0.5) * 1000:.0f} / {percentile(samples, 0.99) * 1000:.0f} ms"


def _cluster() -> DevCluster:
    cluster = DevCluster()
    cluster.up(log=True)  # no-op when it runs; never stopped here: it is shared
    return cluster


def run_reconcile(options: Options) -> list[Row]:
    runs, objects = (5, 20) if options.quick else (20, 50)
    print(f"\n== reconcile: {runs} create/delete cycles, then {objects} unplaceable clusters")
    result = bench_reconcile.run(_cluster(), runs=runs, objects=objects)
    cycles, memory = result.cycles, result.memory
    basis = f"p50 / p99, {len(cycles)} cycles"
    return [
        ["reconcile", "apply -> 3 rank StatefulSets", _ms([c.statefulsets for c in cycles]), basis],
        ["reconcile", "apply -> InferenceCluster Ready", _ms([c.ready for c in cycles]), basis],
        ["reconcile", "apply -> ranks up, rank 0 probed", _ms([c.serving for c in cycles]), basis],
        ["reconcile", "delete -> StatefulSets, pods gone", _ms([c.deleted for c in cycles]), basis],
        [
            "reconcile",
            "operator VmRSS idle -> with N clusters",
            f"{memory.idle_after_runs[0] / 1024:.0f} -> {memory.loaded[0] / 1024:.0f} MiB",
            f"N = {objects}, none placeable",
        ],
        [
            "reconcile",
            f"status written for all {objects}",
            f"{memory.all_status * 1000:.0f} ms",
            "from the first one's creation",
        ],
    ]


def run_faults(options: Options) -> list[Row]:
    injections = 4 if options.quick else 20
    print(f"\n== faults: {injections} container exits, then {injections} pod deletions")
    result = bench_faults.run(_cluster(), injections=injections)
    rows: list[Row] = []
    for kind in bench_faults.KINDS:
        items = [i for i in result.injections if i.kind == kind]
        deleted, serving = [i.first_deleted for i in items], [i.serving for i in items]
        rows.append(["faults", f"{kind}: first pod deleted", _ms(deleted), "goal p99 < 1 s"])
        rows.append(["faults", f"{kind}: ranks Running+Ready", _ms(serving), "goal p99 < 3 s *"])
    if result.stopped_early:
        rows.append(["faults", "STOPPED EARLY", "-", result.stopped_early.splitlines()[0][:60]])
    return rows


def run_failover(options: Options) -> list[Row]:
    failovers = 2 if options.quick else 6
    print(f"\n== failover: {failovers} node failures, each moving the replica to the spare group")
    rounds = bench_failover.run(_cluster(), failovers=failovers)
    basis = f"p50 / p99, {len(rounds)} failovers"
    started = [r.started for r in rounds]
    simulator = [r.serving - r.started for r in rounds]
    return [
        ["failover", "node NotReady -> started on the spare (operator)", _ms(started), basis],
        ["failover", "+ simulator start -> ranks serving", _ms(simulator), basis],
        [
            "failover",
            "node NotReady -> serving on the spare",
            _ms([r.serving for r in rounds]),
            basis,
        ],
        ["failover", "quarantine decision", _ms([r.quarantined for r in rounds]), basis],
    ]


BENCHMARKS: dict[str, Callable[[Options], list[Row]]] = {
    "admission": run_admission,
    "front_door": run_front_door,
    "governance": run_governance,
    "fair_tokens": run_fair_tokens,
    "reconcile": run_reconcile,
    "engine_cache": run_engine_cache,
    "faults": run_faults,
    "failover": run_failover,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=list(BENCHMARKS),
        metavar="NAME",
        help=f"run only this one (repeatable): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument("--quick", action="store_true", help="fewer iterations (about 2 min)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(BENCHMARKS))
        return 0
    chosen = [name for name in BENCHMARKS if not args.only or name in args.only]
    options = Options(quick=args.quick)
    started = time.monotonic()
    needs_cluster = {"reconcile", "faults", "failover"} & set(chosen)
    facts = machine_facts(_cluster() if needs_cluster else None)
    print("sparkllm benchmarks" + (" (--quick)" if args.quick else ""))
    for key, value in facts.items():
        print(f"  {key}: {value}")
    summary: list[Row] = []
    durations: list[str] = []
    failed = False
    for name in chosen:
        began = time.monotonic()
        try:
            summary += BENCHMARKS[name](options)
        except Exception as exc:  # report it, run the others; the exit status says so
            failed = True
            summary.append([name, "FAILED", "-", f"{type(exc).__name__}: {exc}"[:80]])
            print(f"\n!! {name} failed: {type(exc).__name__}: {exc}", flush=True)
        durations.append(f"{name} {time.monotonic() - began:.0f} s")
    print_table(
        "summary" + (" (--quick)" if args.quick else ""),
        ["benchmark", "figure", "value", "basis / goal"],
        summary,
        notes=[
            "p50 / p99 unless stated; p99 is nearest-rank (the slowest sample below 100).",
            "Other processes shared these two cores: read differences, not absolutes.",
            *([BACKOFF_NOTE] if "faults" in chosen else []),
            f"machine: {facts['cores']} cores, {facts['python']}, Kubernetes "
            f"{facts.get('kubernetes', 'not used')}, load {facts['load average (1/5/15 min)']}",
            f"wall time: {', '.join(durations)}; total {time.monotonic() - started:.0f} s",
        ],
    )  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
