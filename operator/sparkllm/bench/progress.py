"""A plain-text progress bar on stderr, without extra dependencies.

Why stderr: stdout carries the results (the Markdown summary), so it can be piped or
redirected while the bar stays on the terminal. On a terminal the bar redraws one line
(carriage return); into a log file or a pod's output it prints a line at every tenth
of the scenario instead, so logs stay short and readable.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

BAR_WIDTH = 24


class ProgressBar:
    """Progress of one scenario: requests done out of total, errors, elapsed time."""

    def __init__(
        self,
        *,
        label: str,
        total: int,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._label, self._total = label, max(total, 1)
        self._out = out if out is not None else sys.stderr
        self._clock = clock
        self._started = clock()
        self._interactive = bool(getattr(self._out, "isatty", lambda: False)())
        self._printed_tenths = -1
        self.done = self.errors = 0

    def line(self) -> str:
        filled = BAR_WIDTH * self.done // self._total
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        return (
            f"[bench] {self._label:<9} [{bar}] {self.done}/{self._total} "
            f"errors {self.errors} {self._clock() - self._started:.1f}s"
        )

    def advance(self, *, failed: bool) -> None:
        self.update(done=self.done + 1, errors=self.errors + int(failed))

    def update(self, *, done: int, errors: int) -> None:
        """Set the counts (e.g. seconds of a timed run) and redraw as ``advance`` does."""
        self.done, self.errors = min(done, self._total), errors
        if self._interactive:
            self._out.write("\r" + self.line())
            self._out.flush()
            return
        tenths = 10 * self.done // self._total
        if tenths > self._printed_tenths:
            self._printed_tenths = tenths
            print(self.line(), file=self._out, flush=True)

    def close(self) -> None:
        if self._interactive:
            self._out.write("\n")
            self._out.flush()
