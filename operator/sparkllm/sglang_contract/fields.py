"""The one table: each launch setting's source in the spec, its SGLang flag, its server_info key.

Why one table: the same fact — "``spec.engine.memFractionStatic`` is SGLang's
``--mem-fraction-static``, reported back as ``mem_fraction_static``" — is needed by the
API (which flags ``extraArgs`` may not set), by the renderer (which words to put on each
rank's command line) and by the ConfigApplied check (which ``/get_server_info`` key to
compare with which spec value, and which spec path to name when they differ). Written
once per consumer, the copies drift: an SGLang upgrade renames a flag
(``--cuda-graph-max-bs`` became ``--cuda-graph-max-bs-decode`` in 0.5.x) and one copy
follows while the others do not. Here every row names its flag once; the server_info
key is the flag's argparse ``dest`` from the pinned flag table
(:mod:`sparkllm.sglang_contract.flags`), never typed again, and a unit test checks every
flag exists in that table.

Also here, because they are facts of the pinned SGLang the API publishes: the choices of
``--tool-call-parser`` and ``--reasoning-parser`` (from the flag table, so the CRD's
enums are SGLang's own lists) and the engine's HTTP port.

Pure: imports nothing of the API at run time (the API imports this module).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from sparkllm.sglang_contract.flags import (
    FlagSpec,
    flag_spec,
    parse_human_readable_int,
    switch_value,
)

if TYPE_CHECKING:
    from sparkllm.api.spec import InferenceClusterSpec

# Rank 0 serves SGLang's HTTP API here (host network, so it is a port on the node).
ENGINE_HTTP_PORT: Final = 30000
# Every address of the node: pods on the host network must be reachable from the router.
ENGINE_LISTEN_HOST: Final = "0.0.0.0"
# The CUDA-graph decode batch flag of the pinned SGLang (0.5.23): `--cuda-graph-max-bs`
# became ambiguous there (it prefixes -decode and -prefill); see sglang_contract/flags.py.
CUDA_GRAPH_DECODE_FLAG: Final = "--cuda-graph-max-bs-decode"
# The layer split has no flag: SGLang reads it from this variable (get_pp_indices).
LAYER_PARTITION_ENV: Final = "SGLANG_PP_LAYER_PARTITION"
# Rank 0's engine key, filled by a secretKeyRef. The engine launcher
# (command.ENGINE_LAUNCHER_CODE) moves it from the environment into SGLang's sys.argv
# inside the process: it is never on a command line (/proc/<pid>/cmdline, the pod spec).
ENGINE_API_KEY_ENV: Final = "SPARKLLM_ENGINE_API_KEY"

TOOL_CALL_PARSERS: Final = flag_spec("--tool-call-parser").choices or ()
REASONING_PARSERS: Final = flag_spec("--reasoning-parser").choices or ()
if TYPE_CHECKING:
    ToolCallParser = str
    ReasoningParser = str
else:  # enums in the CRD: the choices SGLang's argparse accepts, in its order
    ToolCallParser = Literal[TOOL_CALL_PARSERS]
    ReasoningParser = Literal[REASONING_PARSERS]


LaunchValue = str | int | float | bool


def coerce(spec: FlagSpec, value: LaunchValue) -> Any:
    """A value the operator sets (a spec's int, float or text) as SGLang stores it for this
    flag: a float for a ``float`` flag (``2`` -> ``2.0``), an int for an integer one, the
    switch's value for a switch, else the text. What ConfigApplied expects in server_info."""
    if not spec.takes_value:
        return switch_value(spec, negated=False)
    if spec.value_type == "human_readable_int" and isinstance(value, str):
        return parse_human_readable_int(value)
    if spec.value_type == "float":
        return float(value)
    if spec.value_type in ("int", "human_readable_int"):
        return int(value)
    return value if isinstance(value, str) else str(value)


@dataclass(frozen=True, slots=True)
class RankLaunch:
    """What besides the spec decides one rank's command line."""

    rank: int
    """The node rank (``--node-rank``): pipeline stage x tensorParallel + tensor rank."""
    rank0_address: str | None
    """Rank 0's node address (for ``--dist-init-addr``); None when not known."""


@dataclass(frozen=True, slots=True)
class LaunchField:
    """One setting the operator puts on every rank's command line."""

    flag: str
    """SGLang's canonical spelling, e.g. ``--mem-fraction-static``."""
    source: str
    """Where the value comes from: a spec path, or ``operator: ...`` for the operator's own."""
    value: Callable[[InferenceClusterSpec, RankLaunch], LaunchValue | None]
    """The value for a rank, as Python holds it (0.57, 12288, "deepseekv4"); None: not set."""
    secret: bool = False
    """A secret: never on the command line (the launcher adds it), never compared."""

    @property
    def server_info_key(self) -> str:
        """The ServerArgs field SGLang sets from the flag and reports in server_info."""
        return flag_spec(self.flag).dest

    @property
    def spellings(self) -> tuple[str, ...]:
        """The flag and its aliases in the pinned SGLang (``--pp-size``,
        ``--pipeline-parallel-size``)."""
        spec = flag_spec(self.flag)
        return (spec.name, *spec.aliases)


def rank_position(node_rank: int, *, tp_size: int, pp_size: int) -> tuple[int, int]:
    """(pipeline stage, tensor rank) of ``node_rank`` with one GPU per node.

    SGLang 0.5.23's ``_calculate_rank_ranges`` (``srt/entrypoints/engine.py``) with
    ``nnodes = tp_size x pp_size``: ``nnodes_per_pp_rank = nnodes // pp_size = tp_size``,
    so the stage is ``node_rank // tp_size`` and the tensor rank ``node_rank % tp_size``.
    ``tests/unit/test_layouts.py`` runs the wheel's own function and compares.
    """
    if not 0 <= node_rank < tp_size * pp_size:
        raise ValueError(f"node rank {node_rank} outside 0..{tp_size * pp_size - 1}")
    return node_rank // tp_size, node_rank % tp_size


def _dist_init_addr(spec: InferenceClusterSpec, launch: RankLaunch) -> str | None:
    if launch.rank0_address is None:
        return None
    return f"{launch.rank0_address}:{spec.network.dist_init_port}"


def _in_the_process(_spec: InferenceClusterSpec, _launch: RankLaunch) -> None:
    """Not on the command line: ENGINE_LAUNCHER_CODE appends ``--api-key=<key>`` to
    SGLang's ``sys.argv`` from ENGINE_API_KEY_ENV, on rank 0, whose env has it."""


# In command-line order. Every rank gets every row; only --node-rank differs between ranks.
# One GPU per DGX Spark, so --nnodes is --tp-size x --pp-size and SGLang 0.5.23
# (entrypoints/engine.py, _calculate_rank_ranges) gives node rank n tensor rank
# n % tp-size and pipeline stage n // tp-size; rank 0 serves HTTP, every other node runs
# the dummy health server. All ranks meet at rank 0's --dist-init-addr.
LAUNCH_FIELDS: Final = (
    LaunchField("--model-path", "spec.model.path", lambda s, _: s.model.path),
    LaunchField("--served-model-name", "spec.model.servedName", lambda s, _: s.model.served_name),
    LaunchField(
        "--nnodes",
        "spec.engine.tensorParallel x spec.engine.pipelineParallel",
        lambda s, _: s.engine.nodes_per_replica,
    ),
    LaunchField("--node-rank", "operator: the node's rank", lambda _, launch: launch.rank),
    LaunchField("--dist-init-addr", "spec.network.distInitPort", _dist_init_addr),
    LaunchField(
        "--pp-size", "spec.engine.pipelineParallel", lambda s, _: s.engine.pipeline_parallel
    ),
    LaunchField("--tp-size", "spec.engine.tensorParallel", lambda s, _: s.engine.tensor_parallel),
    LaunchField(
        "--mem-fraction-static",
        "spec.engine.memFractionStatic",
        lambda s, _: s.engine.mem_fraction_static,
    ),
    LaunchField(
        "--context-length", "spec.engine.contextLength", lambda s, _: s.engine.context_length
    ),
    LaunchField(
        "--chunked-prefill-size",
        "spec.engine.chunkedPrefillSize",
        lambda s, _: s.engine.chunked_prefill_size,
    ),
    LaunchField(
        CUDA_GRAPH_DECODE_FLAG,
        "spec.engine.cudaGraphMaxBatchSize",
        lambda s, _: s.engine.cuda_graph_max_batch_size,
    ),
    LaunchField(
        "--max-running-requests",
        "spec.engine.maxRunningRequests",
        lambda s, _: s.engine.max_running_requests,
    ),
    LaunchField("--host", "operator: listen on all addresses", lambda *_: ENGINE_LISTEN_HOST),
    LaunchField("--port", "operator: engine port", lambda *_: ENGINE_HTTP_PORT),
    LaunchField("--enable-metrics", "operator: metrics on", lambda *_: True),
    LaunchField(
        "--tool-call-parser", "spec.engine.toolCallParser", lambda s, _: s.engine.tool_call_parser
    ),
    LaunchField(
        "--reasoning-parser", "spec.engine.reasoningParser", lambda s, _: s.engine.reasoning_parser
    ),
    LaunchField("--api-key", "spec.engine.apiKeySecretRef", _in_the_process, secret=True),
)

# Flags (with their aliases) that extraArgs may not set: a second, conflicting --pp-size
# would silently win or lose by position. SGLang's argparse accepts unique abbreviations
# (--mem-frac means --mem-fraction-static), so the API also refuses a prefix of any of
# these; no other SGLang flag is such a prefix (tests/unit/test_api_engine.py checks it).
OPERATOR_OWNED_FLAGS: Final = tuple(
    spelling for field in LAUNCH_FIELDS for spelling in field.spellings
)

# Flags extraArgs may never set, whatever the spec: with a custom logit processor enabled,
# any user could send code for the engine to run (``custom_logit_processor``).
REFUSED_FLAGS: Final = ("--enable-custom-logit-processor",)


__all__ = [
    "CUDA_GRAPH_DECODE_FLAG",
    "ENGINE_API_KEY_ENV",
    "ENGINE_HTTP_PORT",
    "ENGINE_LISTEN_HOST",
    "LAUNCH_FIELDS",
    "LAYER_PARTITION_ENV",
    "OPERATOR_OWNED_FLAGS",
    "REASONING_PARSERS",
    "REFUSED_FLAGS",
    "TOOL_CALL_PARSERS",
    "LaunchField",
    "LaunchValue",
    "RankLaunch",
    "ReasoningParser",
    "ToolCallParser",
    "coerce",
    "rank_position",
]
