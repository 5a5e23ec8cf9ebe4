"""Payload rule ``as_chat``: the chat request the engine derives from the body.

SGLang renders a Messages (Anthropic) or Responses body as the chat-completions request
it converts it to (protocols.py); the prompt rules then measure ``draft.chat`` whatever
the route. For a chat it is the payload itself; completions have no chat.
"""

from __future__ import annotations

from sparkllm.gateway import protocols
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.context import Draft, Route


def as_chat(draft: Draft) -> ErrorReply | None:
    """``draft.chat``: what the prompt rules render and count."""
    route = draft.route
    if route in (Route.MESSAGES, Route.COUNT_TOKENS):
        draft.chat = protocols.anthropic_chat(draft.payload)
    elif route is Route.RESPONSES:
        draft.chat = protocols.responses_chat(draft.payload)
    else:
        draft.chat = draft.payload
    return None
