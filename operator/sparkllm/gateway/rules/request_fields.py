"""Payload rules on the fields that name the model and size the work.

* ``model_name``: the served name, or an alias rewritten to it (404 ``model_not_found``
  for any other: OpenAI's answer for a model the key cannot use);
* ``stream_flag``: ``stream`` is a boolean;
* ``choices``: ``n`` is at most ``spec.admission.maxChoices``;
* ``output_limits``: the output fields sent (``max_completion_tokens`` then
  ``max_tokens`` for chat, which SGLang reads in that order) are positive integers;
* ``prompts_per_request``: a completion's prompts are well-formed and at most
  ``spec.admission.maxPromptsPerRequest``.

Why before the prompt is measured: each is a field read, and what they find (``n``,
the prompts, the output asked for) decides how exactly the prompt must be counted.
"""

from __future__ import annotations

from typing import Final

from sparkllm.gateway import replies, validation
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.context import Draft, Route

# Output-limit fields per route; SGLang reads max_completion_tokens first for chat. The
# last is the one written when the request sets none (a token count generates nothing).
OUTPUT_FIELDS: Final = {
    Route.CHAT: ("max_completion_tokens", "max_tokens"),
    Route.COMPLETIONS: ("max_tokens",),
    Route.MESSAGES: ("max_tokens",),
    Route.COUNT_TOKENS: (),
    Route.RESPONSES: ("max_output_tokens",),
}


def model_name(draft: Draft) -> ErrorReply | None:
    """The served model, or an alias (rewritten to the served name); else 404."""
    model = validation.required(draft.payload, "model")
    if not isinstance(model, str):
        validation.wrong_type("model", "a string", model)
    policy = draft.policy
    if model == policy.served_model_name:
        return None
    if model in policy.model_aliases:
        draft.payload["model"] = policy.served_model_name
        draft.changed = True
        return None
    return replies.model_not_found(model)


def stream_flag(draft: Draft) -> ErrorReply | None:
    """``stream``: a boolean, False when absent."""
    draft.stream = validation.optional_bool(draft.payload, "stream")
    return None


def choices(draft: Draft) -> ErrorReply | None:
    """``n``: answers per prompt, at most the deployment's ``max_choices``."""
    count = validation.optional_positive_int(draft.payload, "n") or 1
    if count > draft.policy.max_choices:
        validation.reject(
            f"'n' is {count}, but this deployment generates at most "
            f"{draft.policy.max_choices} answer(s) per request.",
            param="n",
        )
    draft.choices = count
    return None


def output_limits(draft: Draft) -> ErrorReply | None:
    """The output limits the request sets, each a positive integer. Anthropic's Messages
    API requires ``max_tokens`` (SGLang's ``AnthropicMessagesRequest`` has no default):
    refused when absent, not written in for the client."""
    payload = draft.payload
    if draft.route is Route.MESSAGES:
        validation.required(payload, "max_tokens")
    draft.requested = {
        field: value
        for field in OUTPUT_FIELDS[draft.route]
        if (value := validation.optional_positive_int(payload, field)) is not None
    }
    return None


def prompts_per_request(draft: Draft) -> ErrorReply | None:
    """A completion's prompts, at most the deployment's ``max_prompts`` (chat: none)."""
    if draft.route is not Route.COMPLETIONS:
        return None
    prompts = validation.completion_prompts(draft.payload)
    if len(prompts) > draft.policy.max_prompts:
        validation.reject(
            f"'prompt' holds {len(prompts)} prompts, but this deployment takes at most "
            f"{draft.policy.max_prompts} prompt(s) per request.",
            param="prompt",
        )
    draft.prompts = prompts
    return None
