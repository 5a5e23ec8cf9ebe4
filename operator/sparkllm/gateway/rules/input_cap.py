"""Payload rule ``input_cap``: no input over ``maxInputTokens`` reaches the engine (400
``context_length_exceeded``).

The policy the deployment's safety rests on: prompts over the cap (8,192 tokens by
default) put the engine under memory pressure. What is compared is what the limits see
— every sequence's input (prompts x ``n``), exact or a lower bound already over the cap
("at least N tokens"): an upper bound under the cap never reaches here unproven
(prompt_size.py counts exactly whenever the bound could not settle it).
"""

from __future__ import annotations

from sparkllm.gateway import replies
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.context import Draft


def input_cap(draft: Draft) -> ErrorReply | None:
    """Refuse input over the cap, naming the measured size, the cap and the window."""
    work, policy = draft.work, draft.policy
    if work.input_tokens <= policy.max_input_tokens:
        return None
    least = "at least " if work.largest.at_least else ""
    return replies.context_length_exceeded(
        f"This request's input is {least}{work.input_tokens} tokens{work.detail()}, over this "
        f"deployment's input limit of {policy.max_input_tokens} tokens (the context window "
        f"is {policy.context_length} tokens, input and output together). Please shorten "
        "the input.",
        param=draft.prompt_param,
    )
