"""What the SIMULATOR reads from the model directory: config.json and a token counter.

Why: SGLang counts the prompt with the model's tokenizer to enforce ``--context-length``
and to report ``usage``; the gateway's admission layer counts with the same tokenizer.
The simulator has no weights, but a model directory may well hold ``tokenizer.json`` and
``config.json`` (tests make tiny ones), so it uses them when present:

- ``tokenizer.json`` present: tokens are counted with the ``tokenizers`` library
  (``encode(text, add_special_tokens=False)``), no chat template applied.
- absent: tokens are whitespace-separated words, a stand-in good enough for tests.

``config.json`` gives ``num_hidden_layers`` (to check ``SGLANG_PP_LAYER_PARTITION``) and
``max_position_embeddings`` (the context window when ``--context-length`` is not passed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkllm.errors import SpecError


@dataclass(frozen=True, slots=True)
class TokenCounter:
    """Counts tokens with the model's tokenizer when there is one, else words."""

    tokenizer: Any = None

    @property
    def kind(self) -> str:
        return "tokenizer.json" if self.tokenizer is not None else "whitespace words"

    def count(self, text: str) -> int:
        if self.tokenizer is None:
            return len(text.split())
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


@dataclass(frozen=True, slots=True)
class ModelFiles:
    config: Mapping[str, Any]
    tokens: TokenCounter


def load_model_files(model_path: str, *, tokenizer: bool = True) -> ModelFiles:
    """Read what exists under ``model_path``; a missing directory yields empty defaults.
    ``tokenizer=False`` (a worker rank: it counts no tokens) skips tokenizer.json, and
    with it the ``tokenizers`` import and parsing a multi-megabyte file."""
    directory = Path(model_path)
    config: Mapping[str, Any] = {}
    config_file = directory / "config.json"
    try:
        if config_file.is_file():
            loaded = json.loads(config_file.read_text(encoding="utf-8"))
            config = loaded if isinstance(loaded, dict) else {}
    except (OSError, ValueError) as exc:
        raise SpecError(f"cannot read {config_file}: {exc}") from exc
    tokenizer_file = directory / "tokenizer.json"
    loaded_tokenizer = None
    if tokenizer and tokenizer_file.is_file():
        from tokenizers import Tokenizer

        try:
            loaded_tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # tokenizers raises a bare Exception on bad files
            raise SpecError(f"cannot load {tokenizer_file}: {exc}") from exc
    return ModelFiles(config=config, tokens=TokenCounter(tokenizer=loaded_tokenizer))
