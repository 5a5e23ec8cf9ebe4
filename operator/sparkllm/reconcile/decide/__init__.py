"""The decide step of a pass: an observation in, the plan of every write out. Pure.

A package that imports nothing doing I/O — no Kubernetes client, no kopf, no HTTP, no
sockets, no metrics, no clock, no randomness — and none of the steps around it (observe,
execute); the import-linter contracts in pyproject.toml hold that line. Its input is
``observation.Observation`` (what observe read), its output ``actions.Plan`` (what execute
writes); ``cluster.decide`` is the one entry point.
"""

from sparkllm.reconcile.decide.cluster import decide

__all__ = ["decide"]
