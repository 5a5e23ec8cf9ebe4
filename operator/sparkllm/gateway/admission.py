"""The admission decision: forward a request (maybe with a rewritten body) or refuse it.

Why a pure function of (route, body): this is the policy the deployment's safety rests
on — no input over the cap (8,192 tokens) ever reaches the engine, and input + output
always fits the window (12,288 tokens) — so it is decided in one place, without I/O,
and tested with plain asserts. The ASGI shell only moves bytes.

The decision is the payload rules, in the order rules/pipeline.py lists them (parse,
allowlist, model, the fields that size the work, the prompt's tokens, the cap, the
output's fit); each rule is a module of its own in rules/. This class holds what they
need — the policy's numbers, the tokenizer, the chat template, the allowlist — and
turns what they found into the ``Admitted`` to forward. The original body bytes are
forwarded unless a rule had to change something.
"""

from __future__ import annotations

import json
from typing import Any

from sparkllm.gateway.chat_template import ChatTemplate
from sparkllm.gateway.deepseek_prompt import DeepSeekV4Prompt
from sparkllm.gateway.rules.allowlist import Allowlist
from sparkllm.gateway.rules.context import AdmissionPolicy, Admitted, Decision, Draft, Route
from sparkllm.gateway.rules.pipeline import walk_payload
from sparkllm.gateway.tokens import TokenCounter


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
        draft = Draft(
            route,
            body,
            user=user,
            exact=exact,
            policy=self.policy,
            counter=self._counter,
            template=self._template,
            allowlist=self._allowlist,
        )
        refusal = walk_payload(draft)
        if refusal is not None:
            return refusal
        work = draft.work
        return Admitted(
            body=_serialise(draft.payload) if draft.changed else body,
            input_tokens=work.input_tokens,
            input_tokens_exact=work.largest.exact,
            max_output_tokens=next(iter(draft.granted.values()), 0),  # 0: a token count
            stream=draft.stream,
            sequences=work.sequences,
        )


def _serialise(payload: dict[str, Any]) -> bytes:
    try:
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:  # unpaired surrogates outside the prompt: keep them escaped
        return json.dumps(payload, separators=(",", ":")).encode("ascii")


__all__ = [
    "Admission",
    "AdmissionPolicy",
    "Admitted",
    "Decision",
    "Route",
]
