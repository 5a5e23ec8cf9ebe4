"""ConfigApplied: does rank 0 run with the settings the spec asked for? Pure.

Why: the documents' first acceptance item is "the actual launch parameters match the
target; nothing silently ignored". A flag can be dropped by a wrapper script, overridden
by an image's entrypoint, renamed by an SGLang upgrade (``--cuda-graph-max-bs`` became
``--cuda-graph-max-bs-decode``), or resolved differently at start-up; the engine then
serves, answers 200, and is not the deployment that was planned. SGLang reports what it
runs with at ``GET /get_server_info`` (every ServerArgs field, flat), so the operator
compares that with what it rendered.

What is compared: exactly the values the operator puts on rank 0's command line — it
renders the command with :func:`sparkllm.render.engine.engine_args` and parses it with
the pinned SGLang flag table, so ``extraArgs`` are covered too and the two can never
disagree about a key name (the CUDA-graph decode batch is reported as
``cuda_graph_max_bs_decode`` by SGLang 0.5.23). Not compared: ``api_key`` (a secret;
its value never leaves this module), ``dist_init_addr`` (a node address, known only at
reconcile time; pass ``rank0_address`` to include it), and the layer partition (an
environment variable SGLang does not report). Floats compare with a relative tolerance
of 1e-6, so 0.57 reported as 0.5700000000000001 matches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sparkllm.api import InferenceClusterSpec
from sparkllm.render.engine import engine_args
from sparkllm.render.sglang_flags import flag_table, parse_sglang_argv, typed_value

# ServerArgs fields that hold secrets; their values are never copied anywhere.
SECRET_FIELDS: Final = ("api_key", "admin_api_key")
# Fields of server_info that may embed a secret (the key is on the command line).
SECRET_BEARING_FIELDS: Final = (*SECRET_FIELDS, "launch_command")
REDACTED: Final = "<redacted>"
RELATIVE_TOLERANCE: Final = 1e-6
_PLACEHOLDER_ADDRESS: Final = "0.0.0.0"

SPEC_PATHS: Final[Mapping[str, str]] = {
    "model_path": "spec.model.path",
    "served_model_name": "spec.model.servedName",
    "nnodes": "spec.engine.pipelineParallel",
    "pp_size": "spec.engine.pipelineParallel",
    "tp_size": "spec.engine.tensorParallel",
    "mem_fraction_static": "spec.engine.memFractionStatic",
    "context_length": "spec.engine.contextLength",
    "chunked_prefill_size": "spec.engine.chunkedPrefillSize",
    "cuda_graph_max_bs_decode": "spec.engine.cudaGraphMaxBatchSize",
    "max_running_requests": "spec.engine.maxRunningRequests",
    "tool_call_parser": "spec.engine.toolCallParser",
    "reasoning_parser": "spec.engine.reasoningParser",
    "dist_init_addr": "spec.network.distInitPort",
    "node_rank": "operator: rank 0",
    "host": "operator: listen on all addresses",
    "port": "operator: engine port",
    "enable_metrics": "operator: metrics on",
}


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One setting rank 0 does not run with: the field, what the spec wants, what it runs."""

    field: str
    """The ServerArgs field as /get_server_info names it, e.g. ``mem_fraction_static``."""
    source: str
    """Where the wanted value comes from, e.g. ``spec.engine.memFractionStatic``."""
    wanted: Any
    actual: Any
    reported: bool = True
    """False when the engine does not report the field at all."""

    def message(self) -> str:
        got = f"engine reports {self.actual!r}" if self.reported else "engine does not report it"
        return f"{self.field}: wanted {self.wanted!r} ({self.source}), {got}"


def expected_server_args(
    spec: InferenceClusterSpec, *, rank0_address: str | None = None
) -> dict[str, Any]:
    """{ServerArgs field: value} that rank 0's rendered command sets (secrets excluded)."""
    argv = engine_args(spec, rank=0, rank0_ip=rank0_address or _PLACEHOLDER_ADDRESS, api_key=True)
    specs = {spec.dest: spec for spec in flag_table().flags}
    wanted = {
        dest: typed_value(specs[dest], value) for dest, value in parse_sglang_argv(argv).items()
    }
    excluded = {*SECRET_FIELDS, *(("dist_init_addr",) if rank0_address is None else ())}
    return {field: value for field, value in wanted.items() if field not in excluded}


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def values_match(wanted: Any, actual: Any) -> bool:
    """Equality with numeric tolerance (int/float/numeric string); booleans stay strict."""
    if isinstance(wanted, bool) or isinstance(actual, bool):
        return wanted is actual
    if isinstance(wanted, Sequence) and not isinstance(wanted, str):
        return (
            isinstance(actual, Sequence)
            and not isinstance(actual, str)
            and len(wanted) == len(actual)
            and all(values_match(w, a) for w, a in zip(wanted, actual, strict=True))
        )
    wanted_number, actual_number = _as_number(wanted), _as_number(actual)
    if wanted_number is not None and actual_number is not None and not isinstance(wanted, str):
        return math.isclose(wanted_number, actual_number, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-12)
    return bool(wanted == actual)


def _secrets(server_info: Mapping[str, Any]) -> list[str]:
    values = (server_info.get(field) for field in SECRET_FIELDS)
    return [value for value in values if isinstance(value, str) and value]


def _scrub(value: Any, secrets: Sequence[str]) -> Any:
    if isinstance(value, str) and any(secret in value for secret in secrets):
        return REDACTED
    if isinstance(value, list | tuple):
        return [_scrub(item, secrets) for item in value]
    return value


def redact_server_info(server_info: Mapping[str, Any]) -> dict[str, Any]:
    """server_info without its secrets, safe to log (``launch_command`` carries the key)."""
    secrets = _secrets(server_info)
    return {
        key: (REDACTED if key in SECRET_BEARING_FIELDS else _scrub(value, secrets))
        for key, value in server_info.items()
    }


def compare_server_info(
    spec: InferenceClusterSpec,
    server_info: Mapping[str, Any],
    *,
    rank0_address: str | None = None,
) -> list[Mismatch]:
    """Every operator-set value rank 0 does not run with, in field order; pure.

    ``server_info`` is rank 0's ``GET /get_server_info`` body. The ``api_key`` value
    (and anything containing it) never appears in a Mismatch.
    """
    secrets = _secrets(server_info)
    mismatches = []
    for field, wanted in sorted(expected_server_args(spec, rank0_address=rank0_address).items()):
        reported = field in server_info
        actual = server_info.get(field)
        if reported and values_match(wanted, actual):
            continue
        mismatches.append(
            Mismatch(
                field=field,
                source=SPEC_PATHS.get(field, "spec.engine.extraArgs"),
                wanted=_scrub(wanted, secrets),
                actual=_scrub(actual, secrets),
                reported=reported,
            )
        )
    return mismatches


def describe_mismatches(mismatches: Sequence[Mismatch]) -> str:
    """One line for the ConfigApplied condition message."""
    if not mismatches:
        return "rank 0 runs with every setting the spec asks for"
    return "rank 0 does not run with the spec's settings: " + "; ".join(
        mismatch.message() for mismatch in mismatches
    )
