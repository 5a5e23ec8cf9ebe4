"""The front door, in order: every rule a generation request meets, and the walk.

This is the one place that says what the front door checks and when. Cheapest refusal
first, so a refused request costs the engines nothing (and the gateway little): a
missing key is refused before the body is read, an oversized body before it is parsed,
a malformed field before the prompt is rendered, an over-cap prompt before any budget
is touched, a budget refusal before a queue place is taken.

To add a refusal: write the rule (a module in this package and its unit test) and put it
into one of the two lists below where it belongs (docs/gateway.md, "Adding a front-door
rule"). Routing (404, 405) comes before these, in app.py; the relay after them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from sparkllm.gateway.auth import ApiKeyStore
from sparkllm.gateway.forwarded import ForwardedUsers
from sparkllm.gateway.governance.gate import Governor
from sparkllm.gateway.replies import ErrorReply, RequestRejectedError
from sparkllm.gateway.rules.allowlist import allowed_fields, tool_features
from sparkllm.gateway.rules.api_key import Authenticate
from sparkllm.gateway.rules.as_chat import as_chat
from sparkllm.gateway.rules.body_size import BodySize
from sparkllm.gateway.rules.context import Draft, Request, Verdict
from sparkllm.gateway.rules.decide import Decide
from sparkllm.gateway.rules.fit_output import fit_output
from sparkllm.gateway.rules.governance import (
    ForwardedUser,
    PolicyLoaded,
    ReserveBudget,
    TakeSlot,
)
from sparkllm.gateway.rules.input_cap import input_cap
from sparkllm.gateway.rules.json_body import json_body
from sparkllm.gateway.rules.prompt_size import prompt_size
from sparkllm.gateway.rules.request_fields import (
    choices,
    model_name,
    output_limits,
    prompts_per_request,
    stream_flag,
)

if TYPE_CHECKING:
    from sparkllm.gateway.admission import Admission

PayloadRule = Callable[[Draft], ErrorReply | None]
RequestRule = Callable[[Request], Awaitable[Verdict]]

# The admission decision (``decide`` below): pure functions of the body and the
# deployment's numbers, run by Admission.decide.
PAYLOAD_RULES: Final[tuple[PayloadRule, ...]] = (
    json_body,  # 400 invalid_json: one JSON object
    allowed_fields,  # 400 unsupported_parameter: OpenAI's fields + enabled extensions
    model_name,  # 404 model_not_found; an alias rewritten to the served name
    stream_flag,  # 400: stream is a boolean
    choices,  # 400: n <= maxChoices
    output_limits,  # 400: the route's output limits are positive integers
    as_chat,  # the chat the engine makes of a Messages / Responses body (400 if it cannot)
    tool_features,  # 400 unsupported_parameter: spec.admission.toolCalling
    prompts_per_request,  # 400: completion prompts well-formed, <= maxPromptsPerRequest
    prompt_size,  # 400 when the prompt cannot be built; else its tokens
    input_cap,  # 400 context_length_exceeded: input <= maxInputTokens
    fit_output,  # clamp max_tokens into the window (reject policy: 400)
)


def front_door(
    *,
    keys: ApiKeyStore,
    governor: Governor,
    admission: Admission,
    max_body_bytes: int,
    forwarded: ForwardedUsers | None = None,
) -> tuple[RequestRule, ...]:
    """The request rules of one gateway, in the order every generation request meets them."""
    return (
        Authenticate(keys),  # 401: Authorization: Bearer <a user's key>
        PolicyLoaded(governor),  # 503: a configured governance policy is loaded
        ForwardedUser(forwarded or ForwardedUsers()),  # 400 / 403: a front end's user
        BodySize(max_body_bytes),  # 413: the body within maxBodyBytes
        Decide(admission),  # 400 / 404: PAYLOAD_RULES on the body
        ReserveBudget(governor, admission),  # 429 / 503: the user's rate and token budget
        TakeSlot(governor),  # 429: a slot (fair queue, then the global bound)
    )


async def walk(rules: tuple[RequestRule, ...], request: Request) -> Verdict:
    """Run ``rules`` in order until one refuses or stops (None: every rule passed)."""
    for rule in rules:
        verdict = await rule(request)
        if verdict is not None:
            return verdict
    return None


def walk_payload(draft: Draft) -> ErrorReply | None:
    """Run PAYLOAD_RULES on ``draft`` until one refuses (None: the body is admitted)."""
    try:
        for rule in PAYLOAD_RULES:
            refusal = rule(draft)
            if refusal is not None:
                return refusal
    except RequestRejectedError as rejection:  # a shape check deep inside a field
        return rejection.reply
    return None
