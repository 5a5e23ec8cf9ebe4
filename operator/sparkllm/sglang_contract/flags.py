"""The pinned SGLang's (0.5.23) flag table: which flags exist and how argparse reads them.

Why this module exists: every flag the operator renders, and every ``extraArgs`` entry a
user adds, must be accepted by the SGLang inside the pinned image, and the simulator must
refuse a command line exactly where SGLang would. Both read the same table,
``sglang_flags.json``, generated from the sglang wheel by the harness's extractor
(``hack/update-sglang-flags.sh``; never by importing sglang, which pulls in torch) and
checked in; a unit test fails when it drifts. Which spec field sets which of these flags
is :mod:`sparkllm.sglang_contract.fields`' business.

Facts of 0.5.23 the operator depends on (all verified in the wheel; see docs/simulator.md):

- CUDA-graph decode batch: ``--cuda-graph-max-bs-decode`` (``arg_groups/fields/exec_.py``).
  ``--cuda-graph-max-bs`` does NOT exist any more; argparse's prefix matching makes it an
  *ambiguous option* (it prefixes ``--cuda-graph-max-bs-decode`` and ``-prefill``).
- ``--pp-size`` (alias ``--pipeline-parallel-size``), ``--tp-size``, ``--nnodes``,
  ``--node-rank``, ``--dist-init-addr`` (alias ``--nccl-init-addr``), ``--dist-timeout``
  (default None), all in ``fields/parallel.py``.
- ``--mem-fraction-static``, ``--max-running-requests``, ``--chunked-prefill-size``
  (``fields/schedule.py``, defaults None = resolved at startup), ``--context-length``
  (``fields/model.py``, human-readable int such as ``12k``), ``--watchdog-timeout``
  (``fields/device.py``, default 300), ``--enable-metrics`` (``fields/observability.py``),
  ``--api-key`` and ``--served-model-name`` (``fields/serving.py``).
- ``--tool-call-parser`` and ``--reasoning-parser`` are registered by hand in
  ``server_args.py``; their choices are ``auto`` plus ``function_call/parser_names.py``
  (includes ``deepseekv4``) and ``parser/reasoning_parser_names.py`` (includes
  ``deepseek-v4``).

Parsing follows argparse as SGLang configures it (``ArgumentParser(prog="sglang serve")``):
``--flag value`` and ``--flag=value``, unique-prefix abbreviations, ``-1`` accepted as a
value, the last occurrence wins, unknown arguments are an error. Errors are
:class:`~sparkllm.errors.SpecError` carrying argparse's wording.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from typing import Any

from sparkllm.errors import SpecError

FLAGS_RESOURCE = "sglang_flags.json"

ParsedValue = str | bool | list[str]


@dataclass(frozen=True, slots=True)
class FlagSpec:
    """One SGLang command-line option, as argparse registers it."""

    name: str
    """Canonical spelling, e.g. ``--pp-size``."""
    dest: str
    """The ServerArgs field (argparse ``dest``) the option sets, e.g. ``pp_size``."""
    takes_value: bool
    """False for switches (store_true, BooleanOptionalAction, const actions with nargs=0)."""
    source: str
    """File inside the wheel that declares it."""
    aliases: tuple[str, ...] = ()
    negations: tuple[str, ...] = ()
    """``--no-x`` spellings added by ``argparse.BooleanOptionalAction``."""
    nargs: str | int | None = None
    """argparse nargs: None = exactly one value, or ``?``, ``*``, ``+``, or a count."""
    value_type: str = "str"
    """``int``, ``float``, ``str``, ``bool`` or the name of SGLang's type parser."""
    choices: tuple[str, ...] | None = None
    default: Any = None
    has_default: bool = False
    """False when the default is not a literal the extractor could read."""
    const: Any = None
    """Value stored by a switch (True for store_true) or by ``nargs='?'`` without a value."""
    required: bool = False
    deprecated: bool = False
    replacement: str | None = None

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases, *self.negations)

    def to_json(self) -> dict[str, Any]:
        values = {item.name: getattr(self, item.name) for item in fields(self)}
        return {key: list(v) if isinstance(v, tuple) else v for key, v in values.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FlagSpec:
        tuples = ("aliases", "negations", "choices")
        values: dict[str, Any] = {item.name: data[item.name] for item in fields(cls)}
        for name in tuples:
            values[name] = None if values[name] is None else tuple(values[name])
        return cls(**values)


@dataclass(frozen=True, slots=True)
class FlagTable:
    """Every option of one SGLang version plus the literal defaults of all ServerArgs fields."""

    sglang_version: str
    flags: tuple[FlagSpec, ...]
    field_defaults: Mapping[str, Any] = field(default_factory=dict)
    by_spelling: Mapping[str, FlagSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = {spelling: spec for spec in self.flags for spelling in spec.spellings}
        object.__setattr__(self, "by_spelling", index)

    def to_json(self) -> dict[str, Any]:
        return {
            "sglang_version": self.sglang_version,
            "flags": [spec.to_json() for spec in sorted(self.flags, key=lambda s: s.name)],
            "field_defaults": dict(sorted(self.field_defaults.items())),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FlagTable:
        return cls(
            sglang_version=data["sglang_version"],
            flags=tuple(FlagSpec.from_json(item) for item in data["flags"]),
            field_defaults=dict(data["field_defaults"]),
        )


@cache
def flag_table() -> FlagTable:
    """The packaged table for the pinned SGLang version (read once)."""
    text = resources.files("sparkllm.sglang_contract").joinpath(FLAGS_RESOURCE).read_text("utf-8")
    return FlagTable.from_json(json.loads(text))


SGLANG_VERSION: str = flag_table().sglang_version


def known_flags() -> frozenset[str]:
    """Every accepted full spelling: canonical names, aliases and ``--no-`` negations."""
    return frozenset(flag_table().by_spelling)


def flag_spec(name: str) -> FlagSpec:
    """The option spelled ``name`` (exactly, no abbreviation); SpecError if unknown."""
    spec = flag_table().by_spelling.get(name)
    if spec is None:
        raise SpecError(f"unknown SGLang {SGLANG_VERSION} flag {name}{_suggestion(name)}")
    return spec


def flag_takes_value(name: str) -> bool:
    return flag_spec(name).takes_value


def canonical_flag(name: str) -> str:
    """The canonical spelling of the option ``name`` (``--model`` -> ``--model-path``)."""
    return flag_spec(name).name


def _suggestion(name: str) -> str:
    close = difflib.get_close_matches(name, sorted(known_flags()), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def _looks_like_value(arg: str) -> bool:
    """argparse's rule: a leading '-' marks an option unless the arg is a negative number."""
    if not arg.startswith("-"):
        return True
    try:
        float(arg)
    except ValueError:
        return False
    return True


def _resolve_spelling(option: str, table: FlagTable) -> tuple[str | None, str]:
    """Exact match, else argparse's unique-prefix match. Returns (full spelling, problem)."""
    if option in table.by_spelling:
        return option, ""
    matches = sorted(s for s in table.by_spelling if s.startswith(option))
    if len(matches) == 1:
        return matches[0], ""
    if len(matches) > 1:
        return None, f"ambiguous option: {option} could match {', '.join(matches)}"
    return None, f"unrecognized arguments: {option}"


def _argument_label(spec: FlagSpec) -> str:
    return "/".join((spec.name, *spec.aliases))


def _check_value(spec: FlagSpec, value: str) -> str:
    """argparse's type and choices checks, for the types the simulator can judge."""
    label = _argument_label(spec)
    if spec.value_type in ("int", "float"):
        try:
            int(value) if spec.value_type == "int" else float(value)
        except ValueError:
            return f"argument {label}: invalid {spec.value_type} value: '{value}'"
    if spec.value_type == "human_readable_int" and parse_human_readable_int(value) is None:
        return f"argument {label}: invalid human_readable_int value: '{value}'"
    if spec.choices is not None and value not in spec.choices:
        shown = ", ".join(f"'{c}'" for c in spec.choices)
        return f"argument {label}: invalid choice: '{value}' (choose from {shown})"
    return ""


def parse_human_readable_int(value: str) -> int | None:
    """SGLang's ``human_readable_int``: ``12288``, ``12k`` (SI) or ``12Ki`` (IEC); None if bad."""
    text = value.strip()
    multipliers = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    multipliers |= {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    for suffix in ("Ki", "Mi", "Gi", "Ti", "k", "M", "G", "T"):
        number = text.removesuffix(suffix)
        if number != text:
            try:
                return int(float(number) * multipliers[suffix]) if number else None
            except ValueError:
                return None
    try:
        return int(text)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _Occurrence:
    written: str
    spec: FlagSpec
    value: ParsedValue


def _scan(argv: Sequence[str], table: FlagTable) -> tuple[list[_Occurrence], list[str]]:
    """Walk argv like argparse; return the options found and every problem met."""
    found: list[_Occurrence] = []
    problems: list[str] = []
    position = 0
    while position < len(argv):
        arg = argv[position]
        position += 1
        if _looks_like_value(arg) or arg in ("-", "--"):
            problems.append(f"unrecognized arguments: {arg}")
            continue
        option, has_inline, inline = arg.partition("=")
        spelling, problem = _resolve_spelling(option, table)
        if spelling is None:
            problems.append(problem)
            while position < len(argv) and _looks_like_value(argv[position]):
                position += 1  # most likely the unknown option's own values: one problem
            continue
        spec = table.by_spelling[spelling]
        label = _argument_label(spec)
        if not spec.takes_value:
            if has_inline:
                problems.append(f"argument {label}: ignored explicit argument '{inline}'")
                continue
            value: ParsedValue = switch_value(spec, negated=spelling in spec.negations)
            found.append(_Occurrence(written=option, spec=spec, value=value))
            continue
        values = [inline] if has_inline else []
        if not has_inline:
            while position < len(argv) and _looks_like_value(argv[position]):
                if spec.nargs is None or spec.nargs == "?":
                    if values:
                        break
                elif isinstance(spec.nargs, int) and len(values) == spec.nargs:
                    break
                values.append(argv[position])
                position += 1
        problem = _check_count(spec, values)
        problem = problem or next(filter(None, (_check_value(spec, v) for v in values)), "")
        if problem:
            problems.append(problem)
            continue
        found.append(_Occurrence(written=option, spec=spec, value=_stored(spec, values)))
    return found, problems


def switch_value(spec: FlagSpec, *, negated: bool) -> ParsedValue:
    """What a switch stores when given (``--no-x``: ``negated``)."""
    if negated:
        return False
    if isinstance(spec.const, bool):
        return spec.const
    return True if spec.const is None else str(spec.const)


def _check_count(spec: FlagSpec, values: list[str]) -> str:
    label = _argument_label(spec)
    if spec.nargs is None and len(values) != 1:
        return f"argument {label}: expected one argument"
    if spec.nargs == "+" and not values:
        return f"argument {label}: expected at least one argument"
    if isinstance(spec.nargs, int) and len(values) != spec.nargs:
        return f"argument {label}: expected {spec.nargs} arguments"
    return ""


def _stored(spec: FlagSpec, values: list[str]) -> ParsedValue:
    if spec.nargs in ("+", "*") or isinstance(spec.nargs, int):
        return values
    if spec.nargs == "?" and not values:
        return "" if spec.const is None else str(spec.const)
    return values[0]


def parse_sglang_options(argv: Sequence[str], *, lenient: bool = False) -> dict[str, ParsedValue]:
    """Parse some of SGLang's arguments (e.g. ``extraArgs``) as 0.5.23 would, without
    asking for the required ones.

    Returns the options given, keyed by ServerArgs field (``pp_size``), values as written
    (strings, lists for nargs options, booleans for switches). Raises SpecError with
    argparse's message on the first problem; ``lenient``: what 0.5.23 cannot judge (a
    flag it does not know and its values, a value it refuses) is left out instead — the
    engine image's own SGLang judges it (``launch_check.py``).
    """
    found, problems = _scan(argv, flag_table())
    if problems and not lenient:
        raise SpecError(problems[0])
    return {occurrence.spec.dest: occurrence.value for occurrence in found}


def parse_sglang_argv(argv: Sequence[str]) -> dict[str, ParsedValue]:
    """Parse SGLang's own arguments (after ``-m sglang.launch_server``) as 0.5.23 would.

    As :func:`parse_sglang_options`, and a missing required option is an error too.
    """
    table = flag_table()
    parsed = parse_sglang_options(argv)
    missing = [s for s in table.flags if s.required and s.dest not in parsed]
    if missing:
        names = ", ".join(_argument_label(s) for s in missing)
        raise SpecError(f"the following arguments are required: {names}")
    return parsed


def validate_extra_args(args: Sequence[str], *, reserved: Collection[str] = ()) -> list[str]:
    """Problems with user-supplied extra SGLang arguments whatever SGLang runs them; empty
    if fine.

    Only what does not depend on the engine image's SGLang version: a word that sets an
    option in ``reserved`` (flags the operator renders itself, e.g. ``--pp-size``) by any
    spelling — alias, negation, or an abbreviation argparse could expand to it (when a
    prefix could mean several flags and one is reserved, it is refused too). A flag this
    table does not know, an abbreviation of another flag, a value it would refuse: the
    image's own SGLang judges those before the engine starts (``launch_check.py``,
    condition LaunchChecked), because another SGLang version may accept them.
    """
    table = flag_table()
    reserved_dests = {flag_spec(name).dest for name in reserved}
    problems: list[str] = []
    for word in args:
        option = word.split("=", 1)[0]
        if not option.startswith("--") or option == "--":
            continue
        exact = [option] if option in table.by_spelling else []
        matches = exact or [s for s in table.by_spelling if s.startswith(option)]
        if any(table.by_spelling[s].dest in reserved_dests for s in matches):
            problems.append(
                f"{option} is set by the operator from the spec and may not appear in extraArgs"
            )
    return problems


def typed_value(spec: FlagSpec, value: ParsedValue) -> Any:
    """A parsed value converted the way SGLang's argparse ``type=`` would store it."""
    if isinstance(value, bool):
        return value
    if isinstance(value, list):
        return [typed_value(spec, item) for item in value]
    if spec.value_type == "int":
        return int(value)
    if spec.value_type == "float":
        return float(value)
    if spec.value_type == "human_readable_int":
        return parse_human_readable_int(value)
    return value


def server_args_with_defaults(parsed: Mapping[str, ParsedValue]) -> dict[str, Any]:
    """All ServerArgs fields: literal defaults overlaid with typed parsed values."""
    table = flag_table()
    specs_by_dest = {spec.dest: spec for spec in table.flags}
    merged: dict[str, Any] = dict(table.field_defaults)
    for dest, value in parsed.items():
        spec = specs_by_dest[dest]
        merged[dest] = typed_value(spec, value)
    return merged
