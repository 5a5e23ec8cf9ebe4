"""OpenAI-compatible request parsing, window checks and response shapes, as SGLang 0.5.23 does them.

Why pure and separate: the gateway and the router are tested against these bodies, so
they must match SGLang's byte for byte where it matters — above all the rejection of an
over-long prompt. In 0.5.23 ``TokenizerManager._validate_one_request``
(``sglang/srt/managers/tokenizer_manager.py``) raises ``ValueError`` and the OpenAI
serving layer (``entrypoints/openai/serving_chat.py``, ``serving_completions.py``; also
for ``stream: true``, which is validated before any SSE byte is sent) answers it with
``create_error_response`` (``serving_base.py``): HTTP **400** and the JSON body
``{"object": "error", "message": "The input (N tokens) is longer than the model's context
length (C tokens).", "type": "BadRequestError", "param": null, "code": 400}``. The check
is ``N >= C``; a second one refuses ``N + max_new_tokens > C``. With
``--allow-auto-truncate`` both truncate instead.

Shapes follow ``entrypoints/openai/protocol.py`` (``ChatCompletionResponse``,
``ChatCompletionStreamResponse``, ``CompletionResponse``, ``UsageInfo``, ``ErrorResponse``).
Chat's ``max_tokens`` defaults to None (SGLang then runs to EOS); completions' to 16.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sparkllm_dev.sim.deepseek_v4 import ChatOutput, ToolSpec, first_tool, thinking_requested
from sparkllm_dev.sim.generation import chat_prompt_text

Kind = Literal["chat", "completion"]
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    kind: Kind
    prompt: str
    model: str
    # What the engine tokenises, as SGLang 0.5.23 takes it: the texts (a chat's rendered
    # messages, each completion prompt) and the token ids given as such (a chat's
    # ``input_ids``, which replace the template; completion prompts of ids). A completions
    # batch is one sequence per prompt; the simulator answers it as one.
    prompt_texts: tuple[str, ...]
    prompt_ids: int
    max_tokens: int | None
    stream: bool
    include_usage: bool
    ignore_eos: bool
    thinking: bool = False
    tool: ToolSpec | None = None
    sampled: bool = False
    """temperature > 0 without a seed: the answer varies (0 or a seed: deterministic)."""


class RejectedRequestError(Exception):
    """A request SGLang would answer with an error; carries the status and JSON body."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        super().__init__(body.get("message", "request rejected"))
        self.status = status
        self.body = dict(body)


def error_body(
    message: str, *, err_type: str = "BadRequestError", code: int = 400
) -> dict[str, Any]:
    """SGLang's ``ErrorResponse(...).model_dump()``."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


def _invalid(message: str) -> RejectedRequestError:
    # FastAPI request-validation failures are rewritten to 400 "Bad Request" by SGLang.
    return RejectedRequestError(400, error_body(message, err_type="Bad Request"))


def _optional_int(body: Mapping[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(f"{key} must be an integer")
    if value <= 0 and key == "max_tokens":
        raise _invalid("max_tokens must be positive")
    return value


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, int) and not isinstance(item, bool) for item in value
    )


def _completion_prompts(raw: Any) -> tuple[tuple[str, ...], int]:
    """(texts, token ids) of a completions ``prompt``: a string, token ids, or a batch."""
    if isinstance(raw, str):
        return (raw,), 0
    if _is_ids(raw) and raw:
        return (), len(raw)
    if isinstance(raw, list) and raw and all(isinstance(part, str) for part in raw):
        return tuple(raw), 0
    if isinstance(raw, list) and raw and all(_is_ids(part) for part in raw):
        return (), sum(map(len, raw))
    raise _invalid("prompt: field required (a string, token ids, or a list of either)")


def parse_generation_request(kind: Kind, body: Any, *, default_model: str) -> GenerationRequest:
    """The parts of a chat or completions body the simulator uses; RejectedRequestError if bad."""
    if not isinstance(body, Mapping):
        raise _invalid("request body must be a JSON object")
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
            raise _invalid("messages: field required (a list of message objects)")
        prompt = chat_prompt_text(messages)
        max_tokens = _optional_int(body, "max_completion_tokens") or _optional_int(
            body, "max_tokens"
        )
        input_ids = body.get("input_ids")
        texts: tuple[str, ...] = (prompt,)
        ids = 0
        if isinstance(input_ids, list) and _is_ids(input_ids):  # replaces the template
            texts, ids = (), len(input_ids)
    else:
        texts, ids = _completion_prompts(body.get("prompt"))
        prompt = "".join(texts)
        given = _optional_int(body, "max_tokens")
        max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS if "max_tokens" not in body else given
    options = body.get("stream_options")
    include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
    model = body.get("model")
    temperature = body.get("temperature")
    sampled = (
        isinstance(temperature, (int, float))
        and not isinstance(temperature, bool)
        and temperature > 0
        and body.get("seed") is None
    )
    return GenerationRequest(
        kind=kind,
        prompt=prompt,
        model=model if isinstance(model, str) else default_model,
        prompt_texts=texts,
        prompt_ids=ids,
        max_tokens=max_tokens,
        stream=bool(body.get("stream", False)),
        include_usage=include_usage,
        ignore_eos=bool(body.get("ignore_eos", False)),
        thinking=kind == "chat" and thinking_requested(body),
        tool=first_tool(body) if kind == "chat" else None,
        sampled=sampled,
    )


def fit_context_window(
    *, prompt_tokens: int, max_tokens: int | None, context_length: int, auto_truncate: bool
) -> tuple[int, int | None]:
    """(prompt tokens, max new tokens) after SGLang's window checks, else RejectedRequestError."""
    if prompt_tokens >= context_length:
        if not auto_truncate:
            raise RejectedRequestError(
                400,
                error_body(
                    f"The input ({prompt_tokens} tokens) is longer than the model's "
                    f"context length ({context_length} tokens)."
                ),
            )
        prompt_tokens = context_length
    if max_tokens is not None and prompt_tokens + max_tokens > context_length:
        if not auto_truncate:
            total = prompt_tokens + max_tokens
            raise RejectedRequestError(
                400,
                error_body(
                    "Requested token count exceeds the model's maximum context length "
                    f"of {context_length} tokens. You requested a total of {total} "
                    f"tokens: {prompt_tokens} tokens from the input messages and "
                    f"{max_tokens} tokens for the completion. Please reduce the number "
                    "of tokens in the input messages or the completion to fit within "
                    "the limit."
                ),
            )
        max_tokens = max(0, context_length - prompt_tokens)
    return prompt_tokens, max_tokens


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    }


@dataclass(frozen=True, slots=True)
class ResponseShapes:
    """Builds the JSON objects of one response (non-streamed or each SSE chunk)."""

    request: GenerationRequest
    rid: str
    created: int

    def _envelope(self, *, chunk: bool) -> dict[str, Any]:
        chat = self.request.kind == "chat"
        obj = (
            ("chat.completion.chunk" if chunk else "chat.completion") if chat else "text_completion"
        )
        return {"id": self.rid, "object": obj, "created": self.created, "model": self.request.model}

    def full(self, output: ChatOutput, *, prompt_tokens: int) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0}
        text = "".join(output.content)
        if self.request.kind == "chat":
            choice["message"] = {
                "role": "assistant",
                "content": None if output.tool_calls and not text else text,
                "reasoning_content": "".join(output.reasoning) or None,
            }
            if output.tool_calls:
                choice["message"]["tool_calls"] = tool_calls_json(self.rid, output)
        else:
            choice["text"] = text
        choice |= {"logprobs": None, "finish_reason": output.finish_reason, "matched_stop": None}
        return {
            **self._envelope(chunk=False),
            "choices": [choice],
            "usage": usage(prompt_tokens, output.completion_tokens),
            "metadata": {"weight_version": "default"},
        }

    def chunk(
        self,
        text: str | None,
        *,
        finish_reason: str | None = None,
        first: bool = False,
        reasoning: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0}
        if self.request.kind == "chat":
            role = "assistant" if first else None
            choice["delta"] = {"role": role, "content": text, "reasoning_content": reasoning}
            if tool_calls:
                choice["delta"]["tool_calls"] = tool_calls
        else:
            choice["text"] = text or ""
        choice |= {"logprobs": None, "finish_reason": finish_reason, "matched_stop": None}
        return {**self._envelope(chunk=True), "choices": [choice], "usage": None}

    def usage_chunk(self, *, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
        return {
            **self._envelope(chunk=True),
            "choices": [],
            "usage": usage(prompt_tokens, completion_tokens),
        }


def tool_calls_json(rid: str, output: ChatOutput) -> list[dict[str, Any]]:
    """``tool_calls`` entries as SGLang's ``ToolCall`` dumps them."""
    return [
        {
            "id": f"call_{rid[:8]}_{index}",
            "index": index,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for index, call in enumerate(output.tool_calls)
    ]
