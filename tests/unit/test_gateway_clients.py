"""Ordinary clients through the front door: the official OpenAI SDK and Anthropic's SDK.

Real parts on loopback (tests/unit/smg_stack.py): the simulator, the pinned smg router,
the gateway. What an SDK user does — retrieve the model, create a Response, send an
Anthropic Messages request and count its tokens — works, and is admitted, counted and
charged like a chat.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkllm.gateway import router_errors
from sparkllm.gateway.admission import Admitted, Route
from sparkllm.gateway.app import build_gateway_app
from sparkllm.gateway.governance.meter import UsageMeter
from tests.unit.accept_sim import MODEL
from tests.unit.gateway_fixtures import running, wait_until
from tests.unit.smg_stack import Stack, smg_stack
from tests.unit.test_docs_blocks import ROOT, blocks_of

KEY = "key-alice"
THIS_FILE = "tests/unit/test_gateway_clients.py"


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
def client(stack: Stack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{stack.url}/v1", api_key=KEY, max_retries=0) as sdk:
        yield sdk


def test_openai_sdk_retrieves_the_model_and_an_alias(client: openai.OpenAI, stack: Stack) -> None:
    before = _outcomes(stack)
    assert client.models.retrieve(MODEL).id == MODEL
    assert client.models.retrieve("gpt-4o").id == MODEL  # the alias names the served model
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-5")
    assert missing.value.code == "model_not_found"
    assert "gpt-5" in missing.value.message
    # counted under /v1/models: two found, one not
    after = _counted(stack, before, {("/v1/models", "ok"): 2, ("/v1/models", "bad_request"): 1})
    for outcome, more in (("ok", 2), ("bad_request", 1)):
        assert after[("/v1/models", outcome)] == before[("/v1/models", outcome)] + more


def test_openai_sdk_creates_a_response(client: openai.OpenAI, stack: Stack) -> None:
    before = _usage(stack)
    response = client.responses.create(
        model="gpt-4o", input="Say hello.", instructions="Be brief.", max_output_tokens=8,
        store=False, metadata={"team": "a"}, service_tier="auto", user="u-1",
    )  # fmt: skip
    assert response.output_text
    assert 0 < response.usage.output_tokens <= 8
    charged = _charged(before, _usage(stack))  # the answer's usage, read by the meter
    assert charged == (response.usage.input_tokens, response.usage.output_tokens)


def test_a_budget_lowers_a_responses_output_limit(stack: Stack, tmp_path: Path) -> None:
    """max_output_tokens is lowered to what the budget allows, as max_tokens is on chat."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("minOutputTokens: 1\ndefaults: {tokensPerDay: 60}\n")
    config = stack.config.model_copy(update={"governance_policy_path": policy})
    with (
        running(build_gateway_app(config)) as gateway,
        openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0) as sdk,
    ):
        response = sdk.responses.create(model=MODEL, input="Say hello.", max_output_tokens=500)
    assert response.max_output_tokens is not None
    assert response.max_output_tokens < 60  # what the day's 60 tokens leave after the prompt
    assert response.usage is not None
    assert response.usage.input_tokens + response.usage.output_tokens <= 60


def test_openai_sdk_no_work_fields_pass_on_chat(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
        store=False, metadata={"k": "v"}, service_tier="auto", user="u-1",
        parallel_tool_calls=True, prompt_cache_key="k1",
    )  # fmt: skip
    assert answer.choices[0].message.content is not None


def test_anthropic_sdk_messages_and_count_tokens(stack: Stack) -> None:
    # The front door takes Bearer keys: the SDK's auth_token sends one (api_key would send
    # x-api-key).
    with anthropic.Anthropic(base_url=stack.url, auth_token=KEY, max_retries=0) as client:
        before = _usage(stack)
        message = client.messages.create(
            model=MODEL, max_tokens=8, system="Be brief.",
            messages=[{"role": "user", "content": "Say hello."}], metadata={"user_id": "u-1"},
        )  # fmt: skip
        assert message.content[0].type == "text"
        assert 0 < message.usage.output_tokens <= 8
        charged = _charged(before, _usage(stack))
        assert charged == (message.usage.input_tokens, message.usage.output_tokens)
        counted = client.messages.count_tokens(
            model=MODEL, system="Be brief.", messages=[{"role": "user", "content": "Say hello."}]
        )
        # The exact count admission makes of the same request (the chat template's prompt,
        # as SGLang renders it: test_gateway_sglang_differential.py; the simulator counts
        # its own plain rendering, so its usage differs).
        body = {"model": MODEL, "max_tokens": 8, "system": "Be brief.",
                "messages": [{"role": "user", "content": "Say hello."}]}  # fmt: skip
        decided = stack.app.admission.decide(Route.MESSAGES, json.dumps(body).encode(), exact=True)
        assert isinstance(decided, Admitted)
        assert counted.input_tokens == decided.input_tokens > 0
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(
                model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "x"}],
                extra_body={"ignore_eos": True},
            )  # fmt: skip
        assert "ignore_eos" in str(refused.value)


def test_the_docs_client_example_runs(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/gateway.md's SDK example ("With the SDKs"), run as written against the stack."""
    doc = ROOT / "docs" / "gateway.md"
    (block,) = [b for b in blocks_of(doc) if b.kind == "tested-by" and b.arg == THIS_FILE]
    exec(compile(block.text, f"{doc}:{block.line}", "exec"), {
        "BASE_URL": stack.url, "KEY": KEY, "MODEL": MODEL,
    })  # fmt: skip
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == MODEL
    assert len(printed) >= 4  # the two answers' text between
    assert printed[-1].startswith("MessageTokensCount(input_tokens=")


def test_stored_response_routes_are_served(client: openai.OpenAI, stack: Stack) -> None:
    """An id the caller did not create is the gateway's 404; the creator's own calls reach
    the real router and engine (which keep no store here: smg's 404, SGLang's 400)."""
    headers = {"authorization": f"Bearer {KEY}"}
    retrieved = httpx.get(f"{stack.url}/v1/responses/resp_abc", headers=headers, timeout=10)
    cancelled = httpx.post(f"{stack.url}/v1/responses/resp_abc/cancel", headers=headers)
    for answer in (retrieved, cancelled):
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "not_found"
        assert "x-smg-error-code" not in answer.headers  # answered before the router
    assert httpx.get(f"{stack.url}/v1/responses/resp_abc", timeout=10).status_code == 401
    mine = client.responses.create(model=MODEL, input="Hi.", max_output_tokens=4).id
    retrieved = httpx.get(f"{stack.url}/v1/responses/{mine}", headers=headers, timeout=10)
    assert retrieved.headers.get("x-smg-error-code") == "not_found"  # smg's own answer
    cancelled = httpx.post(f"{stack.url}/v1/responses/{mine}/cancel", headers=headers)
    assert cancelled.status_code == 400
    assert "Response store is disabled" in cancelled.text  # the engine's


# smg 1.13.0's own refusals, recorded from the stack above (before the rewrite).
SMG_RANGE = (
    'temperature: Validation error: range [{"max": Number(2.0), "value": Number(5.0), '
    '"min": Number(0.0)}]'
)
SMG_TYPE = (
    "Invalid JSON data: Failed to deserialize the JSON body into the target type: "
    'max_tokens: invalid type: string "x", expected u32 at line 1 column 32'
)


@pytest.mark.parametrize(
    ("message", "readable"),
    [
        (SMG_RANGE, "'temperature' must be from 0.0 to 2.0, got 5.0."),
        (SMG_TYPE, "'max_tokens' is not valid: invalid type: string \"x\", expected a "
         "non-negative integer."),
        ("top_p: Invalid 'top_p': decimal above maximum value.", None),  # already readable
    ],
)  # fmt: skip
def test_router_debug_text_is_rewritten(message: str, readable: str | None) -> None:
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": "p", "code": "c"}}).encode()  # fmt: skip
    reply = router_errors.readable(400, body)
    assert (reply and reply.message) == readable
    if reply is not None:
        assert (reply.status, reply.param, reply.code) == (400, "p", "c")


def test_router_refusal_reaches_the_sdk_readable_and_counts_as_a_client_error(
    client: openai.OpenAI, stack: Stack
) -> None:
    before = _outcomes(stack)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=5
        )
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["message"] == "'temperature' must be from 0.0 to 2.0, got 5.0."
    assert refused.value.param == "temperature"
    after = _counted(stack, before, {("/v1/chat/completions", "bad_request"): 1})
    assert after[("/v1/chat/completions", "bad_request")] == (
        before[("/v1/chat/completions", "bad_request")] + 1
    )
    assert (
        after[("/v1/chat/completions", "upstream_error")]
        == (before[("/v1/chat/completions", "upstream_error")])
    )


def test_a_full_queue_says_the_real_wait_and_the_sdk_retries_after_it(stack: Stack) -> None:
    """One slot, no queue: while a long answer holds the slot, the SDK's request is
    refused 429 with the wait the service rate predicts (not the 30 s queue timeout), and
    the SDK's default retry gets through after about that long."""
    config = stack.config.model_copy(
        update={"max_concurrent_requests": 1, "queue_size": 0, "queue_timeout_seconds": 30}
    )
    refusals: list[httpx.Headers] = []

    def seen(response: httpx.Response) -> None:
        if response.status_code == 429:
            refusals.append(response.headers)

    app = build_gateway_app(config)
    with (
        running(app) as gateway,
        httpx.Client(event_hooks={"response": [seen]}) as http,
        openai.OpenAI(
            base_url=f"{gateway.url}/v1", api_key=KEY, http_client=http, max_retries=20
        ) as sdk,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        chat: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(5):  # the service rate: five short answers, one after another
            sdk.chat.completions.create(**chat, max_tokens=4)
        long = pool.submit(sdk.chat.completions.create, **chat, max_tokens=400)
        wait_until(lambda: app.limiter.in_flight == 1, what="the long answer to hold the slot")
        started = time.monotonic()
        answer = sdk.chat.completions.create(**chat, max_tokens=4)  # retried by the SDK
        elapsed = time.monotonic() - started
        long.result()
    assert answer.choices[0].message.content is not None
    assert refusals, "no 429 while the long answer held the slot"
    first = refusals[0]
    print(f"\nqueue_full 429: retry-after {first['retry-after']}, "
          f"retry-after-ms {first['retry-after-ms']}; answered after {elapsed:.2f} s")  # fmt: skip
    assert int(first["retry-after-ms"]) < 5000  # the service rate's wait, not the 30 s timeout
    assert int(first["retry-after"]) == math.ceil(int(first["retry-after-ms"]) / 1000)
    assert elapsed < 10


def _outcomes(stack: Stack) -> dict[tuple[str, str], float]:
    text = stack.app.metrics.exposition()[0].decode()
    return {
        (sample.labels["route"], sample.labels["outcome"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "sparkllm_gateway_requests_total"
    }


def _counted(
    stack: Stack, before: dict[tuple[str, str], float], more: dict[tuple[str, str], int]
) -> dict[tuple[str, str], float]:
    """The counts once ``more`` were added to ``before``: the gateway counts a request
    after its answer's last byte, so just after the client has read it."""
    wait_until(
        lambda: all(_outcomes(stack).get(k, 0) >= before.get(k, 0) + n for k, n in more.items()),
        what=f"the gateway to count {more}",
    )
    return _outcomes(stack)


def _usage(stack: Stack) -> dict[str, Any]:
    usage = httpx.get(
        f"{stack.url}/v1/usage", headers={"authorization": f"Bearer {KEY}"}, timeout=10
    ).json()
    rows = usage["data"]
    return rows[0] if rows else {"input_tokens": 0, "output_tokens": 0}


def _charged(before: dict[str, Any], after: dict[str, Any]) -> tuple[int, int]:
    return (
        after["input_tokens"] - before["input_tokens"],
        after["output_tokens"] - before["output_tokens"],
    )


@pytest.mark.parametrize(
    ("content_type", "answer", "charged"),
    [
        ("application/json", {"usage": {"input_tokens": 7, "output_tokens": 3}}, (7, 3)),
        ("text/event-stream",  # Messages: message_start, then message_delta's count
         'event: message_start\ndata: {"type": "message_start", "message": {"usage": '
         '{"input_tokens": 7, "output_tokens": 1}}}\n\nevent: message_delta\ndata: '
         '{"type": "message_delta", "usage": {"output_tokens": 4}}\n\n', (5, 4)),
        ("text/event-stream",  # Responses: the completed response's usage
         'data: {"type": "response.completed", "response": {"usage": {"input_tokens": 6, '
         '"output_tokens": 2}}}\n\n', (6, 2)),
    ],
)  # fmt: skip
def test_the_meter_reads_messages_and_responses_usage(
    content_type: str, answer: Any, charged: tuple[int, int]
) -> None:
    async def exchange() -> UsageMeter:
        async def send(_message: Any) -> None:
            return None

        meter = UsageMeter(send)
        headers = [(b"content-type", content_type.encode())]
        await meter.send({"type": "http.response.start", "status": 200, "headers": headers})
        body = answer if isinstance(answer, str) else json.dumps(answer)
        await meter.send({"type": "http.response.body", "body": body.encode()})
        return meter

    used = asyncio.run(exchange()).used(
        input_tokens=5, reserved_output=9, answered=True, count=None
    )
    assert (used.input_tokens, used.output_tokens, used.measured) == (*charged, True)
