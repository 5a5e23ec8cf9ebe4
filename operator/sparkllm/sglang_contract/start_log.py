"""A rank's start stage, read from SGLang's own log lines. Pure.

Why from the log: a starting rank says nothing else. SGLang opens its HTTP port only at
the end of a start (rank 0) or never (ranks > 0: a dummy health server that always
answers 200), so for the 7-20 minutes a DeepSeek V4 start takes (docs/exposure.md) the
only thing that moves is the engine's log: weights begin, shard after shard, end; the KV
pool; JIT kernels and CUDA graph capture; "fired up". The operator reads the starting
rank pods' recent lines through the API server (``reconcile/start_logs.py`` says why not
a probe) and :func:`read_start_log` turns them into a stage.

Every marker below is a statement of the pinned wheel (SGLang 0.5.23), named with its
file: ``tests/unit/test_start_log_markers.py`` reads those files, renders each logger
call's message (an f-string's values replaced by sample text) and each progress bar's
``desc`` with SGLang's ``BAR_FORMAT``, and checks that the marker matches it — so a new
pin that rewords a line fails there, not silently in the field. The SGLang simulator
prints the same statements at the same moments (``sparkllm_dev/sim/start.py``), labelled
simulated.

What comes before the engine process (the image pull, the network preflight, the model
check, the launch check) is the pod's own state, read from its container statuses
(``reconcile/decide/start_stages.py``); this module is only the engine's part.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Literal


class StartStage(StrEnum):
    """Where a rank's start is, in the order a start passes them."""

    PENDING = "Pending"  # not scheduled, or scheduled and nothing created yet
    PULLING_IMAGE = "PullingImage"  # a container waits on its image (ContainerCreating, pulls)
    PREFLIGHT = "Preflight"  # the network preflight's init containers run
    MODEL_CHECK = "ModelCheck"  # verify-model reads the model copy
    LAUNCH_CHECK = "LaunchCheck"  # the image's SGLang judges the command line
    ENGINE_STARTING = "EngineStarting"  # the engine runs; no stage line yet
    LOADING_WEIGHTS = "LoadingWeights"  # "Load weight begin." .. "Load weight end."
    ALLOCATING_KV_CACHE = "AllocatingKVCache"  # after the weights, before "Memory pool end."
    KERNEL_CAPTURE = "KernelCapture"  # JIT kernels (DeepGEMM, torch compile), CUDA graphs
    WARMING_UP = "WarmingUp"  # graphs captured; rank 0 warms up before "fired up"
    READY = "Ready"  # rank 0: "The server is fired up"; a rank > 0: its graphs captured


ORDER: Final = tuple(StartStage)


@dataclass(frozen=True)
class LogMarker:
    """One SGLang statement that moves a rank to ``stage`` (``pattern`` finds it in a line).

    ``source`` is the wheel file (under ``sglang/``) that writes it; ``kind`` says whether
    it is a logger call (its message) or a tqdm progress bar (its ``desc``, formatted
    with SGLang's ``BAR_FORMAT``); ``example`` is a line as the wheel writes it.
    """

    stage: StartStage
    pattern: re.Pattern[str]
    source: str
    kind: Literal["logger", "tqdm"]
    example: str


_MODEL_RUNNER: Final = "srt/model_executor/model_runner.py"
_GRAPH_SETUP: Final = "srt/model_executor/model_runner_components/cuda_graph_setup.py"
SHARDS_DESC: Final = "Loading safetensors checkpoint shards"
# SGLang's BAR_FORMAT (srt/utils/common.py): "{desc}: {percentage:3.0f}% Completed |
# {n_fmt}/{total_fmt} [...]": the shard count is the n/N after "Completed |".
SHARDS: Final = re.compile(re.escape(SHARDS_DESC) + r":\s*\d+% Completed \| (\d+)/(\d+)")
FIRED_UP: Final = "The server is fired up and ready to roll!"

MARKERS: Final[tuple[LogMarker, ...]] = (
    LogMarker(
        StartStage.LOADING_WEIGHTS, re.compile(r"Load weight begin\. "), _MODEL_RUNNER,
        "logger", "Load weight begin. avail mem=119.42 GB",
    ),
    LogMarker(
        StartStage.LOADING_WEIGHTS, SHARDS, "srt/model_loader/weight_utils.py", "tqdm",
        f"{SHARDS_DESC}:  26% Completed | 12/46 [00:41<01:37,  3.42s/it]",
    ),
    LogMarker(
        StartStage.ALLOCATING_KV_CACHE, re.compile(r"Load weight end\. "), _MODEL_RUNNER,
        "logger", "Load weight end. elapsed=168.31 s, type=DeepseekV4ForCausalLM, "
        "avail mem=63.10 GB, mem usage=56.32 GB.",
    ),
    LogMarker(
        StartStage.KERNEL_CAPTURE, re.compile(r"Memory pool end\. "),
        "srt/mem_cache/kv_cache_configurator.py", "logger", "Memory pool end. avail mem=9.87 GB",
    ),
    LogMarker(
        StartStage.KERNEL_CAPTURE, re.compile(r"Try DeepGEMM JIT Compiling for "),
        "srt/layers/deep_gemm_wrapper/compile_utils.py", "logger",
        "Try DeepGEMM JIT Compiling for <GEMM_NT_F8F8BF16> N=4096, K=7168, num_groups=1 "
        "with all Ms.",
    ),
    LogMarker(
        StartStage.KERNEL_CAPTURE, re.compile(r"Capture [\w ]+ begin\. backend="), _GRAPH_SETUP,
        "logger", "Capture target decode CUDA graph begin. backend=full, "
        "num_tokens_per_req=1, avail mem=9.80 GB",
    ),
    LogMarker(
        StartStage.KERNEL_CAPTURE, re.compile(r"Capturing batches \(bs="),
        "srt/model_executor/runner/decode_cuda_graph_runner.py", "tqdm",
        "Capturing batches (bs=4 avail_mem=9.79 GB): 100%|##########| 4/4 [00:03<00:00]",
    ),
    LogMarker(
        StartStage.WARMING_UP, re.compile(r"Capture [\w ]+ end\. (bs|elapsed)="), _GRAPH_SETUP,
        "logger", "Capture target decode CUDA graph end. bs=[1, 2, 3, 4], elapsed=31.02 s, "
        "mem usage=0.41 GB, avail mem=9.38 GB.",
    ),
    LogMarker(
        StartStage.READY, re.compile(re.escape(FIRED_UP)), "srt/entrypoints/http_server.py",
        "logger", FIRED_UP,
    ),
)  # fmt: skip


@dataclass(frozen=True)
class LogReading:
    """What a rank's log says: its stage, and the shards loaded of how many (when seen)."""

    stage: StartStage
    shards_loaded: int | None = None
    shards_total: int | None = None

    @property
    def shards(self) -> str | None:
        """``12/46`` while the weights load (None when no progress line was seen)."""
        if self.shards_loaded is None or self.shards_total is None:
            return None
        return f"{self.shards_loaded}/{self.shards_total}"


def _split(lines: Iterable[str]) -> Iterable[str]:
    """Lines, with tqdm's carriage-return updates as lines of their own."""
    for line in lines:
        yield from line.split("\r")


def read_start_log(lines: Iterable[str], *, rank: int) -> LogReading | None:
    """The stage the LAST marker in ``lines`` says (None: no marker); a rank > 0 is Ready
    once its graphs are captured (it serves nothing, so it logs no "fired up").

    Later lines win: a restart's log appended to the last one's (the dev cluster keeps
    one file) reads as the new start. Shards count only within the current weight load.
    """
    reading: LogReading | None = None
    for line in _split(lines):
        for marker in MARKERS:
            found = marker.pattern.search(line)
            if found is None:
                continue
            stage = marker.stage
            if stage is StartStage.WARMING_UP and rank > 0:
                stage = StartStage.READY
            if marker.pattern is SHARDS:
                reading = LogReading(stage, int(found.group(1)), int(found.group(2)))
            elif reading is not None and stage is reading.stage:
                pass  # same stage: keep the shard count read so far
            else:
                reading = LogReading(stage)
            break
    return reading
