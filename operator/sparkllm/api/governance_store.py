"""``spec.gateway``: how many gateway replicas run, and where their governance state lives.

Per-user governance (budgets, requests per minute, requests in progress, the usage
ledger) and ``admission.maxConcurrentRequests`` are state. One gateway replica can keep
it in its own process — the default, and what status and docs say it is: lost on a
restart, not shared. Two or more replicas can only keep those promises with a shared
store: each replica alone would let a user spend each budget once per replica and let
``maxConcurrentRequests`` through per replica. So more than one replica requires a
Redis, and the API server refuses the spec otherwise (a CEL rule, below) — a refusal at
``kubectl apply`` rather than limits that silently stop holding.

The Redis is the user's (any Redis 6.2+ reachable from the gateway pods, one endpoint:
a standalone server or a Sentinel-managed primary's Service); its password comes from a
Secret key, read by the pod through ``secretKeyRef``, never copied into the spec.
"""

from typing import Annotated, Any, Final, Literal

from pydantic import Field, StringConstraints

from sparkllm.api.common import ConfigKey, SecretKeyReference
from sparkllm.api.rules import ApiModel, Rule

MAX_GATEWAY_REPLICAS: Final = 16
# host (DNS name, IPv4) or [IPv6], optionally :port — what gateway/governance parses.
REDIS_ADDRESS_PATTERN: Final = (
    r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?)(:[0-9]{1,5})?$"
)
RedisAddress = Annotated[
    str, StringConstraints(min_length=1, max_length=263, pattern=REDIS_ADDRESS_PATTERN)
]


class RedisPasswordReference(SecretKeyReference):
    """The Secret key holding the Redis password, in the InferenceCluster's namespace."""

    key: ConfigKey = Field(
        default="password",
        description="key is the Secret data key holding the password. Default password; "
        "at most 253 characters of [-._a-zA-Z0-9].",
    )


class RedisStoreSpec(ApiModel):
    """A Redis the gateway replicas share for governance state."""

    address: RedisAddress = Field(
        description="address is the Redis endpoint as host or host:port (port default "
        "6379), e.g. redis.governance.svc:6379; an IPv6 address in brackets. Required. "
        "One endpoint (standalone or a Sentinel-managed primary); Redis Cluster is not "
        "supported."
    )
    password_secret_ref: RedisPasswordReference | None = Field(
        default=None,
        description="passwordSecretRef names the Secret key with the Redis password "
        "(AUTH). Optional: unset, the gateway connects without a password — only for a "
        "Redis no one else can reach. The Secret must carry the label "
        "sparkllm.io/secret-use=governance-redis-password (otherwise the InferenceCluster "
        "is InvalidSpec): the gateway sends the value to address.",
    )
    database: int = Field(
        default=0,
        ge=0,
        le=255,
        description="database is the Redis database number. Default 0; 0 to 255. Keys "
        "are prefixed with the InferenceCluster's namespace and name, so several "
        "InferenceClusters may share one database.",
    )


class GovernanceStoreSpec(ApiModel):
    """Where per-user governance state and the usage ledger live."""

    redis: RedisStoreSpec | None = Field(
        default=None,
        description="redis is a shared Redis: budgets, the ledger and the global in-flight "
        "bound hold across gateway replicas and survive a gateway restart. Optional; "
        "unset, the state is in the gateway process — lost on restart, one replica only.",
    )


def _replicas_share_a_store(gateway: "GatewaySpec") -> bool:
    return gateway.replicas == 1 or gateway.governance_store.redis is not None


class GatewaySpec(ApiModel):
    """The front door's deployment: its replicas and the governance state they share."""

    cel_rules = (
        Rule(
            cel="!has(self.replicas) || self.replicas == 1 || "
            "(has(self.governanceStore) && has(self.governanceStore.redis))",
            message="gateway.replicas above 1 needs gateway.governanceStore.redis: per-user "
            "budgets, the usage ledger and admission.maxConcurrentRequests hold across "
            "replicas only in a shared store",
            check=_replicas_share_a_store,
            field_path=".replicas",
        ),
    )

    replicas: int = Field(
        default=1,
        ge=1,
        le=MAX_GATEWAY_REPLICAS,
        description="replicas is the number of gateway pods behind the front-door Service. "
        f"Default 1; 1 to {MAX_GATEWAY_REPLICAS}; above 1 only with "
        "governanceStore.redis. The in-flight total across them never exceeds "
        "admission.maxConcurrentRequests.",
    )
    governance_store: GovernanceStoreSpec = Field(
        default=GovernanceStoreSpec(),
        description="governanceStore is where per-user governance state lives. Default: in "
        "the gateway process.",
    )


class GatewayStatus(ApiModel):
    """Where the gateway's governance state lives, as status says it."""

    replicas: int = Field(ge=1, description="replicas is spec.gateway.replicas, as rendered.")
    governance_store: Literal["InProcess", "Redis"] = Field(
        description="governanceStore is where budgets and the usage ledger live: InProcess "
        "(the gateway's memory) or Redis (spec.gateway.governanceStore.redis, or the "
        "operator's default store)."
    )
    store_source: Literal["Spec", "OperatorDefault"] | None = Field(
        default=None,
        description="storeSource says who named the Redis: Spec "
        "(spec.gateway.governanceStore.redis) or OperatorDefault (the operator's default "
        "store, the chart value governance.redis, used because the spec names none). "
        "Unset with InProcess.",
    )
    message: Annotated[str, StringConstraints(max_length=1024)] = Field(
        description="message says what that means for budgets and the ledger."
    )


def gateway_status(gateway: GatewaySpec, *, from_default: bool = False) -> dict[str, Any]:
    """``status.gateway`` for ``gateway`` (as the operator acts on it: with its default
    store filled in, ``from_default`` then True): where governance state lives, said
    plainly, and who named the store."""
    redis = gateway.governance_store.redis
    if redis is None:
        message = (
            "governance state in the gateway process: budgets and the usage ledger are lost "
            "when the gateway restarts (set spec.gateway.governanceStore.redis, or the "
            "operator's default store, chart value governance.redis, to keep them)"
        )
        return {"replicas": gateway.replicas, "governanceStore": "InProcess", "message": message}
    named = (
        "the operator's default store (chart value governance.redis), as the spec names none"
        if from_default
        else "spec.gateway.governanceStore.redis"
    )
    message = (
        f"governance state in Redis at {redis.address}, from {named}: budgets and the usage "
        f"ledger are shared by the {gateway.replicas} gateway replica(s) and survive restarts"
    )
    return {
        "replicas": gateway.replicas,
        "governanceStore": "Redis",
        "storeSource": "OperatorDefault" if from_default else "Spec",
        "message": message,
    }


__all__ = [
    "MAX_GATEWAY_REPLICAS",
    "GatewaySpec",
    "GatewayStatus",
    "GovernanceStoreSpec",
    "RedisPasswordReference",
    "RedisStoreSpec",
    "gateway_status",
]
