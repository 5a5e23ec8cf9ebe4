"""A tiny but REAL model directory for the demo: safetensors shards, index, config, tokenizer.

The demo's simulated Sparks need files at ``spec.model.path`` for the integrity check
(ModelVerified) and the gateway needs a tokenizer and chat template to count tokens. No
weights can be downloaded here, so this writes a structurally faithful stand-in: every
shard a valid safetensors file (8-byte little-endian header length, JSON header, zero
data), an index naming every shard, a ``config.json`` with the layer count, and a
byte-level BPE tokenizer trained on the spot with ``tokenizers`` plus a ChatML template.
It stands in for DeepSeek V4: the tokenizer also holds every special token DeepSeek's
encoder (deepseek-recipe) spells, so the gateway counts the demo's chats as SGLang
would count V4's, and ``config.json`` names the V4 architecture.
It is a SIMULATION aid: the numbers in it are shapes, not a model.
"""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import deepseek_recipe
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from sparkllm.gateway.deepseek_prompt import IMAGE_TOKEN, TASK_TOKENS

BOS = "<|endoftext|>"
_V4_SPELLINGS = deepseek_recipe.SpecialTokens(image=IMAGE_TOKEN)
DEEPSEEK_V4_SPECIAL_TOKENS = (
    *(
        _V4_SPELLINGS.token(getattr(deepseek_recipe.SpecialToken, kind))
        for kind in (
            "Bos", "Eos", "ThinkingStart", "ThinkingEnd", "System", "User", "Assistant",
            "LatestReminder", "Dsml", "Image", "Ref", "RefEnd", "Box", "BoxEnd", "Point",
            "PointEnd", "Polygon", "PolygonEnd",
        )
    ),
    *TASK_TOKENS.values(),
)  # fmt: skip
SPECIAL_TOKENS = (BOS, "<|im_start|>", "<|im_end|>", *DEEPSEEK_V4_SPECIAL_TOKENS)
ARCHITECTURE = "DeepseekV4ForCausalLM"
CHAT_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_WORDS = (
    "the", "pipeline", "spark", "node", "rank", "layer", "token", "cache", "model", "request",
    "answer", "stream", "system", "user", "assistant", "你好", "世界", "模型", "naïve", "café",
    "12345", '{"json":', "[1,", "2.5,", "true]}",
)  # fmt: skip


def _safetensors(tensors: dict[str, tuple[str, tuple[int, ...]]]) -> bytes:
    header: dict[str, object] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = 2 * _count(shape)  # BF16
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


def _count(shape: tuple[int, ...]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


def _tensors(layers: int, hidden: int, vocab: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {
        "model.embed_tokens.weight": ("BF16", (vocab, hidden))
    }
    for i in range(layers):
        tensors[f"model.layers.{i}.self_attn.q_proj.weight"] = ("BF16", (hidden, hidden))
        tensors[f"model.layers.{i}.input_layernorm.weight"] = ("BF16", (hidden,))
    tensors["model.norm.weight"] = ("BF16", (hidden,))
    tensors["lm_head.weight"] = ("BF16", (vocab, hidden))
    return tensors


def train_tokenizer(*, vocab_size: int = 600) -> Tokenizer:
    """A byte-level BPE (GPT-2 style pre-tokenizer), as production models use."""
    rng = random.Random(7)
    corpus = [" ".join(rng.choice(_WORDS) for _ in range(40)) for _ in range(300)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return tokenizer


def write_toy_model(root: Path, *, layers: int, shards: int, hidden: int = 8) -> Path:
    """Write the model directory at ``root`` (idempotent: same bytes every time)."""
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    vocab = tokenizer.get_vocab_size()
    tensors = _tensors(layers, hidden, vocab)
    names = list(tensors)
    if len(names) < shards:
        raise ValueError(f"{len(names)} tensors cannot fill {shards} shards")
    weight_map: dict[str, str] = {}
    total = 0
    for index in range(shards):  # spread evenly: every shard holds at least one tensor
        chunk = [n for i, n in enumerate(names) if i * shards // len(names) == index]
        shard = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        (root / shard).write_bytes(_safetensors({n: tensors[n] for n in chunk}))
        weight_map |= dict.fromkeys(chunk, shard)
        total += sum(2 * _count(tensors[n][1]) for n in chunk)
    index_doc = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (root / "model.safetensors.index.json").write_text(json.dumps(index_doc))
    config = {
        "architectures": [ARCHITECTURE],
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "vocab_size": vocab,
    }
    (root / "config.json").write_text(json.dumps(config))
    tokenizer.save(str(root / "tokenizer.json"))
    tokenizer_config = {
        "bos_token": BOS,
        "eos_token": "<|im_end|>",
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 12288,
    }
    (root / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return root
