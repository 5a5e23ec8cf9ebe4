"""The operator-wide default governance store: the chart's ``governance.redis`` values.

Why: an administrator who runs one Redis for every InferenceCluster should not have to
repeat its address and password Secret in each spec (issue 17). The chart puts the values
in the operator's env (``SPARKLLM_GOVERNANCE_REDIS_*``, like ``SPARKLLM_IMAGE`` for the
gateway image); the operator reads them once at start and, for every InferenceCluster
whose ``spec.gateway.governanceStore.redis`` is unset, acts as if the spec named them —
the rendered gateway, and ``status.gateway`` (which then says Redis). The spec wins when
it names a store.

The password Secret is read by the gateway pod through ``secretKeyRef``, so it must exist
in each InferenceCluster's own namespace (a pod cannot read another namespace's Secret).

The default does not lift the API server's rule that ``gateway.replicas`` above 1 needs
``spec.gateway.governanceStore.redis``: the API server cannot see the chart, so a spec
asking for several replicas still names its store itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pydantic import ValidationError

from sparkllm.api import InferenceCluster
from sparkllm.api.governance_store import RedisPasswordReference, RedisStoreSpec
from sparkllm.errors import SparkllmError

ADDRESS_ENV: Final = "SPARKLLM_GOVERNANCE_REDIS_ADDRESS"
PASSWORD_SECRET_ENV: Final = "SPARKLLM_GOVERNANCE_REDIS_PASSWORD_SECRET"
PASSWORD_KEY_ENV: Final = "SPARKLLM_GOVERNANCE_REDIS_PASSWORD_KEY"
DATABASE_ENV: Final = "SPARKLLM_GOVERNANCE_REDIS_DATABASE"


def governance_default_from(environ: Mapping[str, str]) -> RedisStoreSpec | None:
    """The default store from the operator's env, or None when no address is set.

    Raises SparkllmError naming the variable when a value is not what the spec accepts
    (the chart's schema refuses the same values at ``helm install``).
    """
    address = environ.get(ADDRESS_ENV, "").strip()
    if not address:
        return None
    fields: dict[str, object] = {"address": address}
    secret = environ.get(PASSWORD_SECRET_ENV, "").strip()
    try:
        if secret:
            key = environ.get(PASSWORD_KEY_ENV, "").strip() or "password"
            fields["password_secret_ref"] = RedisPasswordReference(name=secret, key=key)
        database = environ.get(DATABASE_ENV, "").strip()
        if database:
            fields["database"] = int(database)
        return RedisStoreSpec.model_validate(fields)
    except (ValidationError, ValueError) as exc:
        names = f"{ADDRESS_ENV}, {PASSWORD_SECRET_ENV}, {PASSWORD_KEY_ENV}, {DATABASE_ENV}"
        message = f"the default governance store in the operator's env ({names}) is invalid"
        raise SparkllmError(f"{message}: {exc}") from exc


def with_governance_default(
    ic: InferenceCluster, default: RedisStoreSpec | None
) -> InferenceCluster:
    """``ic`` as the operator acts on it: the default store filled in when the spec names
    none; ``ic`` itself when there is no default or the spec names a store."""
    gateway = ic.spec.gateway
    if default is None or gateway.governance_store.redis is not None:
        return ic
    store = gateway.governance_store.model_copy(update={"redis": default})
    spec = ic.spec.model_copy(
        update={"gateway": gateway.model_copy(update={"governance_store": store})}
    )
    return ic.model_copy(update={"spec": spec})


__all__ = [
    "ADDRESS_ENV",
    "DATABASE_ENV",
    "PASSWORD_KEY_ENV",
    "PASSWORD_SECRET_ENV",
    "governance_default_from",
    "with_governance_default",
]
