"""No product module imports another module's private names (a leading underscore).

A name with a leading underscore is its module's own business: free to change without a
look at anyone else. When two modules need one piece it is made public where it lives, or
moved to a module both import (reconcile/decide/proofs.py holds the rank-pod proof rules
that NetworkVerified shares with ModelVerified, for instance). Read from the AST of every
file, so a lazy import inside a function counts too. Kept beside import-linter's contracts
(test_import_contracts.py) because those see modules, not the names taken from them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ROOT / "operator" / "sparkllm"


def private_imports(source: str) -> list[str]:
    """``module.name`` for every private name ``source`` imports from sparkllm."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = node.module or ""
        if not (node.level or module == "sparkllm" or module.startswith("sparkllm.")):
            continue
        found += [
            f"{module}.{alias.name}"
            for alias in node.names
            if alias.name.startswith("_") and not alias.name.startswith("__")
        ]
    return found


def test_the_check_sees_a_private_import() -> None:
    source = "def f():\n    from sparkllm.reconcile.decide.proofs import _secret, public\n"
    assert private_imports(source) == ["sparkllm.reconcile.decide.proofs._secret"]
    assert private_imports("from os import _exit\nfrom .x import __all__\n") == []


def test_no_module_imports_a_private_name() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted(PRODUCT.rglob("*.py"))
        if (found := private_imports(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}
