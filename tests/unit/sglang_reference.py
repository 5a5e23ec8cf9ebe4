"""SGLang 0.5.23's own request handling, loaded from the pinned wheel, as a test reference.

Not a test module. The dev venv holds the sglang wheel without its dependencies, so the
engine cannot be imported as is. What the differential test needs is pure request
handling: the OpenAI request models and their validators (``protocol.py``) and the chat
serving layer's message preparation (``serving_chat.py``: ``_validate_request``,
``_process_messages``, ``_apply_jinja_template``, the DeepSeek V4 adapter in
``serving_deepseek_recipe.py``). Those modules are imported for real; only imports they
make at module level for other code paths are stubbed, and the stubs are never called
on the paths under test:

* third-party packages not installed here: torch, numpy, transformers, openai (its
  Responses API types), msgspec, fastapi, jsonschema (``check_schema`` becomes a no-op:
  tool parameter schemas are not checked), xgrammar, mistral_common, partial_json_parser
  and the like; ``orjson`` is the stdlib ``json`` (``loads``/``dumps`` semantics), and
  ``regex`` the stdlib ``re``;
* engine internals: the scheduler's batch types, kernels, distributed state, layers,
  model runner, KV cache, model configs, disaggregation, observability and the
  tool-call output parsers (``sglang.srt.function_call``: no ``--tool-call-parser`` is
  configured on the Jinja path; the V4 adapter is built without them).

The tokenizer SGLang's serving layer calls is a stand-in
(tests/unit/transformers_reference.py) whose chat-template rendering is transformers'
own code. No code of the gateway's takes part: everything SGLang does to the request and
the Jinja rendering are the pinned releases' own code.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import re
import sys
import types
import warnings
from pathlib import Path
from typing import Any

from sparkllm_dev.sglang_stubs import StubFinder, stand_in_orjson

_LOADED: list[types.ModuleType] = []


def load() -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    """(protocol, serving_chat, serving_deepseek_recipe) from the pinned wheel.

    The stubs exist only while importing: afterwards ``sys.modules`` and the import
    machinery are as they were (the loaded modules keep their own references), so no
    other test sees a stub, the stand-in ``orjson`` or half of SGLang.
    """
    if _LOADED:
        return _LOADED[0], _LOADED[1], _LOADED[2]
    before = set(sys.modules)
    finder = StubFinder()
    finder.absent.add("xgrammar")  # protocol.py tries it and falls back to Any
    sys.modules.setdefault("regex", re)
    sys.modules.setdefault("orjson", stand_in_orjson())
    sys.meta_path.insert(0, finder)
    try:
        importlib.import_module("sglang.srt.entrypoints.openai.protocol")
        # serving_chat.py catches its MistralCommonException with the template errors: a
        # stand-in class there would break that except clause; absent, it is left out.
        finder.absent.clear()
        finder.absent.add("mistral_common")
        _LOADED.extend(
            importlib.import_module(f"sglang.srt.entrypoints.{name}")
            for name in (
                *("openai.protocol", "openai.serving_chat", "openai.serving_deepseek_recipe"),
                # How Messages and Responses bodies become chats (converters() below).
                *("anthropic.protocol", "anthropic.serving", "openai.serving_responses"),
            )
        )
    finally:
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before:
            del sys.modules[name]
    return _LOADED[0], _LOADED[1], _LOADED[2]


def converters() -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    """(anthropic.protocol, anthropic.serving, openai.serving_responses) from the wheel,
    loaded with ``load()``'s modules (one ``ChatCompletionRequest`` class for all)."""
    load()
    return _LOADED[3], _LOADED[4], _LOADED[5]


def sglang_file(relative: str) -> Path:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None
    assert spec.submodule_search_locations is not None
    return Path(spec.submodule_search_locations[0], relative)


def serving(serving_chat: types.ModuleType, *, tokenizer: Any, content_format: str) -> Any:
    """An ``OpenAIServingChat`` for a Jinja-template model, no parsers configured.

    Built without its constructor (which reads the engine's model config); the attributes
    set are the ones the constructor derives for such a model. Overridden: the two
    methods that ask the (stubbed) tool-call parser registry about output parsing.
    """

    class Serving(serving_chat.OpenAIServingChat):  # type: ignore[misc,name-defined]
        def _template_turn_grammar(self) -> bool:
            return False

        def _requires_response_template_detokenization(self, request: Any) -> bool:
            return False

    # The server's settings _validate_request reads (the engine publishes them at boot).
    serving_chat.get_model = lambda: types.SimpleNamespace(context_length=None)
    serving_chat.get_serving = lambda: types.SimpleNamespace(
        trust_request_chat_template=False, allow_auto_truncate=False, return_input_ids=False
    )
    chat = object.__new__(Serving)
    chat.tokenizer_manager = types.SimpleNamespace(
        tokenizer=tokenizer,
        served_model_name="model",
        model_config=types.SimpleNamespace(is_multimodal=False),
    )
    chat.template_manager = types.SimpleNamespace(
        chat_template_name=None,
        jinja_template_content_format=content_format,
        jinja_template_may_reorder_tool_results=False,
        python_chat_template=None,
        reasoning_config=None,
    )
    chat.tool_call_parser = None
    chat.reasoning_parser = None
    chat.default_chat_template_kwargs = {}
    chat._reasoning_detector = None
    chat.is_gpt_oss = chat.is_gemma4 = chat.is_minimax_m3 = False
    chat.chat_encoding_spec = None
    chat._encoding_adapter = None
    chat._tokenizer_auto_adds_specials = False
    chat._prompt_text_round_trip_is_lossy = False
    chat._chat_template_cache = {}
    return chat


def count(protocol: types.ModuleType, chat: Any, body: bytes) -> int:
    """The prompt's length as SGLang computes it from the raw body; ValueError if refused."""
    from pydantic import ValidationError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # SGLang reads max_tokens
        try:
            request = protocol.ChatCompletionRequest.model_validate(json.loads(body))
        except ValidationError as exc:
            raise ValueError(f"request model: {exc}") from exc
        problem = chat._validate_request(request)
        if problem is not None:
            raise ValueError(problem)
        result = chat._process_messages(request, is_multimodal=False)
    return len(result.prompt_ids)
