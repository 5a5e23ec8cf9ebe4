"""The model's chat template, rendered the way the engine renders it before tokenising.

Why: the input cap counts the tokens the engine will actually process, and for chat
requests that is the rendered template (system prompt, tool definitions, role markers,
generation prompt), not the raw message text. The engine has two layers, reproduced in
two modules:

* here, Hugging Face transformers' Jinja environment (``apply_chat_template``): an
  ``ImmutableSandboxedEnvironment`` with ``trim_blocks``/``lstrip_blocks``, the
  ``loopcontrols`` extension, a ``{% generation %}`` block, ``raise_exception``,
  ``strftime_now``, a ``tojson`` that does not HTML-escape, the special tokens from
  ``tokenizer_config.json`` and ``add_generation_prompt=True``;
* in chat_messages.py, SGLang's message preparation before it calls the template
  (``serving_chat._apply_jinja_template``): what the messages look like when they reach
  the template. Admission prepares them there and renders them here.

Rendering runs user-controlled data through a sandbox: any failure is the request's
fault and surfaces as ``ChatTemplateError`` (a 400), never as a crash.
"""

from __future__ import annotations

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
from sparkllm.gateway.chat_messages import ChatTemplateError, ContentFormat, Message

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
_SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
_MESSAGE_VARIABLES = frozenset({"message", "msg", "m"})
_SHAPES = 256  # conversation shapes whose rendered length is kept (template_probe.py)


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


__all__ = [
    "CHAT_TEMPLATE_FILE",
    "TOKENIZER_CONFIG_FILE",
    "ChatTemplate",
    "ChatTemplateError",
    "ContentFormat",
    "detect_content_format",
]
