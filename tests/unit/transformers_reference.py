"""transformers' chat-template rendering, from the pinned wheel, as a test reference.

Not a test module. SGLang renders a Jinja chat template by calling the Hugging Face
tokenizer's ``apply_chat_template``, i.e. transformers' ``render_jinja_template``. The
dev venv holds transformers 5.19.0 (the version sglang 0.5.23 pins) without its
dependencies, so the library cannot be imported as is; the differential test
(test_gateway_sglang_differential.py) needs only that function, so its module is loaded
by file path. ``TokenizerStandIn`` is the tokenizer SGLang's chat serving layer is
given: ``encode`` is the checkpoint's ``tokenizers`` tokenizer; ``apply_chat_template``
takes the steps of transformers' for one conversation with ``tokenize=False`` (special
tokens from ``tokenizer_config.json`` merged under the template kwargs) and renders with
transformers' own function. The gateway's reimplementation (chat_template.py) plays no
part: it is what the test checks.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

# transformers' named special tokens (PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES).
_SPECIAL_TOKEN_ATTRIBUTES = (
    *("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token"),
    "mask_token",
)
_RENDERER: list[Any] = []


def render_jinja_template() -> Any:
    """transformers' ``render_jinja_template``, from ``utils/chat_template_utils.py``.

    The module is executed from the installed file; the two sibling modules it imports
    are stubbed while it loads: ``transformers.utils.logging`` (``get_logger`` is the
    stdlib's) and ``transformers.utils.import_utils`` (jinja2 available, torch and vision
    not: their only use is type hints for ``get_json_schema``). ``sys.modules`` is
    restored afterwards.
    """
    if _RENDERER:
        return _RENDERER[0]
    import logging

    spec = importlib.util.find_spec("transformers")
    assert spec is not None
    assert spec.submodule_search_locations is not None
    path = Path(spec.submodule_search_locations[0], "utils", "chat_template_utils.py")
    stubs = {name: types.ModuleType(name) for name in ("transformers", "transformers.utils")}
    for package in stubs.values():
        package.__path__ = []
    stubs["transformers.utils.logging"] = types.SimpleNamespace(  # type: ignore[assignment]
        get_logger=logging.getLogger
    )
    stubs["transformers.utils.import_utils"] = types.SimpleNamespace(  # type: ignore[assignment]
        is_jinja_available=lambda: True,
        is_torch_available=lambda: False,
        is_vision_available=lambda: False,
    )
    name = "transformers.utils.chat_template_utils"
    saved = {key: sys.modules[key] for key in (*stubs, name) if key in sys.modules}
    sys.modules.update(stubs)
    try:
        module_spec = importlib.util.spec_from_file_location(name, path)
        assert module_spec is not None
        assert module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    finally:
        for key in (*stubs, name):
            sys.modules.pop(key, None)
        sys.modules.update(saved)
    _RENDERER.append(module.render_jinja_template)
    return _RENDERER[0]


class TokenizerStandIn:
    """The tokenizer methods SGLang's chat serving calls (all but the messages by keyword)."""

    def __init__(self, tokenizer: Any, model_dir: Path | None) -> None:
        self._tokenizer = tokenizer
        self.chat_template: str | None = None
        self.special_tokens_map: dict[str, str] = {}
        if model_dir is not None:  # tokenizer_config.json as transformers reads it
            config = json.loads((model_dir / "tokenizer_config.json").read_text("utf-8"))
            self.chat_template = config["chat_template"]
            for key in _SPECIAL_TOKEN_ATTRIBUTES:
                token = config.get(key)
                if token is not None:
                    self.special_tokens_map[key] = (
                        token["content"] if isinstance(token, dict) else str(token)
                    )
        self.bos_token_id = None

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        documents: list[dict[str, str]] | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        tokenize: bool = True,
        return_dict: bool = True,
        **kwargs: Any,
    ) -> Any:
        """PreTrainedTokenizerBase.apply_chat_template (transformers 5.19.0), tokenize=False.

        Its steps for one conversation, in its order, with its messages; the rendering is
        transformers' own ``render_jinja_template``.
        """
        assert not tokenize
        assert self.chat_template is not None
        if len(conversation) == 0:
            raise ValueError(
                "Cannot apply chat template to an empty conversation. Provide at least one message."
            )
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt are not compatible.")
        template_kwargs = {**self.special_tokens_map, **kwargs}
        flags = {"continue_final_message": continue_final_message}  # no assistant mask
        flags["add_generation_prompt"] = add_generation_prompt
        render = render_jinja_template()
        rendered, _ = render(
            [conversation], tools, documents, self.chat_template, **flags, **template_kwargs
        )
        return rendered[0]
