"""Secret references stay in their lane: a spec may name only Secrets marked for that use.

Why: the operator's ServiceAccount can read every Secret in the namespace, and some
references hand a Secret's value to somewhere the spec's author controls (issue 25):

- ``spec.engine.apiKeySecretRef``: the value becomes rank 0's key (a pod running the
  spec's image reads it) and the router sends it as a Bearer token to those pods;
- ``spec.gateway.governanceStore.redis.passwordSecretRef``: the gateway sends the value
  as Redis AUTH to ``address``, which the spec chooses.

Named freely, either would turn "may create an InferenceCluster" into "may read any Secret
of the namespace" (another app's database password, say). So such a Secret must carry the
label ``sparkllm.io/secret-use`` with the use it is meant for (``engine-api-key``,
``governance-redis-password``): the Secret's owner opts in, and one Secret serves one
use. Anything else is refused before any value is read: the InferenceCluster is
InvalidSpec (Ready=False, one Warning Event) with a message naming the field and the
label to set. A Secret that does not exist yet is not judged here (it has no owner to
ask; the pass reports it missing as before). The operator's own generated engine key is
not a reference and is exempt.

Not laned, and why: ``spec.admission.apiKeysSecretRef`` is mounted only into the gateway
(the operator's image), whose values it compares and never sends anywhere; the TLS
Secrets (``spec.exposure``) are served by the gateway or the ingress controller, their
private keys never leave those pods. (docs/security.md, docs/api.md "Secret references".)

Pure: the reads are the observe step's (``reconcile/reads.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from sparkllm.api.spec import InferenceClusterSpec
from sparkllm.keys import SECRET_USE_LABEL


class SecretUse(enum.StrEnum):
    """The uses a Secret may be marked for (the label's values)."""

    ENGINE_API_KEY = "engine-api-key"
    GOVERNANCE_REDIS_PASSWORD = "governance-redis-password"


# Where each use's value goes: the message says why the label is asked for.
_DESTINATIONS: Final = {
    SecretUse.ENGINE_API_KEY: "rank 0 (the spec's image) and the router's requests to it",
    SecretUse.GOVERNANCE_REDIS_PASSWORD: "the Redis address the spec names",
}


@dataclass(frozen=True, slots=True)
class SecretReference:
    """One laned Secret reference of a spec."""

    field: str
    """The spec path, e.g. ``spec.engine.apiKeySecretRef``."""
    name: str
    use: SecretUse


def laned_references(spec: InferenceClusterSpec) -> tuple[SecretReference, ...]:
    """The spec's references that hand a Secret's value on (see the module docstring)."""
    refs: list[SecretReference] = []
    engine = spec.engine.api_key_secret_ref
    if engine is not None:
        refs.append(
            SecretReference("spec.engine.apiKeySecretRef", engine.name, SecretUse.ENGINE_API_KEY)
        )
    redis = spec.gateway.governance_store.redis
    if redis is not None and redis.password_secret_ref is not None:
        refs.append(
            SecretReference(
                "spec.gateway.governanceStore.redis.passwordSecretRef",
                redis.password_secret_ref.name,
                SecretUse.GOVERNANCE_REDIS_PASSWORD,
            )
        )
    return tuple(refs)


def lane_problem(ref: SecretReference, labels: Mapping[str, str] | None) -> str | None:
    """Why the Secret (its ``labels``; None: it does not exist) may not be used, or None."""
    if labels is None or labels.get(SECRET_USE_LABEL) == ref.use:
        return None
    found = labels.get(SECRET_USE_LABEL)
    marked = "is not marked" if found is None else f"is marked for {found!r}, not"
    return (
        f"{ref.field}: Secret {ref.name} {marked} for use as {ref.use.value}: its value "
        f"would go to {_DESTINATIONS[ref.use]}; if it is meant for that, label it "
        f"{SECRET_USE_LABEL}={ref.use.value}"
    )


__all__ = [
    "SECRET_USE_LABEL",
    "SecretReference",
    "SecretUse",
    "lane_problem",
    "laned_references",
]
