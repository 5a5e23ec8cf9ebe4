"""The SIMULATOR's "model": a deterministic answer for a prompt, one piece per token.

Why deterministic: the documents' acceptance asks for a deterministic question to get the
same answer every time, and tests must assert on output. The answer is a sequence of words
drawn from a fixed vocabulary by hashing the prompt, so equal prompts give equal answers
and different prompts (almost always) differ. Each word is one completion token.

Length rules (mirroring SGLang's ``max_new_tokens`` and ``ignore_eos``): the model would
stop by itself after ``answer_tokens`` tokens (finish_reason ``stop``); ``max_tokens``
cuts earlier (finish_reason ``length``); ``ignore_eos`` runs to exactly ``max_tokens``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

VOCABULARY = (
    "simulated", "spark", "pipeline", "stage", "token", "answer", "layer", "rank",
    "cache", "prefix", "radix", "decode", "prefill", "chunk", "graph", "kernel",
    "memory", "window", "context", "request", "stream", "model", "expert", "router",
    "health", "metric", "replica", "node", "ring", "link", "batch", "queue",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Answer:
    pieces: tuple[str, ...]
    """Text of each completion token, in order; ``"".join(pieces)`` is the answer."""
    finish_reason: str

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def answer_for(
    prompt: str, *, max_tokens: int | None, answer_tokens: int, ignore_eos: bool = False
) -> Answer:
    """The deterministic answer to ``prompt`` under SGLang's length rules."""
    natural = max(1, answer_tokens)
    if max_tokens is not None and (ignore_eos or max_tokens < natural):
        length, reason = max(0, max_tokens), "length"
    else:
        length, reason = natural, "stop"
    digest = hashlib.sha256(prompt.encode("utf-8")).digest()
    pieces = []
    for index in range(length):
        byte = digest[index % len(digest)] + index // len(digest)
        word = VOCABULARY[byte % len(VOCABULARY)]
        pieces.append(word if index == 0 else " " + word)
    return Answer(pieces=tuple(pieces), finish_reason=reason)


def _content_text(content: Any) -> str:
    """OpenAI message content: a string or a list of parts (text parts are kept)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [part.get("text", "") for part in content if isinstance(part, Mapping)]
        return "\n".join(text for text in texts if isinstance(text, str) and text)
    return ""


def chat_prompt_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text the simulator counts for a chat request (no chat template is applied)."""
    return "\n".join(_content_text(message.get("content")) for message in messages)
