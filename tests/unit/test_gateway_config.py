"""GatewayConfig: environment and flags, precedence, validation messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkllm.api import AdmissionSpec, EngineSpec
from sparkllm.errors import GatewayError
from sparkllm.gateway.config import GatewayConfig, MaxTokensPolicy, load_gateway_config

REQUIRED_ENV = {
    "SPARKLLM_GATEWAY_SERVED_MODEL_NAME": "deepseek-v4-flash",
    "SPARKLLM_GATEWAY_API_KEYS_DIR": "/etc/sparkllm/keys",
    "SPARKLLM_GATEWAY_TOKENIZER_DIR": "/models/tok",
}


def test_defaults_are_the_documents_numbers() -> None:
    config = load_gateway_config([], environ=REQUIRED_ENV)
    assert (config.max_input_tokens, config.context_length) == (8192, 12288)
    assert config.max_concurrent_requests == 8
    assert config.max_tokens_policy is MaxTokensPolicy.CLAMP
    assert config.default_max_tokens is None
    assert config.max_body_bytes == 4 * 1024 * 1024
    assert config.upstream_url == "http://127.0.0.1:30080"
    assert config.api_keys_dir == Path("/etc/sparkllm/keys")


@pytest.mark.parametrize(
    "field",
    ["max_input_tokens", "max_concurrent_requests", "queue_size", "queue_timeout_seconds"],
)
def test_the_api_and_the_gateway_share_their_defaults(field: str) -> None:
    # Both read sparkllm.gateway_settings: a user who omits a field in spec.admission gets
    # the value the gateway run by hand has.
    api_default = AdmissionSpec.model_fields[field].default
    assert GatewayConfig.model_fields[field].default == api_default
    context = EngineSpec.model_fields["context_length"].default
    assert GatewayConfig.model_fields["context_length"].default == context


def test_environment_is_read_and_flags_win() -> None:
    environ = {
        **REQUIRED_ENV,
        "SPARKLLM_GATEWAY_MAX_INPUT_TOKENS": "4096",
        "SPARKLLM_GATEWAY_LISTEN_PORT": "9000",
        "SPARKLLM_GATEWAY_MODEL_ALIASES": "gpt-4o, gpt-4o-mini",
        "SPARKLLM_GATEWAY_UPSTREAM_API_KEY": "s3cret",
        "SPARKLLM_GATEWAY_METRICS_PORT": "",  # empty means unset
        "UNRELATED": "ignored",
    }
    config = load_gateway_config(
        ["--listen-port", "9100", "--max-tokens-policy", "reject"], environ=environ
    )
    assert config.max_input_tokens == 4096
    assert config.listen_port == 9100
    assert config.max_tokens_policy is MaxTokensPolicy.REJECT
    assert config.model_aliases == ("gpt-4o", "gpt-4o-mini")
    assert config.metrics_port is None
    assert config.upstream_api_key is not None
    assert config.upstream_api_key.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(config)


def test_default_chat_template_kwargs_come_as_json() -> None:
    kwargs = {"SPARKLLM_GATEWAY_DEFAULT_CHAT_TEMPLATE_KWARGS": '{"thinking": true}'}
    environ = {**REQUIRED_ENV, **kwargs}
    assert load_gateway_config([], environ=environ).default_chat_template_kwargs == {
        "thinking": True
    }
    assert load_gateway_config([], environ=REQUIRED_ENV).default_chat_template_kwargs == {}


def test_config_is_frozen() -> None:
    config = load_gateway_config([], environ=REQUIRED_ENV)
    with pytest.raises(ValueError, match="frozen"):
        config.max_input_tokens = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-input-tokens", "12288"], "max_input_tokens (12288) must be < context_length"),
        (["--context-length", "4096"], "max_input_tokens (8192) must be < context_length (4096)"),
        (["--default-max-tokens", "20000"], "default_max_tokens (20000) must be < context_length"),
        (["--default-max-tokens", "0"], "default_max_tokens: Input should be greater than"),
        (["--max-concurrent-requests", "0"], "max_concurrent_requests"),
        (["--queue-timeout-seconds", "0"], "queue_timeout_seconds"),
        (["--upstream-url", "ftp://router"], "upstream_url: Value error, must be an http"),
        (["--upstream-url", "http://router:1/?q=1"], "must not carry a query"),
        (["--max-tokens-policy", "truncate"], "max_tokens_policy"),
        (["--metrics-port", "8000"], "metrics_port must differ from listen_port"),
        (["--model-aliases", "deepseek-v4-flash"], "model_aliases must not repeat"),
        (["--listen-port", "70000"], "listen_port"),
        (["--log-level", "loud"], "log_level"),
        (["--upstream-ready-path", "readiness"], "must start with '/'"),
        (["--default-chat-template-kwargs", "[1]"], "default_chat_template_kwargs: Input should"),
        (["--default-chat-template-kwargs", "{x"], "default_chat_template_kwargs"),
        (
            ["--default-chat-template-kwargs", '{"chat_template": "{{ 1 }}"}'],
            "default_chat_template_kwargs: Value error, may not set 'chat_template'",
        ),
    ],
)
def test_invalid_values_name_the_field(flags: list[str], message: str) -> None:
    with pytest.raises(GatewayError, match="invalid gateway configuration") as caught:
        load_gateway_config(flags, environ=REQUIRED_ENV)
    assert message in str(caught.value)


def test_missing_required_settings_are_named() -> None:
    with pytest.raises(GatewayError) as caught:
        load_gateway_config([], environ={})
    for field in ("served_model_name", "api_keys_dir", "tokenizer_dir"):
        assert f"{field}: Field required" in str(caught.value)


def test_unknown_prefixed_variable_is_an_error() -> None:
    environ = {**REQUIRED_ENV, "SPARKLLM_GATEWAY_MAX_INPUT_TOKEN": "100"}
    with pytest.raises(GatewayError, match="SPARKLLM_GATEWAY_MAX_INPUT_TOKEN"):
        load_gateway_config([], environ=environ)


def test_every_field_has_a_flag_and_a_description() -> None:
    for name, field in GatewayConfig.model_fields.items():
        assert field.description, name
    config = load_gateway_config(
        ["--served-model-name", "m", "--api-keys-dir", "/k", "--tokenizer-dir", "/t"], environ={}
    )
    assert config.served_model_name == "m"


@pytest.mark.parametrize(("timeout", "retry_after"), [(0.2, 1), (1.0, 1), (1.5, 2), (60.0, 60)])
def test_retry_after_rounds_the_queue_timeout_up(timeout: float, retry_after: int) -> None:
    flags = ["--queue-timeout-seconds", str(timeout)]
    assert load_gateway_config(flags, environ=REQUIRED_ENV).retry_after_seconds == retry_after
