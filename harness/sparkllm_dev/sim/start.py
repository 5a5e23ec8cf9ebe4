"""The SIMULATOR's start: SGLang's own start lines, at the moments SGLang prints them.

Why: the operator reads a starting rank's stage from its log (``sparkllm.sglang_contract.
start_log``); the dev cluster can only show that if the simulator prints the same lines in
the same order — "Load weight begin.", the safetensors progress bar shard by shard, "Load
weight end.", "Memory pool end.", DeepGEMM's JIT line, the CUDA graph capture, "The server
is fired up" — each ending in ``(simulated)`` so nobody mistakes it for a real engine.
The lines are the markers' own examples (checked against the wheel), with the figures
filled in.

And a cold start costs more than a warm one. :class:`StartModel` is a real-scale model,
multiplied by ``scale`` (0: no waiting, the default, so tests stay fast; a test that
watches a start passes e.g. 0.01). Figures (real seconds), and where they come from:

- weights: the seeds' 168.27 GB in 46 safetensors shards (SEEDS.md), split over the
  pipeline ranks (56.09 GB a rank at PP=3; every rank's progress bar counts all 46 files,
  as SGLang's loader iterates them all); ``load_seconds_per_gb`` 3.0 (an effective
  0.33 GB/s from NVMe, quantised layers post-processed: 168 s a rank);
- JIT kernels on a cold start (empty cache): 240 s — the part a persistent cache saves.
  SGLang's own DeepGEMM warning says a full pre-compile "may take a long time (typically
  10-20 mins)" (srt/layers/deep_gemm_wrapper/compile_utils.py); with a warm cache the same
  step loads what it compiled: 10 s;
- KV pool 5 s, CUDA graph capture up to decode batch 4 (the seeds' setting) 30 s, warm-up 5 s.

Cold: 168 + 5 + 240 + 30 + 5 = 448 s, 7.5 minutes, inside the 7-8 minutes a community
four-Spark SGLang set-up reports (issue 28) and under docs/exposure.md's 10-20 sizing;
warm: 218 s. The split between the phases is this model's assumption, fitted to that total.

The cache: ``SGLANG_CACHE_DIR`` from the rank's environment (the operator points it at the
node's per-digest cache, ``render/engine_cache.py``), which the dev cluster's harness maps
to a local directory (``SPARKLLM_SIM_CACHE_DIR``). A start whose cache holds this
simulator's JIT marker is warm; a cold one writes it after its JIT step, as Triton,
DeepGEMM and FlashInfer write their kernels. No cache directory: every start is cold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sparkllm.sglang_contract.start_log import FIRED_UP, SHARDS_DESC

SEEDS_WEIGHTS_GB: Final = 168.27
SEEDS_SHARDS: Final = 46
SIM_CACHE_DIR_ENV: Final = "SPARKLLM_SIM_CACHE_DIR"
SGLANG_CACHE_DIR_ENV: Final = "SGLANG_CACHE_DIR"
JIT_MARKER: Final = "sparkllm-sim/jit-kernels.done"
LABEL: Final = " (simulated)"


@dataclass(frozen=True, slots=True)
class StartModel:
    """Real-scale seconds of each start phase; ``scale`` multiplies them all."""

    scale: float = 0.0
    weights_gb: float | None = None  # this rank's; None: the seeds' weights / pp_size
    load_seconds_per_gb: float = 3.0
    shards: int = SEEDS_SHARDS
    kv_seconds: float = 5.0
    jit_cold_seconds: float = 240.0
    jit_warm_seconds: float = 10.0
    graph_seconds: float = 30.0
    warmup_seconds: float = 5.0

    def rank_weights_gb(self, pp_size: int) -> float:
        return self.weights_gb if self.weights_gb is not None else SEEDS_WEIGHTS_GB / pp_size

    def seconds(self, *, pp_size: int, warm: bool) -> float:
        """The whole start at real scale (before ``scale``)."""
        jit = self.jit_warm_seconds if warm else self.jit_cold_seconds
        load = self.rank_weights_gb(pp_size) * self.load_seconds_per_gb
        return load + self.kv_seconds + jit + self.graph_seconds + self.warmup_seconds


def cache_dir(env: Mapping[str, str]) -> Path | None:
    """Where this rank's JIT caches live on this (simulated) node, if anywhere."""
    local = env.get(SIM_CACHE_DIR_ENV) or env.get(SGLANG_CACHE_DIR_ENV)
    return Path(local) if local else None


def is_warm(cache: Path | None) -> bool:
    return cache is not None and (cache / JIT_MARKER).is_file()


def simulate_start(
    model: StartModel,
    *,
    pp_size: int,
    rank: int,
    cache: Path | None,
    log: logging.Logger,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Print SGLang's start lines for one rank, waiting the model's (scaled) time between
    them; True when the JIT step found a warm cache. Rank 0's "fired up" line comes later,
    once it listens (:func:`fired_up`)."""
    warm = is_warm(cache)
    gb = model.rank_weights_gb(pp_size)
    avail = 119.42

    def wait(seconds: float) -> None:
        if model.scale > 0:
            sleep(seconds * model.scale)

    log.info("Load weight begin. avail mem=%.2f GB%s", avail, LABEL)
    per_shard = gb * model.load_seconds_per_gb / max(1, model.shards)
    for done in range(1, model.shards + 1):
        wait(per_shard)
        percent = round(100 * done / model.shards)
        log.info(
            "%s: %3d%% Completed | %d/%d [simulated]%s",
            SHARDS_DESC, percent, done, model.shards, LABEL,
        )  # fmt: skip
    log.info(
        "Load weight end. elapsed=%.2f s, type=DeepseekV4ForCausalLM, avail mem=%.2f GB, "
        "mem usage=%.2f GB.%s",
        gb * model.load_seconds_per_gb, avail - gb, gb, LABEL,
    )  # fmt: skip
    wait(model.kv_seconds)
    log.info("Memory pool end. avail mem=%.2f GB%s", 9.87, LABEL)
    log.info(
        "Try DeepGEMM JIT Compiling for <GEMM_NT_F8F8BF16> N=4096, K=7168, num_groups=1 with "
        "all Ms.%s%s",
        " (cache hit)" if warm else " (cold: compiling)", LABEL,
    )  # fmt: skip
    wait(model.jit_warm_seconds if warm else model.jit_cold_seconds)
    if cache is not None and not warm:
        marker = cache / JIT_MARKER
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"compiled by a simulated rank {rank} start\n")
    log.info(
        "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
        "avail mem=9.80 GB%s",
        LABEL,
    )
    wait(model.graph_seconds)
    log.info(
        "Capture target decode CUDA graph end. bs=[1, 2, 3, 4], elapsed=%.2f s, "
        "mem usage=0.41 GB, avail mem=9.38 GB.%s",
        model.graph_seconds, LABEL,
    )  # fmt: skip
    if rank == 0:
        wait(model.warmup_seconds)
    return warm


def fired_up(log: logging.Logger) -> None:
    """Rank 0's last start line, once it serves (SGLang's http_server.py)."""
    log.info("%s%s", FIRED_UP, LABEL)
