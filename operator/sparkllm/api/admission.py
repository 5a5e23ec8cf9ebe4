"""``spec.admission``: what the gateway lets through to the engines, and how it says no.

The engines are few and slow (tens of seconds per long request, SEEDS.md), and one
request over the memory budget can take a replica down. So the front door is where
limits live: who may call (user API keys), how large a request may be (input tokens
counted with the model's tokenizer, body bytes), how many run at once and how many may
wait, and what happens to a ``max_tokens`` that would overflow the window. Users get a
clear OpenAI-style error instead of an engine crash. Defaults are the documents'
conservative ones: an 8K input cap under a 12K window.
"""

from typing import Literal

from pydantic import Field

from sparkllm.api.common import LocalObjectReference
from sparkllm.api.rules import ApiModel
from sparkllm.gateway_settings import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONCURRENT_REQUESTS,
    DEFAULT_MAX_INPUT_TOKENS,
    DEFAULT_QUEUE_SIZE,
    DEFAULT_QUEUE_TIMEOUT_SECONDS,
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
