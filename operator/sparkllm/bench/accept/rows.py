"""One row of the acceptance report: an item, its verdict, its basis and why.

Why a row type of its own: the documents' acceptance is a checklist ("not just HTTP
200"), and a platform engineer hands its report to a team. Every item therefore says
what it was measured on (``basis``) and, when it did not pass, why (``detail``). The
third verdict, ``not measured``, exists so that a check without its data source (no
Prometheus, no cluster status) can never read as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from sparkllm.errors import SpecError

SECTIONS: Final = ("functional", "stress", "soak", "regression", "resources")
"""The checklist's sections, in the order they run."""
Verdict = Literal["pass", "fail", "not measured"]
PASS: Final = "pass"
FAIL: Final = "fail"
NOT_MEASURED: Final = "not measured"


def parse_sections(text: str) -> tuple[str, ...]:
    """Comma-separated section names as given; SpecError naming unknown ones."""
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        raise SpecError(f"unknown section(s) {unknown}; known: {', '.join(SECTIONS)}")
    return chosen


def verdict(ok: bool) -> Verdict:
    """``pass`` or ``fail``."""
    return "pass" if ok else "fail"


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One checklist item's outcome."""

    section: str
    """functional, stress, soak, regression or resources."""
    name: str
    verdict: Verdict
    basis: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "name": self.name,
            "verdict": self.verdict,
            "basis": self.basis,
            "detail": self.detail,
        }
