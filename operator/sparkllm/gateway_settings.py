"""The gateway's settings that more than one layer needs: defaults, ports, env-var names.

Why one module: the same facts were written in three places — the API's defaults for
``spec.admission`` (what a user gets by omitting a field), the gateway's own defaults
(what ``python -m sparkllm.gateway`` runs with by hand), and the renderer, which passes
the settings to the gateway pod as ``SPARKLLM_GATEWAY_*`` variables and wires the
router's port into ``upstream_url``. When one copy changed, the others silently kept the
old value. Here each figure is defined once and ``api/``, ``render/`` and ``gateway/``
import it; nothing here imports any of them, so the renderer no longer reaches into the
gateway's internals to learn a variable's name.

Pure constants, naming functions and one shape check: no I/O, no imports from the rest
of sparkllm.
"""

from __future__ import annotations

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
    "DEFAULT_CONTEXT_LENGTH",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONCURRENT_REQUESTS",
    "DEFAULT_MAX_INPUT_TOKENS",
    "DEFAULT_QUEUE_SIZE",
    "DEFAULT_QUEUE_TIMEOUT_SECONDS",
    "DEFAULT_UPSTREAM_URL",
    "ENV_PREFIX",
    "GATEWAY_HTTP_PORT",
    "LISTEN_ALL_ADDRESSES",
    "OPTIONAL_EXTENSIONS",
    "RESERVED_TEMPLATE_KWARGS",
    "ROUTER_HOST",
    "ROUTER_PORT",
    "STANDALONE_MAX_BODY_BYTES",
    "TOOL_FEATURES",
    "env_var_name",
    "governance_key_prefix",
    "template_kwargs_problem",
]
