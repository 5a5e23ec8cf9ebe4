"""The admission decision's payload rules, one by one, and the order they run in.

Each rule is called directly on a ``Draft`` holding what the rules before it would have
written, so a rule's own verdict is what is asserted (its 400 naming the field, or what
it wrote into the draft). The end-to-end decisions stay in test_gateway_admission.py;
here the last tests show the walk's order: a body breaking two rules gets the refusal of
the one listed first in rules/pipeline.py.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from sparkllm.gateway.admission import Admission
from sparkllm.gateway.config import MaxTokensPolicy
from sparkllm.gateway.replies import CODE_CONTEXT_LENGTH, ErrorReply, RequestRejectedError
from sparkllm.gateway.rules.allowlist import allowed_fields, tool_features
from sparkllm.gateway.rules.context import Draft, Route, Work
from sparkllm.gateway.rules.fit_output import fit_output
from sparkllm.gateway.rules.input_cap import input_cap
from sparkllm.gateway.rules.json_body import json_body
from sparkllm.gateway.rules.pipeline import PayloadRule
from sparkllm.gateway.rules.prompt_size import prompt_size
from sparkllm.gateway.rules.request_fields import (
    choices,
    model_name,
    output_limits,
    prompts_per_request,
    stream_flag,
)
from sparkllm.gateway.tokens import PromptSize
from tests.unit.gateway_fixtures import (
    MODEL,
    TOKENIZER_CORPUS_WORD,
    clamp_policy,
    counting_parts,
    payload_draft,
)

CAP, WINDOW = 200, 300


def _draft(
    payload: dict[str, Any] | None = None,
    *,
    route: Route = Route.CHAT,
    exact: bool = False,
    user: str | None = None,
    **policy: Any,
) -> Draft:
    """A draft as the rules before the one tested leave it: the body parsed."""
    admission_policy = dataclasses.replace(
        clamp_policy(cap=CAP, window=WINDOW), model_aliases=frozenset({"gpt-4o"}), **policy
    )
    return payload_draft(payload, policy=admission_policy, route=route, user=user, exact=exact)


def _verdict(rule: PayloadRule, draft: Draft) -> ErrorReply | None:
    """The rule's verdict, whether it returned its refusal or raised it from a field."""
    try:
        return rule(draft)
    except RequestRejectedError as rejection:
        return rejection.reply


def _refusal(rule: PayloadRule, draft: Draft) -> ErrorReply:
    reply = _verdict(rule, draft)
    assert isinstance(reply, ErrorReply), f"{rule.__name__} let it pass"
    return reply


def _chat(content: str = "hello", **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **fields}


def test_json_body_parses_one_object_and_refuses_anything_else() -> None:
    draft = _draft()
    draft.body = b'{"model": "m"}'
    assert _verdict(json_body, draft) is None
    assert draft.payload == {"model": "m"}
    draft.body = b"{"
    assert _refusal(json_body, draft).code == "invalid_json"
    draft.body = b"[1]"
    reply = _refusal(json_body, draft)
    assert (reply.status, reply.code, reply.param) == (400, "invalid_type", "body")


def test_allowed_fields_refuses_a_field_not_let_through_for_this_user() -> None:
    assert _verdict(allowed_fields, _draft(_chat())) is None
    reply = _refusal(allowed_fields, _draft(_chat(input_ids=[1, 2])))
    assert (reply.status, reply.code, reply.param) == (400, "unsupported_parameter", "input_ids")
    grants = {"extensions": {"ignore_eos": frozenset({"bench"})}}
    eos = _chat(ignore_eos=True)
    assert _verdict(allowed_fields, _draft(eos, user="bench", **grants)) is None
    reply = _refusal(allowed_fields, _draft(eos, user="alice", **grants))
    assert "not enabled for your key" in reply.message


def test_model_name_rewrites_an_alias_and_refuses_other_models() -> None:
    served = _draft(_chat())
    assert _verdict(model_name, served) is None
    assert not served.changed
    alias = _draft(_chat() | {"model": "gpt-4o"})
    assert _verdict(model_name, alias) is None
    assert (alias.payload["model"], alias.changed) == (MODEL, True)
    reply = _refusal(model_name, _draft(_chat() | {"model": "llama"}))
    assert (reply.status, reply.code, reply.param) == (404, "model_not_found", "model")
    reply = _refusal(model_name, _draft({"messages": []}))
    assert (reply.code, reply.param) == ("missing_required_parameter", "model")


def test_stream_flag_is_a_boolean() -> None:
    draft = _draft(_chat(stream=True))
    assert _verdict(stream_flag, draft) is None
    assert draft.stream is True
    reply = _refusal(stream_flag, _draft(_chat(stream="yes")))
    assert (reply.code, reply.param) == ("invalid_type", "stream")


def test_choices_is_at_most_max_choices() -> None:
    draft = _draft(_chat(n=3), max_choices=3)
    assert _verdict(choices, draft) is None
    assert draft.choices == 3
    reply = _refusal(choices, _draft(_chat(n=2)))
    assert reply.param == "n"
    assert "at most 1 answer(s)" in reply.message


def test_output_limits_reads_the_routes_fields_as_positive_integers() -> None:
    both = _draft(_chat(max_tokens=5, max_completion_tokens=7))
    assert _verdict(output_limits, both) is None
    assert both.requested == {"max_completion_tokens": 7, "max_tokens": 5}
    legacy = _draft({"max_completion_tokens": 7}, route=Route.COMPLETIONS)
    assert _verdict(output_limits, legacy) is None
    assert legacy.requested == {}  # not a completions field: the allowlist decides
    reply = _refusal(output_limits, _draft(_chat(max_tokens=0)))
    assert (reply.param, reply.code) == ("max_tokens", "invalid_value")


def test_tool_features_refuses_a_feature_not_enabled_on_chat_only() -> None:
    required = _chat(tool_choice="required")
    reply = _refusal(tool_features, _draft(required))
    assert (reply.code, reply.param) == ("unsupported_parameter", "tool_choice")
    enabled = _draft(required, tool_features=frozenset({"required"}))
    assert _verdict(tool_features, enabled) is None
    assert _verdict(tool_features, _draft(required, route=Route.COMPLETIONS)) is None


def test_prompts_per_request_bounds_a_completions_batch() -> None:
    batch = {"model": MODEL, "prompt": ["a", "b", "c"]}
    reply = _refusal(prompts_per_request, _draft(batch, route=Route.COMPLETIONS))
    assert reply.param == "prompt"
    assert "holds 3 prompts" in reply.message
    allowed = _draft(batch, route=Route.COMPLETIONS, max_prompts=3)
    assert _verdict(prompts_per_request, allowed) is None
    assert allowed.prompts == ["a", "b", "c"]
    chat = _draft(_chat())
    assert _verdict(prompts_per_request, chat) is None
    assert not chat.prompts


def test_prompt_size_counts_exactly_unless_the_byte_bound_settles_it() -> None:
    counter, template = counting_parts()
    rendered = template.render(
        [{"role": "user", "content": "hello"}], tools=None, template_kwargs={}
    )
    tokens = counter.count(rendered, add_special_tokens=False)
    exact = _draft(_chat(), exact=True)
    assert _verdict(prompt_size, exact) is None
    assert (exact.work.input_tokens, exact.work.largest.exact) == (tokens, True)
    bounded = _draft(_chat(max_tokens=10))
    bounded.requested = {"max_tokens": 10}
    assert _verdict(prompt_size, bounded) is None
    assert not bounded.work.largest.exact
    assert tokens <= bounded.work.input_tokens <= CAP
    reply = _refusal(prompt_size, _draft({"model": MODEL, "messages": "hi"}))
    assert reply.param == "messages"
    assert counter.byte_level  # the bound's premise (tokens.py)


def test_input_cap_refuses_what_the_limits_see_over_the_cap() -> None:
    draft = _draft(_chat())
    draft.work = Work(PromptSize(CAP, exact=True), 1, 1)
    assert _verdict(input_cap, draft) is None
    draft.work = Work(PromptSize(CAP // 2 + 1, exact=True), 1, 2)  # n = 2: twice the input
    reply = _refusal(input_cap, draft)
    assert (reply.status, reply.code, reply.param) == (400, CODE_CONTEXT_LENGTH, "messages")
    assert f"input is {CAP + 2} tokens (1 prompt(s), n = 2" in reply.message
    draft.work = Work(PromptSize(CAP + 5, exact=False, at_least=True), 1, 1)
    assert f"at least {CAP + 5} tokens" in _refusal(input_cap, draft).message


def test_fit_output_clamps_injects_or_refuses_by_policy() -> None:
    def fitted(payload: dict[str, Any], **policy: Any) -> Draft:
        draft = _draft(payload, **policy)
        draft.requested = {k: v for k, v in payload.items() if k == "max_tokens"}
        draft.work = Work(PromptSize(100, exact=True), 1, 1)
        return draft

    room = WINDOW - 100 - 1
    clamped = fitted(_chat(max_tokens=500))
    assert _verdict(fit_output, clamped) is None
    assert (clamped.granted, clamped.payload["max_tokens"], clamped.changed) == (
        {"max_tokens": room},
        room,
        True,
    )
    within = fitted(_chat(max_tokens=5))
    assert _verdict(fit_output, within) is None
    assert (within.granted, within.changed) == ({"max_tokens": 5}, False)
    injected = fitted(_chat(), default_max_tokens=50)
    assert _verdict(fit_output, injected) is None
    assert (injected.payload["max_tokens"], injected.changed) == (50, True)
    refused = fitted(_chat(max_tokens=500), max_tokens_policy=MaxTokensPolicy.REJECT)
    reply = _refusal(fit_output, refused)
    assert (reply.code, reply.param) == (CODE_CONTEXT_LENGTH, "max_tokens")
    assert f"at most {room} output tokens fit" in reply.message
    full = fitted(_chat(), context_length=101)
    assert "leaves no room for an answer" in _refusal(fit_output, full).message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input_ids": [1], "model": "llama"}, "input_ids"),  # allowlist before the model
        ({"model": "llama", "n": 2}, "model"),  # the model before n
        ({"n": 2, "max_tokens": 0}, "n"),  # n before the output limits
        ({"max_tokens": 0, "tool_choice": "required"}, "max_tokens"),  # limits before tools
        ({"tool_choice": "required", "content": "long"}, "tool_choice"),  # tools before size
        ({"content": "long", "max_tokens": 10_000}, "messages"),  # the cap before the fit
    ],
    ids=lambda value: str(value) if isinstance(value, str) else None,
)
def test_a_body_breaking_two_rules_gets_the_earlier_rules_refusal(
    fields: dict[str, Any], param: str
) -> None:
    counter, template = counting_parts()
    policy = dataclasses.replace(
        clamp_policy(cap=CAP, window=WINDOW), max_tokens_policy=MaxTokensPolicy.REJECT
    )
    content = TOKENIZER_CORPUS_WORD * (CAP * 2) if fields.pop("content", None) else "hi"
    body = json.dumps(_chat(content) | fields).encode()
    decision = Admission(policy=policy, counter=counter, template=template).decide(
        Route.CHAT, body, user="alice"
    )
    assert isinstance(decision, ErrorReply)
    assert decision.param == param
