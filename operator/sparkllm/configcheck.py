"""ConfigApplied: does rank 0 run with the settings the spec asked for? Pure.

Why: the documents' first acceptance item is "the actual launch parameters match the
target; nothing silently ignored". A flag can be dropped by a wrapper script, overridden
by an image's entrypoint, renamed by an SGLang upgrade (``--cuda-graph-max-bs`` became
``--cuda-graph-max-bs-decode``), or resolved differently at start-up; the engine then
serves, answers 200, and is not the deployment that was planned. SGLang reports what it
runs with at ``GET /get_server_info`` (every ServerArgs field, flat), so the operator
compares that with the spec.

How, field by field: each row of the SGLang contract's table
(:data:`sparkllm.sglang_contract.fields.LAUNCH_FIELDS`) says where a setting comes from
in the spec and which server_info key reports it (the flag's ``dest`` in the pinned flag
table). The expected value is the spec's, typed as SGLang types that flag (a float flag
given ``2`` stores ``2.0``); the actual one is server_info's. Rank 0's command line is
not rendered and parsed back, so a renderer that emits a wrong value is caught rather
than agreed with. ``extraArgs`` are covered too: they are the user's own argv words, so
only they are parsed, with the pinned flag table. Not compared: ``api_key`` (a secret;
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
from sparkllm.sglang_contract.fields import LAUNCH_FIELDS, RankLaunch, coerce
from sparkllm.sglang_contract.flags import flag_spec, flag_table, parse_sglang_options, typed_value

# ServerArgs fields that hold secrets; their values are never copied anywhere.
SECRET_FIELDS: Final = ("api_key", "admin_api_key")
# Fields of server_info that may embed a secret (the key is on the command line).
SECRET_BEARING_FIELDS: Final = (*SECRET_FIELDS, "launch_command")
REDACTED: Final = "<redacted>"
RELATIVE_TOLERANCE: Final = 1e-6
EXTRA_ARGS_SOURCE: Final = "spec.engine.extraArgs"


@dataclass(frozen=True, slots=True)
class Expected:
    """One value rank 0 should run with, and where in the spec it comes from."""

    value: Any
    source: str


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


def expected_settings(
    spec: InferenceClusterSpec, *, rank0_address: str | None = None
) -> dict[str, Expected]:
    """{server_info key: expected value and its source} for rank 0 (secrets excluded)."""
    launch = RankLaunch(rank=0, rank0_address=rank0_address)
    wanted: dict[str, Expected] = {}
    for field in LAUNCH_FIELDS:
        value = field.value(spec, launch)
        if value is not None and not field.secret:
            wanted[field.server_info_key] = Expected(
                value=coerce(flag_spec(field.flag), value), source=field.source
            )
    by_dest = {flag.dest: flag for flag in flag_table().flags}
    for dest, text in parse_sglang_options(spec.engine.extra_args, lenient=True).items():
        wanted[dest] = Expected(value=typed_value(by_dest[dest], text), source=EXTRA_ARGS_SOURCE)
    return {key: item for key, item in wanted.items() if key not in SECRET_FIELDS}


def expected_server_args(
    spec: InferenceClusterSpec, *, rank0_address: str | None = None
) -> dict[str, Any]:
    """{ServerArgs field: value} rank 0 should report (secrets excluded)."""
    expected = expected_settings(spec, rank0_address=rank0_address)
    return {key: item.value for key, item in expected.items()}


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
    expected = expected_settings(spec, rank0_address=rank0_address)
    for field, item in sorted(expected.items()):
        reported = field in server_info
        actual = server_info.get(field)
        if reported and values_match(item.value, actual):
            continue
        mismatches.append(
            Mismatch(
                field=field,
                source=item.source,
                wanted=_scrub(item.value, secrets),
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
