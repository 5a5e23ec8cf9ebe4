"""What one simulated SGLang rank is configured to be, derived purely from its inputs.

Why a separate, pure step: startup validation is where SGLang refuses a bad deployment
(an unknown flag, a layer partition that does not fit), and the operator's tests depend on
the simulator refusing the same things with SGLang's words. Keeping it free of I/O lets
those rules be tested with plain asserts; the shell (``server``) only reads files and env.

SGLang behaviour mirrored here (0.5.23):

- ``SGLANG_PP_LAYER_PARTITION`` is read by ``get_pp_indices`` in
  ``sglang/srt/distributed/utils.py`` on every rank: a non-integer entry raises
  ``ValueError("Invalid partition string: …")``, a wrong count
  ``ValueError("len(partitions)=2 does not match pp_size=3.")``, a wrong sum
  ``ValueError("sum(partitions)=42 does not match num_hidden_layers=43.")``. With
  ``pp_size == 1`` the variable is ignored.
- ``served_model_name`` defaults to the model path (``arg_groups/serving_hook.py``) and
  must not contain ``:`` (``arg_groups/validation_hook.py``).
- Multi-node TP x PP (``arg_groups/validation_hook.py``, ``check_server_args``):
  ``(tp_size * pp_size) % nnodes != 0`` fails with ``AssertionError: tp_size must be
  divisible by number of nodes``. Which pipeline stage and tensor rank a node runs is
  ``_calculate_rank_ranges`` in ``srt/entrypoints/engine.py`` (:attr:`EngineConfig.pp_rank`,
  :attr:`EngineConfig.tp_rank`; with several per node, the node's first); the stage
  picks the layers. ``harness/tests/unit/test_sim_config.py`` runs the wheel's function
  and compares.

KV pool size: the product's one KV model (:mod:`sparkllm.plan.kv`) — the documents'
1,579,520 tokens per rank at mem_fraction_static 0.57, scaled in proportion to the
fraction given (the simulator knows no weight sizes; the capacity plan subtracts them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkllm.errors import SpecError
from sparkllm.plan.kv import DOCUMENTED_MEM_FRACTION, proportional_pool_tokens
from sparkllm.sglang_contract.fields import LAYER_PARTITION_ENV
from sparkllm.sglang_contract.flags import ParsedValue, flag_spec, server_args_with_defaults
from sparkllm_dev.sim.options import SimOptions

DEFAULT_CONTEXT_LENGTH = 32_768
DEFAULT_MAX_RUNNING_REQUESTS = 64


class EngineStartupError(SpecError):
    """SGLang would fail at startup; the message is SGLang's (e.g. ``ValueError: …``)."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """One rank's effective configuration, as the simulated engine serves it."""

    server_info_args: Mapping[str, Any]
    """Every ServerArgs field as /get_server_info reports it."""
    node_rank: int
    nnodes: int
    pp_size: int
    tp_size: int
    host: str
    port: int
    model_path: str
    served_model_name: str
    api_key: str | None
    enable_metrics: bool
    context_length: int
    max_running_requests: int
    max_total_num_tokens: int
    layer_partition: tuple[int, ...] | None
    num_hidden_layers: int | None
    sim: SimOptions

    @property
    def is_worker(self) -> bool:
        return self.node_rank > 0

    @property
    def _nnodes_per_pp_rank(self) -> int:
        return max(self.nnodes // self.pp_size, 1)

    @property
    def pp_rank(self) -> int:
        """This node's (first) pipeline stage, as SGLang's _calculate_rank_ranges."""
        return max(self.pp_size // self.nnodes, 1) * (self.node_rank // self._nnodes_per_pp_rank)

    @property
    def tp_rank(self) -> int:
        """This node's (first) tensor-parallel rank, as SGLang's _calculate_rank_ranges."""
        per_node = self.tp_size // self._nnodes_per_pp_rank
        return per_node * (self.node_rank % self._nnodes_per_pp_rank)

    def layers_of_this_rank(self) -> tuple[int, int] | None:
        """[start, end) layers this rank holds, computed like SGLang's get_pp_indices."""
        if self.num_hidden_layers is None:
            return None
        stage = self.pp_rank
        if self.layer_partition is not None:
            start = sum(self.layer_partition[:stage])
            return start, start + self.layer_partition[stage]
        base, remainder = divmod(self.num_hidden_layers, self.pp_size)
        if stage >= self.pp_size - remainder:
            start = stage * (base + 1) - (self.pp_size - remainder)
            return start, start + base + 1
        return stage * base, (stage + 1) * base


def parse_layer_partition(
    text: str | None, *, pp_size: int, num_hidden_layers: int | None
) -> tuple[int, ...] | None:
    """Validate ``SGLANG_PP_LAYER_PARTITION`` as SGLang does; None when unset or pp == 1.

    The sum is checked only when the model's layer count is known (config.json present).
    """
    if text is None or pp_size == 1:
        return None
    try:
        partitions = tuple(int(layer) for layer in text.split(","))
    except ValueError as exc:
        raise EngineStartupError(f"ValueError: Invalid partition string: {text}") from exc
    if len(partitions) != pp_size:
        raise EngineStartupError(
            f"ValueError: len(partitions)={len(partitions)} does not match pp_size={pp_size}."
        )
    if num_hidden_layers is not None and sum(partitions) != num_hidden_layers:
        raise EngineStartupError(
            f"ValueError: sum(partitions)={sum(partitions)} does not match "
            f"num_hidden_layers={num_hidden_layers}."
        )
    return partitions


def _effective_args(
    parsed: Mapping[str, ParsedValue], ignored_flags: tuple[str, ...]
) -> dict[str, Any]:
    ignored = {flag_spec(name).dest for name in ignored_flags}
    return server_args_with_defaults({k: v for k, v in parsed.items() if k not in ignored})


def _int_or(value: Any, fallback: int) -> int:
    return fallback if value is None else int(value)


def build_engine_config(
    *,
    parsed: Mapping[str, ParsedValue],
    sim: SimOptions,
    env: Mapping[str, str],
    model_config: Mapping[str, Any],
) -> EngineConfig:
    """The rank's configuration, or EngineStartupError where SGLang would not start.

    ``parsed`` comes from ``parse_sglang_argv``; ``model_config`` is the model's
    config.json (empty when absent); ``env`` is the rank's environment.
    """
    args = _effective_args(parsed, sim.ignored_flags)
    model_path = str(args["model_path"])
    if args.get("served_model_name") is None:
        args["served_model_name"] = model_path
    served_model_name = str(args["served_model_name"])
    if ":" in served_model_name:
        raise EngineStartupError(
            "AssertionError: served_model_name cannot contain a colon (':') character. "
            "The colon is reserved for the 'model:adapter' syntax used in LoRA adapter "
            f"specification. Invalid value: '{served_model_name}'"
        )
    pp_size = int(args["pp_size"])
    node_rank = int(args["node_rank"])
    nnodes, tp_size = int(args["nnodes"]), int(args["tp_size"])
    # An ignored parallelism flag (--sim-ignore-flag) stands for an engine that does not
    # apply it, to show ConfigApplied naming it; the layout is then not judged.
    judged = not {"nnodes", "tp_size", "pp_size"} & {flag_spec(f).dest for f in sim.ignored_flags}
    if judged and (tp_size * pp_size) % nnodes != 0:
        raise EngineStartupError("AssertionError: tp_size must be divisible by number of nodes")
    layers = model_config.get("num_hidden_layers")
    num_hidden_layers = layers if isinstance(layers, int) else None
    partition = parse_layer_partition(
        env.get(LAYER_PARTITION_ENV), pp_size=pp_size, num_hidden_layers=num_hidden_layers
    )
    window = model_config.get("max_position_embeddings")
    model_window = window if isinstance(window, int) else DEFAULT_CONTEXT_LENGTH
    mem_fraction = args.get("mem_fraction_static")
    fraction = DOCUMENTED_MEM_FRACTION if mem_fraction is None else float(mem_fraction)
    api_key = args.get("api_key")
    return EngineConfig(
        server_info_args=args,
        node_rank=node_rank,
        nnodes=nnodes,
        pp_size=pp_size,
        tp_size=tp_size,
        host=sim.host or str(args["host"]),
        port=sim.port if sim.port is not None else int(args["port"]),
        model_path=model_path,
        served_model_name=served_model_name,
        api_key=None if api_key is None else str(api_key),
        enable_metrics=bool(args["enable_metrics"]),
        context_length=_int_or(args.get("context_length"), model_window),
        max_running_requests=_int_or(
            args.get("max_running_requests"), DEFAULT_MAX_RUNNING_REQUESTS
        ),
        max_total_num_tokens=_int_or(
            args.get("max_total_tokens"), proportional_pool_tokens(fraction)
        ),
        layer_partition=partition,
        num_hidden_layers=num_hidden_layers,
        sim=sim,
    )
