"""What both ``sparkllm bench`` modes do at their edges: read the key, write a report.

Why shared: the matrix and the checklist take the API key the same way (from the variable
named with ``--api-key-env``, never from an argument) and write their reports the same way
(an unwritable path is a SparkllmError naming it).
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkllm.errors import SparkllmError


def api_key(variable: str | None) -> str | None:
    """The key in ``variable`` (None without one); SparkllmError when it is unset."""
    if variable is None:
        return None
    value = os.environ.get(variable)
    if not value:
        raise SparkllmError(f"environment variable {variable} (--api-key-env) is not set")
    return value


def write(path: Path | None, text: str) -> None:
    """Write ``text`` to ``path`` when one is given."""
    if path is None:
        return
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SparkllmError(f"cannot write {path}: {exc.strerror or exc}") from exc
