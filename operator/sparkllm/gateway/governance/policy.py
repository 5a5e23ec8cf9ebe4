"""The per-user policy: defaults plus overrides per user, read from a reviewable YAML file.

Why a file, re-read when it changes: the policy belongs in Git next to the rest of the
deployment, reviewed like code, and must apply without a restart, as user keys do. The
operator mounts the ConfigMap ``spec.admission.governance.policyConfigMapRef`` names; the
kubelet swaps the file in place when the ConfigMap changes, and the gateway checks it at
most once a second (one ``stat``), lazily on the request path.

The file (docs/governance.md has the full table)::

    minOutputTokens: 16          # refuse (429) when a budget leaves fewer output tokens
    admins: [ops]                # may read every user's usage (others: their own)
    defaults:                    # every user, unless overridden
      maxConcurrentRequests: 8   # requests of the user in progress (waiting or running)
      requestsPerMinute: 120
      tokensPerHour: 2000000     # input + output, aligned UTC windows
      tokensPerDay: 20000000
      weight: 1                  # share of the engine's tokens when slots are short
      maxQueuedRequests: 16      # the user's waiting requests
      priority: interactive      # or batch: goes after interactive, off the reserved slots
    reservedInteractiveSlots: 1  # slots batch requests never take (default 1)
    users:
      batch: {weight: 1, maxConcurrentRequests: 16}
      alice: {weight: 4, tokensPerDay: 50000000}
      carol@example.com@webui: {tokensPerDay: 1000000}   # a front end's user
    frontends:                   # keys that may name their end users (forwarded.py)
      webui: {userHeader: X-OpenWebUI-User-Email, maxUsers: 1000}

A user's fields override the defaults' one by one; a field unset in both is unlimited.
A file that fails validation is refused as a whole: at start the gateway then refuses
every generation request with 503 naming the problem (fail closed: a policy that does
not load must not mean "no limits"); on a later reload it keeps the last good policy.
An empty file (nothing, only comments, or ``null``) is refused the same way: an emptied
ConfigMap key is a mistake far more often than a decision, so "no limits" must be said
explicitly, as ``{}``.

Priority classes: a user unset in both is ``interactive``, except the operator's own
benchmark and acceptance Jobs (``sparkllm:bench``), which run as ``batch`` unless the
policy names that user with a priority of its own.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from sparkllm.gateway.governance.store import TokenWindow, UserLimits
from sparkllm.gateway.limits import Priority
from sparkllm.render.names import BENCH_USER

logger = logging.getLogger(__name__)

MAX_POLICY_BYTES = 1024 * 1024
DEFAULT_MIN_OUTPUT_TOKENS = 16
DEFAULT_RESERVED_INTERACTIVE_SLOTS = 1
# The token windows a policy may set: field -> (window name, seconds).
WINDOWS = {
    "tokens_per_minute": ("minute", 60),
    "tokens_per_hour": ("hour", 3600),
    "tokens_per_day": ("day", 86400),
}


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, extra="forbid", frozen=True
    )


class UserPolicy(_Model):
    """One user's limits; unset fields fall back to the defaults, then to unlimited."""

    max_concurrent_requests: int | None = Field(None, ge=1, le=100_000)
    requests_per_minute: int | None = Field(None, ge=1, le=10_000_000)
    tokens_per_minute: int | None = Field(None, ge=1)
    tokens_per_hour: int | None = Field(None, ge=1)
    tokens_per_day: int | None = Field(None, ge=1)
    weight: int | None = Field(None, ge=1, le=1000)
    max_queued_requests: int | None = Field(None, ge=0, le=100_000)
    priority: Literal["interactive", "batch"] | None = None


# Open WebUI's header for the signed-in user's e-mail (ENABLE_FORWARD_USER_INFO_HEADERS):
# unique and its login name, so readable in usage rows and writable in ``users`` (forwarded.py).
DEFAULT_USER_HEADER = "X-OpenWebUI-User-Email"
DEFAULT_MAX_FORWARDED_USERS = 1000
# Headers a front end may not name users in: the key's own, and the request's framing.
_RESERVED_HEADERS = frozenset(
    {"authorization", "x-api-key", "content-type", "content-length", "host", "cookie"}
)


class Frontend(_Model):
    """A key trusted to name its end users in ``user_header`` (forwarded.py)."""

    user_header: str = Field(DEFAULT_USER_HEADER, pattern=r"^[A-Za-z0-9-]{1,64}$")
    max_users: int = Field(DEFAULT_MAX_FORWARDED_USERS, ge=1, le=100_000)

    @field_validator("user_header")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value.lower() in _RESERVED_HEADERS:
            raise ValueError(f"{value} carries the request itself, not a user's name")
        return value


class PolicyDocument(_Model):
    """The policy file as written."""

    min_output_tokens: int = Field(DEFAULT_MIN_OUTPUT_TOKENS, ge=1)
    reserved_interactive_slots: int = Field(DEFAULT_RESERVED_INTERACTIVE_SLOTS, ge=0, le=100_000)
    admins: tuple[str, ...] = ()
    defaults: UserPolicy = UserPolicy()
    users: dict[str, UserPolicy] = Field(default_factory=dict)
    frontends: dict[str, Frontend] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Governed:
    """One user's effective policy: the store's limits, the queue's weight and bound."""

    limits: UserLimits
    weight: int
    max_queued: int | None
    priority: Priority = Priority.INTERACTIVE

    @property
    def budgeted(self) -> bool:
        """Whether any token window applies (then prompts are counted exactly)."""
        return bool(self.limits.token_windows)


def _resolve(defaults: UserPolicy, override: UserPolicy | None, *, batch: bool = False) -> Governed:
    """The effective policy; ``batch``: the operator's Jobs' user (batch unless named)."""
    merged = (
        defaults
        if override is None
        else defaults.model_copy(update=override.model_dump(exclude_none=True))
    )
    windows = tuple(
        TokenWindow(name, seconds, limit)
        for field, (name, seconds) in WINDOWS.items()
        if (limit := getattr(merged, field)) is not None
    )
    return Governed(
        limits=UserLimits(
            max_concurrent_requests=merged.max_concurrent_requests,
            requests_per_minute=merged.requests_per_minute,
            token_windows=windows,
        ),
        weight=merged.weight or 1,
        max_queued=merged.max_queued_requests,
        priority=Priority(_priority(defaults, override, batch=batch)),
    )


def _priority(defaults: UserPolicy, override: UserPolicy | None, *, batch: bool) -> str:
    """The user's own class, else batch for the operator's Jobs, else the default's."""
    if override is not None and override.priority is not None:
        return override.priority
    return "batch" if batch else defaults.priority or "interactive"


class Policy:
    """A validated policy with every user's effective limits resolved once."""

    def __init__(self, document: PolicyDocument) -> None:
        self.document = document
        self.min_output_tokens = document.min_output_tokens
        self.admins = frozenset(document.admins)
        self.reserved_interactive_slots = document.reserved_interactive_slots
        self._default = _resolve(document.defaults, None)
        self._users = {
            user: _resolve(document.defaults, override, batch=user == BENCH_USER)
            for user, override in document.users.items()
        }
        if BENCH_USER not in self._users:  # the operator's Jobs: batch unless named
            self._users[BENCH_USER] = _resolve(document.defaults, None, batch=True)

    def for_user(self, user: str) -> Governed:
        return self._users.get(user, self._default)

    def frontend(self, user: str) -> Frontend | None:
        """The front-end marking of key ``user`` (None: its requests name no one else)."""
        return self.document.frontends.get(user)

    @classmethod
    def parse(cls, text: str) -> Policy:
        """The policy in ``text`` (YAML or JSON); ValueError saying what is wrong."""
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"not valid YAML: {exc}") from exc
        if raw is None:  # "", only comments, ``null``: an emptied file is no policy
            raise ValueError(
                "the policy is empty (no YAML document, only comments, or null); "
                "write {} to mean no limits"
            )
        try:
            return cls(PolicyDocument.model_validate(raw))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'policy'}: {error['msg']}"
                for error in exc.errors()
            )
            raise ValueError(problems) from exc


UNGOVERNED = Policy(PolicyDocument())  # no policy configured: equal weights, no limits


class PolicySource:
    """The policy file, re-read when it changes; ``current()`` is the policy or the problem."""

    def __init__(
        self,
        path: Path,
        *,
        reload_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = path
        self._reload_interval = reload_interval
        self._clock = clock
        self._stamp: tuple[int, int, int] | None = None
        self._policy: Policy | None = None
        self._problem = "not read yet"
        self._checked_at = -float("inf")
        self.reloads = 0
        self.current()

    def current(self) -> Policy | str:
        """The last good policy, or (none ever loaded) why there is none."""
        now = self._clock()
        if now - self._checked_at >= self._reload_interval:
            self._checked_at = now
            self._reload()
        return self._policy if self._policy is not None else self._problem

    def _reload(self) -> None:
        try:
            stat = os.stat(self._path)  # follows the ConfigMap volume's symlinks
            stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if stamp == self._stamp:
                return
            if stat.st_size > MAX_POLICY_BYTES:
                raise ValueError(f"larger than {MAX_POLICY_BYTES} bytes")
            policy = Policy.parse(self._path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problem = f"governance policy {self._path} not loaded: {exc}"
            if problem != self._problem:
                kept = "keeping the last good policy" if self._policy else "refusing requests"
                logger.error("%s; %s", problem, kept)
            self._problem = problem
            return
        self._stamp, self._policy, self._problem = stamp, policy, ""
        self.reloads += 1
        logger.info(
            "governance policy loaded path=%s users=%s",
            self._path,
            ",".join(sorted(policy.document.users)) or "-",
        )
