"""One contract per command: the args type that its parser and its renderer both use.

Why: sparkllm's own sub-commands run in pods the operator renders (``verify-model`` and
``verify-network`` as init containers, ``python -m sparkllm.preflight.bandwidth`` in the
engine image, ``bench`` and ``bench --accept`` as Jobs). Their flags were typed twice, once
in the command's argparse parser and once in the renderer writing the pod's args, so a
renamed flag broke a pod only when it ran. Now each command has one frozen dataclass whose
fields carry their flags (``option``): its parser is built from it (``add_options``), a
parsed namespace becomes it (``from_namespace``), and the renderer fills one in and writes
it out (``command_line``). ``tests/unit/test_command_args.py`` round-trips each.

Field types: ``bool`` is a switch (written when true); ``str``, ``int``, ``float``,
``Path`` (or ``None``) take one value, a ``Literal`` one of its values; ``tuple[str, ...]``
repeats the flag per value, or, with ``sep``, takes one value joined by it. A field is
written, in field order, when it differs from its default (``always``: at its default
too). Standard library only: the bandwidth module ships this file into the engine image
(``preflight/verify.py``, SHIPPED).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar


@dataclass(frozen=True)
class Option:
    """How one field is spelled on a command line."""

    flag: str
    help: str | None = None
    metavar: str | None = None
    sep: str | None = None  # tuple fields: one value, joined by this
    always: bool = False  # written even when it equals its default
    group: str | None = None  # the parser's argument group (help layout only)


def option(
    flag: str,
    *,
    default: Any = dataclasses.MISSING,
    help: str | None = None,
    metavar: str | None = None,
    sep: str | None = None,
    always: bool = False,
    group: str | None = None,
) -> Any:
    """A dataclass field spelled ``flag``; without ``default`` the option is required."""
    spelled = Option(flag, help, metavar, sep, always, group)
    return dataclasses.field(default=default, metadata={"option": spelled})


class CommandArgs(Protocol):
    """A frozen dataclass of options, and the words that start its command line."""

    COMMAND: ClassVar[tuple[str, ...]]
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


ArgsT = TypeVar("ArgsT", bound=CommandArgs)


def _options(cls: type[Any]) -> list[tuple[dataclasses.Field[Any], Option, Any]]:
    """(field, its Option, its type without None) for every option field, in order."""
    hints = typing.get_type_hints(cls)
    found = []
    for field in dataclasses.fields(cls):
        spelled = field.metadata.get("option")
        if isinstance(spelled, Option):
            kind = hints[field.name]
            if isinstance(kind, types.UnionType):  # X | None
                kind = next(a for a in typing.get_args(kind) if a is not type(None))
            found.append((field, spelled, kind))
    return found


def _splitter(sep: str) -> Callable[[str], list[str]]:
    def split(text: str) -> list[str]:  # a list, like an appended option: a tuple once parsed
        return [word.strip() for word in text.split(sep) if word.strip()]

    return split


def add_options(parser: argparse.ArgumentParser, cls: type[CommandArgs]) -> None:
    """Add every option of ``cls`` to ``parser`` (``dest`` = the field's name)."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for field, spelled, kind in _options(cls):
        target: Any = parser
        if spelled.group is not None:
            target = groups.get(spelled.group) or parser.add_argument_group(spelled.group)
            groups[spelled.group] = target
        kwargs: dict[str, Any] = {"dest": field.name, "help": spelled.help}
        if spelled.metavar is not None:
            kwargs["metavar"] = spelled.metavar
        if kind is bool:
            kwargs["action"] = "store_true"
        elif typing.get_origin(kind) is tuple:
            if spelled.sep is not None:
                kwargs["type"] = _splitter(spelled.sep)
            else:
                kwargs["action"] = "append"
        elif typing.get_origin(kind) is typing.Literal:
            kwargs["choices"] = typing.get_args(kind)
        else:
            kwargs["type"] = kind
        if field.default is dataclasses.MISSING:
            kwargs["required"] = True
        elif kind is not bool:
            kwargs["default"] = field.default
        target.add_argument(spelled.flag, **kwargs)


def from_namespace(cls: type[ArgsT], namespace: argparse.Namespace) -> ArgsT:
    """The args a parsed namespace holds (repeated options as tuples)."""
    values = {}
    for field, _, _ in _options(cls):
        value = getattr(namespace, field.name)
        values[field.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values)


def _words(spelled: Option, value: Any) -> list[str]:
    if isinstance(value, bool):
        return [spelled.flag] if value else []
    if isinstance(value, tuple):
        if spelled.sep is not None:
            return [spelled.flag, spelled.sep.join(value)]
        return [word for item in value for word in (spelled.flag, str(item))]
    if isinstance(value, float):
        return [spelled.flag, f"{value:g}"]
    return [spelled.flag, str(value)]


def to_argv(args: CommandArgs) -> list[str]:
    """The options of ``args`` as words: each set one that differs from its default."""
    words: list[str] = []
    for field, spelled, _ in _options(type(args)):
        value = getattr(args, field.name)
        if value is None or (value == field.default and not spelled.always):
            continue
        words += _words(spelled, value)
    return words


def command_line(args: CommandArgs) -> list[str]:
    """The command's own words, then its options: what a pod's ``args`` hold."""
    return [*type(args).COMMAND, *to_argv(args)]


def coerce(cls: type[CommandArgs], name: str, text: str) -> Any:
    """``text`` as the value of ``cls``'s field ``name`` (its int, float, Path or str)."""
    (kind,) = [kind for field, _, kind in _options(cls) if field.name == name]
    return text if typing.get_origin(kind) is typing.Literal else kind(text)


def parse_args(cls: type[ArgsT], argv: list[str], *, prog: str | None = None) -> ArgsT:
    """Parse ``argv`` (the options, after ``COMMAND``) into ``cls`` with its own parser."""
    parser = argparse.ArgumentParser(prog=prog)
    add_options(parser, cls)
    return from_namespace(cls, parser.parse_args(argv))


__all__ = [
    "CommandArgs",
    "Option",
    "add_options",
    "coerce",
    "command_line",
    "from_namespace",
    "option",
    "parse_args",
    "to_argv",
]
