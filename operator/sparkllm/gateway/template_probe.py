"""The rendered prompt's length without rendering it: one probe render per message shape.

Why: for a short prompt only the rendered prompt's UTF-8 length matters (the byte bound,
tokens.py), yet rendering the chat template was most of the admission decision: about
0.1 ms with warm caches, and about 0.25 ms of the time to the first token at
concurrency 1, where the caches are cold (docs/gateway.md, "Front-door benchmark").
Most templates only *place* a message's text: they wrap it in role markers but never
look at it. Then the rendered length is the skeleton's length plus, for each text, the
number of times it was placed times its length; skeleton and counts depend only on the
conversation's *shape* (roles, every other field, tools, template arguments: all but
the texts), and a few shapes cover most traffic.

How the length stays exact: the probe renders a shape once, with an opaque stand-in for
each message's text. A stand-in holds no text, only its message's position, so the
probe's output cannot depend on any text. What a template may do with a stand-in:

* output it (``{{ ... }}``): the probe environment's ``finalize`` counts it and outputs
  nothing in its place;
* join it with ``+`` to strings or other stand-ins: the result is again opaque;
* apply a type test (``is string``, ``is none``, ``is defined``, ...): answered as for
  any string, which is what the text is.

Anything else a template could do to learn about a text — compare it, test it, measure
it, slice it, iterate it, call a method, a filter or a function with it, turn it into a
string another way (``~``, ``%``, ``format``, ``join``) — *taints* the probe, and a
tainted or failed probe means that shape is always rendered. Tainting is recorded
before anything is raised, so an error the template machinery swallows still counts.
Templates are probed only if nothing can capture output into a string that is used
again — ``{% set %}...{% endset %}``, macros, call and filter blocks, blocks, recursive
loops, autoescape changes — and probes that call something non-deterministic
(``strftime_now``, ``lipsum``, ``random``) fail. tests/unit/test_gateway_template_probe.py
checks with hypothesis, over templates that place texts and templates that inspect them
in each of these ways, that a probed length always equals the real rendering's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn

from jinja2 import nodes
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Tests whose answer depends only on the type (a text is a str): probed as for "".
_TYPE_TESTS = frozenset(
    {
        "defined",
        "undefined",
        "none",
        "boolean",
        "false",
        "true",
        "integer",
        "float",
        "string",
        "mapping",
        "number",
        "sequence",
        "iterable",
        "callable",
        "escaped",
    }
)
_NONDETERMINISTIC_FILTERS = frozenset({"random"})
_NONDETERMINISTIC_GLOBALS = ("lipsum", "strftime_now")
# Nodes that capture rendered output into a value the template can use again (or
# change how output is escaped): the probe's empty stand-in output would leak into it.
_CAPTURING_NODES = (
    nodes.AssignBlock,
    nodes.Macro,
    nodes.CallBlock,
    nodes.FilterBlock,
    nodes.Block,
    nodes.EvalContextModifier,
    nodes.Include,
    nodes.Import,
    nodes.FromImport,
    nodes.Extends,
    nodes.ExprStmt,
)


class ProbeFailedError(Exception):
    """A probe cannot give the length (raised inside a probe render, never outside)."""


class _Probe:
    """One probe render: how often each text was output, and whether one was looked at."""

    __slots__ = ("counts", "tainted")

    def __init__(self, texts: int) -> None:
        self.counts = [0] * texts
        self.tainted = False


class _Opaque:
    """A stand-in for a message text, or a ``+`` of texts and strings; see the module doc."""

    __slots__ = ("_parts", "_probe")

    def __init__(self, probe: _Probe, parts: tuple[str | int, ...]) -> None:
        self._probe = probe
        self._parts = parts  # strings, and ints: the positions of texts

    def _taint(self, *_args: object, **_kwargs: object) -> NoReturn:
        self._probe.tainted = True
        raise ProbeFailedError("the template looks at a message text")

    def __add__(self, other: object) -> _Opaque:
        if isinstance(other, _Opaque) and other._probe is self._probe:
            return _Opaque(self._probe, self._parts + other._parts)
        if type(other) is str:
            return _Opaque(self._probe, (*self._parts, other))
        return self._taint()

    def __radd__(self, other: object) -> _Opaque:
        if type(other) is str:
            return _Opaque(self._probe, (other, *self._parts))
        return self._taint()

    def placed(self) -> str:
        """Count this output's texts and return its strings (the texts output as "")."""
        counts = self._probe.counts
        for part in self._parts:
            if type(part) is int:
                counts[part] += 1
        return "".join(part for part in self._parts if type(part) is str)

    # Every other way to learn anything about the text taints the probe.
    __str__ = __repr__ = __format__ = __bytes__ = __bool__ = __len__ = _taint
    __iter__ = __reversed__ = __contains__ = __getitem__ = __hash__ = _taint
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _taint
    __mul__ = __rmul__ = __mod__ = __rmod__ = _taint
    __int__ = __float__ = __index__ = __complex__ = __round__ = _taint
    __getattr__ = _taint


def _finalize(value: object) -> object:
    return value.placed() if isinstance(value, _Opaque) else value


def _check(values: Iterable[object]) -> None:
    for value in values:
        if isinstance(value, _Opaque):
            value._taint()


def _guarded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)  # keeps jinja's pass_context/pass_environment marker
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if name in _NONDETERMINISTIC_FILTERS:
            raise ProbeFailedError(f"the '{name}' filter is not deterministic")
        _check((*args, *kwargs.values()))
        return function(*args, **kwargs)

    return guarded


def _guarded_test(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if name in _TYPE_TESTS and args and isinstance(args[0], _Opaque):
            args = ("", *args[1:])  # a text is a str; these tests look at nothing else
        _check((*args, *kwargs.values()))
        return function(*args, **kwargs)

    return guarded


class ProbeEnvironment(ImmutableSandboxedEnvironment):
    """The chat template's environment, plus the probe's rules (see the module doc).

    Build it with the same options as the rendering environment, then call ``guard()``
    once its filters, tests and globals are all in place.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(finalize=_finalize, **options)

    def guard(self) -> None:
        """Wrap every filter and test, and make the non-deterministic globals fail."""
        self.filters = {name: _guarded_filter(name, f) for name, f in self.filters.items()}
        tests: dict[str, Any] = self.tests  # jinja types them as the 'function' class
        self.tests = {name: _guarded_test(name, f) for name, f in tests.items()}
        for name in _NONDETERMINISTIC_GLOBALS:
            if name in self.globals:
                self.globals[name] = _not_deterministic(name)

    def getattr(self, obj: Any, attribute: str) -> Any:
        _check((obj,))
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _check((obj, argument))
        return super().getitem(obj, argument)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _check((__obj, *args, *kwargs.values()))
        return super().call(__context, __obj, *args, **kwargs)


def _not_deterministic(name: str) -> Callable[..., NoReturn]:
    def fail(*_args: object, **_kwargs: object) -> NoReturn:
        raise ProbeFailedError(f"'{name}' is not deterministic")

    return fail


def probeable(tree: nodes.Template) -> bool:
    """Whether a parsed template can be probed at all (no output capturing, see above)."""
    if any(True for _ in tree.find_all(_CAPTURING_NODES)):
        return False
    return not any(loop.recursive for loop in tree.find_all(nodes.For))


class _Text:
    """Where a message's text was, in a shape (a repr no JSON value can have)."""

    def __repr__(self) -> str:
        return "TEXT"


TEXT = _Text()
MAX_SHAPE_CHARS = 16 * 1024  # larger shapes (big tool schemas) are rendered, not cached


class Shape:
    """A conversation without its texts: the key under which a probe's result is kept.

    ``messages`` are the messages' (key, value) pairs in order, ``TEXT`` where a string
    content was. Equal shapes render alike wherever no text is looked at.
    """

    __slots__ = ("_key", "messages", "template_kwargs", "tools", "variant")

    def __init__(
        self,
        variant: str,
        messages: list[list[tuple[str, Any]]],
        tools: Any,
        template_kwargs: Mapping[str, Any],
    ) -> None:
        self.variant, self.messages = variant, messages
        self.tools, self.template_kwargs = tools, template_kwargs
        # repr, not a hashable copy: it is as exact for JSON values (1 vs 1.0 vs True,
        # key order), and the cheapest canonical form.
        self._key = repr((variant, messages, tools, template_kwargs))

    @property
    def cacheable(self) -> bool:
        return len(self._key) <= MAX_SHAPE_CHARS

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and other._key == self._key


def split_texts(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[list[tuple[str, Any]]], list[str]] | None:
    """The messages with each string content replaced by ``TEXT``, and those contents.

    None if a content is not a string: content parts are data a template iterates.
    """
    shape: list[list[tuple[str, Any]]] = []
    texts: list[str] = []
    for message in messages:
        items = []
        for key, value in message.items():
            if key == "content":
                if type(value) is not str:
                    return None
                texts.append(value)
                items.append((key, TEXT))
            else:
                items.append((key, value))
        shape.append(items)
    return shape, texts


Lengths = tuple[int, tuple[int, ...]]  # skeleton bytes, times each text is output


def probe(render: Callable[[list[dict[str, Any]]], str], shape: Shape) -> Lengths | None:
    """Render ``shape`` once with stand-ins; None if this shape must always be rendered.

    ``render`` renders the probe environment's template for the given messages, with
    the shape's tools and template arguments.
    """
    texts = sum(1 for items in shape.messages for _, value in items if value is TEXT)
    state = _Probe(texts)
    position = iter(range(texts))
    messages = [
        {key: _Opaque(state, (next(position),)) if value is TEXT else value for key, value in items}
        for items in shape.messages
    ]
    try:
        skeleton = render(messages)
    except Exception:  # ProbeFailedError, or anything the template raises for this shape
        return None
    if state.tainted:  # a text was looked at, though the template machinery swallowed it
        return None
    try:
        return len(skeleton.encode("utf-8")), tuple(state.counts)
    except UnicodeEncodeError:  # the template's own text is not valid Unicode
        return None


def rendered_bytes(lengths: Lengths, texts: Sequence[str]) -> int:
    """The real rendering's UTF-8 length; ValueError for a text with unpaired surrogates."""
    skeleton, counts = lengths
    total = skeleton
    for count, text in zip(counts, texts, strict=True):
        if count:  # a text never output is never encoded by the real rendering either
            total += count * (len(text) if text.isascii() else len(text.encode("utf-8")))
    return total
