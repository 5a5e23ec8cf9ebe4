"""Is this CI? The one answer, and what a missing tool means there.

Why one place: the rule "a missing binary may skip locally and must fail under CI=true"
(the project's testing rule) was written six times, with two spellings of the check
(``CI == "true"`` and ``CI in {1, true, yes}``); a test that skips in CI is a test that
does not run. Every fixture and test that needs something a set-up step provides asks
here. The product has no use for it: only the harness and the tests import it.
"""

from __future__ import annotations

import os
from typing import NoReturn


def in_ci() -> bool:
    """Whether this run is CI's (``CI`` set to 1, true or yes, as CI systems set it)."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def unavailable(message: str) -> NoReturn:
    """Skip (locally) or fail (CI) the current test, saying what is missing and how to get it."""
    import pytest  # only tests call this: the harness's runtime does not need pytest

    if in_ci():
        pytest.fail(message)
    pytest.skip(message)
