"""The admission decision: forward a request (maybe with a rewritten body) or refuse it.

Why a pure function of (route, body): this is the policy the deployment's safety rests
on — no input over the cap (8,192 tokens) ever reaches the engine, and input + output
always fits the window (12,288 tokens) — so it is decided in one place, without I/O,
and tested with plain asserts. The ASGI shell only moves bytes.

The decision, in order: parse and check the body's shape (validation.py); check the
model name; render the chat template (chat_template.py) — unless the byte bound on the
rendered length, known by the conversation's shape (template_probe.py), already
settles it; measure the prompt (tokens.py, exactly unless the byte bound already
settles it); refuse input over the cap; then fit the output: a ``max_tokens`` /
``max_completion_tokens`` that would overflow the window is clamped (or refused under
the ``reject`` policy), and a request with none gets ``default_max_tokens`` or the rest
of the window. The original body bytes are forwarded unless something had to change.

"Fits" is the engine's rule, not ours: SGLang refuses a request when
``input + max_new_tokens >= context_length`` (tokenizer_manager._validate_one_request),
so the output budget is ``context_length - input - 1``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from sparkllm.gateway import replies, validation
from sparkllm.gateway.allowlist import Allowlist, check_tool_features
from sparkllm.gateway.chat_messages import ChatTemplateError, message_dump, prepare_messages
from sparkllm.gateway.chat_template import ChatTemplate
from sparkllm.gateway.config import GatewayConfig, MaxTokensPolicy
from sparkllm.gateway.deepseek_prompt import DeepSeekV4Prompt, FieldError
from sparkllm.gateway.replies import ErrorReply, RequestRejectedError
from sparkllm.gateway.tokens import PromptSize, TokenCounter


class Route(enum.StrEnum):
    """The generation endpoints admission guards."""

    CHAT = "/v1/chat/completions"
    COMPLETIONS = "/v1/completions"


# Output-limit fields per route; SGLang reads max_completion_tokens first for chat.
_OUTPUT_FIELDS = {
    Route.CHAT: ("max_completion_tokens", "max_tokens"),
    Route.COMPLETIONS: ("max_tokens",),
}
_INJECTED_FIELD = "max_tokens"


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


class Admission:
    """Decides each generation request; holds the tokenizer and template, no other state.

    ``template`` is the model's Jinja chat template, or for DeepSeek V4 the encoder
    SGLang uses instead of one (deepseek_prompt.py).
    """

    def __init__(
        self,
        *,
        policy: AdmissionPolicy,
        counter: TokenCounter,
        template: ChatTemplate | DeepSeekV4Prompt,
    ) -> None:
        self.policy = policy
        self._counter = counter
        self._template = template
        self._allowlist = Allowlist(policy.extensions)

    def decide(
        self, route: Route, body: bytes, *, user: str | None = None, exact: bool = False
    ) -> Decision:
        """Forward (``Admitted``) or refuse (``ErrorReply``); never raises for bad input.

        ``user`` (the key's owner) decides which optional extensions pass; ``exact``
        counts the prompt exactly even when the byte bound settles the cap (a token
        budget reserves the exact count).
        """
        try:
            return self._decide(route, body, user=user, exact=exact)
        except RequestRejectedError as rejection:
            return rejection.reply

    def _decide(self, route: Route, body: bytes, *, user: str | None, exact: bool) -> Decision:
        payload = validation.parse_json_object(body)
        self._allowlist.check(route.value, payload, user=user)
        changed = self._check_model(payload)
        stream = validation.optional_bool(payload, "stream")
        choices = self._choices(payload)
        requested = {
            field: value
            for field in _OUTPUT_FIELDS[route]
            if (value := validation.optional_positive_int(payload, field)) is not None
        }
        largest_output = max(requested.values(), default=self.policy.default_max_tokens)
        # Below this size the exact count cannot change the decision (see tokens.py).
        exact_above = -1
        if largest_output is not None and choices == 1 and not exact:
            exact_above = min(self.policy.max_input_tokens, _budget(self.policy, largest_output))
        if route is Route.CHAT:
            check_tool_features(payload, enabled=self.policy.tool_features)
            large = len(body) > self.policy.max_input_tokens  # may be grossly over the cap
            size = self._measure_chat(payload, exact_above=exact_above, large=large)
            work = _Work(size, 1, choices)
        else:
            work = self._measure_completion(payload, exact_above=exact_above, choices=choices)
        prompt_param = "messages" if route is Route.CHAT else "prompt"
        if work.input_tokens > self.policy.max_input_tokens:
            raise RequestRejectedError(self._too_long(work, param=prompt_param))
        # With an inexact size, the bound already left room for every requested limit.
        granted = self._fit_output(payload, requested, work=work, param=prompt_param)
        changed = changed or granted != requested
        return Admitted(
            body=_serialise(payload) if changed else body,
            input_tokens=work.input_tokens,
            input_tokens_exact=work.largest.exact,
            max_output_tokens=next(iter(granted.values())),
            stream=stream,
            sequences=work.sequences,
        )

    def _choices(self, payload: dict[str, Any]) -> int:
        """``n``: answers per prompt, at most the deployment's ``max_choices``."""
        choices = validation.optional_positive_int(payload, "n") or 1
        if choices > self.policy.max_choices:
            validation.reject(
                f"'n' is {choices}, but this deployment generates at most "
                f"{self.policy.max_choices} answer(s) per request.",
                param="n",
            )
        return choices

    def _check_model(self, payload: dict[str, Any]) -> bool:
        """Whether the model was an alias (rewritten to the served name)."""
        model = validation.required(payload, "model")
        if not isinstance(model, str):
            validation.wrong_type("model", "a string", model)
        if model == self.policy.served_model_name:
            return False
        if model in self.policy.model_aliases:
            payload["model"] = self.policy.served_model_name
            return True
        raise RequestRejectedError(replies.model_not_found(model))

    def _measure_chat(
        self, payload: dict[str, Any], *, exact_above: int, large: bool
    ) -> PromptSize:
        messages = validation.chat_messages(payload)
        continue_final = validation.optional_bool(payload, "continue_final_message")
        template = self._template
        if isinstance(template, DeepSeekV4Prompt):
            return self._encode_v4(template, payload, exact_above=exact_above, large=large)
        tools = validation.chat_tools(payload)
        template_kwargs = validation.template_kwargs(payload, self.policy.template_defaults)
        try:
            prepared, prefix = prepare_messages(
                [message_dump(message) for message in messages],
                content_format=template.content_format,
                continue_final_message=continue_final,
            )
            if not prefix and exact_above >= 0:
                bound = self._bound_unrendered(template, prepared, tools, template_kwargs)
                if bound is not None and bound <= exact_above:
                    return PromptSize(bound, exact=False)
            rendered = template.render(prepared, tools=tools, template_kwargs=template_kwargs)
        except ChatTemplateError as exc:
            validation.reject(
                f"The messages cannot be formatted with this model's chat template: {exc}",
                param="messages",
            )
        if prefix:  # the engine encodes the continued assistant text separately
            sizes = [
                self._measure(text, special=False, exact_above=-1, param="messages")
                for text in (rendered, prefix)
            ]
            least = any(size.at_least for size in sizes)
            return PromptSize(sum(size.tokens for size in sizes), exact=not least, at_least=least)
        return self._measure(rendered, special=False, exact_above=exact_above, param="messages")

    def _encode_v4(
        self, prompt: DeepSeekV4Prompt, payload: dict[str, Any], *, exact_above: int, large: bool
    ) -> PromptSize:
        """DeepSeek's encoder, as SGLang runs it; the byte bounds settle short prompts and
        (for a ``large`` body, which alone can be) grossly oversized ones."""
        try:
            return prompt.measure(
                payload,
                exact_above=exact_above,
                byte_level=self._counter.byte_level,
                refuse_above=self.policy.max_input_tokens if large else -1,
                defaults=self.policy.template_defaults,
            )
        except FieldError as exc:
            validation.reject(str(exc), param=exc.param)
        except ChatTemplateError as exc:
            validation.reject(
                f"The messages cannot be encoded for this model: {exc}", param="messages"
            )

    def _bound_unrendered(
        self,
        template: ChatTemplate,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        template_kwargs: dict[str, Any],
    ) -> int | None:
        """The byte bound from the rendered length known by shape, if it is known."""
        if not self._counter.byte_level:
            return None
        try:
            size = template.rendered_bytes(messages, tools=tools, template_kwargs=template_kwargs)
        except ValueError:
            _invalid_unicode("messages")
        return None if size is None else self._counter.byte_bound(size, add_special_tokens=False)

    def _measure_completion(
        self, payload: dict[str, Any], *, exact_above: int, choices: int
    ) -> _Work:
        prompts = validation.completion_prompts(payload)
        if len(prompts) > self.policy.max_prompts:
            validation.reject(
                f"'prompt' holds {len(prompts)} prompts, but this deployment takes at most "
                f"{self.policy.max_prompts} prompt(s) per request.",
                param="prompt",
            )
        if len(prompts) > 1:
            exact_above = -1  # the limits see the sum: count each prompt exactly
        sizes = [
            PromptSize(len(prompt), exact=True)
            if isinstance(prompt, list)
            else self._measure(prompt, special=True, exact_above=exact_above, param="prompt")
            for prompt in prompts
        ]
        largest = max(sizes, key=lambda size: size.tokens)
        total = sum(size.tokens for size in sizes)
        exact = all(size.exact for size in sizes)
        least = any(size.at_least for size in sizes)
        largest = PromptSize(largest.tokens, exact=exact, at_least=least)
        return _Work(largest, len(prompts), choices, total)

    def _measure(self, text: str, *, special: bool, exact_above: int, param: str) -> PromptSize:
        try:
            return self._counter.measure(
                text,
                add_special_tokens=special,
                exact_above=exact_above,
                refuse_above=self.policy.max_input_tokens,
            )
        except ValueError:
            _invalid_unicode(param)

    def _too_long(self, work: _Work, *, param: str) -> ErrorReply:
        cap, window = self.policy.max_input_tokens, self.policy.context_length
        least = "at least " if work.largest.at_least else ""
        return replies.context_length_exceeded(
            f"This request's input is {least}{work.input_tokens} tokens{work.detail()}, over this "
            f"deployment's input limit of {cap} tokens (the context window is {window} "
            f"tokens, input and output together). Please shorten the input.",
            param=param,
        )

    def _fit_output(
        self, payload: dict[str, Any], requested: dict[str, int], *, work: _Work, param: str
    ) -> dict[str, int]:
        """The output limits to forward, written into ``payload`` when they change."""
        window = self.policy.context_length
        input_tokens = work.input_tokens
        budget = _budget(self.policy, input_tokens, sequences=work.sequences)
        if budget < 1:  # only when max_input_tokens is context_length - 1
            message = (
                f"This request's input is {input_tokens} tokens: the context window of "
                f"{window} tokens leaves no room for an answer. Please shorten the input."
            )
            raise RequestRejectedError(replies.context_length_exceeded(message, param=param))
        if not requested:
            default = self.policy.default_max_tokens
            granted = budget if default is None else min(default, budget)
            payload[_INJECTED_FIELD] = granted
            return {_INJECTED_FIELD: granted}
        fitted = dict(requested)
        for name, value in requested.items():
            if value <= budget:
                continue
            if self.policy.max_tokens_policy is MaxTokensPolicy.REJECT:
                message = (
                    f"'{name}' is {value}, but the input is {input_tokens} tokens and the "
                    f"context window is {window} tokens: at most {budget} output tokens fit. "
                    f"Lower '{name}' or shorten the input."
                )
                raise RequestRejectedError(replies.context_length_exceeded(message, param=name))
            fitted[name] = payload[name] = budget
        return fitted


def _invalid_unicode(param: str) -> NoReturn:
    validation.reject(f"'{param}' contains invalid Unicode (an unpaired surrogate).", param=param)


def _budget(policy: AdmissionPolicy, tokens: int, *, sequences: int = 1) -> int:
    """The most output tokens per sequence that may accompany ``tokens`` in the window.

    One request's sequences (prompts x n) are seen as one: their inputs and outputs
    together must fit the window, as one sequence's must (SGLang's rule, ``input +
    max_new_tokens < context_length``).
    """
    return (policy.context_length - tokens - 1) // sequences


@dataclass(frozen=True, slots=True)
class _Work:
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


def _serialise(payload: dict[str, Any]) -> bytes:
    try:
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:  # unpaired surrogates outside the prompt: keep them escaped
        return json.dumps(payload, separators=(",", ":")).encode("ascii")
