"""The one exception hierarchy of sparkllm.

Lower-level errors (kubernetes ApiException, httpx errors, OSError) are translated at
the module that meets them and re-raised as one of these with ``from exc``, so callers
handle sparkllm's own vocabulary and never a library's::

    SparkllmError
    ├── SpecError              an InferenceCluster spec that cannot work (user must fix)
    ├── PlacementError         the nodes a spec names are missing or not usable
    ├── ClusterAPIError        the Kubernetes API refused or failed a request
    │   └── ConflictError      optimistic-concurrency conflict: retry with fresh state
    └── GatewayError           the admission layer cannot serve (bad config, no upstream)
        └── GovernanceStoreError  the shared governance store (Redis) cannot answer
"""


class SparkllmError(Exception):
    """Base of every error sparkllm raises on purpose."""


class SpecError(SparkllmError):
    """The spec is invalid or cannot be realised; the message names the field."""


class PlacementError(SparkllmError):
    """Nodes named by the placement are missing, duplicated or not schedulable."""


class ClusterAPIError(SparkllmError):
    """The Kubernetes API failed a request (after translation from the client's error)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ConflictError(ClusterAPIError):
    """A write lost an optimistic-concurrency race (HTTP 409); retry on fresh state."""


class GatewayError(SparkllmError):
    """The admission layer is misconfigured or its upstream is unusable."""


class GovernanceStoreError(GatewayError):
    """The shared governance store cannot answer: no budget can be checked (503)."""
