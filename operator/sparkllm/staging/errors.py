"""The one error a stage ends with: a reason from the enum and one line for a person.

Lower-level errors (httpx's, minio's, huggingface_hub's, OSError) are translated where
they are met (``http_fetch``, ``s3``, ``hub``) and re-raised as :class:`StageError` with
``from exc``; ``sparkllm stage-model`` prints ``stage-model: failed: <Reason>: <message>``
and exits 1.
"""

from __future__ import annotations

import errno

from sparkllm.errors import SparkllmError
from sparkllm.staging.plan import StageReason


class StageError(SparkllmError):
    """A stage failed for ``reason``; the message names the file or source."""

    def __init__(self, reason: StageReason, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.detail = message


def from_os_error(exc: OSError, *, what: str) -> StageError:
    """ENOSPC/EDQUOT are DiskFull; any other local I/O error is named as it is."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StageError(StageReason.DISK_FULL, f"{what}: no space left on the device")
    return StageError(StageReason.INVALID_SOURCE, f"{what}: {exc}")


def from_http_status(status: int, *, what: str) -> StageError:
    """401/403 Unauthorized, 404/410 NotFound, anything else InvalidSource."""
    if status in (401, 403):
        return StageError(StageReason.UNAUTHORIZED, f"{what}: HTTP {status}")
    if status in (404, 410):
        return StageError(StageReason.NOT_FOUND, f"{what}: HTTP {status}")
    return StageError(StageReason.INVALID_SOURCE, f"{what}: HTTP {status}")
