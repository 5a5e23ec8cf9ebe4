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

_STUBBED_PACKAGES = frozenset(
    {
        *("torch", "numpy", "transformers", "openai", "msgspec", "fastapi", "jsonschema"),
        *("xgrammar", "mistral_common", "partial_json_parser", "PIL", "triton", "zmq"),
        *("uvloop", "aiohttp", "requests", "psutil", "setproctitle", "sentencepiece"),
        *("einops", "safetensors", "huggingface_hub", "pybase64", "soundfile", "decord"),
        *("outlines", "llguidance", "starlette", "IPython", "tqdm", "filelock", "blobfile"),
        *("tiktoken", "interegular", "compressed_tensors", "gguf", "scipy", "cv2", "av"),
        *("sgl_kernel", "flashinfer", "pynvml", "vllm", "torchvision", "torchaudio"),
        *("msgpack", "datasets", "modelscope", "pandas", "ray", "accelerate", "peft"),
        *("timm", "librosa", "openai_harmony", "anthropic", "nvidia", "amdsmi"),
    }
)
_STUBBED_SGLANG = (
    "sglang.srt.managers.schedule_batch",
    "sglang.kernels",
    "sglang.srt.distributed",
    "sglang.srt.layers",
    "sglang.srt.model_executor",
    "sglang.srt.mem_cache",
    "sglang.srt.configs",
    "sglang.srt.disaggregation",
    "sglang.srt.observability",
    "sglang.srt.function_call",
)
# Attribute names a stub must not pretend to have (Python and pydantic probe them).
_REAL_DUNDERS = frozenset(
    {
        "__wrapped__", "__signature__", "__origin__", "__args__", "__parameters__",
        "__get_pydantic_json_schema__", "__supertype__", "__annotations__",
        "__dataclass_fields__", "__name__", "__qualname__", "__module__", "__dict__",
        "__orig_bases__", "__deepcopy__", "__copy__", "__reduce_ex__", "__getstate__",
        "__set_name__", "__get__", "__fspath__", "__path__", "__file__", "__spec__",
        "__loader__", "__all__", "__set__", "__delete__", "__self__", "__func__",
        "__code__", "__isabstractmethod__", "__slots__", "__bases__", "__mro__",
        "__class__", "__abstractmethods__", "__type_params__", "__pydantic_fields__",
        "__pydantic_decorators__", "__pydantic_generic_metadata__", "__pydantic_complete__",
        "__pydantic_validator__", "__pydantic_serializer__", "__private_attributes__",
        "__get_validators__", "__modify_schema__", "__version__", "__pydantic_core_schema__",
        "__pydantic_root_model__", "__pydantic_custom_init__", "__pydantic_post_init__",
        "__pydantic_parent_namespace__", "__class_vars__", "__pydantic_extra__",
    }
)  # fmt: skip


class _StubType(type):
    """The class of stand-in classes: any attribute, subscript or union is a stand-in."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **_: Any):
        return super().__new__(mcs, name, bases, namespace)

    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **_: Any):
        super().__init__(name, bases, namespace)

    def __getattr__(cls, name: str) -> Any:
        if name in _REAL_DUNDERS:
            raise AttributeError(name)
        return Stub()

    def __getitem__(cls, item: object) -> Any:
        return cls

    def __or__(cls, other: object) -> Any:
        return cls

    def __ror__(cls, other: object) -> Any:
        return cls

    def __bool__(cls) -> bool:
        return False

    def __iter__(cls) -> Any:
        return iter(())

    def __contains__(cls, item: object) -> bool:
        return False


class Stub(metaclass=_StubType):
    """A stand-in value: callable, subscriptable, falsy, empty; pydantic takes any value."""

    def __init_subclass__(cls, **_: Any) -> None:
        pass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.any_schema()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else Stub()

    def __bool__(self) -> bool:
        return False

    def __contains__(self, item: object) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __index__(self) -> int:
        return 0

    def __getitem__(self, item: object) -> Any:
        return Stub()

    def __setitem__(self, item: object, value: object) -> None:
        pass

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (Stub,)


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        stand_in = _StubType(name, (Stub,), {})
        setattr(self, name, stand_in)
        return stand_in


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self.absent: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        top = fullname.split(".", maxsplit=1)[0]
        if top in self.absent:
            return None
        stubbed = top in _STUBBED_PACKAGES or any(
            fullname == name or fullname.startswith(name + ".") for name in _STUBBED_SGLANG
        )
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True) if stubbed else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "2.9.0"  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _orjson() -> types.ModuleType:
    module = types.ModuleType("orjson")
    module.loads = json.loads  # type: ignore[attr-defined]
    module.dumps = lambda value, **_: json.dumps(value).encode()  # type: ignore[attr-defined]
    module.JSONDecodeError = json.JSONDecodeError  # type: ignore[attr-defined]
    return module


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
    finder = _StubFinder()
    finder.absent.add("xgrammar")  # protocol.py tries it and falls back to Any
    sys.modules.setdefault("regex", re)
    sys.modules.setdefault("orjson", _orjson())
    sys.meta_path.insert(0, finder)
    try:
        importlib.import_module("sglang.srt.entrypoints.openai.protocol")
        # serving_chat.py catches its MistralCommonException with the template errors: a
        # stand-in class there would break that except clause; absent, it is left out.
        finder.absent.clear()
        finder.absent.add("mistral_common")
        _LOADED.extend(
            importlib.import_module(f"sglang.srt.entrypoints.openai.{name}")
            for name in ("protocol", "serving_chat", "serving_deepseek_recipe")
        )
    finally:
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before:
            del sys.modules[name]
    return _LOADED[0], _LOADED[1], _LOADED[2]


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
