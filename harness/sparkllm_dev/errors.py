"""The harness's own errors, under sparkllm's one hierarchy.

Why a module of its own: the product's ``sparkllm.errors`` names only what the operator and
the gateway raise; the dev cluster, the simulator and the demo live in this package, which
the image never contains, so their errors live here too. They subclass
``sparkllm.errors.SparkllmError`` so a caller handling sparkllm's vocabulary handles them::

    SparkllmError                (sparkllm.errors)
    └── DevClusterError          the local control plane cannot be built, started or reached
        └── WaitTimeoutError     (devcluster.wait) a polled condition missed its deadline
"""

from __future__ import annotations

from sparkllm.errors import SparkllmError


class DevClusterError(SparkllmError):
    """The local development control plane failed to build, start, or answer."""


class WaitTimeoutError(DevClusterError):
    """A condition did not become true before its deadline."""
