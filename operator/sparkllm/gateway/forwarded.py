"""Forwarded identity: a front end's key names its end user in a header, trusted only there.

Why: a team's web UI (Open WebUI) calls the front door with one key for everyone, so the
whole team was one user — one budget, one fair share, one usage row. Open WebUI can
forward the signed-in user (``ENABLE_FORWARD_USER_INFO_HEADERS``: ``X-OpenWebUI-User-
Name``, ``-Id``, ``-Email``, ``-Role``). The governance policy's ``frontends`` marks the
keys allowed to do that, and the header each names its user in (policy.py; default
``X-OpenWebUI-User-Email``: unique in Open WebUI and its login, so a usage row and a
policy override read as the person; ``-Name`` is a display name, neither unique nor
stable; ``-Id`` is a stable UUID, for whoever prefers it over readability).

Each named user then counts as ``<name>@<frontend>``: their own policy (``users`` may
name them so), budget, fair share, usage row. A key's file name never holds ``@``
(Secret data keys are ``[-._a-zA-Z0-9]+``), and the front end's name follows the last
``@``, so a forwarded name can never be another key's user, nor another front end's:
``bob`` from ``webui`` is ``bob@webui``, not ``bob``. The front end's own key keeps its
own limits, which bound the sum of its users (the front end's total is reserved beside
each user's: ``reserve_frontend``).

This is a trust decision (docs/security.md): the front end vouches for the name; the
gateway checks only its shape. So the header counts **only** on a key marked as a front
end; on any other key it is ignored. No ``X-OpenWebUI-*`` header, nor the configured one,
ever reaches the engine: the gateway builds upstream requests from scratch with a fixed
list of headers (app.py), whichever key sent them.

On a front end's key:

* the header absent: the request is the front end's own (its key's row and limits);
* present but empty, longer than ``MAX_NAME_CHARS``, or with any character outside
  ``[A-Za-z0-9._@+-]`` (control characters, spaces, ``|``, non-ASCII look-alikes): 400
  ``invalid_forwarded_user`` naming the header — never a silent fallback to the front
  end's own budget;
* a new name once ``maxUsers`` names were seen (since this gateway started): 403
  ``too_many_forwarded_users``: a leaked front-end key cannot mint unbounded users,
  usage rows or metric series.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from sparkllm.gateway.asgi import Scope, header
from sparkllm.gateway.governance.gate import Governor, Pass
from sparkllm.gateway.governance.policy import Policy
from sparkllm.gateway.replies import INVALID_REQUEST, ErrorReply
from sparkllm.gateway.rules.context import Admitted

logger = logging.getLogger(__name__)

MAX_NAME_CHARS: Final = 128
NAME: Final = re.compile(rb"[A-Za-z0-9._@+-]+")
SEPARATOR: Final = "@"
CODE_INVALID_FORWARDED_USER: Final = "invalid_forwarded_user"
CODE_TOO_MANY_FORWARDED_USERS: Final = "too_many_forwarded_users"


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a request is: ``key`` (the key's file name: its grants, e.g. extensions) and
    ``user`` (whom governance counts); ``frontend`` is set when ``user`` is one of a
    front end's end users (then ``user`` is ``<name>@<frontend>``)."""

    key: str
    user: str
    frontend: str | None = None


def forwarded_name(user: str, frontend: str) -> str:
    """The user id a front end's end user ``user`` counts as."""
    return f"{user}{SEPARATOR}{frontend}"


def _invalid(header_name: str, problem: str) -> ErrorReply:
    message = (
        f"The {header_name} header names the front end's user: it {problem}. It must be "
        f"1 to {MAX_NAME_CHARS} characters of A-Z a-z 0-9 . _ @ + -."
    )
    return ErrorReply(400, message, INVALID_REQUEST, CODE_INVALID_FORWARDED_USER)


def _problem(value: bytes) -> str:
    if not value:
        return "is empty"
    if len(value) > MAX_NAME_CHARS:
        return f"is {len(value)} bytes long"
    return "holds a character outside that set"


class ForwardedUsers:
    """Resolves a key's request to its Identity, and keeps the names each front end used."""

    def __init__(self) -> None:
        self._seen: dict[str, set[str]] = {}

    def resolve(self, key: str, scope: Scope, policy: Policy) -> Identity | ErrorReply:
        """The request's identity under ``policy``, or the 400/403 for a bad name."""
        frontend = policy.frontend(key)
        if frontend is None:  # not a front end: any such header is ignored
            return Identity(key, key)
        value = header(scope, frontend.user_header.lower().encode("ascii"))
        if value is None:  # the front end's own request
            return Identity(key, key)
        if len(value) > MAX_NAME_CHARS or NAME.fullmatch(value) is None:
            return _invalid(frontend.user_header, _problem(value))
        name = value.decode("ascii")
        seen = self._seen.setdefault(key, set())
        if name not in seen:
            if len(seen) >= frontend.max_users:
                message = (
                    f"The front end '{key}' has named {len(seen)} users, its policy's "
                    f"maxUsers (frontends.{key}.maxUsers); a new one is refused."
                )
                return ErrorReply(403, message, INVALID_REQUEST, CODE_TOO_MANY_FORWARDED_USERS)
            seen.add(name)
            logger.info("front end named a new user frontend=%s user=%s", key, name)
        return Identity(key, forwarded_name(name, key), frontend=key)

    def known(self, keys: Iterable[str]) -> set[str]:
        """Every user id with a key now: the keys, and the users of front ends among them
        (whose metric series are kept; the others' are dropped at a scrape)."""
        holders = set(keys)
        named = (
            forwarded_name(name, frontend)
            for frontend, names in self._seen.items()
            if frontend in holders
            for name in names
        )
        return holders | set(named)


async def reserve_frontend(
    governor: Governor,
    frontend: str,
    granted: Pass,
    decision: Admitted,
    *,
    policy: Policy,
    recount: Callable[[], Admitted | ErrorReply] | None,
) -> Pass | ErrorReply:
    """The front end's own reservation for its user's request already ``granted``: the
    same prompt and at most the output the user was granted, under the front end's
    limits (no slot: the user's reservation took it). So the front end's key bounds the
    sum of its users. A refusal says it is the front end's limit."""
    exact = decision.input_tokens_exact or granted.recount is None
    asked = dataclasses.replace(
        decision,
        body=granted.body,
        input_tokens=granted.input_tokens,
        input_tokens_exact=exact,
        max_output_tokens=max(
            1, min(decision.max_output_tokens, granted.reserved_output // decision.sequences)
        ),
    )
    recount = None if exact else recount
    total = await governor.admit(frontend, asked, policy=policy, recount=recount, slot=False)
    if isinstance(total, ErrorReply) and total.status == 429:
        shared = f"The front end '{frontend}' has one budget for all its users. "
        return dataclasses.replace(total, message=shared + total.message)
    return total
