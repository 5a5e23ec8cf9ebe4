"""The operator-wide default governance store: the chart's ``governance.redis`` values.

Why: an administrator who runs one Redis for every InferenceCluster should not have to
repeat its address and password Secret in each spec (issue 17). The chart puts the values
in the operator's env (``SPARKLLM_GOVERNANCE_REDIS_*``, like ``SPARKLLM_IMAGE`` for the
gateway image); the operator reads them once at start and hands them to ``decide`` with
its other settings. For every InferenceCluster whose ``spec.gateway.governanceStore.redis``
is unset, decide acts as if the spec named them — the rendered gateway, and
``status.gateway`` (which then says Redis, from the operator's default). The spec wins
when it names a store. ``sparkllm render`` takes the same values as flags and calls the
same decide, so it prints what the operator applies; ``sparkllm usage`` reads the same
env when it runs where the operator does.

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
from sparkllm.api.validate import describe_errors
from sparkllm.errors import SparkllmError

ADDRESS_ENV: Final = "SPARKLLM_GOVERNANCE_REDIS_ADDRESS"
PASSWORD_SECRET_ENV: Final = "SPARKLLM_GOVERNANCE_REDIS_PASSWORD_SECRET"
PASSWORD_KEY_ENV: Final = "SPARKLLM_GOVERNANCE_REDIS_PASSWORD_KEY"
DATABASE_ENV: Final = "SPARKLLM_GOVERNANCE_REDIS_DATABASE"
ENV_NAMES: Final = (ADDRESS_ENV, PASSWORD_SECRET_ENV, PASSWORD_KEY_ENV, DATABASE_ENV)


def governance_default(
    values: Mapping[str, str], *, names: tuple[str, str, str, str], where: str
) -> RedisStoreSpec | None:
    """The default store from ``values`` keyed by ``names`` (address, password Secret,
    its key, database), or None when the address is empty.

    Raises SparkllmError naming ``where`` and the names when a value is not what the spec
    accepts (the chart's schema refuses the same values at ``helm install``).
    """
    address_name, secret_name, key_name, database_name = names
    address = values.get(address_name, "").strip()
    if not address:
        return None
    fields: dict[str, object] = {"address": address}
    secret = values.get(secret_name, "").strip()
    try:
        if secret:
            key = values.get(key_name, "").strip() or "password"
            fields["password_secret_ref"] = RedisPasswordReference(name=secret, key=key)
        database = values.get(database_name, "").strip()
        if database:
            if not database.isdigit():
                raise ValueError(f"database: {database!r} is not a number (0, 1, ...)")
            fields["database"] = int(database)
        return RedisStoreSpec.model_validate(fields)
    except (ValidationError, ValueError) as exc:
        message = f"the default governance store {where} ({', '.join(names)}) is invalid"
        detail = describe_errors(exc) if isinstance(exc, ValidationError) else str(exc)
        raise SparkllmError(f"{message}: {detail}") from exc


def governance_default_from(environ: Mapping[str, str]) -> RedisStoreSpec | None:
    """The default store from the operator's env, or None when no address is set."""
    return governance_default(environ, names=ENV_NAMES, where="in the operator's env")


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
    "ENV_NAMES",
    "PASSWORD_KEY_ENV",
    "PASSWORD_SECRET_ENV",
    "governance_default",
    "governance_default_from",
    "with_governance_default",
]
