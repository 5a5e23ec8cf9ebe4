"""What the rules read and write: a request's context, and a body's draft decision.

Why two contexts: request rules (the app's, ``async``) work on one HTTP request — who
sent it, its body, its reservation and slot — and the app releases what they took
(``granted``, ``holder``) whatever happens. Payload rules (the admission decision's,
pure) work on one body — its parsed fields, what the prompt measures, what output fits
— and may run on a worker thread, or twice for one request (the exact recount). Each
field below is written by one rule and read by the rules after it; ``pipeline.py``
says which rule runs when.

Both are plain mutable objects with ``__slots__``, made once per request (per decision):
with the parsed body's dict, the only allocations the walk adds to what the steps
themselves need (about 2 µs per decision and 5 µs per request on the 2-core machine).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sparkllm.gateway.asgi import Receive, Scope
from sparkllm.gateway.config import GatewayConfig, MaxTokensPolicy
from sparkllm.gateway.governance.meter import NOTHING_USED, Used
from sparkllm.gateway.governance.policy import UNGOVERNED, Policy
from sparkllm.gateway.metrics import Outcome
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.tokens import PromptSize, TokenCounter

if TYPE_CHECKING:
    from sparkllm.gateway.chat_template import ChatTemplate
    from sparkllm.gateway.deepseek_prompt import DeepSeekV4Prompt
    from sparkllm.gateway.governance.gate import Pass
    from sparkllm.gateway.rules.allowlist import Allowlist


class Stop(enum.Enum):
    """A verdict that ends the walk without an answer."""

    CLIENT_LEFT = "client_left"  # the client disconnected while its request waited


# What a rule answers: continue (None), refuse (the reply), or stop.
Verdict = ErrorReply | Stop | None


class Route(enum.StrEnum):
    """The generation endpoints admission guards.

    Messages (Anthropic's protocol), its token count and Responses are chats to the
    engine: SGLang turns each body into a chat-completions request before it renders and
    counts the prompt (protocols.py does the same for admission).
    """

    CHAT = "/v1/chat/completions"
    COMPLETIONS = "/v1/completions"
    MESSAGES = "/v1/messages"
    COUNT_TOKENS = "/v1/messages/count_tokens"
    RESPONSES = "/v1/responses"


# The field an input-size refusal names, per route.
_PROMPT_PARAM = {
    Route.CHAT: "messages",
    Route.COMPLETIONS: "prompt",
    Route.MESSAGES: "messages",
    Route.COUNT_TOKENS: "messages",
    Route.RESPONSES: "input",
}


@dataclass(frozen=True, slots=True)
class AdmissionPolicy:
    """The numbers admission enforces (a projection of GatewayConfig)."""

    served_model_name: str
    model_aliases: frozenset[str]
    max_input_tokens: int
    context_length: int
    max_tokens_policy: MaxTokensPolicy
    default_max_tokens: int | None
    # What passes beyond OpenAI's fields, and how much work one request may ask for
    # (allowlist.py); the defaults are the deployment's: one answer for one prompt.
    extensions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    max_choices: int = 1
    max_prompts: int = 1
    tool_features: frozenset[str] = frozenset()
    # The engine's --default-chat-template-kwargs (mirrored by the operator): SGLang fills
    # a request's unset template kwargs from them, so the count must too.
    template_defaults: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: GatewayConfig) -> AdmissionPolicy:
        return cls(
            served_model_name=config.served_model_name,
            model_aliases=frozenset(config.model_aliases),
            max_input_tokens=config.max_input_tokens,
            context_length=config.context_length,
            max_tokens_policy=config.max_tokens_policy,
            default_max_tokens=config.default_max_tokens,
            extensions={name: frozenset(users) for name, users in config.extensions.items()},
            max_choices=config.max_choices,
            max_prompts=config.max_prompts_per_request,
            tool_features=frozenset(config.tool_calling),
            template_defaults=config.default_chat_template_kwargs,
        )

    def output_budget(self, tokens: int, *, sequences: int = 1) -> int:
        """The most output tokens per sequence that may accompany ``tokens`` in the window.

        One request's sequences (prompts x n) are seen as one: their inputs and outputs
        together must fit the window, as one sequence's must (SGLang's rule, ``input +
        max_new_tokens < context_length``, tokenizer_manager._validate_one_request).
        """
        return (self.context_length - tokens - 1) // sequences


@dataclass(frozen=True, slots=True)
class Admitted:
    """Forward ``body`` upstream. ``input_tokens`` is exact or, if not, an upper bound."""

    body: bytes
    input_tokens: int
    input_tokens_exact: bool
    max_output_tokens: int
    stream: bool
    sequences: int = 1  # prompts x n: each may produce max_output_tokens


Decision = Admitted | ErrorReply


@dataclass(frozen=True, slots=True)
class Work:
    """A request's work: its largest prompt, how many prompts, ``n`` answers to each."""

    largest: PromptSize
    prompts: int
    choices: int
    prompt_tokens: int | None = None  # all prompts together (default: the largest)

    @property
    def sequences(self) -> int:
        return self.prompts * self.choices

    @property
    def input_tokens(self) -> int:
        """What the limits see: every sequence's input."""
        total = self.largest.tokens if self.prompt_tokens is None else self.prompt_tokens
        return total * self.choices

    def detail(self) -> str:
        if self.sequences == 1:
            return ""
        return (
            f" ({self.prompts} prompt(s), n = {self.choices}; the largest prompt is "
            f"{self.largest.tokens} tokens)"
        )


_NO_WORK = Work(PromptSize(0, exact=True), 0, 0)
_NONE: Mapping[str, int] = MappingProxyType({})


class Draft:
    """One body on its way through the payload rules, and what they learned of it.

    The deployment's side (``policy``, ``counter``, ``template``, ``allowlist``) is set
    at the start; the rest is written by the rules, in the pipeline's order.
    """

    __slots__ = (
        "allowlist",
        "body",
        "changed",
        "chat",
        "choices",
        "counter",
        "exact",
        "granted",
        "payload",
        "policy",
        "prompts",
        "requested",
        "route",
        "stream",
        "template",
        "user",
        "work",
    )

    def __init__(
        self,
        route: Route,
        body: bytes,
        *,
        user: str | None,
        exact: bool,
        policy: AdmissionPolicy,
        counter: TokenCounter,
        template: ChatTemplate | DeepSeekV4Prompt,
        allowlist: Allowlist,
    ) -> None:
        self.route = route
        self.body = body
        self.user = user  # the key's owner: decides which optional extensions pass
        self.exact = exact  # count exactly even where the byte bound settles the cap
        self.policy = policy
        self.counter = counter
        self.template = template
        self.allowlist = allowlist
        # Written by the rules (each replaces, never mutates, the shared empty default).
        self.payload: dict[str, Any] = {}  # json_body: the parsed body (rules edit it)
        self.changed = False  # the payload differs from the body: re-serialise it
        # as_chat: the chat-completions request the engine derives from the payload (the
        # payload itself for a chat); what the prompt is rendered and counted from.
        self.chat: dict[str, Any] = self.payload
        self.stream = False  # stream_flag
        self.choices = 1  # choices: n
        self.requested: Mapping[str, int] = _NONE  # output_limits: the output fields sent
        self.prompts: Sequence[str | list[int]] = ()  # prompts_per_request (completions)
        self.work = _NO_WORK  # prompt_size: what the limits see
        self.granted: Mapping[str, int] = _NONE  # fit_output: the output limits forwarded

    @property
    def prompt_param(self) -> str:
        """The field an input-size refusal names."""
        return _PROMPT_PARAM[self.route]


@dataclass(slots=True, eq=False)
class Request:
    """One generation request on its way through the request rules.

    ``granted`` and ``holder`` are what the budget and the slot took: the app gives them
    back (``Governor.finish``, ``release``) whatever happens after. ``outcome`` and
    ``used`` are what ``finish`` charges if the request ends where it is.
    """

    route: Route
    scope: Scope
    receive: Receive
    arrived: float  # perf_counter() when the request reached the app
    user: str | None = None  # authenticate; forwarded_user: <name>@<frontend> if named
    policy: Policy = UNGOVERNED  # policy_loaded: the governance policy in force
    key: str | None = None  # authenticate: the key's owner (what it is granted)
    frontend: str | None = None  # forwarded_user: the front end that named ``user``
    body: bytes = b""  # body_size: the whole body, within max_body_bytes
    decision: Admitted | None = None  # decide
    deciding: float | None = None  # decide: seconds the decision took
    granted: Pass | None = None  # reserve_budget: the reservation to settle
    frontend_granted: Pass | None = None  # reserve_budget: the front end's total, too
    holder: str | None = None  # take_slot: the slot to release
    outcome: Outcome = Outcome.CLIENT_CLOSED
    used: Used = NOTHING_USED
