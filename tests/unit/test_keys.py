"""Every ``sparkllm.io/`` label and annotation key is spelled once, in ``sparkllm.keys``.

Read from the AST of every product file: a string constant that is exactly such a key
(messages that mention one, like "annotate sparkllm.io/restart=now", are text, not keys)
anywhere but keys.py fails, naming the file and the key; in keys.py each literal appears
once (a key with two roles is an alias of the other name, not a second literal).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "operator" / "sparkllm"
KEYS = PRODUCT / "keys.py"
KEY = re.compile(r"^sparkllm\.io/(?!v\d)[a-z0-9-]+$")  # not the apiVersion (sparkllm.io/v1alpha1)


def key_literals(source: str) -> list[str]:
    """The string constants of ``source`` that are exactly a ``sparkllm.io/`` key."""
    return [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and KEY.match(node.value)
    ]


def test_the_check_tells_a_key_from_a_message() -> None:
    source = (
        'A = "sparkllm.io/restart"\nB = "annotate sparkllm.io/restart=now"\nC = "sparkllm.io/v1"\n'
    )
    assert key_literals(source) == ["sparkllm.io/restart"]


def test_no_key_is_spelled_outside_keys_py() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted(PRODUCT.rglob("*.py"))
        if path != KEYS and (found := key_literals(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}


def test_each_key_is_spelled_once() -> None:
    counts = Counter(key_literals(KEYS.read_text(encoding="utf-8")))
    assert counts  # the module holds the keys
    assert {key: n for key, n in counts.items() if n > 1} == {}
