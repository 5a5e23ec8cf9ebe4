"""The governor: one admitted request's way through policy, budget, fair queue and slot.

Why one object between the app and the store: the steps must pair up whatever happens —
a reservation made is settled, a queue place taken is given back, a global slot taken
is released — also when the client leaves or the upstream fails; the app calls
``admit`` then ``slot``, relays, and ``finish`` in a ``finally``. In order:

1. the user's effective policy (policy.py); a configured policy that never loaded
   refuses with 503 (fail closed);
2. ``store.admit``: requests per minute, the user's requests in progress, and the token
   windows, reserving the exact prompt plus the granted output — ``max_tokens`` is
   lowered in the body when the budget allows less than asked;
3. the fair queue (limits.py) for a local slot, then the store's global slot (several
   gateway replicas share ``maxConcurrentRequests``; waits for it up to the queue
   timeout);
4. after the relay, ``store.settle`` with what was used (meter.py) and the accounting.

The fair queue orders by tokens served (limits.py): a request's prompt is charged to
its user when it is given a local slot, its output (and the prompt's exact count, when
the bound was charged) when it settles; ``_charged`` remembers what each request was
charged, so a request that never held a slot is charged nothing.

Round trips to a shared store: when a local slot is free at once, ``admit`` asks for
the budget and the global slot in one call, and ``finish`` settles and releases a global
slot in one; slots.py says how the slots pair up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkllm.errors import GovernanceStoreError
from sparkllm.gateway.asgi import Receive
from sparkllm.gateway.config import GatewayConfig
from sparkllm.gateway.governance import replies
from sparkllm.gateway.governance.meter import UsageMeter, Used
from sparkllm.gateway.governance.policy import UNGOVERNED, Governed, Policy, PolicySource
from sparkllm.gateway.governance.redis_store import open_store
from sparkllm.gateway.governance.slots import SlotKeeper
from sparkllm.gateway.governance.store import (
    Admit,
    AdmitRequest,
    GovernanceStore,
    Limit,
    Refusal,
)
from sparkllm.gateway.limits import ConcurrencyLimiter, Priority
from sparkllm.gateway.metrics import UserMetrics
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.context import Admitted

OFFLOAD_METER_BYTES = 16 * 1024  # answers longer than this are metered on a worker thread
# Every route's output limits (chat, completions, Messages: max_tokens; Responses:
# max_output_tokens): the one a body has is lowered to the grant.
_OUTPUT_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
_BUDGET_LIMITS = (Limit.TOKENS, Limit.MIN_OUTPUT)


@dataclass(frozen=True, slots=True)
class Pass:
    """An admitted request's reservation: forward ``body``; settle ``ticket`` afterwards."""

    user: str
    ticket: str
    body: bytes
    input_tokens: int
    reserved_output: int  # every sequence's output together
    governed: Governed
    # The exact prompt count, when input_tokens is the byte bound (settle corrects it).
    recount: Callable[[], Admitted | ErrorReply] | None = None

    @property
    def reserved(self) -> Used:
        """The whole reservation, charged when what was used cannot be known."""
        return Used(self.input_tokens, self.reserved_output, measured=False)


class Governor:
    """Per-user governance around the relay; see the module docstring."""

    def __init__(
        self,
        *,
        store: GovernanceStore,
        limiter: ConcurrencyLimiter,
        metrics: UserMetrics,
        policy: PolicySource | None,
        max_in_flight: int,
        queue_timeout: float,
        count_output: Callable[[str], int] | None = None,
        replica: str = "local",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.limiter = limiter
        self.metrics = metrics
        self._policy = policy
        self.count_output = count_output  # the model's tokenizer, for streams without usage
        self._clock = clock
        self._charged: dict[str, int] = {}  # ticket -> the prompt tokens the queue charged
        self.slots = SlotKeeper(
            store=store,
            limiter=limiter,
            metrics=metrics,
            max_in_flight=max_in_flight,
            queue_timeout=queue_timeout,
            replica=replica,
        )

    @classmethod
    def from_config(
        cls,
        config: GatewayConfig,
        *,
        metrics: UserMetrics,
        count_output: Callable[[str], int] | None,
        store: GovernanceStore | None = None,
    ) -> Governor:
        """The governor of a gateway run with ``config`` (default: the store it configures)."""
        path = config.governance_policy_path
        return cls(
            store=open_store(config) if store is None else store,
            limiter=ConcurrencyLimiter(
                max_in_flight=config.max_concurrent_requests,
                queue_size=config.queue_size,
                timeout=config.queue_timeout_seconds,
            ),
            metrics=metrics,
            policy=None if path is None else PolicySource(path),
            max_in_flight=config.max_concurrent_requests,
            queue_timeout=config.queue_timeout_seconds,
            count_output=count_output,
        )

    def policy(self) -> Policy | ErrorReply:
        if self._policy is None:
            return UNGOVERNED
        current = self._policy.current()
        return replies.policy_unavailable(current) if isinstance(current, str) else current

    async def admit(
        self,
        user: str,
        decision: Admitted,
        *,
        policy: Policy,
        recount: Callable[[], Admitted | ErrorReply] | None = None,
        slot: bool = True,
    ) -> Pass | ErrorReply:
        """Reserve the request's tokens under the user's limits, or the 429 to send.

        ``decision.input_tokens`` may be the byte bound (admission counts exactly only
        when the bound cannot settle its own decision). The bound is reserved as it is
        when every window still holds it plus the requested output — an exact count
        would not change the grant, and settling charges the exact count. Otherwise
        ``recount`` (the decision with an exact count) is taken, so the grant and any
        refusal come from the exact prompt; a reservation already made for the bound
        is kept whole, and the grant grows by what the bound over-counted.

        ``slot=False``: a reservation only, no slot taken with it (a front end's own
        total beside its user's reservation, which takes the slot: forwarded.py).
        """
        governed = policy.for_user(user)
        self.limiter.reserve(policy.reserved_interactive_slots)
        prompt, weight, priority = decision.input_tokens, governed.weight, governed.priority
        # Free at once: the global slot comes with admit.
        local = slot and self.limiter.try_acquire(
            user, weight=weight, input_tokens=prompt, priority=priority
        )
        try:
            reserved = await self._reserve_exact(
                user, decision, policy=policy, governed=governed, recount=recount, local=local
            )
        except BaseException:
            if local:
                self._unserved(user, weight=weight, input_tokens=prompt, priority=priority)
            raise
        if not isinstance(reserved, tuple):
            if local:
                self._unserved(user, weight=weight, input_tokens=prompt, priority=priority)
            return reserved
        admitted, holder, decision = reserved
        if local:
            self.slots.keep(admitted.ticket, holder, priority)
            self._charged[admitted.ticket] = prompt
        exact = decision.input_tokens_exact or recount is None
        requested = decision.max_output_tokens * decision.sequences
        reservation = decision.input_tokens + admitted.granted_output_tokens
        granted = admitted.granted_output_tokens
        if not exact and granted < requested and recount is not None:
            counted = recount()
            if isinstance(counted, Admitted):  # the same body: it was admitted before
                granted = min(requested, reservation - counted.input_tokens)
                decision, exact = counted, True
        per_sequence = granted // decision.sequences
        body = decision.body
        if per_sequence < decision.max_output_tokens:
            body = _lower_max_tokens(body, per_sequence)
        return Pass(
            user=user,
            ticket=admitted.ticket,
            body=body,
            input_tokens=decision.input_tokens,
            reserved_output=reservation - decision.input_tokens,
            governed=governed,
            recount=None if exact else recount,
        )

    def _unserved(self, user: str, *, weight: int, input_tokens: int, priority: Priority) -> None:
        """Give back a local slot taken at admission for a request refused there, and
        what the fair queue was charged for it."""
        self.limiter.release(priority)
        self.limiter.charge(user, weight=weight, input_tokens=-input_tokens, requests=-1)

    async def _reserve_exact(
        self,
        user: str,
        decision: Admitted,
        *,
        policy: Policy,
        governed: Governed,
        recount: Callable[[], Admitted | ErrorReply] | None,
        local: bool,
    ) -> tuple[Admit, str | None, Admitted] | ErrorReply:
        """The reservation, the global slot's holder if one came with it, the decision.

        A budget refusal of the byte bound is retried with the exact count (``admit``).
        """
        admitted, holder = await self._reserve(
            user, decision, policy=policy, governed=governed, local=local
        )
        exact = decision.input_tokens_exact or recount is None
        if not exact and isinstance(admitted, Refusal) and admitted.limit in _BUDGET_LIMITS:
            counted = recount() if recount is not None else decision  # a refusal reserved nothing
            if isinstance(counted, ErrorReply):
                return counted
            decision = counted
            admitted, holder = await self._reserve(
                user, decision, policy=policy, governed=governed, local=local
            )
        if isinstance(admitted, ErrorReply):
            return admitted
        if isinstance(admitted, Refusal):
            self.metrics.refused(user, reason=replies.reason(admitted))
            return replies.refused(
                admitted, min_output_tokens=policy.min_output_tokens, limits=governed.limits
            )
        return admitted, holder, decision

    async def _reserve(
        self, user: str, decision: Admitted, *, policy: Policy, governed: Governed, local: bool
    ) -> tuple[Admit | Refusal | ErrorReply, str | None]:
        """``store.admit``; holding a local slot, with the global one (its holder if taken)."""
        request = AdmitRequest(
            user=user,
            input_tokens=decision.input_tokens,
            requested_output_tokens=decision.max_output_tokens * decision.sequences,
            min_output_tokens=policy.min_output_tokens * decision.sequences,
            limits=governed.limits,
            now=self._clock(),
        )
        asked = self.slots.ask() if local else None
        try:  # cancelled after Redis took the slot, it lapses with its lease
            admitted = await self.store.admit(request, slot=asked)
        except GovernanceStoreError as exc:  # a shared store down: no budget can be checked
            return replies.store_unavailable(str(exc)), None
        taken = asked is not None and isinstance(admitted, Admit) and admitted.slot
        return admitted, asked.holder if asked is not None and taken else None

    async def wait_for_slot(self, granted: Pass, receive: Receive) -> str | ErrorReply | None:
        """A slot's holder id, the 429, or None if the client disconnects first."""
        governed = granted.governed
        holder = await self.slots.wait(
            ticket=granted.ticket,
            user=granted.user,
            weight=governed.weight,
            max_queued=governed.max_queued,
            receive=receive,
            input_tokens=granted.input_tokens,
            priority=governed.priority,
        )
        if isinstance(holder, str):  # given a slot: its prompt was charged (if not at admit)
            self._charged.setdefault(granted.ticket, granted.input_tokens)
        return holder

    async def measure(
        self, meter: UsageMeter, granted: Pass, *, answered: bool, client_closed: bool = False
    ) -> Used:
        """What the answer used; a long answer is read on a worker thread."""
        measure = functools.partial(
            meter.used,
            input_tokens=granted.input_tokens,
            reserved_output=granted.reserved_output,
            answered=answered,
            client_closed=client_closed,
            count=self.count_output,
        )
        used = await asyncio.to_thread(measure) if meter.size > OFFLOAD_METER_BYTES else measure()
        recount = granted.recount
        if recount is not None and not used.input_from_usage and used.input_tokens:
            # The bound was reserved and the answer said no prompt count: count it now.
            large = len(granted.body) > OFFLOAD_METER_BYTES
            counted = await asyncio.to_thread(recount) if large else recount()
            if isinstance(counted, Admitted):
                used = dataclasses.replace(used, input_tokens=counted.input_tokens)
        return used

    async def release(self, holder: str) -> None:
        """Give the local slot back; the global one is released by ``finish``."""
        self.slots.release(holder)

    async def finish(self, granted: Pass, *, used: Used, outcome: str) -> None:
        """Charge what was used, give the rest back, and count it (once per Pass).

        Also gives back what ``admit`` took and no one asked for, and releases a spare
        global slot in the same call to the store.
        """
        release = self.slots.finishing(granted.ticket)
        charged = self._charged.pop(granted.ticket, None)
        if charged is not None:  # what it really used, less the prompt charged at its slot
            self.limiter.charge(
                granted.user,
                weight=granted.governed.weight,
                input_tokens=used.input_tokens - charged,
                output_tokens=used.output_tokens,
            )
        await self.store.settle(
            granted.ticket,
            input_tokens=used.input_tokens,
            output_tokens=used.output_tokens,
            outcome=outcome,
            now=self._clock(),
            release=release,
        )
        self.metrics.finished(
            granted.user,
            outcome=outcome,
            input_tokens=used.input_tokens,
            output_tokens=used.output_tokens,
        )


def _lower_max_tokens(body: bytes, granted: int) -> bytes:
    """The body with every output limit at most ``granted`` (admission always set one)."""
    payload: dict[str, Any] = json.loads(body)
    for name in _OUTPUT_FIELDS:
        value = payload.get(name)
        if isinstance(value, int) and value > granted:
            payload[name] = granted
    return json.dumps(payload, separators=(",", ":")).encode("ascii")
