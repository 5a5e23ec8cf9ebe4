"""DeepSeek V4 prompts counted as SGLang encodes them: with DeepSeek's own encoder.

Why: SGLang 0.5.23 does not render a DeepSeek V4 chat with a Jinja template. When the
tool-call parser is ``deepseekv4``, or the checkpoint's architecture is ``DeepseekV4``
(``chat_encoding.resolve_chat_encoding_spec``: spec ``dsv4``), it turns the request into
token ids with ``deepseek-recipe``, DeepSeek's reference encoder (``DeepSeekRecipe`` in
``parser/deepseek_recipe_renderer.py``, the request mapping in
``entrypoints/openai/serving_deepseek_recipe.py``). A Jinja equivalent can only come
close, so the gateway runs the same encoder, pinned at the version SGLang requires, on
the checkpoint's own ``tokenizer.json``: the count is the engine's count.

What is reproduced, in SGLang's order: the trailing assistant turn (continued with
``continue_final_message``, else re-sent as a user turn, its tool calls dropped); null
content as ""; tools only when ``tool_choice`` is not "none" (one tool for a named
choice), unset fields dropped; thinking as SGLang's request validator decides it
(``chat_template_kwargs.thinking``, else on for a ``reasoning_effort`` other than "none"
or a ``reasoning`` object that enables it or names an effort); a named
``reasoning_effort`` (a number is refused, as SGLang refuses it for V4); the request
rewrite before the encoder (``developer`` as ``system``, object tool-call arguments as
compact JSON, "required" or a named choice as "auto", a structural-tag response format
left to the grammar); and SGLang's quick-instruction ``task``. Message fields SGLang's
request model does not know are dropped, as its parsing drops them. Images are refused:
V4 Flash and Pro take text only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import deepseek_recipe as recipe
from tokenizers import Tokenizer

from sparkllm.errors import GatewayError
from sparkllm.gateway import validation
from sparkllm.gateway.chat_template import ChatTemplateError
from sparkllm.gateway.tokens import PromptSize, longest_token_bytes, lower_bound

T = TypeVar("T")

DSV4: Final = "dsv4"
TOOL_CALL_PARSER: Final = "deepseekv4"
RECIPE_MODEL: Final = "DeepSeek-V4-Pro"  # the name SGLang gives recipe for every V4


def _special(name: str) -> str:
    """DeepSeek spells its special tokens with U+FF5C (fullwidth vertical line)."""
    return f"<\uff5c{name}\uff5c>"


IMAGE_TOKEN: Final = _special("deepseek_image")  # the checkpoint's image token
ASSISTANT_TOKEN: Final = _special("Assistant")
THINK_START, THINK_END = "<think>", "</think>"
# SGLang's quick-instruction tasks: "action" follows the generation header, the others
# replace it (DeepSeekRecipe._attach_task).
TASK_TOKENS: Final = {
    task: _special(task) for task in ("action", "query", "authority", "domain", "title", "read_url")
}
# The fields of SGLang's chat message model; its parsing drops any other.
_MESSAGE_FIELDS: Final = frozenset(
    {"role", "content", "tool_call_id", "name", "phase", "reasoning_content", "tool_calls"}
    | {"tools", "prefix"}
)
_FUNCTION_FIELDS: Final = ("description", "name", "parameters", "strict", "defer_loading")
_MEDIA_PARTS: Final = frozenset({"image_url", "video_url", "audio_url", "input_audio"})
_NUMBER: Final = re.compile(r"\d+(\.\d+)?")  # SGLang's numeric effort (_numeric_effort)


class FieldError(ChatTemplateError):
    """A request field other than the messages that SGLang refuses for V4 (a 400 naming it)."""

    def __init__(self, message: str, *, param: str) -> None:
        super().__init__(message)
        self.param = param


def chat_encoding(tokenizer_dir: Path, tool_call_parser: str | None) -> str | None:
    """SGLang's encoder choice for V4 (``dsv4``), or None for the Jinja template.

    The tool-call parser decides first, then ``config.json``'s architecture, as in
    SGLang. Other non-Jinja encoders (V3.2, V4.1, Kimi K3) are not reproduced; their
    names are returned so the caller can say the count is approximate.
    """
    by_parser = {
        "deepseekv4": DSV4, "deepseekv41": "dsv41", "deepseekv32": "dsv32", "kimi_k3": "kimi_k3"
    }  # fmt: skip
    if tool_call_parser in by_parser:
        return by_parser[tool_call_parser]
    try:
        config = json.loads((tokenizer_dir / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise GatewayError(f"cannot read {tokenizer_dir / 'config.json'}: {exc}") from exc
    architectures = config.get("architectures") if isinstance(config, dict) else None
    arch = str(architectures[0]) if isinstance(architectures, list) and architectures else ""
    if config.get("model_type") == "deepseek_v41" or "DeepseekV41" in arch:
        return "dsv41"
    if "DeepseekV4" in arch:
        return DSV4
    return "kimi_k3" if "KimiK3" in arch else None


class DeepSeekV4Prompt:
    """Counts a chat request's prompt tokens with deepseek-recipe, as SGLang's ``dsv4``."""

    def __init__(self, tokenizer_json: str) -> None:
        special = recipe.SpecialTokens(image=IMAGE_TOKEN)
        self._options = recipe.ConversionOptions().with_special_tokens(special)
        self._encoding = (
            recipe.DeepseekV4Encoding()
            .with_special_tokens(special)
            .with_tokenizer(recipe.Tokenizer.from_str(tokenizer_json))
        )
        self._tokenizer = Tokenizer.from_str(tokenizer_json)
        self._longest_token = longest_token_bytes(self._tokenizer)
        self._header = {
            thinking: [
                self._token_id(ASSISTANT_TOKEN),
                self._token_id(THINK_START if thinking else THINK_END),
            ]
            for thinking in (True, False)
        }

    @classmethod
    def from_dir(cls, tokenizer_dir: Path) -> DeepSeekV4Prompt:
        """Load the checkpoint's tokenizer; GatewayError if it cannot encode a V4 chat."""
        path = tokenizer_dir / "tokenizer.json"
        try:
            prompt = cls(path.read_text(encoding="utf-8"))
            prompt.count({"messages": [{"role": "user", "content": ""}]})
        except (OSError, ChatTemplateError, RuntimeError, ValueError) as exc:
            raise GatewayError(f"cannot encode DeepSeek V4 chats with {path}: {exc}") from exc
        return prompt

    def _token_id(self, token: str) -> int:
        token_id = self._tokenizer.token_to_id(token)
        if token_id is None:
            raise ValueError(f"the tokenizer has no token {token}")
        return int(token_id)

    def count(self, payload: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> int:
        """The prompt's exact length in tokens (see ``measure``)."""
        return self.measure(payload, exact_above=-1, byte_level=False, defaults=defaults).tokens

    def measure(
        self,
        payload: Mapping[str, Any],
        *,
        exact_above: int,
        byte_level: bool,
        refuse_above: int = -1,
        defaults: Mapping[str, Any] | None = None,
    ) -> PromptSize:
        """The prompt's length, exact unless its byte bound is already <= ``exact_above``,
        or its lower bound (bytes / longest token) already over ``refuse_above`` (>= 0).

        ``defaults`` are the engine's server chat template kwargs
        (``--default-chat-template-kwargs``): a default ``thinking`` or
        ``reasoning_effort`` applies where the request says nothing, as in SGLang.

        ``payload`` is a chat request that passed the gateway's shape checks; a request
        the encoder refuses raises ChatTemplateError. The bound (``byte_level``: the
        tokenizer is a plain byte-level BPE, tokens.py) is the rendered prompt's UTF-8
        length: every text piece has at most one token per byte, and every special
        token is one token spelled with several bytes.
        """
        body, task, task_prefix = self._request_body(payload, defaults)
        conversation = self._convert(body)
        thinking = body["thinking"]
        # a task (rare) is always encoded: its ids are checked as SGLang checks them
        if byte_level and (exact_above >= 0 or refuse_above >= 0) and task is None:
            rendered = self._call(self._encoding.render_conversation, conversation).prompt
            bound = len(rendered.encode("utf-8", "surrogatepass"))
            if bound <= exact_above:
                return PromptSize(bound, exact=False)
            least = lower_bound(bound, longest_token=self._longest_token)
            if 0 <= refuse_above < least:
                return PromptSize(least, exact=False, at_least=True)
        ids = self._call(self._encoding.encode, conversation)
        if task is not None:
            ids = self._attach_task(ids, task, thinking=thinking)
        extra = 0
        if task_prefix:
            extra = len(self._tokenizer.encode(task_prefix, add_special_tokens=False).ids)
        return PromptSize(len(ids) + extra, exact=True)

    def _request_body(
        self, payload: Mapping[str, Any], defaults: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], str | None, str | None]:
        """(SGLang's request body for recipe, the task, text to append after the task)."""
        messages = [_wire_message(m) for m in payload["messages"]]
        if any(_has_media(m.get("content")) for m in messages):
            raise ChatTemplateError("image, video and audio input is not supported")
        task = payload.get("task")
        if task is not None and task not in TASK_TOKENS:
            raise FieldError(f"unknown task {task!r}", param="task")
        continue_final = bool(payload.get("continue_final_message"))
        defaults = defaults or {}
        effort = _named_effort(payload, defaults)
        thinking = validation.thinking(payload, defaults)  # as SGLang resolves it
        task_prefix = None
        last = messages[-1]
        if last["role"] == "assistant" and isinstance(last.get("content"), str):
            last = {k: v for k, v in last.items() if k != "tool_calls"}
            if not continue_final:
                messages[-1] = {"role": "user", "content": last["content"]}
            elif task is not None:  # the task renders its own tail; the text follows it
                task_prefix = messages.pop()["content"]
                continue_final = False
            else:
                messages[-1] = last
        body: dict[str, Any] = {
            "messages": messages,
            "thinking": thinking,
            "continue_final_message": continue_final,
            "response_format": payload.get("response_format"),
        }
        # the tools SGLang hands the encoder: none for tool_choice "none", one for a name
        tools = validation.chat_tools(payload)
        if tools is not None:
            body["tools"] = [_tool(tool) for tool in tools]
            body["tool_choice"] = payload.get("tool_choice")
        body = {key: value for key, value in body.items() if value is not None}
        if effort is not None and effort != "none":
            body["reasoning_effort"] = effort
        return body, task, task_prefix

    def _convert(self, body: dict[str, Any]) -> recipe.Conversation:
        request = _recipe_request(body)
        try:
            return recipe.ChatCompletionRequest(request).convert(self._options).conversation
        except recipe.ConversionError as exc:
            raise ChatTemplateError(_error_message(exc.body)) from exc
        except (RuntimeError, TypeError, ValueError) as exc:
            raise ChatTemplateError(str(exc)) from exc

    @staticmethod
    def _call(function: Callable[[recipe.Conversation], T], conversation: recipe.Conversation) -> T:
        """The encoder's refusals (a special token it lacks, bad text) are the request's."""
        try:
            return function(conversation)
        except (RuntimeError, ValueError) as exc:
            raise ChatTemplateError(str(exc)) from exc

    def _attach_task(self, ids: list[int], task: str, *, thinking: bool) -> list[int]:
        header = self._header[thinking]
        if ids[-len(header) :] != header:
            raise ChatTemplateError("task requires the conversation to end with a user message")
        task_id = self._token_id(TASK_TOKENS[task])
        return [*ids, task_id] if task == "action" else [*ids[: -len(header)], task_id]


def _named_effort(payload: Mapping[str, Any], defaults: Mapping[str, Any]) -> str | None:
    """The reasoning effort, which for V4 must be a named tier (SGLang refuses numbers,
    also spelled as text); a server default's when the request names none."""
    raw = payload.get("reasoning_effort")
    if isinstance(raw, str) and _NUMBER.fullmatch(raw.strip()):
        raise FieldError(
            f"DeepSeek-V4 reasoning_effort must be a named tier, got {raw.strip()!r}",
            param="reasoning_effort",
        )
    effort = validation.effort(payload, defaults)
    if effort is None or (isinstance(effort, str) and not _NUMBER.fullmatch(effort.strip())):
        return effort
    param = "reasoning_effort" if raw is not None else "reasoning"
    if raw is None and payload.get("reasoning") is None:
        param = "chat_template_kwargs"  # the request's kwargs named it
    shown = effort.strip() if isinstance(effort, str) else effort
    message = f"DeepSeek-V4 reasoning_effort must be a named tier, got {shown!r}"
    raise FieldError(message, param=param)


def _wire_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message as SGLang's request model keeps it: known fields, role lowercased."""
    kept = {k: v for k, v in message.items() if k in _MESSAGE_FIELDS}
    kept["role"] = str(kept["role"]).lower()
    if kept.get("content") is None:
        kept["content"] = ""
    return kept


def _has_media(content: object) -> bool:
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") in _MEDIA_PARTS for part in content
    )


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool as SGLang's model dumps it, unset (None) fields dropped."""
    function = tool["function"]
    defer = tool.get("defer_loading")
    dumped = {k: function[k] for k in _FUNCTION_FIELDS if function.get(k) is not None}
    if defer is not None and function.get("defer_loading") is None:
        dumped["defer_loading"] = defer
    out: dict[str, Any] = {"type": tool.get("type") or "function", "function": dumped}
    if defer is not None:
        out["defer_loading"] = defer
    return out


def _recipe_request(body: Mapping[str, Any]) -> dict[str, Any]:
    """SGLang's rewrite of the request for recipe's Chat Completions adapter.

    Copies only what it changes (the client's nested objects are never written: the
    payload may still be forwarded), which keeps it off the path's cost.
    """
    request = dict(body)
    request["model"] = RECIPE_MODEL
    request["thinking"] = {"type": "enabled" if request["thinking"] else "disabled"}
    response_format = request.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "structural_tag":
        del request["response_format"]
    choice = request.get("tool_choice")
    if not request.get("tools") or choice == "none":
        request.pop("tools", None)
        request.pop("tool_choice", None)
    elif choice == "required" or isinstance(choice, dict):
        request["tool_choice"] = "auto"  # SGLang enforces the choice with its grammar
    messages = request["messages"] = [dict(message) for message in request["messages"]]
    for message in messages:
        if message["role"] == "developer":
            message["role"] = "system"
        calls = message.get("tool_calls")
        if isinstance(calls, list) and any(map(_object_arguments, calls)):
            message["tool_calls"] = [
                _with_json_arguments(call) if _object_arguments(call) else call for call in calls
            ]
    if request.pop("continue_final_message", False) and messages[-1]["role"] == "assistant":
        messages[-1]["prefix"] = True
    return request


def _object_arguments(call: object) -> bool:
    """A tool call whose ``function.arguments`` is not the JSON text OpenAI specifies."""
    function = call.get("function") if isinstance(call, dict) else None
    return isinstance(function, dict) and not isinstance(function.get("arguments", ""), str)


def _with_json_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call["function"]
    text = json.dumps(function["arguments"], ensure_ascii=False, separators=(",", ":"))
    return {**call, "function": {**function, "arguments": text}}


def _error_message(body: str) -> str:
    """recipe's refusal is an OpenAI error body; its message is what the client needs."""
    try:
        return str(json.loads(body)["error"]["message"])
    except (TypeError, ValueError, KeyError):
        return body
