"""The SIMULATOR's HTTP surface, handler level (httpx's ASGI transport, no sockets)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from sparkllm_dev.sim.metrics import EngineMetrics
from sparkllm_dev.sim.scheduler import RequestSlots
from sparkllm_dev.sim.server import prepare

KEY = "engine-secret"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    config = {"num_hidden_layers": 43, "max_position_embeddings": 1048576, "model_type": "x"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def rank_argv(model: Path, *extra: str, sim: Sequence[str] = (), rank: int = 0) -> list[str]:
    return [
        *sim, "--", "python3", "-m", "sglang.launch_server", "--model-path", str(model),
        "--served-model-name", "dsv4", "--nnodes", "3", "--node-rank", str(rank),
        "--dist-init-addr", "127.0.0.1:5000", "--pp-size", "3", "--tp-size", "1",
        "--mem-fraction-static", "0.5", "--context-length", "64", "--chunked-prefill-size",
        "4096", "--cuda-graph-max-bs-decode", "4", "--max-running-requests", "8",
        "--host", "0.0.0.0", "--port", "30000", "--api-key", KEY, *extra,
    ]  # fmt: skip


def requests(
    argv: list[str], *calls: tuple[str, str, dict[str, Any]], partition: str = "14,14,15"
) -> list[httpx.Response]:
    """Build the rank from argv and send the calls, in order, to its ASGI app."""
    app = prepare(argv, env={"SGLANG_PP_LAYER_PARTITION": partition}).app

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            return [await client.request(method, path, **kw) for method, path, kw in calls]

    return asyncio.run(run())


def get(path: str, headers: dict[str, str] | None = None) -> tuple[str, str, dict[str, Any]]:
    return ("GET", path, {"headers": headers or {}})


def post(path: str, body: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    return ("POST", path, {"headers": AUTH, "json": body})


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "dsv4", "messages": [{"role": "user", "content": content}], **extra}


def events(response: httpx.Response) -> list[str]:
    assert response.headers["content-type"] == "text/event-stream"
    blocks = response.text.split("\n\n")
    assert blocks[-1] == ""
    assert all(block.startswith("data: ") for block in blocks[:-1])
    return [block.removeprefix("data: ") for block in blocks[:-1]]


@pytest.mark.parametrize(
    ("path", "headers", "status"),
    [
        ("/health", {}, 200),
        ("/health_generate", {}, 200),
        ("/metrics", {}, 200),
        ("/ping", {}, 401),
        ("/ping", AUTH, 200),
        ("/get_server_info", {}, 401),
        ("/get_server_info", {"Authorization": "Bearer wrong"}, 401),
        ("/get_server_info", {"Authorization": KEY}, 401),
        ("/get_server_info", {"Authorization": f"bearer {KEY}"}, 200),
        ("/v1/models", {}, 401),
        ("/v1/models", AUTH, 200),
        ("/no/such/path", {}, 401),
        ("/no/such/path", AUTH, 404),
    ],
)
def test_api_key_like_sglang(
    model_dir: Path, path: str, headers: dict[str, str], status: int
) -> None:
    (response,) = requests(rank_argv(model_dir, "--enable-metrics"), get(path, headers))
    assert response.status_code == status
    assert response.headers["x-sparkllm-simulator"] == "true"
    if status == 401:
        assert response.json() == {"error": "Unauthorized"}


def test_health_is_503_while_starting(model_dir: Path) -> None:
    argv = rank_argv(model_dir, sim=["--sim-startup-seconds", "600"])
    health, ping, info = requests(
        argv, get("/health"), get("/ping", AUTH), get("/server_info", AUTH)
    )
    assert (health.status_code, ping.status_code, info.status_code) == (503, 503, 200)


def test_server_info_echoes_every_arg(model_dir: Path) -> None:
    old, new = requests(
        rank_argv(model_dir), get("/get_server_info", AUTH), get("/server_info", AUTH)
    )
    info = old.json()
    assert new.json().keys() == info.keys()
    expected = {
        "pp_size": 3, "tp_size": 1, "nnodes": 3, "node_rank": 0, "context_length": 64,
        "mem_fraction_static": 0.5, "chunked_prefill_size": 4096, "cuda_graph_max_bs_decode": 4,
        "max_running_requests": 8, "dist_init_addr": "127.0.0.1:5000", "host": "0.0.0.0",
        "served_model_name": "dsv4", "watchdog_timeout": 300, "dist_timeout": None,
        "enable_metrics": False, "version": "0.5.23", "simulator": True,
        "max_total_num_tokens": 1_385_544, "tool_call_parser": None,
    }  # fmt: skip
    assert {key: info[key] for key in expected} == expected
    assert "--pp-size 3" in info["launch_command"]


def test_tp2_pp2_ranks_report_their_layout(model_dir: Path) -> None:
    """TP=2 x PP=2 on four nodes: rank 0's server_info reports the layout as given, node
    rank 3's scheduler gauges carry its stage and tensor rank (1, 1)."""
    layout = ["--nnodes", "4", "--pp-size", "2", "--tp-size", "2", "--enable-metrics"]
    (info,) = requests(
        rank_argv(model_dir, *layout), get("/get_server_info", AUTH), partition="21,22"
    )
    reported = {key: info.json()[key] for key in ("tp_size", "pp_size", "nnodes", "node_rank")}
    assert reported == {"tp_size": 2, "pp_size": 2, "nnodes": 4, "node_rank": 0}
    (metrics,) = requests(rank_argv(model_dir, *layout, rank=3), get("/metrics"), partition="21,22")
    assert 'pp_rank="1"' in metrics.text
    assert 'tp_rank="1"' in metrics.text


def test_ignored_flag_shows_the_default(model_dir: Path) -> None:
    argv = rank_argv(model_dir, sim=["--sim-ignore-flag", "cuda-graph-max-bs-decode"])
    (response,) = requests(argv, get("/get_server_info", AUTH))
    assert response.json()["cuda_graph_max_bs_decode"] is None
    assert response.json()["context_length"] == 64


def test_model_endpoints(model_dir: Path) -> None:
    models, one, missing, info = requests(
        rank_argv(model_dir),
        get("/v1/models", AUTH),
        get("/v1/models/dsv4", AUTH),
        get("/v1/models/other", AUTH),
        get("/get_model_info", AUTH),
    )
    (card,) = models.json()["data"]
    assert (card["id"], card["owned_by"], card["max_model_len"]) == ("dsv4", "sglang", 64)
    assert one.json()["id"] == "dsv4"
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"
    assert info.json()["model_path"] == str(model_dir)
    assert info.json()["is_generation"] is True


def test_chat_non_stream_and_stream_agree(model_dir: Path) -> None:
    plain, streamed, again = requests(
        rank_argv(model_dir),
        post("/v1/chat/completions", chat("two words", max_tokens=5)),
        post("/v1/chat/completions", chat("two words", max_tokens=5, stream=True,
                                          stream_options={"include_usage": True})),
        post("/v1/chat/completions", chat("two words", max_tokens=5)),
    )  # fmt: skip
    body = plain.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["finish_reason"] == "length"
    text = body["choices"][0]["message"]["content"]
    assert len(text.split()) == 5
    assert again.json()["choices"][0]["message"]["content"] == text
    assert body["usage"] == {
        "prompt_tokens": 2, "total_tokens": 7, "completion_tokens": 5,
        "prompt_tokens_details": None, "reasoning_tokens": 0, "completion_tokens_details": None,
    }  # fmt: skip
    data = events(streamed)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(item) for item in data[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    assert "".join(c["choices"][0]["delta"]["content"] or "" for c in chunks[:-1]) == text
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 5


def test_stream_without_usage_has_no_usage_chunk(model_dir: Path) -> None:
    (streamed,) = requests(
        rank_argv(model_dir), post("/v1/chat/completions", chat("hi", stream=True))
    )
    chunks = [json.loads(item) for item in events(streamed)[:-1]]
    assert all(chunk["choices"] for chunk in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert len(chunks) == 32 + 2


def test_completions_default_to_16_tokens(model_dir: Path) -> None:
    plain, streamed = requests(
        rank_argv(model_dir),
        post("/v1/completions", {"prompt": "a b c"}),
        post("/v1/completions", {"prompt": "a b c", "max_tokens": 3, "stream": True}),
    )
    choice = plain.json()["choices"][0]
    assert (len(choice["text"].split()), choice["finish_reason"]) == (16, "length")
    assert plain.json()["object"] == "text_completion"
    chunks = [json.loads(item) for item in events(streamed)[:-1]]
    assert (
        "".join(c["choices"][0]["text"] for c in chunks)
        == choice["text"][: len("".join(c["choices"][0]["text"] for c in chunks))]
    )


OVER = "The input (64 tokens) is longer than the model's context length (64 tokens)."


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", chat(" ".join(["w"] * 64))),
        ("/v1/chat/completions", chat(" ".join(["w"] * 64), stream=True)),
        ("/v1/completions", {"prompt": " ".join(["w"] * 64), "stream": True}),
    ],
)
def test_over_length_prompt_rejected_like_sglang(
    model_dir: Path, path: str, body: dict[str, Any]
) -> None:
    (response,) = requests(rank_argv(model_dir), post(path, body))
    assert response.status_code == 400
    assert response.json() == {
        "object": "error", "message": OVER, "type": "BadRequestError", "param": None, "code": 400,
    }  # fmt: skip


def test_prompt_plus_max_tokens_over_window_rejected(model_dir: Path) -> None:
    (response,) = requests(
        rank_argv(model_dir), post("/v1/chat/completions", chat("a b c", max_tokens=62))
    )
    assert response.status_code == 400
    assert "You requested a total of 65 tokens" in response.json()["message"]


def test_generation_requires_json(model_dir: Path) -> None:
    (response,) = requests(
        rank_argv(model_dir),
        ("POST", "/v1/chat/completions", {"headers": {**AUTH, "content-type": "text/plain"},
                                          "content": "{}"}),
    )  # fmt: skip
    assert response.status_code == 400
    assert "application/json" in response.json()["message"]


def test_metrics_use_sglang_names_and_labels(model_dir: Path) -> None:
    _, metrics = requests(
        rank_argv(model_dir, "--enable-metrics"),
        post("/v1/chat/completions", chat("x y", max_tokens=3)),
        get("/metrics"),
    )
    text = metrics.text
    tokenizer_labels = 'engine_type="unified",is_streaming="false",model_name="dsv4"'
    assert f"sglang:prompt_tokens_total{{{tokenizer_labels}}} 2.0" in text
    assert f"sglang:generation_tokens_total{{{tokenizer_labels}}} 3.0" in text
    assert f"sglang:num_requests_total{{{tokenizer_labels}}} 1.0" in text
    for name in (
        "time_to_first_token_seconds",
        "e2e_request_latency_seconds",
        "inter_token_latency_seconds",
    ):
        assert f"sglang:{name}_count{{" in text
    scheduler_labels = (
        'engine_type="unified",model_name="dsv4",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    )
    for name in ("num_running_reqs", "num_queue_reqs", "num_used_tokens", "token_usage",
                 "gen_throughput", "cache_hit_rate"):  # fmt: skip
        assert f"sglang:{name}{{{scheduler_labels}}}" in text
    assert f"sglang:max_total_num_tokens{{{scheduler_labels}}} 1.385544e+06" in text


def test_metrics_absent_without_enable_metrics(model_dir: Path) -> None:
    (response,) = requests(rank_argv(model_dir), get("/metrics"))
    assert response.status_code == 404


@pytest.mark.parametrize("enable_metrics", [True, False])
def test_worker_is_a_dummy_health_server(model_dir: Path, enable_metrics: bool) -> None:
    extra = ["--enable-metrics"] if enable_metrics else []
    responses = requests(
        rank_argv(model_dir, *extra, rank=2),
        get("/ping"), get("/health"), get("/health_generate"), get("/metrics"),
        get("/v1/models", AUTH), get("/get_server_info", AUTH),
        ("POST", "/v1/chat/completions", {"json": chat("x"), "headers": AUTH}),
    )  # fmt: skip
    codes = [r.status_code for r in responses]
    assert codes == [200, 200, 200, 200 if enable_metrics else 404, 404, 404, 404]
    if enable_metrics:
        assert 'pp_rank="2"' in responses[3].text
        assert "sglang:prompt_tokens_total" not in responses[3].text


def test_tokenizer_json_is_used_for_counting(model_dir: Path) -> None:
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(
        ["hello world again"], trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    )
    tokenizer.save(str(model_dir / "tokenizer.json"))
    (response,) = requests(
        rank_argv(model_dir), post("/v1/chat/completions", chat("hello,world!", max_tokens=1))
    )
    # Whitespace pre-tokenizer splits punctuation: 4 tokens, where word counting says 1.
    assert response.json()["usage"]["prompt_tokens"] == 4


def test_request_slots_queue_beyond_capacity() -> None:
    metrics = EngineMetrics(model_name="m", pp_rank=0, max_total_num_tokens=100)
    slots = RequestSlots(capacity=1, metrics=metrics)

    def gauge(name: str) -> float | None:
        labels = {
            "model_name": "m",
            "engine_type": "unified",
            "tp_rank": "0",
            "pp_rank": "0",
            "moe_ep_rank": "0",
        }
        return metrics.registry.get_sample_value(f"sglang:{name}", labels)

    async def scenario() -> list[tuple[int, int, float | None, float | None]]:
        seen = []
        release = asyncio.Event()

        async def hold() -> None:
            async with slots.slot(prompt_tokens=10):
                await release.wait()

        first = asyncio.create_task(hold())
        second = asyncio.create_task(hold())
        for _ in range(10):  # a few scheduler turns let both tasks reach the semaphore
            await asyncio.sleep(0)
        seen.append((slots.running, slots.queued, gauge("num_queue_reqs"), gauge("token_usage")))
        release.set()
        await asyncio.gather(first, second)
        seen.append(
            (slots.running, slots.queued, gauge("num_queue_reqs"), gauge("num_used_tokens"))
        )
        return seen

    assert asyncio.run(scenario()) == [(1, 1, 1.0, 0.1), (0, 0, 0.0, 0.0)]


# --- issue 14: what reaches an engine, and a client that leaves -------------------------
# A chat's input_ids replace the rendered prompt, completion prompts of token ids or
# batches count every sequence (so a test shows what would have reached an engine), and
# a client that disconnects mid-stream aborts its generation at once, its running
# request count back to 0 (uvicorn drops writes to a closed connection silently).


def _usage(model: Path, path: str, body: dict[str, Any]) -> dict[str, Any]:
    (answer,) = requests(rank_argv(model), post(path, body))
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["usage"])


def test_chat_input_ids_are_the_prompt(model_dir: Path) -> None:
    usage = _usage(model_dir, "/v1/chat/completions", chat("hi", input_ids=[5] * 40, max_tokens=1))
    assert usage["prompt_tokens"] == 40


def test_completion_token_ids_and_batches_count_every_sequence(model_dir: Path) -> None:
    path = "/v1/completions"
    ids = _usage(model_dir, path, {"model": "dsv4", "prompt": [1, 2, 3], "max_tokens": 1})
    assert ids["prompt_tokens"] == 3
    batch = {"model": "dsv4", "prompt": [[1, 2], [3, 4, 5]], "max_tokens": 1}
    assert _usage(model_dir, path, batch)["prompt_tokens"] == 5
    one = _usage(model_dir, path, {"model": "dsv4", "prompt": "a b", "max_tokens": 1})
    two = _usage(model_dir, path, {"model": "dsv4", "prompt": ["a b", "a b"], "max_tokens": 1})
    assert two["prompt_tokens"] == 2 * one["prompt_tokens"]


def test_a_client_leaving_mid_stream_aborts_its_generation(model_dir: Path) -> None:
    rank = prepare(rank_argv(model_dir), env={"SGLANG_PP_LAYER_PARTITION": "14,14,15"})
    app: Any = rank.app
    body = json.dumps(chat("hi", stream=True, max_tokens=40, ignore_eos=True)).encode()

    async def run() -> float:
        left, streaming = asyncio.Event(), asyncio.Event()
        sent: list[dict[str, Any]] = []
        delivered = [False]

        async def receive() -> dict[str, Any]:
            if not delivered[0]:
                delivered[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if sum(m["type"] == "http.response.body" for m in sent) >= 3:
                streaming.set()  # mid-stream

        scope = {
            "type": "http", "method": "POST", "path": "/v1/chat/completions",
            "headers": [(b"content-type", b"application/json"),
                        (b"authorization", AUTH["Authorization"].encode())],
            "query_string": b"",
        }  # fmt: skip
        serving = asyncio.ensure_future(app(scope, receive, send))
        await asyncio.wait_for(streaming.wait(), timeout=10)
        assert app.generation.slots.running == 1
        left.set()
        started = time.monotonic()
        while app.generation.slots.running:
            await asyncio.sleep(0.01)
            assert time.monotonic() - started < 1.0, "the generation ran on"
        await asyncio.wait_for(serving, timeout=1)
        return time.monotonic() - started

    assert asyncio.run(run()) < 1.0


def test_messages_and_responses_as_the_wheels_models_shape_them(model_dir: Path) -> None:
    """Anthropic Messages and OpenAI Responses, answered as chats and shaped as SGLang
    0.5.23's own response models (validated with the pinned wheel's classes)."""
    from tests.unit import sglang_reference

    protocol, _, _ = sglang_reference.load()
    anthropic, _, _ = sglang_reference.converters()
    body = {"model": "dsv4", "max_tokens": 5, "system": "s", "messages": chat("hi")["messages"]}
    message, counted, response, streamed, stored = requests(
        rank_argv(model_dir),
        post("/v1/messages", body),
        post("/v1/messages/count_tokens", {"model": "dsv4", "messages": body["messages"]}),
        post("/v1/responses", {"model": "dsv4", "input": "hi", "max_output_tokens": 5}),
        post("/v1/responses", {"model": "dsv4", "input": "hi", "stream": True}),
        ("GET", "/v1/responses/resp_1", {"headers": AUTH}),
    )
    answer = anthropic.AnthropicMessagesResponse.model_validate(message.json())
    assert (answer.stop_reason, answer.usage.output_tokens) == ("max_tokens", 5)
    assert counted.json()["input_tokens"] > 0
    made = protocol.ResponsesResponse.model_validate({**response.json(), "usage": None})
    assert made.status == "incomplete"
    assert response.json()["output"][0]["content"][0]["text"]  # (the item types: openai's)
    usage = response.json()["usage"]  # the wheel's serializer makes this of its UsageInfo
    engine = protocol.UsageInfo(
        prompt_tokens=usage["input_tokens"], completion_tokens=5, total_tokens=usage["total_tokens"]
    )
    assert made.model_copy(update={"usage": engine}).model_dump()["usage"] == usage
    assert streamed.status_code == 400  # non-streamed only, said so
    assert "not streamed" in streamed.json()["message"]
    assert (stored.status_code, stored.json()["param"]) == (400, "response_id")
