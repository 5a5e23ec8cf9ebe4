"""Ordinary clients through the front door: the official OpenAI SDK and Anthropic's SDK.

Real parts on loopback (tests/unit/smg_stack.py): the simulator, the pinned smg router,
the gateway. What an SDK user does — retrieve the model, create a Response, send an
Anthropic Messages request and count its tokens — works, and is admitted, counted and
charged like a chat.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from tests.unit.accept_sim import MODEL
from tests.unit.smg_stack import Stack, smg_stack

KEY = "key-alice"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with smg_stack(
        tmp_path_factory.mktemp("clients"),
        keys={"alice": KEY},
        sim=["--sim-tpot-ms=1"],
        model_aliases=("gpt-4o",),
    ) as running:
        yield running


@pytest.fixture
def client(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=KEY, max_retries=0)


def test_openai_sdk_retrieves_the_model_and_an_alias(client: openai.OpenAI) -> None:
    assert client.models.retrieve(MODEL).id == MODEL
    assert client.models.retrieve("gpt-4o").id == MODEL  # the alias names the served model
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-5")
    assert missing.value.code == "model_not_found"
    assert "gpt-5" in missing.value.message


def test_openai_sdk_creates_a_response(client: openai.OpenAI, stack: Stack) -> None:
    response = client.responses.create(
        model="gpt-4o", input="Say hello.", instructions="Be brief.", max_output_tokens=8,
        store=False, metadata={"team": "a"}, service_tier="auto", user="u-1",
    )  # fmt: skip
    assert response.output_text
    assert 0 < response.usage.output_tokens <= 8
    row = _usage(stack)
    assert row["input_tokens"] >= response.usage.input_tokens > 0


def test_openai_sdk_no_work_fields_pass_on_chat(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
        store=False, metadata={"k": "v"}, service_tier="auto", user="u-1",
        parallel_tool_calls=True, prompt_cache_key="k1",
    )  # fmt: skip
    assert answer.choices[0].message.content is not None


def test_anthropic_sdk_messages_and_count_tokens(stack: Stack) -> None:
    # The Anthropic SDK sends x-api-key; the front door takes Bearer keys, as the SDK's
    # auth_token option sends them.
    client = anthropic.Anthropic(base_url=stack.url, auth_token=KEY, max_retries=0)
    message = client.messages.create(
        model=MODEL, max_tokens=8, system="Be brief.",
        messages=[{"role": "user", "content": "Say hello."}], metadata={"user_id": "u-1"},
    )  # fmt: skip
    assert message.content[0].type == "text"
    assert 0 < message.usage.output_tokens <= 8
    counted = client.messages.count_tokens(
        model=MODEL, system="Be brief.", messages=[{"role": "user", "content": "Say hello."}]
    )
    assert counted.input_tokens > 0
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}],
            extra_body={"ignore_eos": True},
        )  # fmt: skip
    assert "ignore_eos" in str(refused.value)


def test_stored_response_routes_are_served(stack: Stack) -> None:
    headers = {"authorization": f"Bearer {KEY}"}
    retrieved = httpx.get(f"{stack.url}/v1/responses/resp_abc", headers=headers, timeout=10)
    cancelled = httpx.post(f"{stack.url}/v1/responses/resp_abc/cancel", headers=headers)
    assert retrieved.status_code != 404 or retrieved.json()["error"]["code"] != "unknown_url"
    assert cancelled.json().get("error", {}).get("code") != "unknown_url"
    assert httpx.get(f"{stack.url}/v1/responses/resp_abc", timeout=10).status_code == 401


def _usage(stack: Stack) -> dict[str, object]:
    usage = httpx.get(
        f"{stack.url}/v1/usage", headers={"authorization": f"Bearer {KEY}"}, timeout=10
    ).json()
    (row,) = usage["data"]
    return row
