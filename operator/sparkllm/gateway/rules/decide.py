"""Request rule ``decide``: the admission decision on the body — the payload rules, in
the pipeline's order (400 / 404 naming the field; the body maybe rewritten).

Bodies larger than ``OFFLOAD_BODY_BYTES`` (roughly 4K tokens of English) are decided on
a worker thread: tokenising takes milliseconds and tokenizers releases the GIL
meanwhile, so the event loop keeps streaming other answers. Smaller ones are cheaper
than the thread hop. The time it took is kept for the admission-duration histogram.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import TYPE_CHECKING, Final

from sparkllm.gateway.replies import ErrorReply
from sparkllm.gateway.rules.context import Request, Route, Verdict

if TYPE_CHECKING:
    from sparkllm.gateway.admission import Admission

OFFLOAD_BODY_BYTES: Final = 16 * 1024


class Decide:
    """``request.decision`` (and ``deciding``, its seconds), or the refusal."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    async def __call__(self, request: Request) -> Verdict:
        # The key's grants (extensions) decide, whoever a front end names.
        body, route, user = request.body, request.route, request.key
        started = time.perf_counter()
        # A token count's answer is the count: exact, never the byte bound.
        decide = functools.partial(
            self.admission.decide, route, body, user=user, exact=route is Route.COUNT_TOKENS
        )
        decision = await asyncio.to_thread(decide) if len(body) > OFFLOAD_BODY_BYTES else decide()
        request.deciding = time.perf_counter() - started
        if isinstance(decision, ErrorReply):
            return decision
        request.decision = decision
        return None
