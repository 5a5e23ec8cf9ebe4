"""Request rules of per-user governance (governance/, docs/governance.md).

* ``policy_loaded`` (503 ``governance_policy_unavailable``): a configured policy that
  never loaded refuses every generation request (fail closed) — before the body is read;
* ``reserve_budget`` (429 naming the limit; 503 when a shared store cannot answer):
  requests per minute, the user's requests in progress and the token windows, reserving
  the prompt plus the granted output (``max_tokens`` lowered in the body when the
  budget allows less than asked); a front end's user is reserved under the front end's
  own limits too (forwarded.py), so the front end's key bounds the sum of its users;
* ``forwarded_user`` (400 / 403): who a front end's key names (forwarded.py);
* ``take_slot`` (429 naming the queue bound or the timeout): the fair queue's local
  slot, then the store's global one; ``Stop.CLIENT_LEFT`` if the client disconnects
  while queued.

The governor (governance/gate.py) does the work; these only place each step in the
walk. What ``reserve_budget`` and ``take_slot`` take (``request.granted``,
``request.holder``) the app gives back whatever happens after them.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

from sparkllm.gateway.forwarded import ForwardedUsers, reserve_frontend
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


class ForwardedUser:
    """``request.user`` (and ``frontend``): the end user a front end's key names, or the
    400 / 403 for a name it may not use; any other key's request stays its own."""

    def __init__(self, forwarded: ForwardedUsers) -> None:
        self.forwarded = forwarded

    async def __call__(self, request: Request) -> Verdict:
        assert request.key is not None  # authenticated
        identity = self.forwarded.resolve(request.key, request.scope, request.policy)
        if isinstance(identity, ErrorReply):
            return identity
        request.user, request.frontend = identity.user, identity.frontend
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
            self.admission.decide, request.route, decision.body, user=request.key, exact=True
        )
        granted = await self.governor.admit(user, decision, policy=request.policy, recount=recount)
        if isinstance(granted, ErrorReply):
            return granted
        request.granted = granted
        if request.frontend is None:
            return None
        total = await reserve_frontend(
            self.governor,
            request.frontend,
            granted,
            decision,
            policy=request.policy,
            recount=recount,
        )
        if isinstance(total, ErrorReply):
            request.outcome = Outcome.RATE_LIMITED  # what the user's reservation is settled as
            return total
        request.granted = dataclasses.replace(granted, body=total.body)  # lowered by both
        request.frontend_granted = total
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
