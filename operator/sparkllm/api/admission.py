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
    SETTINGS,
    TOOL_FEATURES,
    Setting,
    setting,
)

Extension = Literal[OPTIONAL_EXTENSIONS]  # type: ignore[valid-type]
ToolFeature = Literal[TOOL_FEATURES]  # type: ignore[valid-type]
TokensPolicy = Literal[MAX_TOKENS_POLICY.choices]  # type: ignore[name-defined]
UserName = Annotated[str, StringConstraints(min_length=1, max_length=253)]


def setting_field(row: Setting) -> Any:
    """The API field of a settings-table row: its default, bounds and description."""
    return Field(default=row.default, ge=row.minimum, le=row.maximum, description=row.description)


def relation_rules() -> tuple[Rule, ...]:
    """The API's rules between settings (gateway_settings.RELATIONS over two spec fields):
    the CEL the API server runs and its pydantic twin, with one message."""
    spec_fields = {row.field for row in SETTINGS}
    return tuple(
        _below(setting(relation.field), setting(relation.bound), relation.api_message())
        for relation in RELATIONS
        if {relation.field, relation.bound} <= spec_fields
    )


def _below(field: Setting, bound: Setting, message: str) -> Rule:
    def check(spec: Any) -> bool:
        return bool(field.read(spec) < bound.read(spec))  # type: ignore[operator]

    return Rule(
        cel=f"self.{field.spec} < self.{bound.spec}",
        message=message,
        check=check,
        field_path=f".{field.spec}",
    )


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
    max_input_tokens: int = setting_field(MAX_INPUT_TOKENS)
    max_tokens_policy: TokensPolicy = setting_field(MAX_TOKENS_POLICY)
    max_concurrent_requests: int = setting_field(MAX_CONCURRENT_REQUESTS)
    queue_size: int = setting_field(QUEUE_SIZE)
    queue_timeout_seconds: int = setting_field(QUEUE_TIMEOUT_SECONDS)
    max_body_bytes: int = setting_field(MAX_BODY_BYTES)
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
    max_choices: int = setting_field(MAX_CHOICES)
    max_prompts_per_request: int = setting_field(MAX_PROMPTS_PER_REQUEST)
    no_replica_hold_seconds: int = setting_field(NO_REPLICA_HOLD_SECONDS)
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
