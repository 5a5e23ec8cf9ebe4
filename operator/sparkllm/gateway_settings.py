"""The gateway's settings that more than one layer needs: defaults, ports, env-var names.

Why one module: the same facts were written in three places — the API's defaults for
``spec.admission`` (what a user gets by omitting a field), the gateway's own defaults
(what ``python -m sparkllm.gateway`` runs with by hand), and the renderer, which passes
the settings to the gateway pod as ``SPARKLLM_GATEWAY_*`` variables and wires the
router's port into ``upstream_url``. When one copy changed, the others silently kept the
old value. Here each figure is defined once and ``api/``, ``render/`` and ``gateway/``
import it; nothing here imports any of them, so the renderer no longer reaches into the
gateway's internals to learn a variable's name.

The settings a spec sets and the gateway reads are one table, ``SETTINGS``: a row holds
every record of one setting — its spec path, the variable the renderer writes, its
default, its bounds, its descriptions — and the API field (api/admission.py,
api/engine.py), the rendered env (render/gateway.py) and the gateway's config field
(gateway/config.py) are made from the row. ``RELATIONS`` are the rules between settings
(the input cap below the window), stated once for the API's rule and the gateway's
check. A new setting is one row; tests/unit/test_gateway_settings_table.py walks the
table and proves each consumer agrees with it.

Pure constants, the table, naming functions and one shape check: no I/O, no imports
from the rest of sparkllm.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

# --- admission limits: the documents' conservative deployment (SEEDS.md) ----------------
# An 8K input cap under a 12K window: the window keeps room for the answer.
DEFAULT_MAX_INPUT_TOKENS: Final = 8192
DEFAULT_CONTEXT_LENGTH: Final = 12288
DEFAULT_MAX_CONCURRENT_REQUESTS: Final = 8
DEFAULT_QUEUE_SIZE: Final = 32
DEFAULT_QUEUE_TIMEOUT_SECONDS: Final = 60
# The largest body spec.admission admits by default (1 MiB); the operator always sets it.
DEFAULT_MAX_BODY_BYTES: Final = 1_048_576
# The gateway run by hand, with no operator to set it, reads larger bodies (4 MiB).
STANDALONE_MAX_BODY_BYTES: Final = 4 * 1024 * 1024


# --- the settings a spec sets and the gateway reads: one row each ------------------------
@dataclass(frozen=True, slots=True)
class Setting:
    """Every record of one setting, from ``spec`` to the gateway.

    ``field`` is the GatewayConfig field (its variable: ``env``); ``spec`` its path under
    ``spec`` (camelCase). ``default``, ``minimum`` and ``maximum`` are the API's (what a
    spec omitting it gets; inclusive bounds) and the gateway's, which run by hand only
    differs where it says so: ``standalone_default``, and ``fractional`` seconds (any
    positive number, where the API takes whole ones). ``choices`` names an enumerated
    setting's values. ``omit_default``: rendered only when the spec differs from the
    default (the gateway's default is the same), so a default spec renders as before the
    setting existed.
    """

    field: str
    spec: str
    default: int | str
    description: str  # the API field's (in the CRD)
    summary: str  # the gateway flag's help
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    standalone_default: int | None = None
    fractional: bool = False
    omit_default: bool = False

    @property
    def env(self) -> str:
        """The variable the renderer writes and the gateway reads."""
        return env_var_name(self.field)

    @property
    def spec_name(self) -> str:
        """The API field's name (the path's last part)."""
        return self.spec.rsplit(".", 1)[-1]

    @property
    def attributes(self) -> tuple[str, ...]:
        """The path as the API models' attribute names (snake_case)."""
        return tuple(_SNAKE.sub("_", part).lower() for part in self.spec.split("."))

    @property
    def gateway_default(self) -> int | str:
        """What the gateway run by hand, with no operator to set it, uses."""
        return self.default if self.standalone_default is None else self.standalone_default

    def read(self, spec: object) -> object:
        """The value a spec (an ``InferenceClusterSpec``) sets."""
        value = spec
        for name in self.attributes:
            value = getattr(value, name)
        return value


_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")

MAX_INPUT_TOKENS: Final = Setting(
    field="max_input_tokens",
    spec="admission.maxInputTokens",
    default=DEFAULT_MAX_INPUT_TOKENS,
    minimum=1,
    maximum=1_048_575,
    description="maxInputTokens is the largest prompt, in tokens counted with the "
    "model's tokenizer and chat template, the gateway accepts; longer requests are "
    "rejected with HTTP 400. "
    f"Default {DEFAULT_MAX_INPUT_TOKENS}; at least 1 and less than "
    "engine.contextLength, so the window keeps room for the answer.",
    summary="Input cap in tokens (rendered prompt, template included).",
)
CONTEXT_LENGTH: Final = Setting(
    field="context_length",
    spec="engine.contextLength",
    default=DEFAULT_CONTEXT_LENGTH,
    minimum=1,
    maximum=1_048_576,
    description="contextLength is the hard window in tokens, input plus output "
    f"(--context-length). Default {DEFAULT_CONTEXT_LENGTH}; 1 to 1048576; must exceed "
    "admission.maxInputTokens.",
    summary="The engine's hard window: input + output tokens.",
)
MAX_TOKENS_POLICY: Final = Setting(
    field="max_tokens_policy",
    spec="admission.maxTokensPolicy",
    default="clamp",
    choices=("clamp", "reject"),
    description="maxTokensPolicy says what happens when a request's max_tokens plus "
    "its input exceed engine.contextLength: clamp lowers max_tokens to fit, reject "
    "answers HTTP 400. Default clamp; one of clamp, reject.",
    summary="clamp: lower max_tokens to what fits; reject: 400 instead.",
)
MAX_CONCURRENT_REQUESTS: Final = Setting(
    field="max_concurrent_requests",
    spec="admission.maxConcurrentRequests",
    default=DEFAULT_MAX_CONCURRENT_REQUESTS,
    minimum=1,
    maximum=4096,
    description="maxConcurrentRequests is how many requests the gateway forwards at "
    "once across all replicas; more wait in the queue. "
    f"Default {DEFAULT_MAX_CONCURRENT_REQUESTS}; 1 to 4096.",
    summary="Requests in flight to the upstream at once.",
)
QUEUE_SIZE: Final = Setting(
    field="queue_size",
    spec="admission.queueSize",
    default=DEFAULT_QUEUE_SIZE,
    minimum=0,
    maximum=100_000,
    description="queueSize is how many requests may wait for a slot; when the queue is "
    f"full the gateway answers HTTP 429 with Retry-After. Default {DEFAULT_QUEUE_SIZE}; "
    "0 (no queue) to 100000.",
    summary="Requests waiting for a slot beyond that; more get 429 at once.",
)
QUEUE_TIMEOUT_SECONDS: Final = Setting(
    field="queue_timeout_seconds",
    spec="admission.queueTimeoutSeconds",
    default=DEFAULT_QUEUE_TIMEOUT_SECONDS,
    minimum=1,
    maximum=3600,
    fractional=True,
    description="queueTimeoutSeconds is how long a request may wait in the queue "
    "before the gateway answers HTTP 429 with Retry-After. "
    f"Default {DEFAULT_QUEUE_TIMEOUT_SECONDS}; 1 to 3600.",
    summary="Longest wait in the queue before 429 with Retry-After.",
)
MAX_BODY_BYTES: Final = Setting(
    field="max_body_bytes",
    spec="admission.maxBodyBytes",
    default=DEFAULT_MAX_BODY_BYTES,
    minimum=1024,
    maximum=67_108_864,
    standalone_default=STANDALONE_MAX_BODY_BYTES,
    description="maxBodyBytes is the largest request body the gateway reads; larger "
    f"ones get HTTP 413 before any tokenization. Default {DEFAULT_MAX_BODY_BYTES} "
    "(1 MiB); 1024 to 67108864.",
    summary="Largest request body accepted (413 beyond).",
)
MAX_CHOICES: Final = Setting(
    field="max_choices",
    spec="admission.maxChoices",
    default=1,
    minimum=1,
    maximum=16,
    omit_default=True,
    description="maxChoices is the largest n (answers per prompt) a request may ask "
    "for; the limits then see n times the input and the output. Default 1; 1 to 16.",
    summary="Largest n (answers per prompt).",
)
MAX_PROMPTS_PER_REQUEST: Final = Setting(
    field="max_prompts_per_request",
    spec="admission.maxPromptsPerRequest",
    default=1,
    minimum=1,
    maximum=64,
    omit_default=True,
    description="maxPromptsPerRequest is how many prompts one /v1/completions request "
    "may batch; the limits then see all of them together. Default 1; 1 to 64.",
    summary="Most prompts in one /v1/completions request.",
)
DEFAULT_NO_REPLICA_HOLD_SECONDS: Final = 30
NO_REPLICA_HOLD_SECONDS: Final = Setting(
    field="no_replica_hold_seconds",
    spec="admission.noReplicaHoldSeconds",
    default=DEFAULT_NO_REPLICA_HOLD_SECONDS,
    minimum=0,
    maximum=600,
    omit_default=True,
    description="noReplicaHoldSeconds is how long a request is held, keeping its slot, "
    "while no replica serves but one is expected (a restart, a failover, a scale-up: "
    "spec.replicas above 0 and a replica not stopped by its restart budget); it is "
    "relayed as soon as the router has a replica again, else answered HTTP 503 with the "
    "reason. Scaled to 0 or a spent restart budget is answered at once. "
    f"Default {DEFAULT_NO_REPLICA_HOLD_SECONDS}; 0 (answer at once) to 600.",
    summary="Seconds a request is held while no replica serves but one is expected.",
)
# In the order the renderer writes them (a default spec renders as it always has).
SETTINGS: Final = (
    MAX_INPUT_TOKENS,
    CONTEXT_LENGTH,
    MAX_TOKENS_POLICY,
    MAX_CONCURRENT_REQUESTS,
    QUEUE_SIZE,
    QUEUE_TIMEOUT_SECONDS,
    MAX_BODY_BYTES,
    MAX_CHOICES,
    MAX_PROMPTS_PER_REQUEST,
    NO_REPLICA_HOLD_SECONDS,
)


@dataclass(frozen=True, slots=True)
class Below:
    """A rule between two settings: ``field`` must be less than ``bound`` (``why``)."""

    field: str
    bound: str
    why: str = ""

    def problem(self, value: object, bound: object) -> str:
        """The gateway's message for values that break the rule."""
        why = f": {self.why}" if self.why else ""
        return f"{self.field} ({value}) must be < {self.bound} ({bound}){why}"

    def api_message(self) -> str:
        """The API's message (both sides are SETTINGS rows): names the spec fields."""
        field, bound = setting(self.field), setting(self.bound)
        why = f": {self.why}" if self.why else ""
        return f"{field.spec_name} must be less than {bound.spec}{why}"


# The cap below the window: the window must keep room for the answer. The API refuses a
# spec that breaks it (api/spec.py), the gateway a configuration (gateway/config.py).
INPUT_BELOW_WINDOW: Final = Below(
    "max_input_tokens", "context_length", "the window must keep room for the answer"
)
RELATIONS: Final = (
    INPUT_BELOW_WINDOW,
    Below("default_max_tokens", "context_length"),  # the gateway's own setting
)


def setting(field: str) -> Setting:
    """The row of ``field`` (KeyError if the table has none)."""
    for row in SETTINGS:
        if row.field == field:
            return row
    raise KeyError(field)


# --- what passes the front door beyond OpenAI's fields (gateway/rules/allowlist.py) ---
# SGLang sampling extensions a deployment may enable (spec.admission.extensions).
OPTIONAL_EXTENSIONS: Final = (
    *("ignore_eos", "min_p", "min_tokens", "no_stop_trim", "repetition_penalty"),
    *("separate_reasoning", "skip_special_tokens", "stop_token_ids", "stream_reasoning"),
    "top_k",
)
# Tool-calling features the documents do not support in production; a deployment may
# enable them (spec.admission.toolCalling): tool_choice "required", a named tool_choice,
# strict function definitions, a JSON-schema response_format.
TOOL_FEATURES: Final = ("json_schema", "named", "required", "strict")

# --- chat template kwargs -------------------------------------------------------------
# Keys no chat_template_kwargs may set, a request's nor the engine's server defaults
# (--default-chat-template-kwargs, which the front door mirrors): the template's own
# variables, and "chat_template", which would replace the template the front door counts
# with (SGLang renders with it: from a request only under --trust-request-chat-template,
# which the API refuses; from the server defaults, for every request).
RESERVED_TEMPLATE_KWARGS: Final = frozenset(
    {"messages", "tools", "documents", "add_generation_prompt", "chat_template"}
)


def template_kwargs_problem(kwargs: object) -> str:
    """Why ``kwargs`` cannot be chat template kwargs ("" when it can): a JSON object
    whose keys are identifiers and not reserved (RESERVED_TEMPLATE_KWARGS)."""
    if not isinstance(kwargs, dict):
        return "must be a JSON object"
    for key in kwargs:
        if key in RESERVED_TEMPLATE_KWARGS or not str(key).isidentifier():
            return f"may not set {key!r}"
    return ""


# --- ports and addresses inside the gateway pod -----------------------------------------
LISTEN_ALL_ADDRESSES: Final = "0.0.0.0"  # the admission layer listens on the pod IP
GATEWAY_HTTP_PORT: Final = 8000  # the admission layer: Service port and container port
# The admission layer's /metrics (series labelled by user): a container port only, in no
# Service, so no exposure object can route it; Prometheus scrapes the pod (a PodMonitor).
GATEWAY_METRICS_PORT: Final = 8001
ROUTER_HOST: Final = "127.0.0.1"  # smg is reachable only from inside the pod
ROUTER_PORT: Final = 30080  # smg's client port, behind the admission layer
DEFAULT_UPSTREAM_URL: Final = f"http://{ROUTER_HOST}:{ROUTER_PORT}"


# --- the shared governance store (Redis) ------------------------------------------------
def governance_key_prefix(namespace: str, name: str) -> str:
    """The prefix of one InferenceCluster's governance keys in a shared Redis.

    The hash tag (``{...}``) keeps all of them in one slot; the operator renders it into
    the gateway's settings and ``sparkllm usage --redis`` reads the ledger under it.
    """
    return f"sparkllm:{{{namespace}/{name}}}"


# --- configuration by environment --------------------------------------------------------
ENV_PREFIX: Final = "SPARKLLM_GATEWAY_"


def env_var_name(field: str) -> str:
    """The environment variable that sets the gateway setting ``field`` (a GatewayConfig
    field name, e.g. ``max_input_tokens`` -> ``SPARKLLM_GATEWAY_MAX_INPUT_TOKENS``)."""
    return ENV_PREFIX + field.upper()


__all__ = [
    "CONTEXT_LENGTH",
    "DEFAULT_CONTEXT_LENGTH",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONCURRENT_REQUESTS",
    "DEFAULT_MAX_INPUT_TOKENS",
    "DEFAULT_QUEUE_SIZE",
    "DEFAULT_QUEUE_TIMEOUT_SECONDS",
    "DEFAULT_UPSTREAM_URL",
    "ENV_PREFIX",
    "GATEWAY_HTTP_PORT",
    "INPUT_BELOW_WINDOW",
    "LISTEN_ALL_ADDRESSES",
    "MAX_BODY_BYTES",
    "MAX_CHOICES",
    "MAX_CONCURRENT_REQUESTS",
    "MAX_INPUT_TOKENS",
    "MAX_PROMPTS_PER_REQUEST",
    "MAX_TOKENS_POLICY",
    "NO_REPLICA_HOLD_SECONDS",
    "OPTIONAL_EXTENSIONS",
    "QUEUE_SIZE",
    "QUEUE_TIMEOUT_SECONDS",
    "RELATIONS",
    "RESERVED_TEMPLATE_KWARGS",
    "ROUTER_HOST",
    "ROUTER_PORT",
    "SETTINGS",
    "STANDALONE_MAX_BODY_BYTES",
    "TOOL_FEATURES",
    "Below",
    "Setting",
    "env_var_name",
    "governance_key_prefix",
    "setting",
    "template_kwargs_problem",
]
