"""The model's chat template, rendered the way the engine renders it before tokenising.

Why: the input cap counts the tokens the engine will actually process, and for chat
requests that is the rendered template (system prompt, tool definitions, role markers,
generation prompt), not the raw message text. Two layers are reproduced here:

* Hugging Face transformers' Jinja environment (``apply_chat_template``): an
  ``ImmutableSandboxedEnvironment`` with ``trim_blocks``/``lstrip_blocks``, the
  ``loopcontrols`` extension, a ``{% generation %}`` block, ``raise_exception``,
  ``strftime_now``, a ``tojson`` that does not HTML-escape, the special tokens from
  ``tokenizer_config.json`` and ``add_generation_prompt=True``;
* SGLang's message preparation before it calls the template
  (``serving_chat._apply_jinja_template``): null fields dropped, ``content: null``
  rendered as "", text parts joined with a space for templates that take string content,
  tool-call ``arguments`` parsed from JSON, and a trailing assistant message either
  continued (``continue_final_message``) or turned into a user turn; a conversation left
  empty is refused, as transformers' ``apply_chat_template`` refuses it.

Rendering runs user-controlled data through a sandbox: any failure is the request's
fault and surfaces as ``ChatTemplateError`` (a 400), never as a crash.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from sparkllm.errors import GatewayError
from sparkllm.gateway import template_probe

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
RESERVED_TEMPLATE_VARIABLES = frozenset({"messages", "tools", "documents", "add_generation_prompt"})
_SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
_TEXT_PART_TYPES = frozenset({"text", "input_text"})
_NULLABLE_FUNCTION_FIELDS = frozenset({"description", "parameters"})
# SGLang's chat message fields (ChatCompletionMessageGenericParam), in its order.
_MESSAGE_FIELDS = (
    *("role", "content", "tool_call_id", "name", "phase", "reasoning_content"),
    *("tool_calls", "tools", "prefix"),
)
_MESSAGE_VARIABLES = frozenset({"message", "msg", "m"})
_SHAPES = 256  # conversation shapes whose rendered length is kept (template_probe.py)

Message = dict[str, Any]


class ContentFormat(enum.StrEnum):
    """How a template expects ``message.content`` (SGLang's detection, same names)."""

    STRING = "string"  # plain text; content parts are joined with a space
    OPENAI = "openai"  # a list of {"type": "text", "text": ...} parts


class ChatTemplateError(ValueError):
    """The request's messages cannot be rendered by the template (the client's fault)."""


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(date_format: str) -> str:
    return datetime.now().strftime(date_format)


class _GenerationBlock(Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body (transformers' tag)."""

    tags = {"generation"}  # noqa: RUF012 (jinja2 declares it a mutable set)

    def parse(self, parser: jinja2.parser.Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_render_body")
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Callable[[], str]) -> str:
        return caller()


_Environment = TypeVar("_Environment", bound=ImmutableSandboxedEnvironment)


def _environment(kind: type[_Environment]) -> _Environment:
    environment = kind(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment


def _iterates_message_content(node: nodes.Node) -> bool:
    while isinstance(node, nodes.Filter | nodes.Test) and node.node is not None:
        node = node.node
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
        return _iterates_message_content(node.node)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        key = node.arg.value
    elif isinstance(node, nodes.Getattr):
        key = node.attr
    else:
        return False
    target = node.node
    return key == "content" and isinstance(target, nodes.Name) and target.name in _MESSAGE_VARIABLES


def detect_content_format(source: str) -> ContentFormat:
    """OPENAI if the template loops over ``message.content`` (or is multimodal), else STRING."""
    if any(word in source for word in ("image", "audio", "video", "vision")):
        return ContentFormat.OPENAI
    tree = _environment(ImmutableSandboxedEnvironment).parse(source)
    loops = tree.find_all(nodes.For)
    if any(_iterates_message_content(loop.iter) for loop in loops):
        return ContentFormat.OPENAI
    return ContentFormat.STRING


def _token_text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _special_tokens(config: Mapping[str, Any]) -> dict[str, Any]:
    tokens: dict[str, Any] = {}
    for key in _SPECIAL_TOKEN_KEYS:
        text = _token_text(config.get(key))
        if text is not None:
            tokens[key] = text
    extra = config.get("additional_special_tokens")
    if isinstance(extra, list):
        tokens["additional_special_tokens"] = [
            text for text in map(_token_text, extra) if text is not None
        ]
    return tokens


def _template_sources(config: Mapping[str, Any]) -> dict[str, str]:
    template = config.get("chat_template")
    if isinstance(template, str):
        return {"default": template}
    if isinstance(template, list):
        return {
            str(item["name"]): str(item["template"])
            for item in template
            if isinstance(item, Mapping) and "name" in item and "template" in item
        }
    return {}


class ChatTemplate:
    """A compiled chat template (plus its optional ``tool_use`` variant) and special tokens."""

    def __init__(self, sources: Mapping[str, str], *, special_tokens: Mapping[str, Any]) -> None:
        if "default" not in sources:
            raise GatewayError("the chat template has no 'default' variant")
        environment = _environment(ImmutableSandboxedEnvironment)
        probing = _environment(template_probe.ProbeEnvironment)
        probing.guard()
        try:
            self._templates = {name: environment.from_string(src) for name, src in sources.items()}
            self._probe_templates = {
                name: probing.from_string(src)
                for name, src in sources.items()
                if template_probe.probeable(probing.parse(src))
            }
        except jinja2.TemplateError as exc:
            raise GatewayError(f"the chat template does not compile: {exc}") from exc
        self.content_format = detect_content_format(sources["default"])
        self._special_tokens = dict(special_tokens)
        self._lengths = functools.lru_cache(maxsize=_SHAPES)(self._probe)

    @classmethod
    def load(cls, *, tokenizer_dir: Path, override_path: Path | None = None) -> ChatTemplate:
        """Read the template as the engine would: override file, chat_template.jinja, config."""
        config_path = tokenizer_dir / TOKENIZER_CONFIG_FILE
        separate_file = tokenizer_dir / CHAT_TEMPLATE_FILE
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
            if not isinstance(config, dict):
                raise GatewayError(f"{config_path} is not a JSON object")
            sources = _template_sources(config)
            if override_path is not None:
                sources = {"default": override_path.read_text(encoding="utf-8")}
            elif separate_file.is_file():
                sources = {"default": separate_file.read_text(encoding="utf-8")}
        except (OSError, ValueError) as exc:
            raise GatewayError(f"cannot read the chat template: {exc}") from exc
        if not sources:
            raise GatewayError(
                f"no chat template: {config_path} has no chat_template and no "
                f"{CHAT_TEMPLATE_FILE} or chat_template_path was given"
            )
        return cls(sources, special_tokens=_special_tokens(config))

    def render(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        template_kwargs: Mapping[str, Any],
    ) -> str:
        """The prompt text for ``messages`` with the generation prompt appended."""
        template = self._templates[self._variant(tools)]
        try:
            return self._render(template, messages, tools=tools, template_kwargs=template_kwargs)
        except Exception as exc:  # anything the template raises is due to the input
            raise ChatTemplateError(f"{type(exc).__name__}: {exc}") from exc

    def rendered_bytes(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        template_kwargs: Mapping[str, Any],
    ) -> int | None:
        """``len(render(...).encode())`` without rendering, or None if it must render.

        Known when this conversation's shape was probed (template_probe.py): the
        template placed its texts without looking at them. Raises ValueError (as
        encoding the rendered prompt would) for a text with unpaired surrogates.
        """
        variant = self._variant(tools)
        if variant not in self._probe_templates:
            return None
        split = template_probe.split_texts(messages)
        if split is None:
            return None
        shape = template_probe.Shape(variant, split[0], tools, template_kwargs)
        lengths = self._lengths(shape) if shape.cacheable else None
        return None if lengths is None else template_probe.rendered_bytes(lengths, split[1])

    def _variant(self, tools: Sequence[Mapping[str, Any]] | None) -> str:
        return "tool_use" if tools and "tool_use" in self._templates else "default"

    def _render(
        self,
        template: jinja2.Template,
        messages: Sequence[Any],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        template_kwargs: Mapping[str, Any],
    ) -> str:
        variables = {**self._special_tokens, **template_kwargs}
        return template.render(
            messages=messages, tools=tools, documents=None, add_generation_prompt=True, **variables
        )

    def _probe(self, shape: template_probe.Shape) -> template_probe.Lengths | None:
        template = self._probe_templates[shape.variant]
        return template_probe.probe(
            lambda messages: self._render(
                template, messages, tools=shape.tools, template_kwargs=shape.template_kwargs
            ),
            shape,
        )


def _joined_text(parts: Sequence[Any]) -> str:
    return " ".join(str(part["text"]) for part in parts if part.get("type") in _TEXT_PART_TYPES)


def prepare_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    content_format: ContentFormat,
    continue_final_message: bool,
) -> tuple[list[Message], str]:
    """SGLang's message preparation; returns the messages and an assistant prefix.

    ``messages`` as SGLang's request model dumps them (``message_dump``). Expects shapes
    already validated by admission (objects with a string role; content a
    string, null or a list of text parts; reasoning parts are left out, as SGLang does).
    Raises ChatTemplateError for tool-call arguments that are not a JSON object, and when
    no message is left (a lone assistant message continued), as the engine does.
    """
    prepared: list[Message] = []
    for original in messages:
        message = {  # a null content becomes "" in its place, as SGLang writes it
            key: "" if value is None else value
            for key, value in original.items()
            if value is not None or key == "content"
        }
        content = message.get("content", "")
        if isinstance(content, list):
            if content_format is ContentFormat.STRING or message.get("role") == "tool":
                content = _joined_text(content)
            else:
                content = [
                    {"type": "text", "text": part["text"]}
                    for part in content
                    if part.get("type") in _TEXT_PART_TYPES
                ]
        message["content"] = content
        if message.get("role") == "assistant" and isinstance(message.get("tool_calls"), list):
            message["tool_calls"] = [_parsed_tool_call(call) for call in message["tool_calls"]]
        prepared.append(message)
    prefix = ""
    if prepared and prepared[-1].get("role") == "assistant":
        last_content = prepared[-1]["content"]
        if isinstance(last_content, str):
            if continue_final_message:
                prefix = last_content
                prepared.pop()
            else:
                prepared[-1] = {"role": "user", "content": last_content}
    if not prepared:  # transformers' apply_chat_template refuses it (a 400 from the engine)
        raise ChatTemplateError("Cannot apply chat template to an empty conversation.")
    return prepared, prefix


def message_dump(message: Mapping[str, Any]) -> Message:
    """The message as SGLang's request model dumps it: its fields only, unset ones null.

    A user message keeps role and content; others also their tool-call id, name, phase,
    reasoning content, tool calls (id, index, type, function name and arguments) and
    tools (as ``validation`` dumps them), and the prefix flag. The role is lower-cased.
    """
    role = str(message["role"]).lower()
    if role == "user":
        return {"role": role, "content": message.get("content")}
    dumped = {field: message.get(field) for field in _MESSAGE_FIELDS}
    dumped["role"] = role
    calls = dumped["tool_calls"]
    if isinstance(calls, list):
        dumped["tool_calls"] = [_call_dump(call) for call in calls]
    if isinstance(dumped["tools"], list):
        dumped["tools"] = [tool_dump(tool) for tool in dumped["tools"]]
    return dumped


def tool_dump(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool as SGLang's ``Tool`` model dumps it for the chat template.

    ``type``, ``function`` and ``defer_loading`` (null when unset); the function's
    ``description`` and ``parameters`` (null when unset), ``strict`` and
    ``defer_loading`` only when set, in the client's key order; other keys dropped.
    Expects a shape validation.py checked.
    """
    function = tool["function"]
    defer = tool.get("defer_loading")
    function_defer = function.get("defer_loading")
    fields = {
        "description": function.get("description"),
        "name": function["name"],
        "parameters": function.get("parameters"),
        "strict": function.get("strict"),
        "defer_loading": defer if function_defer is None else function_defer,
    }
    dumped = {k: v for k, v in fields.items() if v is not None or k in _NULLABLE_FUNCTION_FIELDS}
    order = [key for key in function if key in dumped]
    dumped = {key: dumped[key] for key in order + [k for k in dumped if k not in order]}
    return {"type": tool.get("type", "function"), "function": dumped, "defer_loading": defer}


def _call_dump(call: Any) -> Any:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        return call
    function = call["function"]
    return {
        "id": call.get("id"),
        "index": call.get("index"),
        "type": call.get("type", "function"),
        "function": {"name": function.get("name"), "arguments": function.get("arguments")},
    }


def _parsed_tool_call(call: Any) -> Any:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except (ValueError, RecursionError) as exc:
        raise ChatTemplateError("tool call function.arguments must be valid JSON") from exc
    if not isinstance(arguments, dict):
        raise ChatTemplateError("tool call function.arguments must be a JSON object")
    return {**call, "function": {**function, "arguments": arguments}}
