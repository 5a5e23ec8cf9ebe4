"""``status.replicaStatuses[].start``: a start you can watch, rank by rank.

Why: a DeepSeek V4 start takes many minutes (weights, JIT kernels, CUDA graph capture)
and used to read "ranks starting" throughout. While a replica starts, each rank's stage
is written here — what its pod is doing before the engine (image, preflight, model check,
launch check), then what SGLang's own log lines say (``sglang_contract/start_log.py``:
weights with shard counts, KV cache, kernel/graph capture, warm-up, ready) — with when
the stage began, the time since the start against ``startupGraceSeconds``, and this
object's last start's duration as the estimate. ``status.start`` is the one-word summary
the ``Start`` printer column shows (``kubectl get icl``, ``-w``).
"""

from datetime import datetime
from typing import Annotated

from pydantic import Field, StringConstraints

from sparkllm.api.rules import ApiModel
from sparkllm.sglang_contract.start_log import StartStage

StageName = Annotated[str, StringConstraints(max_length=64)]


class RankStart(ApiModel):
    """Where one rank's start is."""

    rank: int = Field(ge=0, description="rank is the pipeline rank, from 0.")
    stage: StageName = Field(
        description="stage is where the rank's start is: "
        + ", ".join(stage.value for stage in StartStage)
        + " (docs/operator.md, 'Watching a start')."
    )
    shards: Annotated[str, StringConstraints(max_length=32)] | None = Field(
        default=None,
        description="shards is the weight shards loaded of how many (e.g. 12/46), from "
        "SGLang's safetensors progress bar, while the weights load.",
    )
    since: datetime | None = Field(
        default=None, description="since is when the rank entered this stage (RFC 3339)."
    )


class ReplicaStart(ApiModel):
    """The start of a replica's current generation, while it is not serving yet."""

    started_at: datetime = Field(
        description="startedAt is when this generation's first rank pod was created."
    )
    elapsed_seconds: int = Field(
        ge=0, description="elapsedSeconds is the time since startedAt at the last pass."
    )
    grace_seconds: int = Field(
        ge=0,
        description="graceSeconds is restartPolicy.startupGraceSeconds: past it, a start "
        "that is not serving is restarted (StartupTimeout).",
    )
    estimate_seconds: int | None = Field(
        default=None,
        ge=0,
        description="estimateSeconds is how long this replica's last completed start took "
        "(replicaStatuses[].lastStartSeconds); absent before the first one.",
    )
    ranks: tuple[RankStart, ...] = Field(
        default=(), description="ranks is each rank's stage, in rank order."
    )
