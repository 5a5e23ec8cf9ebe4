"""Request rules of per-user governance (governance/, docs/governance.md).

* ``policy_loaded`` (503 ``governance_policy_unavailable``): a configured policy that
  never loaded refuses every generation request (fail closed) — before the body is read;
* ``reserve_budget`` (429 naming the limit; 503 when a shared store cannot answer):
  requests per minute, the user's requests in progress and the token windows, reserving
  the prompt plus the granted output (``max_tokens`` lowered in the body when the
  budget allows less than asked);
* ``take_slot`` (429 naming the queue bound or the timeout): the fair queue's local
  slot, then the store's global one; ``Stop.CLIENT_LEFT`` if the client disconnects
  while queued.

The governor (governance/gate.py) does the work; these only place each step in the
walk. What ``reserve_budget`` and ``take_slot`` take (``request.granted``,
``request.holder``) the app gives back whatever happens after them.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from sparkllm.gateway.governance.gate import Governor
from sparkllm.gateway.metrics import Outcome
from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.context import Request, Stop, Verdict

if TYPE_CHECKING:
    from sparkllm.gateway.admission import Admission


class PolicyLoaded:
    """``request.policy``: the governance policy in force, or the 503 to send."""

    def __init__(self, governor: Governor) -> None:
        self.governor = governor

    async def __call__(self, request: Request) -> Verdict:
        policy = self.governor.policy()
        if isinstance(policy, ErrorReply):
            return policy
        request.policy = policy
        return None


class ReserveBudget:
    """``request.granted``: the user's reservation (and the body to forward), or the 429.

    A decision made on the byte bound is recounted exactly (``exact=True``) when the
    budget's verdict depends on it (Governor.admit).
    """

    def __init__(self, governor: Governor, admission: Admission) -> None:
        self.governor = governor
        self.admission = admission

    async def __call__(self, request: Request) -> Verdict:
        decision, user = request.decision, request.user
        assert decision is not None
        assert user is not None
        recount = functools.partial(
            self.admission.decide, request.route, decision.body, user=user, exact=True
        )
        granted = await self.governor.admit(user, decision, policy=request.policy, recount=recount)
        if isinstance(granted, ErrorReply):
            return granted
        request.granted = granted
        return None


class TakeSlot:
    """``request.holder``: a slot to relay in, the 429, or ``Stop.CLIENT_LEFT``."""

    def __init__(self, governor: Governor) -> None:
        self.governor = governor

    async def __call__(self, request: Request) -> Verdict:
        granted = request.granted
        assert granted is not None  # reserved
        holder = await self.governor.wait_for_slot(granted, request.receive)
        if holder is None:  # the client gave up while queued
            return Stop.CLIENT_LEFT
        if isinstance(holder, ErrorReply):
            request.outcome = Outcome.RATE_LIMITED  # what the reservation is settled as
            return holder
        request.holder = holder
        return None
