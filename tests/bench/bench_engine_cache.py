"""Benchmark (issue 28 item 6): a restart with warm vs cold engine caches, on the
simulator's start model.

Not a pytest test: numbers, never a verdict. Run from the repository root (no cluster):

    .venv/bin/python -m tests.bench.bench_engine_cache [--rounds 2] [--scale 0.02]

The simulator's own start (``sparkllm_dev.sim.start.simulate_start``: SGLang's start lines
with the model's waits between them, really slept) runs for rank 0 of a PP=3 replica with
a cache directory, as on a node with ``engineCache.root``: the first start of each round
finds it empty (cold: it compiles, 240 s at real scale, and leaves its marker), the second
finds the marker (warm: 10 s). Printed per round: each start's wall time at the run's
scale and scaled back to real seconds (divided by the scale), and the model's own figures.
What the model assumes and where its figures come from: sim/start.py's docstring; the
operator's part (pod creation, init containers, the log reads) is not in these numbers —
the cluster test tests/integration/test_start_stages.py sees both together.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sparkllm_dev.sim.start import StartModel, simulate_start


def _timed(model: StartModel, cache: Path) -> tuple[float, bool]:
    log = logging.getLogger("bench-engine-cache")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    began = time.perf_counter()
    warm = simulate_start(model, pp_size=3, rank=0, cache=cache, log=log)
    return time.perf_counter() - began, warm


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scale", type=float, default=0.02)
    args = parser.parse_args(argv)
    model = StartModel(scale=args.scale)
    print(
        f"model (real seconds): cold {model.seconds(pp_size=3, warm=False):.0f} s, "
        f"warm {model.seconds(pp_size=3, warm=True):.0f} s; run at scale {args.scale:g}"
    )
    for round_ in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="engine-cache-") as scratch:
            cache = Path(scratch)
            cold, cold_hit = _timed(model, cache)
            warm, warm_hit = _timed(model, cache)
        assert not cold_hit
        assert warm_hit
        print(
            f"ROUND {round_} cold {cold:.2f} s ({cold / args.scale:.0f} s real) "
            f"warm {warm:.2f} s ({warm / args.scale:.0f} s real) ratio {warm / cold:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
