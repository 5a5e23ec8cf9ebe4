"""Exact prompt token counts with the model's own tokenizer, and a proven cheap bound.

Why exact: the input cap (8,192 tokens in a 12,288-token window) exists because longer
prompts put the engine under memory pressure. A character or word heuristic would let
some over-cap prompts through and refuse some that fit, so the gateway counts with the
model's ``tokenizer.json`` exactly as the engine does (the engine encodes the rendered
chat prompt without adding special tokens; plain completion prompts with them).

Why a bound: tokenising costs about 1 ms per thousand tokens. For a byte-level BPE the
count can never exceed the prompt's UTF-8 byte length (plus the special tokens the
post-processor adds), so when that bound already fits under the limit the exact count is
not needed. The argument, checked by ``is_byte_level_bpe`` at load time:

1. no normaliser runs, so the text the model sees is the text we measured;
2. added (special) tokens are matched first, each one token for one or more bytes;
3. pre-tokenisers only split (``Split``, ``Digits``, ``Punctuation``) and ``ByteLevel``
   without ``add_prefix_space`` maps every byte to exactly one symbol, adding none;
4. every BPE token covers at least one symbol (unknown symbols give at most one token).

Hence ``tokens <= bytes + special tokens added``. A tokenizer that does not pass the
check never takes the shortcut.

The same argument bounds the count from below: every token covers at most ``L`` bytes,
``L`` the longest token in the vocabulary (a BPE token's symbols, one per byte; an added
token's UTF-8 spelling), so ``tokens >= ceil(bytes / L)``. A prompt whose lower bound is
already over the cap is refused without tokenising it (a 1 MiB prompt costs ~0.4 s to
tokenise, before any concurrency slot is taken). tests/unit/test_gateway_tokens.py and
test_gateway_transport.py check both bounds with hypothesis against a real trained
tokenizer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from sparkllm.errors import GatewayError

TOKENIZER_FILE = "tokenizer.json"
_SPLITTING_PRE_TOKENIZERS = frozenset({"Split", "Digits", "Punctuation"})
_SMOKE_TEXT = "Hello, world! 你好 🙂 <|unknown|> 12345"


@dataclass(frozen=True, slots=True)
class PromptSize:
    """Tokens of one prompt: the exact count, or an upper bound when ``exact`` is False."""

    tokens: int
    exact: bool
    at_least: bool = False  # ``tokens`` is a lower bound (only ever over a limit)


def _is_plain_byte_level(pre_tokenizer: Mapping[str, Any]) -> bool:
    return pre_tokenizer.get("type") == "ByteLevel" and not pre_tokenizer.get(
        "add_prefix_space", False
    )


def is_byte_level_bpe(tokenizer_json: Mapping[str, Any]) -> bool:
    """Whether tokens <= UTF-8 bytes is guaranteed for this ``tokenizer.json`` (see above)."""
    model = tokenizer_json.get("model") or {}
    if model.get("type") != "BPE":
        return False
    normalizer = tokenizer_json.get("normalizer")
    if normalizer is not None and not (
        normalizer.get("type") == "Sequence" and not normalizer.get("normalizers")
    ):
        return False
    if any(not token.get("content") for token in tokenizer_json.get("added_tokens") or []):
        return False
    pre_tokenizer = tokenizer_json.get("pre_tokenizer") or {}
    if _is_plain_byte_level(pre_tokenizer):
        return True
    if pre_tokenizer.get("type") != "Sequence":
        return False
    steps = pre_tokenizer.get("pretokenizers") or []
    byte_level_steps = [step for step in steps if step.get("type") == "ByteLevel"]
    return len(byte_level_steps) == 1 and all(
        _is_plain_byte_level(step) or step.get("type") in _SPLITTING_PRE_TOKENIZERS
        for step in steps
    )


def longest_token_bytes(tokenizer: Tokenizer) -> int:
    """The most bytes one token covers (a byte-level BPE's symbols are one byte each)."""
    added = [token.content for token in tokenizer.get_added_tokens_decoder().values()]
    model_vocab = tokenizer.get_vocab(with_added_tokens=False)
    return max(
        max(map(len, model_vocab), default=1),
        max((len(text.encode("utf-8")) for text in added), default=1),
    )


def lower_bound(utf8_bytes: int, *, longest_token: int) -> int:
    """At least this many tokens for a text of ``utf8_bytes`` (byte-level BPE, above)."""
    return -(-utf8_bytes // longest_token)


class TokenCounter:
    """Counts tokens with one loaded tokenizer; thread-safe (encoding is read-only)."""

    def __init__(self, tokenizer: Tokenizer, *, byte_level: bool) -> None:
        tokenizer.no_padding()  # padding would inflate counts, truncation hide them:
        tokenizer.no_truncation()  # the engine applies neither to prompts.
        self._tokenizer = tokenizer
        self.byte_level = byte_level
        self.special_tokens_added = int(tokenizer.num_special_tokens_to_add(False))
        self.longest_token_bytes = longest_token_bytes(tokenizer)

    @classmethod
    def from_dir(cls, tokenizer_dir: Path) -> TokenCounter:
        """Load ``tokenizer.json`` from ``tokenizer_dir``; GatewayError if unusable."""
        path = tokenizer_dir / TOKENIZER_FILE
        try:
            text = path.read_text(encoding="utf-8")
            tokenizer = Tokenizer.from_str(text)
            byte_level = is_byte_level_bpe(json.loads(text))
            counter = cls(tokenizer, byte_level=byte_level)
            counter.count(_SMOKE_TEXT, add_special_tokens=True)  # fail now, not per request
        except Exception as exc:  # OSError, bad JSON, or tokenizers' plain Exception
            raise GatewayError(f"cannot load tokenizer {path}: {exc}") from exc
        return counter

    def count(self, text: str, *, add_special_tokens: bool) -> int:
        """Exact number of tokens the engine will see for ``text``.

        Raises ValueError for text that is not valid Unicode (unpaired surrogates).
        """
        try:
            # encode_batch_fast skips offset bookkeeping: ~20% faster than encode().
            (encoding,) = self._tokenizer.encode_batch_fast(
                [text], add_special_tokens=add_special_tokens
            )
        except TypeError as exc:  # how tokenizers reports a str it cannot take as UTF-8
            raise ValueError("text is not valid Unicode (unpaired surrogate)") from exc
        return len(encoding.ids)

    def measure(
        self, text: str, *, add_special_tokens: bool, exact_above: int, refuse_above: int = -1
    ) -> PromptSize:
        """The exact count, unless the byte bounds already decide.

        Callers pass the largest size at which the exact number would not change their
        decision (``exact_above``; below 0 the count is exact unless refused), and the
        size over which they refuse (``refuse_above``; below 0: never refused unread).
        Raises ValueError for text that is not valid Unicode (unpaired surrogates).
        """
        if self.byte_level:
            size = len(text.encode("utf-8"))
            bound = self.byte_bound(size, add_special_tokens=add_special_tokens)
            if bound is not None and bound <= exact_above:
                return PromptSize(bound, exact=False)
            least = lower_bound(size, longest_token=self.longest_token_bytes)
            if 0 <= refuse_above < least:
                return PromptSize(least, exact=False, at_least=True)
        return PromptSize(self.count(text, add_special_tokens=add_special_tokens), exact=True)

    def byte_bound(self, utf8_bytes: int, *, add_special_tokens: bool) -> int | None:
        """At most this many tokens for a text of ``utf8_bytes``; None if not byte-level."""
        if not self.byte_level:
            return None
        return utf8_bytes + (self.special_tokens_added if add_special_tokens else 0)
