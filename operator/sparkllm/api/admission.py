"""``spec.admission``: what the gateway lets through to the engines, and how it says no.

The engines are few and slow (tens of seconds per long request, SEEDS.md), and one
request over the memory budget can take a replica down. So the front door is where
limits live: who may call (user API keys), how large a request may be (input tokens
counted with the model's tokenizer, body bytes), how many run at once and how many may
wait, and what happens to a ``max_tokens`` that would overflow the window. Users get a
clear OpenAI-style error instead of an engine crash. Defaults are the documents'
conservative ones: an 8K input cap under a 12K window.
"""

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from sparkllm.api.common import ConfigKey, DnsSubdomain, LocalObjectReference
from sparkllm.api.rules import ApiModel, Rule
from sparkllm.gateway_settings import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONCURRENT_REQUESTS,
    DEFAULT_MAX_INPUT_TOKENS,
    DEFAULT_QUEUE_SIZE,
    DEFAULT_QUEUE_TIMEOUT_SECONDS,
    OPTIONAL_EXTENSIONS,
    TOOL_FEATURES,
)

Extension = Literal[OPTIONAL_EXTENSIONS]  # type: ignore[valid-type]
ToolFeature = Literal[TOOL_FEATURES]  # type: ignore[valid-type]
UserName = Annotated[str, StringConstraints(min_length=1, max_length=253)]


def _once(message: str, *, key: str | None) -> Rule:
    """A list rule: no item (or no item's ``key`` field) appears twice."""
    item = "a" if key is None else f"a.{key}"
    other = "b" if key is None else f"b.{key}"

    def check(items: tuple[Any, ...]) -> bool:
        values = [item if key is None else getattr(item, key) for item in items]
        return len(set(values)) == len(values)

    return Rule(
        cel=f"self.all(a, self.exists_one(b, {other} == {item}))", message=message, check=check
    )


class ExtensionGrant(ApiModel):
    """One SGLang request extension the gateway lets through, for every user or some."""

    parameter: Extension = Field(
        description="parameter is the request field let through (Required), e.g. "
        "ignore_eos (the acceptance benchmark sends it for exact output lengths). One of: "
        + ", ".join(OPTIONAL_EXTENSIONS)
        + "."
    )
    users: tuple[UserName, ...] = Field(
        default=(),
        max_length=64,
        description="users are the data keys of apiKeysSecretRef whose requests may carry "
        "it. Default empty: every user.",
    )


class PolicyConfigMapReference(ApiModel):
    """The ConfigMap key holding the per-user governance policy (docs/governance.md)."""

    name: DnsSubdomain = Field(
        description="name of the ConfigMap, in the InferenceCluster's namespace. Required; "
        "a DNS subdomain of at most 253 characters."
    )
    key: ConfigKey = Field(
        default="policy.yaml",
        description="key is the ConfigMap data key holding the policy YAML. Default "
        "policy.yaml; at most 253 characters of [-._a-zA-Z0-9].",
    )


class GovernanceSpec(ApiModel):
    """Per-user governance: limits, budgets and shares of the slots, from a policy file."""

    policy_config_map_ref: PolicyConfigMapReference | None = Field(
        default=None,
        description="policyConfigMapRef names the ConfigMap key with the per-user policy: "
        "defaults and per-user overrides of maxConcurrentRequests, requestsPerMinute, "
        "tokensPerMinute/Hour/Day (input + output), weight and maxQueuedRequests "
        "(docs/governance.md). Edits apply without a restart. A policy that does not "
        "load makes the gateway refuse generation requests with HTTP 503 naming the "
        "problem; a later broken edit keeps the last good policy. Optional: unset, no "
        "per-user limits apply and users share the slots equally.",
    )


class AdmissionSpec(ApiModel):
    """Limits and authentication the gateway enforces before a request reaches an engine."""

    api_keys_secret_ref: LocalObjectReference = Field(
        description="apiKeysSecretRef names the Secret holding the API keys users present "
        "(Authorization: Bearer). Required: the gateway never serves unauthenticated. "
        "Every value in the Secret is one accepted key; its data key names the user in "
        "logs and metrics. Keys are read at runtime, never copied into a pod spec."
    )
    max_input_tokens: int = Field(
        default=DEFAULT_MAX_INPUT_TOKENS,
        ge=1,
        le=1_048_575,
        description="maxInputTokens is the largest prompt, in tokens counted with the "
        "model's tokenizer and chat template, the gateway accepts; longer requests are "
        "rejected with HTTP 400. "
        f"Default {DEFAULT_MAX_INPUT_TOKENS}; at least 1 and less than "
        "engine.contextLength, so the window keeps room for the answer.",
    )
    max_tokens_policy: Literal["clamp", "reject"] = Field(
        default="clamp",
        description="maxTokensPolicy says what happens when a request's max_tokens plus "
        "its input exceed engine.contextLength: clamp lowers max_tokens to fit, reject "
        "answers HTTP 400. Default clamp; one of clamp, reject.",
    )
    max_concurrent_requests: int = Field(
        default=DEFAULT_MAX_CONCURRENT_REQUESTS,
        ge=1,
        le=4096,
        description="maxConcurrentRequests is how many requests the gateway forwards at "
        "once across all replicas; more wait in the queue. "
        f"Default {DEFAULT_MAX_CONCURRENT_REQUESTS}; 1 to 4096.",
    )
    queue_size: int = Field(
        default=DEFAULT_QUEUE_SIZE,
        ge=0,
        le=100_000,
        description="queueSize is how many requests may wait for a slot; when the queue is "
        f"full the gateway answers HTTP 429 with Retry-After. Default {DEFAULT_QUEUE_SIZE}; "
        "0 (no queue) to 100000.",
    )
    queue_timeout_seconds: int = Field(
        default=DEFAULT_QUEUE_TIMEOUT_SECONDS,
        ge=1,
        le=3600,
        description="queueTimeoutSeconds is how long a request may wait in the queue "
        "before the gateway answers HTTP 429 with Retry-After. "
        f"Default {DEFAULT_QUEUE_TIMEOUT_SECONDS}; 1 to 3600.",
    )
    max_body_bytes: int = Field(
        default=DEFAULT_MAX_BODY_BYTES,
        ge=1024,
        le=67_108_864,
        description="maxBodyBytes is the largest request body the gateway reads; larger "
        f"ones get HTTP 413 before any tokenization. Default {DEFAULT_MAX_BODY_BYTES} "
        "(1 MiB); 1024 to 67108864.",
    )
    extensions: Annotated[
        tuple[ExtensionGrant, ...],
        _once("extensions must name each parameter once", key="parameter"),
    ] = Field(
        default=(),
        max_length=16,
        description="extensions are the SGLang request extensions the gateway lets "
        "through (and counts like the rest); any other field beyond OpenAI's is refused "
        "with HTTP 400 unsupported_parameter. Default none.",
    )
    max_choices: int = Field(
        default=1,
        ge=1,
        le=16,
        description="maxChoices is the largest n (answers per prompt) a request may ask "
        "for; the limits then see n times the input and the output. Default 1; 1 to 16.",
    )
    max_prompts_per_request: int = Field(
        default=1,
        ge=1,
        le=64,
        description="maxPromptsPerRequest is how many prompts one /v1/completions request "
        "may batch; the limits then see all of them together. Default 1; 1 to 64.",
    )
    governance: GovernanceSpec = Field(
        default=GovernanceSpec(),
        description="governance is per-user governance: a policy of limits and token "
        "budgets per user, fair shares of the slots by weight, and the usage ledger "
        "(GET /v1/usage, sparkllm usage). Default: no policy, equal shares.",
    )
    tool_calling: Annotated[
        tuple[ToolFeature, ...], _once("toolCalling must name each feature once", key=None)
    ] = Field(
        default=(),
        max_length=4,
        description="toolCalling lists the tool-calling features the gateway lets through: "
        "required (tool_choice required), named (a named tool_choice), strict (strict "
        "function definitions), json_schema (a JSON-schema response_format). Default none: "
        "the documents do not support them in production; each gets HTTP 400.",
    )
