"""Prompts of a given length in tokens: cold load prompts and needle-in-a-haystack prompts.

Why token-exact when possible: every number of the benchmark is "at N input tokens", and
TTFT grows with N (the documents: 29.18 s at 4K, 44.37 s at 8K). With the model's tokenizer
(``--tokenizer DIR`` holding ``tokenizer.json``) each prompt's user text is sized to exactly
N tokens: the longest run of filler words that fits, then topped up with short pieces
(punctuation, short words) until the count is N — a word boundary alone often lands one or
two tokens short (the report records the counts). Without one, N whitespace-separated words
stand in for N tokens and the report says "approximate": real tokenizers give roughly 1 to
1.5 tokens per English word. Either way the server's own count (``usage.prompt_tokens``,
which includes the chat template) is reported next to it.

Cold: every prompt starts with a nonce unique to the run and the request, so no prefix
is shared with an earlier request and SGLang's radix cache cannot serve any of it.
The filler is plain English words drawn by a seeded generator: the same seed gives the
same prompt, so a run can be repeated exactly apart from its nonce.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tokenizers import Tokenizer

from sparkllm.errors import SpecError

FILLER_WORDS: Final = (
    "the", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "are", "as",
    "with", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word",
    "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "there",
    "use", "each", "which", "she", "do", "how", "their", "if", "will", "up", "other",
    "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make",
    "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see",
    "number", "no", "way", "could", "people", "my", "than", "first", "water", "been",
    "call", "who", "its", "now", "find", "long", "down", "day", "did", "get", "come",
    "made", "may", "part", "river", "stone", "light", "garden", "window", "paper",
)  # fmt: skip
PAD_PIECES: Final = (" .", " ,", ".", ",", *(f" {word}" for word in FILLER_WORDS))
"""What tops a prompt up to its exact token count (tokenizer mode); tried most tokens first."""
NEEDLE_COLOURS: Final = ("amber", "cobalt", "crimson", "jade", "saffron", "violet", "umber")
NIAH_QUESTION: Final = (
    "\n\nQuestion: what is the secret passphrase mentioned in the text above? "
    "Answer with the passphrase only."
)


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt: its text, its token count by our counter, and the needle if any."""

    text: str
    tokens: int
    needle: str | None = None


class PromptBuilder:
    """Builds prompts of N tokens with a tokenizer, or of N words without one."""

    def __init__(self, tokenizer: Any = None, *, source: str = "") -> None:
        self._tokenizer = tokenizer
        self.source = source
        self._pieces: tuple[tuple[int, str], ...] | None = None

    @classmethod
    def from_dir(cls, directory: Path | None) -> PromptBuilder:
        """Load ``tokenizer.json`` from ``directory``; approximate mode when None."""
        if directory is None:
            return cls()
        path = directory / "tokenizer.json"
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception for bad files
            raise SpecError(f"cannot load tokenizer {path}: {exc}") from exc
        return cls(tokenizer, source=str(path))

    @property
    def exact(self) -> bool:
        return self._tokenizer is not None

    @property
    def counting(self) -> str:
        """How prompt lengths are counted, for the report."""
        if self.exact:
            return f"tokenizer ({self.source}), user text without chat template"
        return "approximate: whitespace-separated words stand in for tokens"

    def count(self, text: str) -> int:
        if self._tokenizer is None:
            return len(text.split())
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def _fit(self, build: Callable[[int, str], str], target: int) -> Prompt:
        """``build(words, pad)`` of exactly ``target`` tokens when pieces allow.

        The longest word count that fits (binary search), then ``_pad``.
        """
        low, high, best = 0, 4 * target + 8, 0
        while low <= high:
            middle = (low + high) // 2
            if self.count(build(middle, "")) <= target:
                best, low = middle, middle + 1
            else:
                high = middle - 1
        text = self._pad(lambda pad: build(best, pad), target)
        return Prompt(text=text, tokens=self.count(text))

    def _pad_pieces(self) -> tuple[tuple[int, str], ...]:
        """(tokens on their own, piece), most tokens first; computed once per tokenizer."""
        if self._pieces is None:
            costs = {piece: self.count(piece) for piece in PAD_PIECES}
            ranked = sorted(costs.items(), key=lambda item: (-item[1], PAD_PIECES.index(item[0])))
            self._pieces = tuple((cost, piece) for piece, cost in ranked if cost > 0)
        return self._pieces

    def _pad(self, build: Callable[[str], str], target: int) -> str:
        """Top ``build("")`` up with pieces while it is short of ``target`` tokens.

        A piece is kept only when the whole text, counted again, grows and stays within
        ``target`` (merges across the seam are counted, not assumed). Words mode needs
        none: a word is a token there, so the fit is already exact.
        """
        pad, count = "", self.count(build(""))
        while self.exact and count < target:
            for cost, piece in self._pad_pieces():
                if cost > target - count:
                    continue
                grown = self.count(build(pad + piece))
                if count < grown <= target:
                    pad, count = pad + piece, grown
                    break
            else:
                break  # no piece fits: the longest fit stands (the report shows the count)
        return build(pad)

    def load_prompt(self, *, tokens: int, nonce: str, seed: int) -> Prompt:
        """A cold prompt of ``tokens`` tokens: nonce first, then seeded filler words."""
        words = random.Random(seed).choices(FILLER_WORDS, k=4 * tokens + 8)
        prefix = f"[{nonce}]"
        return self._fit(lambda count, pad: " ".join([prefix, *words[:count]]) + pad, tokens)

    def needle_prompt(self, *, tokens: int, depth: float, nonce: str, seed: int) -> Prompt:
        """A haystack of ``tokens`` tokens with a passphrase at ``depth`` (0 = start, 1 = end)."""
        if not 0.0 <= depth <= 1.0:
            raise SpecError("needle depth must be between 0 and 1")
        rng = random.Random(seed)
        needle = f"{rng.choice(NEEDLE_COLOURS)}-{rng.randrange(1000, 10000)}"
        sentence = f"The secret passphrase is {needle}."
        words = rng.choices(FILLER_WORDS, k=4 * tokens + 8)

        def build(count: int, pad: str) -> str:
            cut = round(depth * count)
            body = [*words[:cut], sentence, *words[cut:count]]
            return " ".join([f"[{nonce}]", *body]) + pad + NIAH_QUESTION

        prompt = self._fit(build, tokens)
        return Prompt(text=prompt.text, tokens=prompt.tokens, needle=needle)


def needle_found(answer: str, needle: str) -> bool:
    """Whether ``answer`` states the passphrase (case-insensitive, whole)."""
    return needle.lower() in answer.lower()
