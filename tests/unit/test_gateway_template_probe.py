"""The rendered prompt's length known by shape (template_probe.py): always the real one.

The property: whenever ``rendered_bytes`` gives a length, it is the UTF-8 length of what
``render`` produces for the same messages. Checked with hypothesis over templates that
only place texts (where the length must be known: that is the point) and templates that
look at a text in each way a template can (where it must not be).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkllm.gateway import template_probe
from sparkllm.gateway.admission import Admission, Admitted, Route
from sparkllm.gateway.chat_template import ChatTemplate, ChatTemplateError
from sparkllm.gateway.tokens import TokenCounter
from tests.bench.bench_admission import DEEPSEEK_LIKE_TEMPLATE
from tests.unit.gateway_fixtures import CHAT_TEMPLATE, MODEL, clamp_policy, train_tokenizer

SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}

# Templates that only place the texts: the length is known without rendering.
PLACING = {
    "fixture (Qwen-like, tools)": CHAT_TEMPLATE,
    "bench (DeepSeek-like, namespace)": DEEPSEEK_LIKE_TEMPLATE,
    "type test": (
        "{% for m in messages %}{% if m.content is string and m.content is not none %}"
        "{{ '<' + m.role + '>' + m.content }}{% endif %}{% endfor %}"
    ),
    "joined in a namespace, output twice": (
        "{% set ns = namespace(all='') %}{% for m in messages %}"
        "{% set ns.all = ns.all + m['content'] + '\\n' %}{% endfor %}{{ ns.all }}|{{ ns.all }}"
    ),
    "assigned, output twice": (
        "{% for m in messages %}{% set c = m.content %}[{{ c }}]({{ c }}){% endfor %}"
    ),
    "counts and indexes": (
        "{{ messages | length }}{% for m in messages %}{{ loop.index }}{{ m.role | upper }}:"
        "{{ m['content'] }}{% if not loop.last %},{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}>{% endif %}"
    ),
}

# Templates that look at a text: the length must not be taken from a probe.
_LOOKING_BODIES = {
    "trim filter": "{{ m.content | trim }}",
    "in test": "{% if '</think>' in m.content %}R{% endif %}{{ m.content }}",
    "method": "{{ m.content.split('</think>')[-1] }}",
    "length filter": "{{ m.content | length }}",
    "truthiness": "{% if m.content %}{{ m.content }}{% else %}(empty){% endif %}",
    "equality": "{% if m.content == 'x' %}X{% endif %}{{ m.content }}",
    "order": "{% if m.content > 'm' %}late{% endif %}{{ m.content }}",
    "membership in a list": "{% if m.content in ['a', 'b'] %}ab{% endif %}",
    "tilde join": "{{ m.content ~ '!' }}",
    "percent format": "{{ '%s!' % m.content }}",
    "format method": "{{ '{}!'.format(m.content) }}",
    "index": "{{ m.content[0] if m.content else '' }}",
    "slice": "{{ m.content[:3] }}",
    "tojson": "{{ m.content | tojson }}",
    "content test": "{% if m.content is lower %}l{% endif %}{{ m.content }}",
    "int filter": "{{ m.content | int }}",
    "iteration": "{% for c in m.content %}{{ c }}.{% endfor %}",
    "default with boolean": "{{ m.content | default('empty', true) }}",
    "loop.changed": "{% if loop.changed(m.content) %}{{ m.content }}{% endif %}",
    "replace filter": "{{ m.content | replace('a', 'aaaa') }}",
    "repetition": "{{ m.content * 2 }}",
    "filter on a join": "{{ ('<' + m.content) | upper }}",
    "string filter": "{{ m.content | string | length }}",
    "join filter": "{{ [m.content, m.role] | join(' ') }}",
    "whole message": "{{ m }}",
    "dunder": "{{ m.content.__class__ }}",
    "as a key": "{% set d = {m.content: 1} %}{{ d | length }}",
    "set capture": "{% set x %}{{ m.content }}{% endset %}{{ x | trim }}{{ x }}",
    "macro": "{% macro wrap(t) %}[{{ t }}]{% endmacro %}{{ wrap(m.content) | trim }}",
    "filter block": "{% filter upper %}{{ m.content }}{% endfilter %}",
    "autoescape": "{% autoescape true %}{{ m.content }}{% endautoescape %}",
    "date": "{{ strftime_now('%d %B %Y') }}{{ m.content }}",
    "lipsum": "{{ lipsum(1, html=false) }}{{ m.content }}",
    "random": "{{ [m.role, 'x'] | random }}{{ m.content }}",
}
LOOKING = {
    **{
        name: "{% for m in messages %}" + body + "{% endfor %}"
        for name, body in _LOOKING_BODIES.items()
    },
    "map attribute and join": "{{ messages | map(attribute='content') | join('\\n') }}",
    "recursive loop": (
        "{% for m in messages recursive %}{{ m.content }}{% if m.role != 'echo' %}"
        "{% set inner = loop([{'role': 'echo', 'content': m.content}]) %}{{ inner }}{{ inner }}"
        "{% endif %}{% endfor %}"
    ),
}
# DeepSeek R1's way: only assistant texts are looked at ('</think>' is cut off).
REASONING = (
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}<U>{{ m.content }}"
    "{% elif m.role == 'system' %}{{ m.content }}{% elif m.role == 'assistant' %}"
    "{% set c = m.content %}{% if '</think>' in c %}{% set c = c.split('</think>')[-1] %}"
    "{% endif %}<A>{{ c }}{{ eos_token }}{% endif %}{% endfor %}<A>"
)

_TEMPLATES = {
    name: ChatTemplate({"default": source}, special_tokens=SPECIAL)
    for name, source in {**PLACING, **LOOKING, "reasoning": REASONING}.items()
}

_TEXTS = st.one_of(
    st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
    st.sampled_from(["", " ", " padded ", "</think>", "a</think>b", "x", "ab", "{{ x }}"]),
)
_MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": _TEXTS}
    ),
    min_size=1,
    max_size=4,
)


def _lengths(
    template: ChatTemplate, messages: list[dict[str, Any]]
) -> tuple[int | None, int | None]:
    """(the length by shape, the real rendering's length or None if it raises)."""
    known = template.rendered_bytes(messages, tools=None, template_kwargs={})
    try:
        real = template.render(messages, tools=None, template_kwargs={})
    except ChatTemplateError:
        return known, None
    return known, len(real.encode("utf-8"))


# 300 in every profile: each example is one template x one message shape, and a shape the
# cache answers wrongly for one template is the failure this looks for.
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(_TEMPLATES)), messages=_MESSAGES)
def test_a_length_known_by_shape_is_the_rendered_length(
    name: str, messages: list[dict[str, Any]]
) -> None:
    # The templates are shared by all examples: most shapes were probed with other texts.
    known, real = _lengths(_TEMPLATES[name], messages)
    if known is not None:
        assert real is not None, f"{name}: a length for messages the template refuses"
        assert known == real, name


@pytest.mark.parametrize("name", sorted(PLACING))
def test_templates_that_place_texts_are_not_rendered_for_length(name: str) -> None:
    template = _TEMPLATES[name]
    for texts in (("Be brief.", "Hi there"), ("", "¿Qué tal? 你好 🙂")):
        messages = [{"role": "system", "content": texts[0]}, {"role": "user", "content": texts[1]}]
        known, real = _lengths(template, messages)
        assert known is not None
        assert known == real


@pytest.mark.parametrize("name", sorted(LOOKING))
def test_templates_that_look_at_texts_are_rendered(name: str) -> None:
    messages = [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "ab"}]
    known, _ = _lengths(_TEMPLATES[name], messages)
    assert known is None


def test_only_shapes_whose_texts_are_looked_at_are_rendered() -> None:
    template = _TEMPLATES["reasoning"]
    plain = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert _lengths(template, plain)[0] == len(b"<s>SU<A>") + len("<U>")
    answered = [*plain, {"role": "assistant", "content": "t</think>A"}, plain[1]]
    assert _lengths(template, answered) == (None, len(b"<s>S<U>U<A>A</s><U>U<A>"))


def test_a_shape_the_template_refuses_has_no_length() -> None:
    template = _TEMPLATES["fixture (Qwen-like, tools)"]
    messages = [{"role": "narrator", "content": "once upon a time"}]
    assert template.rendered_bytes(messages, tools=None, template_kwargs={}) is None
    with pytest.raises(ChatTemplateError, match="Unsupported role: narrator"):
        template.render(messages, tools=None, template_kwargs={})


def test_shapes_differ_in_every_field_but_the_texts() -> None:
    template = _TEMPLATES["fixture (Qwen-like, tools)"]
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}
    user = {"role": "user", "content": "weather?"}
    cases = [
        ([user], None, {}),
        ([user], [tool], {}),
        ([{"role": "user", "content": "weather?", "name": "ann"}], None, {}),
        ([user], None, {"enable_thinking": False}),
    ]
    for messages, tools, kwargs in cases:
        known = template.rendered_bytes(messages, tools=tools, template_kwargs=kwargs)
        real = template.render(messages, tools=tools, template_kwargs=kwargs)
        assert known == len(real.encode("utf-8"))
    with_tool = template.rendered_bytes([user], tools=[tool], template_kwargs={})
    assert with_tool is not None
    assert with_tool > (template.rendered_bytes([user], tools=None, template_kwargs={}) or 0)


def test_content_parts_and_oversized_shapes_are_rendered() -> None:
    template = _TEMPLATES["fixture (Qwen-like, tools)"]
    parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert template.rendered_bytes(parts, tools=None, template_kwargs={}) is None
    big = [{"role": "user", "content": "hi", "name": "n" * template_probe.MAX_SHAPE_CHARS}]
    assert template.rendered_bytes(big, tools=None, template_kwargs={}) is None


def test_unpaired_surrogates_in_a_placed_text_raise_as_encoding_would() -> None:
    template = _TEMPLATES["bench (DeepSeek-like, namespace)"]
    messages = [{"role": "user", "content": "broken \ud800 text"}]
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        template.rendered_bytes(messages, tools=None, template_kwargs={})
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        template.render(messages, tools=None, template_kwargs={}).encode("utf-8")


def _one_text_shape() -> template_probe.Shape:
    return template_probe.Shape(
        "default", [[("role", "user"), ("content", template_probe.TEXT)]], None, {}
    )


def test_a_look_the_template_machinery_swallows_still_counts() -> None:
    shape = _one_text_shape()

    def render(messages: list[dict[str, Any]]) -> str:
        with contextlib.suppress(Exception):  # what a careless filter might do
            str(messages[0]["content"])
        return "placed nothing"

    assert template_probe.probe(render, shape) is None


@pytest.mark.parametrize(
    "use", ["{{ m.content | shout }}", "{{ m.content is text }}", "{{ describe(m.content) }}"]
)
def test_filters_tests_and_functions_cannot_tell_a_stand_in_from_a_text(use: str) -> None:
    # Each treats strings differently from other values without calling anything on
    # them: only the guard around every filter, test and call notices.
    environment = template_probe.ProbeEnvironment()
    environment.filters["shout"] = lambda value: value.upper() if isinstance(value, str) else ""
    environment.tests["text"] = lambda value: isinstance(value, str)
    environment.globals["describe"] = lambda value: "text" if isinstance(value, str) else "?"
    environment.guard()
    template = environment.from_string("{% for m in messages %}" + use + "{% endfor %}")
    shape = _one_text_shape()
    assert template_probe.probe(lambda messages: template.render(messages=messages), shape) is None


def _admission(template: ChatTemplate) -> Admission:
    tokenizer = train_tokenizer()
    counter = TokenCounter(tokenizer, byte_level=True)
    policy = clamp_policy()
    return Admission(policy=policy, counter=counter, template=template)


def test_admission_bounds_a_short_prompt_without_rendering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    template = ChatTemplate({"default": CHAT_TEMPLATE}, special_tokens=SPECIAL)
    admission = _admission(template)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 🙂"}]
    rendered = template.render(messages, tools=None, template_kwargs={})
    body = json.dumps({"model": MODEL, "messages": messages, "max_tokens": 64}).encode()

    def no_render(*_args: object, **_kwargs: object) -> str:
        raise AssertionError("rendered although the shape's length was known")

    monkeypatch.setattr(ChatTemplate, "render", no_render)
    decision = admission.decide(Route.CHAT, body)
    assert isinstance(decision, Admitted)
    assert (decision.input_tokens, decision.input_tokens_exact) == (len(rendered.encode()), False)


def test_admission_refuses_unpaired_surrogates_known_by_shape() -> None:
    admission = _admission(ChatTemplate({"default": CHAT_TEMPLATE}, special_tokens=SPECIAL))
    body = (
        b'{"model": "%s", "messages": [{"role": "user", "content": "x\\ud800"}], "max_tokens": 8}'
    )
    decision = admission.decide(Route.CHAT, body % MODEL.encode())
    assert not isinstance(decision, Admitted)
    assert decision.status == 400
    assert "invalid Unicode" in decision.message
