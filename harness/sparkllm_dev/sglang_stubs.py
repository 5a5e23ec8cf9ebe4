"""Stand-in modules for what SGLang's wheel imports but a dev virtualenv does not hold.

Why: the dev venv installs the sglang wheel without its dependencies (torch, CUDA
kernels and the like), yet two things run SGLang's own code from it: the tests' reference
of its request handling (``tests/unit/sglang_reference.py``) and the dev cluster's launch
check (``sparkllm_dev.sim.launch_check``: the operator's program, SGLang's own argument
parser). The modules they run import those packages, and some of SGLang's engine
internals, at module level for code paths they never take. While importing, ``StubFinder``
answers those names with stand-ins (``Stub``: callable, subscriptable, falsy, empty); the
code under test runs for real. ``exclude`` keeps a listed module real (by its full
name; a top-level name keeps its whole package): the launch check needs the real
``msgspec`` (SGLang's ServerArgs is a msgspec Struct) and the dependency-free
``sglang.srt.function_call.parser_names`` (the ``--tool-call-parser`` choices).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import types
from typing import Any

STUBBED_PACKAGES = frozenset(
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
STUBBED_SGLANG = (
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

    def __new__(
        mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **_: Any
    ) -> _StubType:
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


class StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        stand_in = _StubType(name, (Stub,), {})
        setattr(self, name, stand_in)
        return stand_in


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stand-ins for STUBBED_PACKAGES and STUBBED_SGLANG, but ``exclude`` and ``absent``."""

    def __init__(self, *, exclude: frozenset[str] = frozenset()) -> None:
        self.absent: set[str] = set()
        self.exclude = exclude

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        top = fullname.split(".", maxsplit=1)[0]
        if top in self.absent or fullname in self.exclude:
            return None
        stubbed = (top in STUBBED_PACKAGES and top not in self.exclude) or any(
            fullname == name or fullname.startswith(name + ".") for name in STUBBED_SGLANG
        )
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True) if stubbed else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "2.9.0"  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def stand_in_orjson() -> types.ModuleType:
    module = types.ModuleType("orjson")
    module.loads = json.loads  # type: ignore[attr-defined]
    module.dumps = lambda value, **_: json.dumps(value).encode()  # type: ignore[attr-defined]
    module.JSONDecodeError = json.JSONDecodeError  # type: ignore[attr-defined]
    return module
