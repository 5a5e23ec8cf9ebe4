"""Engine settings the front door must know about: each is owned, mirrored, refused or allowed.

Why: the front door's promise — no prompt over the cap ever reaches the engine — holds
only if it counts what the engine renders. SGLang reads several settings while it builds
the prompt (the chat template, default template kwargs, the tokenizer, the parsers, the
model config that picks DeepSeek's encoder...). A setting the gateway does not know
about, passed through ``spec.engine.extraArgs`` or ``env``, silently breaks the exact
count (issue 25: ``--default-chat-template-kwargs '{"thinking": true}'`` let a 10,383
token prompt in under an 8,192 cap). The same goes for settings that open another
listener on the node's address (ranks run on the host network), write prompts to logs or
files, or put a secret in the pod spec.

Which settings those are is not typed here: ``guarded_fields.json`` is extracted from the
pinned wheel's own code (``sparkllm_dev.flags.guarded``: every ServerArgs field and
``SGLANG_*`` variable that ``serving_chat.py``, the tokenizer manager, the template
manager, the chat encoders and the model config read; the request logger's and crash
dump's settings; the keys and the TLS key password the HTTP server takes; the gRPC
listener and every port). This module holds one decision per extracted setting, and the
unit tests fail when the extraction has a setting without a decision or a decision is
left for a setting the wheel no longer reads. Decisions:

- ``OWNED``: a spec field sets it (the launch field table); ``extraArgs`` may not.
- ``MIRRORED``: allowed in ``extraArgs``, and the operator gives the gateway the same
  value, so it counts with it (``--default-chat-template-kwargs``).
- ``REFUSED``: the API refuses it in ``extraArgs`` (or ``env``) with a message naming it
  and saying why (its class's reason).
- ``ALLOWED``: read there, but it changes nothing the front door relies on (the reason
  says why: output only, multimodal only, weights and compute only...).

Pure: reads the packaged table once.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Final

from sparkllm.errors import SpecError
from sparkllm.gateway_settings import template_kwargs_problem
from sparkllm.sglang_contract.fields import LAUNCH_FIELDS, REFUSED_FLAGS
from sparkllm.sglang_contract.flags import flag_spec, flag_table, parse_sglang_options

GUARDED_RESOURCE: Final = "guarded_fields.json"


class GuardClass(enum.StrEnum):
    """Why a setting matters to the front door."""

    PROMPT = "prompt"
    LOG = "log"
    SECRET = "secret"
    LISTENER = "listener"


# What a refused setting of each class does, as the API's message says it.
CLASS_REASONS: Final = {
    GuardClass.PROMPT: "changes the prompt the engine renders or counts, which the front "
    "door must count exactly",
    GuardClass.LOG: "writes prompts to the engine's logs or files",
    GuardClass.SECRET: "puts a secret into the pod spec",
    GuardClass.LISTENER: "opens another listener on the node's address (host network)",
}


class Handling(enum.StrEnum):
    OWNED = "owned"
    MIRRORED = "mirrored"
    REFUSED = "refused"
    ALLOWED = "allowed"


@dataclass(frozen=True, slots=True)
class Decision:
    handling: Handling
    why: str = ""
    """ALLOWED: why it changes nothing the front door relies on; MIRRORED: the gateway
    setting it goes to; REFUSED: what to do instead (may be empty)."""


_OUTPUT = "output and usage reporting only: the prompt and its count are unchanged"
_CACHE = "caching and batching only: the same ids are counted"
_COMPUTE = "weights and compute only: the prompt and its count are unchanged"
_MULTIMODAL = "multimodal inputs only: the front door admits text"
_MIRRORED = Decision(Handling.MIRRORED, "default_chat_template_kwargs")
_NO_TEMPLATE = Decision(
    Handling.REFUSED,
    "put the template into the model directory (chat_template.jinja or "
    "tokenizer_config.json), which the engine and the front door both read",
)
_REFUSED = Decision(Handling.REFUSED)

# One decision per extracted flag (ServerArgs field) that no spec field owns.
FLAG_DECISIONS: Final[Mapping[str, Decision]] = {
    # --- prompt --------------------------------------------------------------------
    "default_chat_template_kwargs": _MIRRORED,
    "chat_template": _NO_TEMPLATE,
    "hf_chat_template_name": _NO_TEMPLATE,
    "completion_template": _NO_TEMPLATE,
    "trust_request_chat_template": _REFUSED,
    "tokenizer_path": _REFUSED,
    "tokenizer_mode": _REFUSED,
    "tokenizer_backend": _REFUSED,
    "skip_tokenizer_init": _REFUSED,
    "revision": _REFUSED,
    "trust_remote_code": _REFUSED,
    "model_config_parser": _REFUSED,
    "json_model_override_args": _REFUSED,
    "decrypted_config_file": _REFUSED,
    "decrypted_draft_config_file": _REFUSED,
    "enable_multimodal": _REFUSED,
    "enable_custom_logit_processor": _REFUSED,
    "allow_auto_truncate": Decision(
        Handling.ALLOWED,
        "the front door keeps every prompt and its answer inside the window, so nothing "
        "is ever truncated",
    ),
    "enable_cache_report": Decision(Handling.ALLOWED, _OUTPUT),
    "incremental_streaming_output": Decision(Handling.ALLOWED, _OUTPUT),
    "return_hidden_states_mode": Decision(Handling.ALLOWED, _OUTPUT),
    "return_input_ids": Decision(Handling.ALLOWED, _OUTPUT),
    "return_output_ids": Decision(Handling.ALLOWED, _OUTPUT),
    "stream_response_default_include_usage": Decision(Handling.ALLOWED, _OUTPUT),
    "grammar_backend": Decision(Handling.ALLOWED, "constrains the output only"),
    "sampling_defaults": Decision(Handling.ALLOWED, "sampling defaults only"),
    "tokenizer_metrics_allowed_custom_labels": Decision(Handling.ALLOWED, "metric labels only"),
    "tokenizer_metrics_custom_labels_header": Decision(Handling.ALLOWED, "metric labels only"),
    "disable_radix_cache": Decision(Handling.ALLOWED, _CACHE),
    "enable_dynamic_batch_tokenizer": Decision(Handling.ALLOWED, _CACHE),
    "dynamic_batch_tokenizer_batch_size": Decision(Handling.ALLOWED, _CACHE),
    "dynamic_batch_tokenizer_batch_timeout": Decision(Handling.ALLOWED, _CACHE),
    "dtype": Decision(Handling.ALLOWED, _COMPUTE),
    "quantization": Decision(Handling.ALLOWED, _COMPUTE),
    "quantize_and_serve": Decision(Handling.ALLOWED, _COMPUTE),
    "model_impl": Decision(Handling.ALLOWED, _COMPUTE),
    "disable_hybrid_swa_memory": Decision(Handling.ALLOWED, _COMPUTE),
    "speculative_algorithm": Decision(Handling.ALLOWED, _COMPUTE),
    "speculative_draft_model_quantization": Decision(Handling.ALLOWED, _COMPUTE),
    "enable_multi_layer_eagle": Decision(Handling.ALLOWED, _COMPUTE),
    "is_embedding": Decision(
        Handling.ALLOWED, "an embedding server renders no chat at all (requests fail)"
    ),
    "encoder_only": Decision(
        Handling.ALLOWED, "an encoder-only server serves no chat (multimodal disaggregation)"
    ),
    "language_only": Decision(Handling.ALLOWED, _MULTIMODAL),
    "language_model_only": Decision(Handling.ALLOWED, _MULTIMODAL),
    "encoder_transfer_backend": Decision(Handling.ALLOWED, _MULTIMODAL),
    "enable_encoder_swa_bounded_replay": Decision(Handling.ALLOWED, _MULTIMODAL),
    # --- log -----------------------------------------------------------------------
    "log_requests": _REFUSED,
    "log_requests_level": _REFUSED,
    "log_requests_format": _REFUSED,
    "log_requests_target": _REFUSED,
    "crash_dump_folder": _REFUSED,
    # --- secret --------------------------------------------------------------------
    "admin_api_key": _REFUSED,
    "ssl_keyfile_password": _REFUSED,
    # --- listener ------------------------------------------------------------------
    "grpc_port": _REFUSED,
    "grpc_mode": _REFUSED,
    "smg_grpc_mode": _REFUSED,
    "use_ray": _REFUSED,  # Ray starts its own services (GCS, dashboard) on the node
    "nccl_port": _REFUSED,
    "disaggregation_bootstrap_port": _REFUSED,
    "encoder_bootstrap_port": _REFUSED,
    "engine_info_bootstrap_port": _REFUSED,
    "gated_launch_port": _REFUSED,
    "remote_instance_weight_loader_seed_instance_service_port": _REFUSED,
    "remote_instance_weight_loader_send_weights_group_ports": _REFUSED,
    "smg_http_sidecar_port": _REFUSED,
}

# One decision per extracted SGLANG_* variable (engine.env).
ENV_DECISIONS: Final[Mapping[str, Decision]] = {
    "SGLANG_DEFAULT_THINKING": _REFUSED,
    "SGLANG_DSV4_REASONING_EFFORT": _REFUSED,
    "SGLANG_DSV41_REASONING_EFFORT": _REFUSED,
    "SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES": _REFUSED,
    "SGLANG_EXTERNAL_MM_PROCESSOR_PACKAGE": _REFUSED,
    "SGLANG_ENABLE_RESPONSE_TEMPLATE_TURN_GRAMMAR": Decision(
        Handling.ALLOWED, "constrains the output only"
    ),
    "SGLANG_MM_PRECOMPUTE_HASH": Decision(Handling.ALLOWED, _MULTIMODAL),
    "SGLANG_GRPC_PORT": _REFUSED,
}


@dataclass(frozen=True, slots=True)
class GuardedTable:
    """The extracted classes: ServerArgs fields and SGLANG_* variables, per class."""

    sglang_version: str
    flags: Mapping[GuardClass, tuple[str, ...]]
    env: Mapping[GuardClass, tuple[str, ...]]

    def flag_class(self, field: str) -> GuardClass:
        """The first class (in GuardClass order) the field is extracted in."""
        return next(c for c in GuardClass if field in self.flags[c])

    def env_class(self, name: str) -> GuardClass:
        return next(c for c in GuardClass if name in self.env[c])


@cache
def guarded_table() -> GuardedTable:
    """The packaged extraction for the pinned SGLang (read once)."""
    text = resources.files("sparkllm.sglang_contract").joinpath(GUARDED_RESOURCE).read_text()
    data = json.loads(text)
    classes = data["classes"]
    return GuardedTable(
        sglang_version=data["sglang_version"],
        flags={c: tuple(classes[c.value]["flags"]) for c in GuardClass},
        env={c: tuple(classes[c.value]["env"]) for c in GuardClass},
    )


def owned_fields() -> frozenset[str]:
    """ServerArgs fields a spec field sets (the launch field table's flags)."""
    return frozenset(field.server_info_key for field in LAUNCH_FIELDS)


def flag_decision(field: str) -> Decision:
    """The decision for an extracted field: owned when a spec field sets it."""
    if field in owned_fields():
        return Decision(Handling.OWNED)
    return FLAG_DECISIONS[field]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Refused spellings of one class, and the reason the API gives."""

    guard: GuardClass
    spellings: tuple[str, ...]
    """Every spelling (canonical, aliases, ``--no-`` negations) of every refused flag,
    or the refused variable names."""

    @property
    def reason(self) -> str:
        return CLASS_REASONS[self.guard]


def refused_flags() -> tuple[Refusal, ...]:
    """Per class (in GuardClass order), the spellings ``extraArgs`` may not use.

    A field extracted in several classes is refused under the first one; the flags
    ``fields.REFUSED_FLAGS`` refuses with a reason of their own are left to that rule.
    """
    table = guarded_table()
    specs = {spec.dest: spec for spec in flag_table().flags}
    refusals = []
    for guard in GuardClass:
        fields = [
            field
            for field in table.flags[guard]
            if table.flag_class(field) is guard
            and flag_decision(field).handling is Handling.REFUSED
            and specs[field].name not in REFUSED_FLAGS
        ]
        spellings = sorted(s for field in fields for s in specs[field].spellings)
        if spellings:
            refusals.append(Refusal(guard, tuple(spellings)))
    return tuple(refusals)


def refused_env() -> tuple[Refusal, ...]:
    """Per class, the ``SGLANG_*`` variables ``engine.env`` may not set."""
    table = guarded_table()
    refusals = []
    for guard in GuardClass:
        names = sorted(
            name
            for name in table.env[guard]
            if table.env_class(name) is guard and ENV_DECISIONS[name].handling is Handling.REFUSED
        )
        if names:
            refusals.append(Refusal(guard, tuple(names)))
    return tuple(refusals)


def mirrored_settings(extra_args: Sequence[str]) -> dict[str, str]:
    """The gateway settings (name -> value) the mirrored flags in ``extra_args`` set.

    ``--default-chat-template-kwargs``: the JSON object the engine parses, checked as
    SGLang and the gateway need it (an object, no reserved key such as
    ``chat_template``), passed on compact. SpecError naming ``spec.engine.extraArgs``
    otherwise (the CEL rules cannot parse JSON: the operator reports it as InvalidSpec).
    """
    try:
        parsed = parse_sglang_options(extra_args, lenient=True)
    except SpecError as exc:
        raise SpecError(f"spec.engine.extraArgs: {exc}") from None
    settings: dict[str, str] = {}
    for flag, setting in mirrored_flags().items():
        dest = flag_spec(flag).dest
        if dest not in parsed:
            continue
        try:
            value = json.loads(str(parsed[dest]))
        except ValueError as exc:
            raise SpecError(f"spec.engine.extraArgs: {flag} is not JSON: {exc}") from None
        problem = template_kwargs_problem(value)
        if problem:
            raise SpecError(f"spec.engine.extraArgs: {flag} {problem}")
        settings[setting] = json.dumps(value, separators=(",", ":"), sort_keys=False)
    return settings


def mirrored_flags() -> dict[str, str]:
    """Flag (canonical spelling) -> the gateway setting it is mirrored to."""
    specs = {spec.dest: spec for spec in flag_table().flags}
    return {
        specs[field].name: decision.why
        for field, decision in FLAG_DECISIONS.items()
        if decision.handling is Handling.MIRRORED
    }


__all__ = [
    "CLASS_REASONS",
    "ENV_DECISIONS",
    "FLAG_DECISIONS",
    "GUARDED_RESOURCE",
    "Decision",
    "GuardClass",
    "GuardedTable",
    "Handling",
    "Refusal",
    "flag_decision",
    "guarded_table",
    "mirrored_flags",
    "mirrored_settings",
    "owned_fields",
    "refused_env",
    "refused_flags",
]
