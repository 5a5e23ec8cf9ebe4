"""Payload rule ``prompt_size``: how many tokens the engine will see (400 when the prompt
cannot be built: a message the chat template refuses, invalid Unicode).

The chat template is rendered (chat_template.py; for DeepSeek V4 the encoder SGLang uses
instead, deepseek_prompt.py) — unless the byte bound on the rendered length, known by
the conversation's shape (template_probe.py), already settles the decision — and the
prompt measured (tokens.py): exactly, unless the byte bound settles it. "Settles": at or
under ``exact_above``, the largest size at which an exact count could change neither the
cap's verdict nor the output granted (so it is -1, always exact, when the request has
several sequences or the caller asked for an exact count). A prompt whose *lower* bound
is already over the cap is not tokenised at all: ``input_cap`` refuses it next.

The engine encodes a rendered chat without special tokens and a completion prompt with
them; a continued final assistant message is encoded apart (SGLang does both).
"""

from __future__ import annotations

from typing import Any, NoReturn

from sparkllm.gateway import validation
from sparkllm.gateway.chat_messages import ChatTemplateError, message_dump, prepare_messages
from sparkllm.gateway.chat_template import ChatTemplate
from sparkllm.gateway.deepseek_prompt import DeepSeekV4Prompt, FieldError
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.context import Draft, Route, Work
from sparkllm.gateway.tokens import PromptSize


def prompt_size(draft: Draft) -> ErrorReply | None:
    """Measure the prompt(s) into ``draft.work``."""
    exact_above = _exact_above(draft)
    if draft.route is not Route.COMPLETIONS:  # a chat, or a body the engine makes one of
        large = len(draft.body) > draft.policy.max_input_tokens  # may be grossly over the cap
        size = _measure_chat(draft, exact_above=exact_above, large=large)
        draft.work = Work(size, 1, draft.choices)
    else:
        draft.work = _measure_completion(draft, exact_above=exact_above)
    return None


def _exact_above(draft: Draft) -> int:
    """Below this size the exact count cannot change the decision (see tokens.py)."""
    policy = draft.policy
    largest_output = max(draft.requested.values(), default=policy.default_max_tokens)
    if largest_output is None or draft.choices != 1 or draft.exact:
        return -1
    return min(policy.max_input_tokens, policy.output_budget(largest_output))


def _measure_chat(draft: Draft, *, exact_above: int, large: bool) -> PromptSize:
    payload = draft.chat
    messages = validation.chat_messages(payload)
    continue_final = validation.optional_bool(payload, "continue_final_message")
    template = draft.template
    if isinstance(template, DeepSeekV4Prompt):
        return _encode_v4(draft, template, exact_above=exact_above, large=large)
    tools = validation.chat_tools(payload)
    template_kwargs = validation.template_kwargs(payload, draft.policy.template_defaults)
    try:
        prepared, prefix = prepare_messages(
            [message_dump(message) for message in messages],
            content_format=template.content_format,
            continue_final_message=continue_final,
        )
        if not prefix and exact_above >= 0:
            bound = _bound_unrendered(draft, template, prepared, tools, template_kwargs)
            if bound is not None and bound <= exact_above:
                return PromptSize(bound, exact=False)
        rendered = template.render(prepared, tools=tools, template_kwargs=template_kwargs)
    except ChatTemplateError as exc:
        validation.reject(
            f"The messages cannot be formatted with this model's chat template: {exc}",
            param=_prompt_field(draft),
        )
    if prefix:  # the engine encodes the continued assistant text separately
        sizes = [
            _measure(draft, text, special=False, exact_above=-1, param=_prompt_field(draft))
            for text in (rendered, prefix)
        ]
        least = any(size.at_least for size in sizes)
        return PromptSize(sum(size.tokens for size in sizes), exact=not least, at_least=least)
    return _measure(
        draft, rendered, special=False, exact_above=exact_above, param=_prompt_field(draft)
    )


def _encode_v4(
    draft: Draft, prompt: DeepSeekV4Prompt, *, exact_above: int, large: bool
) -> PromptSize:
    """DeepSeek's encoder, as SGLang runs it; the byte bounds settle short prompts and
    (for a ``large`` body, which alone can be) grossly oversized ones."""
    try:
        return prompt.measure(
            draft.chat,
            exact_above=exact_above,
            byte_level=draft.counter.byte_level,
            refuse_above=draft.policy.max_input_tokens if large else -1,
            defaults=draft.policy.template_defaults,
        )
    except FieldError as exc:
        validation.reject(str(exc), param=exc.param)
    except ChatTemplateError as exc:
        validation.reject(
            f"The messages cannot be encoded for this model: {exc}", param=_prompt_field(draft)
        )


def _bound_unrendered(
    draft: Draft,
    template: ChatTemplate,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    template_kwargs: dict[str, Any],
) -> int | None:
    """The byte bound from the rendered length known by shape, if it is known."""
    counter = draft.counter
    if not counter.byte_level:
        return None
    try:
        size = template.rendered_bytes(messages, tools=tools, template_kwargs=template_kwargs)
    except ValueError:
        _invalid_unicode(_prompt_field(draft))
    return None if size is None else counter.byte_bound(size, add_special_tokens=False)


def _measure_completion(draft: Draft, *, exact_above: int) -> Work:
    prompts = draft.prompts
    if len(prompts) > 1:
        exact_above = -1  # the limits see the sum: count each prompt exactly
    sizes = [
        PromptSize(len(prompt), exact=True)
        if isinstance(prompt, list)
        else _measure(draft, prompt, special=True, exact_above=exact_above, param="prompt")
        for prompt in prompts
    ]
    largest = max(sizes, key=lambda size: size.tokens)
    total = sum(size.tokens for size in sizes)
    exact = all(size.exact for size in sizes)
    least = any(size.at_least for size in sizes)
    largest = PromptSize(largest.tokens, exact=exact, at_least=least)
    return Work(largest, len(prompts), draft.choices, total)


def _measure(draft: Draft, text: str, *, special: bool, exact_above: int, param: str) -> PromptSize:
    try:
        return draft.counter.measure(
            text,
            add_special_tokens=special,
            exact_above=exact_above,
            refuse_above=draft.policy.max_input_tokens,
        )
    except ValueError:
        _invalid_unicode(param)


def _prompt_field(draft: Draft) -> str:
    """The field a chat's prompt comes from, as the client wrote it (Responses: input)."""
    return "input" if draft.route is Route.RESPONSES else "messages"


def _invalid_unicode(param: str) -> NoReturn:
    validation.reject(f"'{param}' contains invalid Unicode (an unpaired surrogate).", param=param)
