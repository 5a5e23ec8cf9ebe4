"""Poll to a deadline: the one way tests and the dev cluster wait for things.

Fixed sleeps make tests slow when the machine is fast and flaky when it is slow;
polling a predicate until a generous deadline is neither.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sparkllm_dev.errors import WaitTimeoutError

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    *,
    timeout: float,
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Call ``predicate`` until it returns a truthy value; return that value.

    Raises WaitTimeoutError naming ``what`` (and the last exception, if the predicate raised)
    once ``timeout`` seconds have passed.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
        except Exception as exc:  # the predicate may fail while things settle
            last_error = exc
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise WaitTimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(interval)
