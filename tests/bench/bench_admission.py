"""Benchmark: what admission costs per request, for 256-, 2K- and 8K-token prompts.

Not a pytest test (benchmarks report numbers, they never pass or fail). Run from the
repository root:

    .venv/bin/python tests/bench/bench_admission.py [--runs 200] [--tokenizer-dir DIR]

With ``--tokenizer-dir`` it uses a real model directory (tokenizer.json and
tokenizer_config.json with its chat template); without, it trains a byte-level BPE
(16k vocabulary, DeepSeek-style template and special tokens) on synthetic multilingual
text first, which takes a few seconds. For each prompt size it prints p50/p99 over
``--runs`` runs (prompts of at most 256, 2,048 and 8,192 tokens) of:

* ``count``            tokenising the already rendered prompt (the exact count);
* ``render+count``     chat template rendering plus the exact count (the goal: < 10 ms
                       at 8K tokens);
* ``decide exact``     the whole admission decision on the JSON body when the exact count
                       is needed (no max_tokens: the rest of the window is injected);
* ``decide bounded``   the same with ``max_tokens`` = 128, where the byte bound may make
                       tokenising unnecessary (it does whenever UTF-8 bytes <= the cap);
* ``v4 encode``, ``v4 decide exact``, ``v4 decide bounded``: the same conversation
                       through DeepSeek's encoder (deepseek-recipe), as the gateway counts
                       DeepSeek V4 (the goal for ``v4 encode``: < 10 ms at 8K tokens).
                       Skipped for a ``--tokenizer-dir`` without DeepSeek's special tokens.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from sparkllm.errors import GatewayError
from sparkllm.gateway.admission import Admission, Admitted, Route
from sparkllm.gateway.chat_template import ChatTemplate
from sparkllm.gateway.deepseek_prompt import DeepSeekV4Prompt
from sparkllm.gateway.tokens import TokenCounter
from sparkllm_dev.devcluster.toymodel import DEEPSEEK_V4_SPECIAL_TOKENS
from tests.unit.gateway_fixtures import clamp_policy

# DeepSeek's special tokens use U+FF5C (fullwidth bar) and U+2581 (lower one-eighth block).
BOS, EOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"
USER, ASSISTANT = "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>"
DEEPSEEK_LIKE_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for m in messages %}{% if m.role == 'system' %}{% set ns.system = m.content %}"
    "{% endif %}{% endfor %}{{ ns.system }}"
    "{% for m in messages %}"
    "{% if m.role == 'user' %}" + USER + "{{ m.content }}"
    "{% elif m.role == 'assistant' %}" + ASSISTANT + "{{ m.content }}{{ eos_token }}"
    "{% elif m.role != 'system' %}{{ raise_exception('unsupported role ' + m.role) }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}" + ASSISTANT + "<think>\\n{% endif %}"
)
MODEL = "bench-model"
CAP, WINDOW = 8192, 12288
_SYLLABLES = ("ka", "ri", "to", "no", "mi", "sa", "el", "an", "ter", "pro", "con", "ing", "ed")
_CJK = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自之着去"


def _synthetic_vocabulary(rng: random.Random) -> list[str]:
    words = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(6000)]
    words += ["".join(rng.choice(_CJK) for _ in range(rng.randint(1, 3))) for _ in range(800)]
    words += [str(rng.randint(0, 99999)) for _ in range(200)] + [",", ".", "?", "(x)", "->"]
    return words


def _sentence(rng: random.Random, vocabulary: list[str]) -> str:
    # Zipf-like: early words are much more frequent, as in natural text.
    picks = (
        vocabulary[min(int(rng.paretovariate(1.1)) - 1, len(vocabulary) - 1)] for _ in range(12)
    )
    return " ".join(picks).capitalize() + "."


def train_bench_tokenizer(directory: Path) -> None:
    """A 16k byte-level BPE + DeepSeek-style tokenizer_config.json in ``directory``."""
    rng = random.Random(2026)
    vocabulary = _synthetic_vocabulary(rng)
    rng.shuffle(vocabulary)
    corpus = [" ".join(_sentence(rng, vocabulary) for _ in range(8)) for _ in range(6000)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=16000,
        special_tokens=list(
            dict.fromkeys([BOS, EOS, USER, ASSISTANT, *DEEPSEEK_V4_SPECIAL_TOKENS])
        ),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"bos_token": BOS, "eos_token": EOS, "chat_template": DEEPSEEK_LIKE_TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def _prompt_of_tokens(
    counter: TokenCounter, template: ChatTemplate, tokens: int
) -> list[dict[str, str]]:
    """A system + user conversation whose rendered prompt has at most ``tokens`` tokens."""
    rng = random.Random(tokens)
    vocabulary = _synthetic_vocabulary(rng)
    system = "You are a careful assistant. Answer briefly and cite the source."

    def conversation(sentences: list[str]) -> list[dict[str, str]]:
        user = " ".join(sentences)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def size(sentences: list[str]) -> int:
        rendered = template.render(conversation(sentences), tools=None, template_kwargs={})
        return counter.count(rendered, add_special_tokens=False)

    sentences: list[str] = []
    while size(sentences) < tokens:
        sentences.extend(_sentence(rng, vocabulary) for _ in range(20))
    while size(sentences) > tokens:
        sentences.pop()
    return conversation(sentences)


def _v4_rows(
    v4: DeepSeekV4Prompt, admission: Admission, messages: list[dict[str, str]], *, runs: int
) -> None:
    """The conversation through DeepSeek's encoder, as the gateway counts DeepSeek V4."""
    payload = {"model": MODEL, "messages": messages}
    tokens = v4.count(payload)
    size = len(json.dumps(messages, ensure_ascii=False).encode())
    exact_body = json.dumps(payload).encode()
    bounded_body = json.dumps({**payload, "max_tokens": 128}).encode()
    bounded = admission.decide(Route.CHAT, bounded_body)
    assert isinstance(bounded, Admitted), bounded
    note = "bound used, not tokenised" if not bounded.input_tokens_exact else "tokenised"
    rows: list[tuple[str, Callable[[], object], str]] = [
        ("v4 encode", functools.partial(v4.count, payload), ""),
        ("v4 decide exact", functools.partial(admission.decide, Route.CHAT, exact_body), ""),
        ("v4 decide bounded", functools.partial(admission.decide, Route.CHAT, bounded_body), note),
    ]
    for step, run, row_note in rows:
        p50, p99 = _percentiles(run, runs)
        print(f"{tokens:>8} {size:>7} {step:<16} {p50:>8.3f} {p99:>8.3f}  {row_note}")


def _render_and_count(
    counter: TokenCounter, template: ChatTemplate, messages: list[dict[str, str]]
) -> int:
    rendered = template.render(messages, tools=None, template_kwargs={})
    return counter.count(rendered, add_special_tokens=False)


def _percentiles(run: Callable[[], object], runs: int) -> tuple[float, float]:
    for _ in range(5):
        run()  # warm caches (BPE word cache, jinja)
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--tokenizer-dir", type=Path, help="a real model's tokenizer directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = args.tokenizer_dir
        if model_dir is None:
            model_dir = Path(scratch)
            started = time.perf_counter()
            train_bench_tokenizer(model_dir)
            print(f"trained a 16k byte-level BPE in {time.perf_counter() - started:.1f} s")
        counter = TokenCounter.from_dir(model_dir)
        template = ChatTemplate.load(tokenizer_dir=model_dir)
        policy = clamp_policy(model=MODEL, cap=CAP, window=WINDOW)
        admission = Admission(policy=policy, counter=counter, template=template)
        try:
            v4: DeepSeekV4Prompt | None = DeepSeekV4Prompt.from_dir(model_dir)
        except GatewayError as exc:
            v4 = None
            print(f"no DeepSeek V4 rows: {exc}")
        v4_admission = (
            None if v4 is None else Admission(policy=policy, counter=counter, template=v4)
        )
        print(f"byte-level shortcut available: {counter.byte_level}; runs per row: {args.runs}")
        print(f"{'prompt':>8} {'bytes':>7} {'step':<16} {'p50 ms':>8} {'p99 ms':>8}  note")
        for target in (256, 2048, CAP):
            messages = _prompt_of_tokens(counter, template, target)
            rendered = template.render(messages, tools=None, template_kwargs={})
            tokens = counter.count(rendered, add_special_tokens=False)
            size = len(rendered.encode())
            exact_body = json.dumps({"model": MODEL, "messages": messages}).encode()
            bounded_body = json.dumps(
                {"model": MODEL, "messages": messages, "max_tokens": 128}
            ).encode()
            bounded = admission.decide(Route.CHAT, bounded_body)
            assert isinstance(bounded, Admitted), bounded
            render_and_count = functools.partial(_render_and_count, counter, template, messages)
            note = "bound used, not tokenised" if not bounded.input_tokens_exact else "tokenised"
            rows: list[tuple[str, Callable[[], object], str]] = [
                ("count", functools.partial(counter.count, rendered, add_special_tokens=False), ""),
                ("render+count", render_and_count, ""),
                ("decide exact", functools.partial(admission.decide, Route.CHAT, exact_body), ""),
                (
                    "decide bounded",
                    functools.partial(admission.decide, Route.CHAT, bounded_body),
                    note,
                ),
            ]
            for step, run, note in rows:
                p50, p99 = _percentiles(run, args.runs)
                print(f"{tokens:>8} {size:>7} {step:<16} {p50:>8.3f} {p99:>8.3f}  {note}")
            if v4 is not None and v4_admission is not None:
                _v4_rows(v4, v4_admission, messages, runs=args.runs)


if __name__ == "__main__":
    main()
