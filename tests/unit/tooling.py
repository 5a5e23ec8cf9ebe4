"""What a test needs from outside Python: a tool on PATH or a directory a set-up step fills.

The set-up (`make test` runs hack/setup-test-tools.sh and hack/fetch-kube-schemas.sh)
installs and downloads; tests never do. When something is missing a test skips locally,
saying how to get it, and fails under CI, where a skip would hide a broken set-up.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sparkllm_dev.ci import unavailable

SETUP = "run `bash hack/setup-test-tools.sh` (`make test` does)"


def on_path(name: str) -> str:
    """The executable ``name`` on PATH (e.g. promtool), or skip/fail."""
    return shutil.which(name) or unavailable(f"{name} missing: {SETUP}")


def filled(path: Path, *, marker: str, how: str = SETUP) -> Path:
    """``path`` once its set-up step finished (``marker`` inside it exists), or skip/fail."""
    if (path / marker).is_file():
        return path
    return unavailable(f"nothing at {path} yet: {how}")
