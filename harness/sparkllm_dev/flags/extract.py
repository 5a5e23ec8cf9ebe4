"""Derive SGLang's flag table from the sglang wheel's source text, without importing sglang.

Why: importing sglang pulls in torch and CUDA, which the operator's image and CI must not
carry, yet the operator must only ever render flags the pinned SGLang accepts. So we read
the wheel's Python files with ``ast`` and re-derive what argparse would register. The files
come from the sglang the dev virtualenv installs without dependencies
(``read_installed_sources``), or from a downloaded wheel (``ensure_wheel``,
``read_wheel_sources``: hack/update-sglang-flags.sh, when the pin moves). Dev-only: the
product reads the checked-in table, ``sparkllm.sglang_contract.flags``.

How SGLang 0.5.23 registers flags (and therefore what this mirrors):

- ``sglang/srt/arg_groups/fields/*.py`` declare msgspec Struct namespaces (the ones listed
  in ``server_args._INPUT_NAMESPACES``). Each field annotated ``A[T, "help"]`` or
  ``A[T, Arg(...)]`` becomes a flag via ``arg_utils.add_cli_args_from_dataclass``: name
  ``--`` + field with ``_`` -> ``-`` unless ``Arg(cli_name=)``; ``Arg(aliases=)`` adds
  spellings; ``Arg(no_cli=True)`` has none. Then, in that order: an ``Arg(action=)`` wins;
  ``Literal[...]`` gives choices; ``List[X]`` (without ``type_parser``) takes ``nargs='+'``;
  ``bool`` is ``store_true`` (whatever its default); anything else takes one value and is
  required when it has no default.
- ``server_args.ServerArgs.add_cli_args`` adds the rest by hand (parsers with dynamic
  choices, deprecated spellings) with ``parser.add_argument``; custom actions come from
  ``arg_groups/argparse_actions.py``, whose ``__init__`` defaults say whether they take a
  value.

Literal values (defaults, choice lists such as ``TOOL_CALL_PARSER_NAMES``) are evaluated
from the sources by ``source_literals.SourceEvaluator``; what it cannot evaluate is
recorded as unknown.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from sparkllm.errors import SpecError
from sparkllm.sglang_contract import flags as sglang_flags
from sparkllm.sglang_contract.flags import FlagSpec, FlagTable
from sparkllm_dev.flags.source_literals import SourceEvaluator, dotted_name, function_locals

SOURCE_PATTERNS = (
    "sglang/_version.py",
    "sglang-*.dist-info/METADATA",
    "sglang/srt/server_args.py",
    "sglang/srt/arg_groups/fields/*.py",
    "sglang/srt/arg_groups/argparse_actions.py",
    "sglang/srt/arg_groups/choices.py",
    "sglang/srt/parser/reasoning_parser_names.py",
    "sglang/srt/function_call/parser_names.py",
    "sglang/srt/model_executor/cuda_graph_config.py",
    "sglang/srt/utils/common.py",
)
SERVER_ARGS = "sglang/srt/server_args.py"
FIELDS_GLOB = "sglang/srt/arg_groups/fields/*.py"
ACTIONS = "sglang/srt/arg_groups/argparse_actions.py"
_DEPRECATED_HELP = re.compile(r"^\s*\(?\s*deprecated\b", re.IGNORECASE)
_REPLACEMENT_HELP = re.compile(r"\buse\s+['\"`]?(--[a-z0-9][a-z0-9-]*)", re.IGNORECASE)
_NO_VALUE_ACTIONS = {"store_true": True, "store_false": False, "store_const": None}


def _text(node: ast.expr | None) -> str:
    """Best-effort text of a help string (constant, f-string or concatenation)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(part) for part in node.values if isinstance(part, ast.Constant))
    if isinstance(node, ast.BinOp):
        return _text(node.left) + _text(node.right)
    return ""


def _help_facts(help_text: str, new_flag: str | None = None) -> tuple[bool, str | None]:
    deprecated = bool(_DEPRECATED_HELP.match(help_text))
    replacement = new_flag
    if deprecated and replacement is None:
        found = _REPLACEMENT_HELP.search(help_text)
        replacement = found.group(1) if found else None
    return deprecated, replacement


def _unwrap_optional(node: ast.expr) -> ast.expr:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = [s for s in (node.left, node.right) if not _is_none(s)]
        return sides[0] if len(sides) == 1 else node
    generic = dotted_name(node.value) if isinstance(node, ast.Subscript) else ""
    if isinstance(node, ast.Subscript) and generic in ("Optional", "typing.Optional"):
        return node.slice
    if isinstance(node, ast.Subscript) and generic in ("Union", "typing.Union"):
        members = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        rest = [m for m in members if not _is_none(m)]
        return rest[0] if len(rest) == 1 else node
    return node


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _subscript_items(node: ast.Subscript) -> list[ast.expr]:
    return list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]


class _FieldReader:
    """Turns one ``A[T, Arg(...)]`` field into a FlagSpec the way arg_utils would."""

    def __init__(self, evaluator: SourceEvaluator, action_defaults: Mapping[str, dict[str, Any]]):
        self.evaluator = evaluator
        self.action_defaults = action_defaults

    def _choices(self, node: ast.expr | None) -> tuple[str, ...] | None:
        known, value = self.evaluator.literal(node)
        return tuple(str(item) for item in value) if known and value is not None else None

    def read(
        self, name: str, annotation: ast.expr, default: ast.expr | None, source: str
    ) -> FlagSpec | None:
        if not isinstance(annotation, ast.Subscript):
            return None
        if dotted_name(annotation.value) not in ("A", "Annotated", "typing.Annotated"):
            return None
        raw_type, *metadata = _subscript_items(annotation)
        arg: dict[str, ast.expr] | None = None
        for item in metadata:
            if isinstance(item, ast.Call) and dotted_name(item.func) == "Arg":
                arg = {kw.arg: kw.value for kw in item.keywords if kw.arg}
                break
            if _text(item):
                arg = {"help": item}
                break
        if arg is None or self.evaluator.literal(arg.get("no_cli"))[1] is True:
            return None
        cli_name = self.evaluator.literal(arg.get("cli_name"))[1] or "--" + name.replace("_", "-")
        has_default, default_value = self.evaluator.literal(default)
        deprecated, replacement = _help_facts(_text(arg.get("help")))
        common: dict[str, Any] = {
            "name": cli_name,
            "dest": name,
            "source": source,
            "aliases": tuple(self.evaluator.literal(arg.get("aliases"))[1] or ()),
            "default": default_value,
            "has_default": has_default,
            "deprecated": deprecated,
            "replacement": replacement,
        }
        parser = dotted_name(arg["type_parser"]) if "type_parser" in arg else None
        nargs = self.evaluator.literal(arg.get("nargs"))[1]
        if "action" in arg:
            return self._with_action(common, arg, parser)
        inner = _unwrap_optional(raw_type)
        kind = dotted_name(inner.value) if isinstance(inner, ast.Subscript) else dotted_name(inner)
        if kind in ("Literal", "typing.Literal") and isinstance(inner, ast.Subscript):
            literals = [self.evaluator.value(item) for item in _subscript_items(inner)]
            first_type = type(literals[0]).__name__ if literals else "str"
            value_type = parser or (first_type if first_type in ("int", "float") else "str")
            choices = self._choices(arg.get("choices")) or tuple(str(v) for v in literals)
            return FlagSpec(**common, takes_value=True, value_type=value_type, choices=choices)
        if kind in ("List", "list", "typing.List") and parser is None:
            assert isinstance(inner, ast.Subscript)
            element = dotted_name(_subscript_items(inner)[0])
            return FlagSpec(
                **common,
                takes_value=True,
                nargs=nargs or "+",
                value_type=element if element in ("int", "float") else "str",
                choices=self._choices(arg.get("choices")),
            )
        if kind == "bool":
            return FlagSpec(**common, takes_value=False, value_type="bool", const=True)
        value_type = parser or (kind if kind in ("int", "float") else "str")
        required = self.evaluator.literal(arg.get("required"))[1]
        return FlagSpec(
            **common,
            takes_value=True,
            nargs=nargs,
            value_type=value_type,
            choices=self._choices(arg.get("choices")),
            const=self.evaluator.literal(arg.get("const"))[1],
            required=required is True or (required is None and default is None),
        )

    def _with_action(
        self, common: dict[str, Any], arg: Mapping[str, ast.expr], parser: str | None
    ) -> FlagSpec:
        action = dotted_name(arg["action"])
        if action.endswith("BooleanOptionalAction"):
            negations = tuple(
                "--no-" + spelling[2:]
                for spelling in (common["name"], *common["aliases"])
                if spelling.startswith("--")
            )
            return FlagSpec(
                **common, takes_value=False, value_type="bool", const=True, negations=negations
            )
        nargs = self.action_defaults.get(action, {}).get("nargs")
        extra = arg.get("action_kwargs")
        if isinstance(extra, ast.Dict):
            for key, value in zip(extra.keys, extra.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "nargs":
                    nargs = self.evaluator.literal(value)[1]
        return FlagSpec(**common, takes_value=nargs != 0, nargs=nargs, value_type=parser or "str")


def _action_defaults(tree: ast.Module | None) -> dict[str, dict[str, Any]]:
    """Constructor defaults (nargs, const, default) of each custom argparse Action class."""
    found: dict[str, dict[str, Any]] = {}
    for node in tree.body if tree else []:
        if not isinstance(node, ast.ClassDef):
            continue
        defaults: dict[str, Any] = {"nargs": None}
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                named = item.args.args[-len(item.args.defaults) :] if item.args.defaults else []
                for param, value in zip(named, item.args.defaults, strict=True):
                    if isinstance(value, ast.Constant):
                        defaults[param.arg] = value.value
        found[node.name] = defaults
    return found


def _manual_flags(tree: ast.Module, reader: _FieldReader, *, source: str) -> Iterator[FlagSpec]:
    """Flags registered with ``parser.add_argument(...)`` inside ``add_cli_args``."""
    for function in ast.walk(tree):
        if not (isinstance(function, ast.FunctionDef) and function.name == "add_cli_args"):
            continue
        local = function_locals(function)
        for call in ast.walk(function):
            is_add = isinstance(call, ast.Call) and dotted_name(call.func).endswith(".add_argument")
            if not is_add:
                continue
            assert isinstance(call, ast.Call)
            yield _manual_flag(call, reader, local=local, source=source)


def _manual_flag(
    call: ast.Call, reader: _FieldReader, *, local: Mapping[str, ast.expr], source: str
) -> FlagSpec:
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    kwargs = {kw.arg: kw.value for kw in call.keywords if kw.arg}

    def literal(key: str) -> tuple[bool, Any]:
        return reader.evaluator.literal(kwargs.get(key), local)

    action_node = kwargs.get("action")
    if isinstance(action_node, ast.Constant):
        action = str(action_node.value)
    else:
        action = dotted_name(action_node) if action_node is not None else "store"
    settings = dict(reader.action_defaults.get(action, {"nargs": None}))
    if action in _NO_VALUE_ACTIONS:
        settings |= {"nargs": 0, "const": _NO_VALUE_ACTIONS[action]}
    settings["default"] = False if action == "store_true" else settings.get("default")
    for key in ("nargs", "const", "default"):
        known, value = literal(key)
        if known or key in kwargs:
            settings[key] = value
    if literal("const_value")[0]:
        settings["const"] = literal("const_value")[1]
    has_default, _ = literal("default")
    dest = str(literal("dest")[1] or names[0].lstrip("-").replace("-", "_"))
    new_flag = literal("new_flag")[1]
    deprecated, replacement = _help_facts(_text(kwargs.get("help")), new_flag)
    choices = literal("choices")[1]
    type_name = dotted_name(kwargs["type"]) if "type" in kwargs else "str"
    nargs = settings["nargs"]
    return FlagSpec(
        name=names[0],
        aliases=tuple(names[1:]),
        dest=dest,
        takes_value=nargs != 0,
        nargs=nargs,
        value_type=type_name if nargs != 0 else "bool",
        choices=None if choices is None else tuple(str(c) for c in choices),
        default=settings["default"],
        has_default=has_default or "default" not in kwargs,
        const=settings.get("const"),
        required=literal("required")[1] is True,
        deprecated=deprecated or action.startswith("Deprecated"),
        replacement=replacement,
        source=source,
    )


def _input_classes(server_args: ast.Module) -> set[str] | None:
    for node in server_args.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.List)):
            continue
        if any(isinstance(t, ast.Name) and t.id == "_INPUT_NAMESPACES" for t in node.targets):
            return {dotted_name(item) for item in node.value.elts}
    return None


def _namespace_fields(
    trees: Mapping[str, ast.Module], wanted: set[str] | None
) -> Iterator[tuple[str, ast.AnnAssign]]:
    """(source path, field) for each annotated field of each input namespace class."""
    for path, tree in trees.items():
        if not fnmatch.fnmatch(path, FIELDS_GLOB):
            continue
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            if wanted is not None and node.name not in wanted:
                continue
            for item in node.body:
                if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                    continue
                if not item.target.id.startswith("_NS"):
                    yield path, item


def _version(sources: Mapping[str, str], trees: Mapping[str, ast.Module]) -> str:
    version_tree = trees.get("sglang/_version.py")
    if version_tree is not None:
        with_version = SourceEvaluator({"v": version_tree}, {}).names.get("__version__")
        if isinstance(with_version, ast.Constant) and isinstance(with_version.value, str):
            return with_version.value
    for path, text in sources.items():
        if path.endswith(".dist-info/METADATA"):
            found = re.search(r"^Version:\s*(\S+)", text, re.MULTILINE)
            if found:
                return found.group(1)
    raise SpecError("cannot tell the sglang version from the given sources")


def extract_flags(sources: Mapping[str, str]) -> FlagTable:
    """The flag table of the sglang whose files (wheel path -> text) are given. Pure."""
    if SERVER_ARGS not in sources:
        raise SpecError(f"{SERVER_ARGS} is missing from the sources")
    trees = {path: ast.parse(text, path) for path, text in sources.items() if path.endswith(".py")}
    fields = list(_namespace_fields(trees, _input_classes(trees[SERVER_ARGS])))
    plain = SourceEvaluator(trees, {})
    field_defaults: dict[str, Any] = {}
    for _, item in fields:
        known, value = plain.literal(item.value)
        if known:
            field_defaults[item.target.id] = value  # type: ignore[union-attr]
    evaluator = SourceEvaluator(trees, field_defaults)
    reader = _FieldReader(evaluator, _action_defaults(trees.get(ACTIONS)))
    specs: dict[str, FlagSpec] = {}
    for path, item in fields:
        assert isinstance(item.target, ast.Name)
        spec = reader.read(item.target.id, item.annotation, item.value, path)
        if spec is not None:
            specs[spec.name] = spec
    for spec in _manual_flags(trees[SERVER_ARGS], reader, source=SERVER_ARGS):
        specs.setdefault(spec.name, spec)
    return FlagTable(
        sglang_version=_version(sources, trees),
        flags=tuple(sorted(specs.values(), key=lambda s: s.name)),
        field_defaults=field_defaults,
    )


def _is_source(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


def read_wheel_sources(wheel: Path, patterns: Sequence[str] = SOURCE_PATTERNS) -> dict[str, str]:
    """The files ``extract_flags`` needs (or ``patterns``), read from a wheel (a zip)
    without unpacking it."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: archive.read(name).decode("utf-8")
            for name in archive.namelist()
            if _is_source(name, patterns)
        }


def read_installed_sources(
    version: str, patterns: Sequence[str] = SOURCE_PATTERNS
) -> dict[str, str]:
    """The files ``extract_flags`` needs (or ``patterns``), read from the installed
    sglang ``version``.

    The dev virtualenv holds the pinned sglang without its dependencies (never imported:
    only its files are read, under their paths in the wheel, which the install keeps).
    """
    try:
        dist = metadata.distribution("sglang")
    except metadata.PackageNotFoundError as exc:
        raise SpecError(
            "sglang is not installed (hack/install-python-deps.sh --extras dev)"
        ) from exc
    if dist.version != version:
        raise SpecError(f"the installed sglang is {dist.version}, not the pinned {version}")
    return {
        str(path): path.read_text(encoding="utf-8")
        for path in dist.files or ()
        if _is_source(str(path), patterns)
    }


def ensure_wheel(version: str, *, cache_dir: Path) -> Path:
    """The cached sglang wheel for ``version``, downloaded (no deps) with pip if absent."""
    pattern = f"sglang-{version}-*.whl"
    cached = sorted(cache_dir.glob(pattern))
    if cached:
        return cached[0]
    cache_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps"]
    command += ["--only-binary=:all:", "--python-version", "3.11", "-d", str(cache_dir)]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    cached = sorted(cache_dir.glob(pattern))
    if completed.returncode != 0 or not cached:
        raise SpecError(f"pip download sglang=={version} failed: {completed.stderr[-2000:]}")
    return cached[0]


def wheel_command(
    prog: str, argv: Sequence[str] | None, *, default_output: Path, patterns: Sequence[str]
) -> tuple[dict[str, str], Path]:
    """``[WHEEL] [--output JSON]``, the command line of this package's extractors: the
    files matching ``patterns`` (from WHEEL, default the installed pinned sglang) and
    where to write."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument(
        "wheel", type=Path, nargs="?", help="the sglang wheel to read (default: installed sglang)"
    )
    parser.add_argument("--output", type=Path, default=default_output)
    options = parser.parse_args(argv)
    if options.wheel is None:
        return read_installed_sources(sglang_flags.SGLANG_VERSION, patterns), options.output
    return read_wheel_sources(options.wheel, patterns), options.output


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sparkllm_dev.flags.extract [WHEEL] [--output JSON]``."""
    default_output = Path(sglang_flags.__file__).with_name(sglang_flags.FLAGS_RESOURCE)
    sources, output = wheel_command(
        "python -m sparkllm_dev.flags.extract",
        argv,
        default_output=default_output,
        patterns=SOURCE_PATTERNS,
    )
    table = extract_flags(sources)
    text = json.dumps(table.to_json(), indent=1, sort_keys=False) + "\n"
    output.write_text(text, encoding="utf-8")
    print(f"sglang {table.sglang_version}: {len(table.flags)} flags -> {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
