"""Evaluate literal-ish Python expressions found in source text, without running it.

Why a module of its own: ``extract`` must learn SGLang's defaults and choice lists
(``TOOL_CALL_PARSER_NAMES``, ``field(default=...)``, ``_declared_default("x")``, small
functions that return a list) from the wheel's sources, because importing sglang pulls
in torch. Computing those values is one concern — a tiny, deliberately limited
interpreter over ``ast`` nodes — and reading argparse registrations is another, so the
interpreter lives here and ``extract`` only asks it questions.

What it evaluates: constants, list/tuple/set/dict displays, unary +/-, ``+ - * **`` on
same-kind operands, module- and class-level names (``NAME`` and ``Class.NAME`` across all
given modules), ``list()/tuple()/set()/frozenset()/sorted()`` of one argument,
``field(default=...)`` / ``default_factory=list|dict``, ``_declared_default("field")``
(from the field defaults given), and argument-less module functions through their last
``return`` with their local assignments. Anything else raises ``UnresolvedError``, which
callers record as "unknown" rather than guess. Sets come back sorted (by ``str``) so the
output is deterministic.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 12
"""How many names/calls deep an evaluation may go before it gives up (cycles, recursion)."""


class UnresolvedError(Exception):
    """An expression is not a literal the evaluator can compute."""


class SourceEvaluator:
    """Evaluates literal-ish expressions against the module-level names of all sources."""

    def __init__(self, trees: Mapping[str, ast.Module], field_defaults: Mapping[str, Any]):
        self.names: dict[str, ast.expr] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.field_defaults = field_defaults
        for tree in trees.values():
            for node in tree.body:
                self._index(node, prefix="")

    def _index(self, node: ast.stmt, *, prefix: str) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.names[prefix + target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and node.value and isinstance(node.target, ast.Name):
            self.names[prefix + node.target.id] = node.value
        elif isinstance(node, ast.FunctionDef) and not prefix:
            self.functions[node.name] = node
        elif isinstance(node, ast.ClassDef) and not prefix:
            for child in node.body:
                self._index(child, prefix=f"{node.name}.")

    def value(self, node: ast.expr, local: Mapping[str, ast.expr] | None = None) -> Any:
        """The node's value; UnresolvedError when it is not computable here."""
        return self._eval(node, dict(local or {}), depth=0)

    def literal(
        self, node: ast.expr | None, local: Mapping[str, ast.expr] | None = None
    ) -> tuple[bool, Any]:
        """(known, value): the node's JSON-able value, or (False, None)."""
        if node is None:
            return False, None
        try:
            value = self.value(node, local)
        except UnresolvedError:
            return False, None
        return (True, value) if is_json_literal(value) else (False, None)

    def _eval(self, node: ast.expr, local: dict[str, ast.expr], *, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise UnresolvedError
        again = depth + 1
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items = [self._eval(item, local, depth=again) for item in node.elts]
            return sorted(items, key=str) if isinstance(node, ast.Set) else items
        if isinstance(node, ast.Dict) and all(key is not None for key in node.keys):
            return {
                self._eval(key, local, depth=again): self._eval(val, local, depth=again)
                for key, val in zip(node.keys, node.values, strict=True)
                if key is not None
            }
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = self._eval(node.operand, local, depth=again)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            return _binary(
                node.op,
                self._eval(node.left, local, depth=again),
                self._eval(node.right, local, depth=again),
            )
        if isinstance(node, ast.Name):
            return self._name(node.id, local, depth=again)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            key = f"{node.value.id}.{node.attr}"
            if key in self.names:
                return self._eval(self.names[key], {}, depth=again)
        if isinstance(node, ast.Call):
            return self._call(node, local, depth=again)
        raise UnresolvedError

    def _name(self, name: str, local: dict[str, ast.expr], *, depth: int) -> Any:
        builtins = {"True": True, "False": False, "None": None}
        if name in builtins:
            return builtins[name]
        if name in local:
            return self._eval(local[name], {}, depth=depth)
        if name in self.names:
            return self._eval(self.names[name], {}, depth=depth)
        raise UnresolvedError

    def _call(self, node: ast.Call, local: dict[str, ast.expr], *, depth: int) -> Any:
        func = dotted_name(node.func)
        if func in ("list", "tuple", "set", "frozenset", "sorted") and len(node.args) == 1:
            items = list(self._eval(node.args[0], local, depth=depth))
            return sorted(items, key=str) if func in ("set", "frozenset", "sorted") else items
        if func == "_declared_default" and node.args:
            field_name = self._eval(node.args[0], local, depth=depth)
            if field_name in self.field_defaults:
                return self.field_defaults[field_name]
        if func in ("msgspec.field", "field", "dataclasses.field"):
            keywords = {kw.arg: kw.value for kw in node.keywords}
            if "default" in keywords:
                return self._eval(keywords["default"], local, depth=depth)
            factory = (
                dotted_name(keywords["default_factory"]) if "default_factory" in keywords else ""
            )
            if factory in ("list", "dict"):
                return [] if factory == "list" else {}
        if func in self.functions and not node.args and not node.keywords:
            function = self.functions[func]
            returns = [stmt for stmt in function.body if isinstance(stmt, ast.Return)]
            if returns and returns[-1].value is not None:
                return self._eval(returns[-1].value, function_locals(function), depth=depth)
        raise UnresolvedError


def _binary(op: ast.operator, left: Any, right: Any) -> Any:
    operations = {ast.Add: "__add__", ast.Sub: "__sub__", ast.Mult: "__mul__", ast.Pow: "__pow__"}
    method = operations.get(type(op))
    if method is None or isinstance(left, str) != isinstance(right, str):
        raise UnresolvedError
    return getattr(left, method)(right)


def dotted_name(node: ast.expr) -> str:
    """``a.b.c`` for a Name/Attribute chain, ``""`` for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted_name(node.value)}.{node.attr}"
    return ""


def function_locals(function: ast.FunctionDef) -> dict[str, ast.expr]:
    """The first simple assignment to each local name in ``function`` (name -> value)."""
    assigned: dict[str, ast.expr] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                assigned.setdefault(target.id, node.value)
    return assigned


def is_json_literal(value: Any) -> bool:
    """True for None, bool, int, float, str and lists/str-keyed dicts of those."""
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list):
        return all(is_json_literal(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_json_literal(v) for k, v in value.items())
    return False
