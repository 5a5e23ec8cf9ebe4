"""The gateway's configuration: one frozen model, read from environment and command line.

Why this shape: the operator renders the gateway Deployment with environment variables
(secrets arrive through ``secretKeyRef``, never as flags visible in ``ps``), while people
running it by hand prefer flags. Both land in one validated, immutable ``GatewayConfig``,
so the rest of the gateway never re-checks a number. Precedence: command line over
environment (``SPARKLLM_GATEWAY_<FIELD>``) over defaults. An empty environment variable
counts as unset, because Kubernetes manifests often template optional values as "".
Every flag is derived from the model's fields, so a field, its variable and its flag can
never drift apart. The defaults the operator's API shares, the ports and the variables'
naming live in :mod:`sparkllm.gateway_settings`, so the renderer needs nothing from here.
"""

from __future__ import annotations

import argparse
import enum
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from sparkllm.errors import GatewayError
from sparkllm.gateway.governance.redis_store import parse_address
from sparkllm.gateway_settings import (
    CONTEXT_LENGTH,
    DEFAULT_UPSTREAM_URL,
    ENV_PREFIX,
    GATEWAY_HTTP_PORT,
    LISTEN_ALL_ADDRESSES,
    MAX_BODY_BYTES,
    MAX_CHOICES,
    MAX_CONCURRENT_REQUESTS,
    MAX_INPUT_TOKENS,
    MAX_PROMPTS_PER_REQUEST,
    MAX_TOKENS_POLICY,
    NO_REPLICA_HOLD_SECONDS,
    OPTIONAL_EXTENSIONS,
    QUEUE_SIZE,
    QUEUE_TIMEOUT_SECONDS,
    RELATIONS,
    TOOL_FEATURES,
    Setting,
    template_kwargs_problem,
)

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def setting_field(row: Setting) -> Any:
    """The config field of a settings-table row (gateway_settings.SETTINGS): the default
    the gateway run by hand uses, the bounds (fractional seconds: any positive number)."""
    if row.fractional:
        default: Any = float(row.gateway_default)
        return Field(default, gt=0, le=row.maximum, description=row.summary)
    return Field(row.gateway_default, ge=row.minimum, le=row.maximum, description=row.summary)


class MaxTokensPolicy(enum.StrEnum):
    """What to do when a request asks for more output than the window has left."""

    CLAMP = "clamp"  # lower max_tokens to what fits and forward
    REJECT = "reject"  # answer 400 context_length_exceeded


class GatewayConfig(BaseModel):
    """Everything the admission gateway needs; see docs/gateway.md for the full table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    upstream_url: str = Field(
        DEFAULT_UPSTREAM_URL,
        description="Base URL of the SGLang model gateway router (smg) behind this gateway.",
    )
    listen_host: str = Field(LISTEN_ALL_ADDRESSES, description="Address to listen on.")
    listen_port: int = Field(GATEWAY_HTTP_PORT, ge=1, le=65535, description="Port to listen on.")
    served_model_name: str = Field(
        min_length=1, description="The one model name accepted in requests (404 otherwise)."
    )
    model_aliases: tuple[str, ...] = Field(
        (),
        description="Other accepted model names (comma-separated); rewritten to the served name.",
    )
    max_input_tokens: int = setting_field(MAX_INPUT_TOKENS)
    context_length: int = setting_field(CONTEXT_LENGTH)
    max_tokens_policy: MaxTokensPolicy = Field(
        MaxTokensPolicy(str(MAX_TOKENS_POLICY.default)), description=MAX_TOKENS_POLICY.summary
    )
    default_max_tokens: int | None = Field(
        None,
        ge=1,
        description="max_tokens when the client sends none (unset: the rest of the window).",
    )
    max_concurrent_requests: int = setting_field(MAX_CONCURRENT_REQUESTS)
    queue_size: int = setting_field(QUEUE_SIZE)
    queue_timeout_seconds: float = setting_field(QUEUE_TIMEOUT_SECONDS)
    max_body_bytes: int = setting_field(MAX_BODY_BYTES)
    no_replica_hold_seconds: int = setting_field(NO_REPLICA_HOLD_SECONDS)
    api_keys_dir: Path = Field(
        description="Directory of user keys (a mounted Secret): one file per user, name = user id."
    )
    governance_policy_path: Path | None = Field(
        None,
        description="The per-user governance policy (YAML, a mounted ConfigMap key), re-read "
        "when it changes; unset: no per-user limits, equal shares of the slots.",
    )
    governance_redis_address: str | None = Field(
        None,
        description="host:port of the shared governance store (Redis): budgets, ledger and "
        "the global in-flight bound held across gateway replicas and restarts. Unset: "
        "state in this process (one replica; lost on restart).",
    )
    governance_redis_password: SecretStr | None = Field(
        None, description="Password of that Redis (AUTH). Prefer env (a Secret's key)."
    )
    governance_redis_database: int = Field(0, ge=0, description="Redis database number.")
    governance_key_prefix: str = Field(
        "sparkllm",
        min_length=1,
        description="Prefix of every governance key in Redis; one per InferenceCluster "
        "(the operator sets sparkllm:{namespace/name}).",
    )
    tokenizer_dir: Path = Field(
        description="Directory with tokenizer.json and tokenizer_config.json (chat_template)."
    )
    chat_template_path: Path | None = Field(
        None, description="A Jinja chat template file overriding the tokenizer config's."
    )
    default_chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="The engine's --default-chat-template-kwargs (a JSON object): SGLang "
        "fills every request's unset chat_template_kwargs from them, so the count does too "
        "(the operator mirrors the flag from spec.engine.extraArgs).",
    )
    tool_call_parser: str | None = Field(
        None,
        description="The engine's --tool-call-parser. With deepseekv4 (or a DeepseekV4 "
        "checkpoint) prompts are counted with DeepSeek's encoder, as SGLang encodes them.",
    )
    upstream_api_key: SecretStr | None = Field(
        None, description="Bearer key for the upstream (replaces the user's key). Prefer env."
    )
    upstream_connect_timeout_seconds: float = Field(
        5.0, gt=0, description="Timeout to connect to the upstream."
    )
    upstream_read_timeout_seconds: float = Field(
        900.0, gt=0, description="Longest silence from the upstream while waiting or streaming."
    )
    upstream_ready_path: str = Field(
        "/readiness", description="Upstream path probed by /ready (2xx = ready)."
    )
    metrics_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="Serve /metrics on this port, never on listen_port: its series name "
        "users (unset: no metrics over HTTP).",
    )
    tls_cert_file: Path | None = Field(
        None,
        description="Serve HTTPS with this PEM certificate chain (a mounted kubernetes.io/tls "
        "Secret's tls.crt), re-read when it changes; unset: plain HTTP.",
    )
    tls_key_file: Path | None = Field(
        None, description="The private key of tls_cert_file (PEM); set both or neither."
    )
    cluster_name: str | None = Field(
        None,
        description="The InferenceCluster this gateway fronts: read to say why no replica "
        "serves when the router has none (unset: the 503 says no replica is ready).",
    )
    cluster_namespace: str | None = Field(None, description="The InferenceCluster's namespace.")
    log_level: str = Field("info", description="Log level: " + ", ".join(LOG_LEVELS) + ".")
    extensions: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="SGLang extensions let through (a JSON object: extension -> the users "
        'it is enabled for, [] for every user), e.g. {"ignore_eos": ["bench"]}. One of: '
        + ", ".join(sorted(OPTIONAL_EXTENSIONS))
        + ".",
    )
    max_choices: int = setting_field(MAX_CHOICES)
    max_header_bytes: int = Field(
        32 * 1024, ge=1024, description="Largest request line + headers; beyond: 431."
    )
    header_timeout_seconds: float = Field(
        10.0, gt=0, description="Longest wait for a request's headers; then 408 and close."
    )
    body_timeout_seconds: float = Field(
        60.0, gt=0, description="Longest wait for a request's whole body; then close."
    )
    keep_alive_timeout_seconds: int = Field(
        15, ge=1, description="Idle time a keep-alive connection is kept between requests."
    )
    max_prompts_per_request: int = setting_field(MAX_PROMPTS_PER_REQUEST)
    tool_calling: tuple[str, ...] = Field(
        (),
        description="Tool-calling features let through (comma-separated): "
        + ", ".join(sorted(TOOL_FEATURES))
        + ". Default none, the documents' production rule.",
    )

    @field_validator("model_aliases", "tool_calling", mode="before")
    @classmethod
    def _split_aliases(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(alias.strip() for alias in value.split(",") if alias.strip())
        return value

    @field_validator("extensions", "default_chat_template_kwargs", mode="before")
    @classmethod
    def _parse_json(cls, value: object) -> object:
        return json.loads(value) if isinstance(value, str) else value

    @field_validator("default_chat_template_kwargs")
    @classmethod
    def _check_template_kwargs(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = template_kwargs_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("extensions", "tool_calling")
    @classmethod
    def _check_names(cls, value: Any, info: ValidationInfo) -> Any:
        known = OPTIONAL_EXTENSIONS if info.field_name == "extensions" else TOOL_FEATURES
        unknown = set(value).difference(known)
        if unknown:
            raise ValueError(f"unknown: {', '.join(sorted(unknown))}; known: {sorted(known)}")
        return value

    @field_validator("upstream_url")
    @classmethod
    def _check_upstream_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment:
            raise ValueError("must not carry a query or fragment")
        return value.rstrip("/")

    @field_validator("governance_redis_address")
    @classmethod
    def _check_redis_address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_address(value)  # ValueError names the address
        return value

    @field_validator("upstream_ready_path")
    @classmethod
    def _check_ready_path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must start with '/'")
        return value

    @field_validator("log_level")
    @classmethod
    def _check_log_level(cls, value: str) -> str:
        if value.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return value.lower()

    @model_validator(mode="after")
    def _check_windows(self) -> GatewayConfig:
        for relation in RELATIONS:  # the input cap below the window, ... (gateway_settings)
            value, bound = getattr(self, relation.field), getattr(self, relation.bound)
            if value is not None and value >= bound:
                raise ValueError(relation.problem(value, bound))
        if self.metrics_port is not None and self.metrics_port == self.listen_port:
            raise ValueError(f"metrics_port must differ from listen_port ({self.listen_port})")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file are set together or not at all")
        if self.served_model_name in self.model_aliases:
            raise ValueError("model_aliases must not repeat served_model_name")
        return self

    @property
    def retry_after_seconds(self) -> int:
        """Retry-After on 429: the queue timeout, rounded up, at least one second."""
        return max(1, int(-(-self.queue_timeout_seconds // 1)))


def build_argument_parser() -> argparse.ArgumentParser:
    """One ``--field-name`` flag per config field; values are validated by the model."""
    parser = argparse.ArgumentParser(
        prog="python -m sparkllm.gateway",
        description="sparkllm admission gateway: auth, token cap and limits in front of smg.",
        epilog=f"Every flag can also be set as {ENV_PREFIX}<FIELD_NAME> in the environment.",
    )
    for name, field in GatewayConfig.model_fields.items():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            default=argparse.SUPPRESS,
            metavar=name.upper(),
            help=field.description,
        )
    return parser


def load_gateway_config(
    argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Merge environment and command line into a validated config, or raise GatewayError.

    A malformed command line exits like every argparse program (status 2); an unknown
    ``SPARKLLM_GATEWAY_*`` variable is an error, so a typo cannot be silently ignored.
    """
    raw: dict[str, Any] = {}
    for key, value in (environ or {}).items():
        if not key.startswith(ENV_PREFIX) or value == "":
            continue
        field = key[len(ENV_PREFIX) :].lower()
        if field not in GatewayConfig.model_fields:
            raise GatewayError(f"unknown gateway setting in environment: {key}")
        raw[field] = value
    flags = build_argument_parser().parse_args(list(argv) if argv is not None else [])
    raw.update(vars(flags))
    try:
        return GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'config'}: {error['msg']}"
            for error in exc.errors()
        )
        raise GatewayError(f"invalid gateway configuration: {problems}") from exc


__all__ = [
    "LOG_LEVELS",
    "GatewayConfig",
    "MaxTokensPolicy",
    "build_argument_parser",
    "load_gateway_config",
]
