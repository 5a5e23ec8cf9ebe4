"""The release notes and the operator agree on which versions carry security fixes.

Why: ``UpdatePending`` tells a user to apply an operator update at once only for a version
in ``SECURITY_FIXES``; the release notes are where an administrator reads the same. A fix
named in one and not the other would either page nobody or alarm everybody.
"""

from __future__ import annotations

import re
from pathlib import Path

from sparkllm.reconcile.decide.upgrade import SECURITY_FIXES

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
SECURITY_HEADING = "### Security fixes (apply now)"


def security_fixes(text: str) -> dict[str, str]:
    """{version: what} from each release's "Security fixes (apply now)" list."""
    fixes: dict[str, list[str]] = {}
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        version = section.split(maxsplit=1)[0]
        if SECURITY_HEADING not in section:
            continue
        body = section.split(SECURITY_HEADING, 1)[1].split("\n### ", 1)[0]
        items = [line[2:].strip() for line in body.splitlines() if line.startswith("- ")]
        if items:
            fixes[version] = items
    return {version: "; ".join(items) for version, items in fixes.items()}


def test_every_release_lists_its_security_fixes_as_the_operator_does() -> None:
    assert security_fixes(CHANGELOG.read_text()) == dict(SECURITY_FIXES)


def test_the_parser_reads_a_listed_fix() -> None:
    text = "## 0.2.0\n\n### Security fixes (apply now)\n\n- the init container ran as root\n"
    assert security_fixes(text) == {"0.2.0": "the init container ran as root"}
    assert security_fixes("## 0.1.0\n\n### Security fixes (apply now)\n\nNone.\n") == {}


def test_the_current_version_has_release_notes() -> None:
    import importlib.metadata

    version = importlib.metadata.version("sparkllm")
    assert f"\n## {version}\n" in CHANGELOG.read_text()
