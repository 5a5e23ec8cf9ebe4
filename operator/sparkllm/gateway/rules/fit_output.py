"""Payload rule ``fit_output``: input + output always fit the window (clamp, or 400
``context_length_exceeded`` under the ``reject`` policy).

"Fits" is the engine's rule, not ours: SGLang refuses a request when ``input +
max_new_tokens >= context_length`` (tokenizer_manager._validate_one_request), so the
output budget per sequence is ``(context_length - input - 1) // sequences``. A
``max_tokens`` / ``max_completion_tokens`` over it is lowered to it (``clamp``) or
refused (``reject``); a request with none gets ``default_max_tokens`` or the rest of the
window, written into the body as ``max_tokens``. With an inexact (bound) input, the
bound already left room for every requested limit (prompt_size.py).
"""

from __future__ import annotations

from sparkllm.gateway import replies
from sparkllm.gateway.config import MaxTokensPolicy
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.context import Draft, Route
from sparkllm.gateway.rules.request_fields import OUTPUT_FIELDS


def fit_output(draft: Draft) -> ErrorReply | None:
    """The output limits to forward (``draft.granted``), written into the payload when
    they change."""
    policy, work, requested = draft.policy, draft.work, draft.requested
    if draft.route is Route.COUNT_TOKENS:  # nothing is generated
        return None
    window, input_tokens = policy.context_length, work.input_tokens
    budget = policy.output_budget(input_tokens, sequences=work.sequences)
    if budget < 1:  # only when max_input_tokens is context_length - 1
        return replies.context_length_exceeded(
            f"This request's input is {input_tokens} tokens: the context window of "
            f"{window} tokens leaves no room for an answer. Please shorten the input.",
            param=draft.prompt_param,
        )
    if not requested:
        default = policy.default_max_tokens
        granted = budget if default is None else min(default, budget)
        injected = OUTPUT_FIELDS[draft.route][-1]
        draft.payload[injected] = granted
        draft.granted = {injected: granted}
        draft.changed = True
        return None
    fitted = dict(requested)
    for name, value in requested.items():
        if value <= budget:
            continue
        if policy.max_tokens_policy is MaxTokensPolicy.REJECT:
            return replies.context_length_exceeded(
                f"'{name}' is {value}, but the input is {input_tokens} tokens and the "
                f"context window is {window} tokens: at most {budget} output tokens fit. "
                f"Lower '{name}' or shorten the input.",
                param=name,
            )
        fitted[name] = draft.payload[name] = budget
        draft.changed = True
    draft.granted = fitted
    return None
