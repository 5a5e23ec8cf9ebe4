"""Why no replica serves: the 503 the front door answers instead of the router's 404.

Why: when the router (smg) has no replica registered for the model — the InferenceCluster
is scaled to 0, every replica is restarting or not ready yet, or a replica spent its
restart budget — smg answers ``404 model_not_found`` "No worker available for model
'...'". A client reads that as a wrong model name and does not retry. The admission layer
has already checked the model name (admission.py), so any ``model_not_found`` from the
router on a generation route means "nothing serves": it becomes ``503`` with
``Retry-After`` and a message that says why. So does smg's other way of saying it, while
its replicas are registered but all failing health checks (circuit breaker open):
``503 no_available_workers`` "All workers are unavailable", with ``Retry-After: 1``.

Where the why comes from: the router knows only that it has no replica; the
InferenceCluster knows why. The gateway reads its own InferenceCluster (one ``get``, with
the gateway's ServiceAccount; the Role ``render/gateway.py`` renders allows ``get`` on that
object only) when the router reports no replica, at most once per ``CACHE_SECONDS``.
That stays right when the operator is down: ``spec.replicas`` is the user's own word and
read fresh; the replicas' states are the operator's last report. When the object cannot
be read (no credentials, the API server away, the gateway run by hand) the message says
that no replica is ready, without the why. The router's answer is always the trigger:
the gateway never refuses on the object's word alone, so a stale status can at worst
make a message less precise, never turn a serving model away.

Held, not refused, through short gaps (issue 29): while no replica serves but one is
expected, a request waits up to ``no_replica_hold_seconds`` and is relayed as soon as
the router has a replica again; then (or at once, when none is expected) the 503 above.
"Expected" is the InferenceCluster's word, not the router's: ``spec.replicas`` above 0
and not every replica stopped by its restart budget (``replica_expected``). The router
knows only that it has no worker registered — it cannot tell a scale to 0 or a spent
restart budget (nothing will come: hold no one) from a restart, a failover or a
scale-up in progress (a replica is coming). So a hold needs the object read: a gateway
that cannot read it (run by hand, no credentials) answers at once, as before. The
router stays the trigger and the oracle: held requests wait for its ``/readiness``
(one poll every ``HOLD_POLL_SECONDS`` for all of them, only while someone waits), then
are sent again; a request the router still cannot place waits on until its bound. A
client that leaves while held frees its place and is charged nothing (no engine saw
the request).

``no_replica_reply`` and ``replica_expected`` are pure (tested with plain dicts);
``ServingState`` is the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

from sparkllm.api.meta import API_VERSION, KIND
from sparkllm.errors import ClusterAPIError
from sparkllm.gateway.asgi import Receive, wait_for_disconnect
from sparkllm.gateway.replies import SERVER_ERROR, ErrorReply
from sparkllm.kube.client import KubeAPI, load_configuration
from sparkllm.kube.kinds import lookup_kind

logger = logging.getLogger(__name__)

# smg 1.13.0 with no worker for the model (status, error.code in the body); the header
# carries the code too.
ROUTER_ERROR_CODE_HEADER: Final = b"x-smg-error-code"
ROUTER_NO_WORKER: Final = frozenset({(404, "model_not_found"), (503, "no_available_workers")})
ROUTER_NO_WORKER_STATUSES: Final = frozenset(status for status, _code in ROUTER_NO_WORKER)

CODE_SCALED_TO_ZERO: Final = "model_scaled_to_zero"
CODE_NO_REPLICA_READY: Final = "no_replica_ready"
CODE_RESTART_BUDGET_EXHAUSTED: Final = "restart_budget_exhausted"
# Retry-After: a stopped model comes back when someone scales it up (check now and then);
# a replica restarting or starting takes a minute or more; a spent budget waits for a person.
RETRY_SCALED_TO_ZERO_SECONDS: Final = 60
RETRY_NOT_READY_SECONDS: Final = 30
RETRY_BUDGET_EXHAUSTED_SECONDS: Final = 300
CACHE_SECONDS: Final = 2.0  # one read of the object serves a burst of refused requests
READ_TIMEOUT_SECONDS: Final = 2.0
# How often held requests' shared poll asks the router whether it has a replica again: a
# held request is sent again within this of the router's readiness (loopback, ~1 ms).
HOLD_POLL_SECONDS: Final = 0.25


class HoldEnd(enum.Enum):
    """How one wait of a held request ended."""

    RETRY = "retry"  # the router says it has a replica: send the request again
    ANSWER = "answer"  # none expected (or the bound had passed): the 503 now, not held
    EXPIRED = "expired"  # waited to the bound, no replica came: the 503 now
    CLIENT_LEFT = "client_left"  # the client disconnected while held


Hold = Callable[[Receive], Awaitable[HoldEnd]]


def is_no_worker(status: int, headers: Sequence[tuple[bytes, bytes]], body: bytes) -> bool:
    """Whether the router's answer says it has no replica that can take the request."""
    if status not in ROUTER_NO_WORKER_STATUSES:
        return False
    codes = {value.decode("latin-1") for name, value in headers if name == ROUTER_ERROR_CODE_HEADER}
    if any((status, code) in ROUTER_NO_WORKER for code in codes):
        return True
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return False
    return isinstance(error, dict) and (status, error.get("code")) in ROUTER_NO_WORKER


def replica_expected(cluster: Mapping[str, Any] | None) -> bool:
    """Whether a replica is expected to serve soon, as far as ``cluster`` (the object as
    read; None: not known) tells: replicas wanted, and not every one stopped by its
    restart budget. Unknown is not expected: a hold must not outlast a scale to 0. Pure."""
    if cluster is None:
        return False
    return no_replica_reply(cluster, model="").code == CODE_NO_REPLICA_READY


def _unavailable(message: str, *, code: str, retry_after: int) -> ErrorReply:
    return ErrorReply(503, message, SERVER_ERROR, code, retry_after_seconds=retry_after)


def _replica_state(replica: Mapping[str, Any]) -> str:
    """One replica in words: ``replica 0 is Restarting (rank 2 exited)``."""
    index = replica.get("index", "?")
    if replica.get("budgetExhausted"):
        return (
            f"replica {index} is stopped: it spent its restart budget "
            "(spec.restartPolicy.maxRestartsPerHour)"
        )
    phase = replica.get("phase") or "not ready"
    if phase == "Ready":  # the operator's last report; the router knows better now
        return f"replica {index} is Ready by the last status, but the router holds it out"
    message = replica.get("message")
    return f"replica {index} is {phase}" + (f" ({message})" if message else "")


def no_replica_reply(
    cluster: Mapping[str, Any] | None, *, model: str, name: str | None = None
) -> ErrorReply:
    """The 503 for "the router has no replica", saying why as far as ``cluster`` tells.

    ``cluster`` is the InferenceCluster object as read (None: not known). Pure.
    """
    spec = (cluster or {}).get("spec") or {}
    status = (cluster or {}).get("status") or {}
    meta = (cluster or {}).get("metadata") or {}
    named = f"InferenceCluster {meta.get('namespace')}/{meta.get('name') or name}"
    if cluster is not None and spec.get("replicas") == 0:
        message = (
            f"The model '{model}' is not being served: {named} is scaled to 0 replicas "
            "(spec.replicas is 0). Requests are served again once it is scaled up."
        )
        return _unavailable(
            message, code=CODE_SCALED_TO_ZERO, retry_after=RETRY_SCALED_TO_ZERO_SECONDS
        )
    replicas = [r for r in status.get("replicaStatuses") or [] if isinstance(r, Mapping)]
    if replicas and all(r.get("budgetExhausted") for r in replicas):
        message = (
            f"The model '{model}' is not being served: every replica stopped after spending "
            f"its restart budget (spec.restartPolicy.maxRestartsPerHour); they stay stopped "
            f"until the spec changes or {named} is annotated sparkllm.io/restart=now."
        )
        return _unavailable(
            message, code=CODE_RESTART_BUDGET_EXHAUSTED, retry_after=RETRY_BUDGET_EXHAUSTED_SECONDS
        )
    retry = RETRY_NOT_READY_SECONDS
    if replicas:
        states = "; ".join(_replica_state(r) for r in replicas)
        why = f"no replica is ready yet ({states})"
    else:
        why = "no replica is registered with the router yet (starting or restarting)"
    message = f"The model '{model}' cannot answer right now: {why}. Retry after {retry} s."
    return _unavailable(message, code=CODE_NO_REPLICA_READY, retry_after=retry)


class ServingState:
    """Reads the gateway's InferenceCluster when the router has no replica; cached briefly.

    ``namespace``/``name`` unset (the gateway run by hand): no reads, the generic reply,
    no holds. ``probe`` asks the router whether it is ready (None: yes; else why not):
    held requests wait for it, at most ``hold_seconds`` each.
    """

    def __init__(
        self,
        *,
        model: str,
        namespace: str | None,
        name: str | None,
        clock: Callable[[], float] = time.monotonic,
        hold_seconds: float = 0.0,
        probe: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        self._model = model
        self._namespace, self._name = namespace, name
        self._clock = clock
        self._read_at = -CACHE_SECONDS
        self._cluster: Mapping[str, Any] | None = None
        self._api: KubeAPI | None = None  # made at the first read
        self._said = ""  # the last reply's message, logged when it changes
        self.hold_seconds = hold_seconds
        self._probe = probe
        self._waiting = 0  # held requests now waiting for the router
        self._ready = asyncio.Event()  # set at the next poll that finds the router ready
        self._poller: asyncio.Task[None] | None = None

    async def _current(self) -> Mapping[str, Any] | None:
        """The InferenceCluster as last read (read again when older than CACHE_SECONDS)."""
        namespace, name = self._namespace, self._name
        if namespace and name and self._clock() - self._read_at >= CACHE_SECONDS:
            self._read_at = self._clock()
            self._cluster = await self._read(namespace, name)
        return self._cluster

    def holding(self) -> Hold:
        """One request's hold: each call (after the router said it has no replica) waits
        for the router's next readiness (RETRY) while a replica is expected and the
        request's bound (from its first call) has not passed. The object is read again
        while it waits (each CACHE_SECONDS): a scale to 0 meanwhile ends the hold.
        ANSWER: not held at all; EXPIRED: held, and now the 503."""
        deadline: float | None = None

        async def hold(receive: Receive) -> HoldEnd:
            nonlocal deadline
            if self._probe is None:
                return HoldEnd.ANSWER
            deadline = self._clock() + self.hold_seconds if deadline is None else deadline
            waited = False
            while True:
                now = self._clock()
                if deadline <= now or not replica_expected(await self._current()):
                    return HoldEnd.EXPIRED if waited else HoldEnd.ANSWER
                end = await self._wait(receive, min(deadline - now, CACHE_SECONDS))
                if end is not HoldEnd.EXPIRED:
                    return end
                waited = True

        return hold

    async def _wait(self, receive: Receive, seconds: float) -> HoldEnd:
        """Wait for the poll to find the router ready, the client to leave, or ``seconds``."""
        self._waiting += 1
        if self._poller is None or self._poller.done():
            self._poller = asyncio.ensure_future(self._poll())
        ready = asyncio.ensure_future(self._ready.wait())
        left = asyncio.ensure_future(wait_for_disconnect(receive))
        try:
            done, _pending = await asyncio.wait(
                {ready, left}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            self._waiting -= 1
            for task in (ready, left):
                task.cancel()
        if left in done:
            return HoldEnd.CLIENT_LEFT
        return HoldEnd.RETRY if ready in done else HoldEnd.EXPIRED

    async def _poll(self) -> None:
        """Ask the router while anyone is held; wake them all when it is ready."""
        assert self._probe is not None
        while self._waiting:
            if await self._probe() is None:
                ready, self._ready = self._ready, asyncio.Event()
                ready.set()  # those waiting now retry; later ones wait for the next poll
            await asyncio.sleep(HOLD_POLL_SECONDS)

    async def reply(self) -> ErrorReply:
        """The 503 to send now that the router said it has no replica."""
        cluster = await self._current()
        reply = no_replica_reply(cluster, model=self._model, name=self._name)
        if reply.message != self._said:  # a transition is logged once, not per request
            self._said = reply.message
            logger.warning("no replica serves: %s code=%s", reply.message, reply.code)
        return reply

    async def _read(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            if self._api is None:
                self._api = KubeAPI(load_configuration(), timeout=READ_TIMEOUT_SECONDS)
            kind = lookup_kind(API_VERSION, KIND)
            cluster: Mapping[str, Any] | None = await self._api.get(kind, name, namespace)
        except (ClusterAPIError, OSError, ValueError) as exc:  # no credentials, API away
            logger.warning(
                "cannot read the InferenceCluster to say why no replica serves error=%s", exc
            )
            return None
        return cluster

    async def aclose(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        if self._api is not None:
            await self._api.aclose()


__all__ = [
    "CODE_NO_REPLICA_READY",
    "CODE_RESTART_BUDGET_EXHAUSTED",
    "CODE_SCALED_TO_ZERO",
    "Hold",
    "HoldEnd",
    "ServingState",
    "is_no_worker",
    "no_replica_reply",
    "replica_expected",
]
