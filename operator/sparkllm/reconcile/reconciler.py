"""One level-based reconcile pass of an InferenceCluster: observe, decide, execute.

The same pass runs for every trigger — operator start, create, spec change, a rank pod
or node changing, a timer — and reads everything fresh, so it converges from any state,
including a half-finished restart left by an operator that died. It is three steps:
``observation.observe`` reads everything the pass needs, ``decide.decide`` (pure)
returns the plan of every write, and ``execute.execute`` makes them. A pass with nothing
to do plans, and so makes, no write. This module holds what lives between passes: the
API client, the engine readers (whose ``/get_server_info`` replies are cached per
restart generation), the clock, and the operator's settings decide is given: the
gateway image and the default governance store (the chart's ``governance.redis``); and
the administrator's policy (the chart's ``policy``), which observe checks first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from sparkllm.api.admin_policy import AdminPolicy
from sparkllm.api.governance_store import RedisStoreSpec
from sparkllm.errors import ClusterAPIError
from sparkllm.kube.client import KubeAPI
from sparkllm.kube.kinds import kind_of
from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.observation import Key
from sparkllm.reconcile.decide.upgrade import DEFAULT_UPGRADE, UpgradeSettings
from sparkllm.reconcile.engines import ConfigProbe, Engines, RunningRequests
from sparkllm.reconcile.execute import execute
from sparkllm.reconcile.observe import observe
from sparkllm.render.product_image import DEFAULT_PRODUCT_IMAGE, ProductImage

HTTP_UNPROCESSABLE = 422  # the API server's "Invalid": the object itself is refused


def utcnow() -> datetime:
    """Now, in UTC, to the millisecond (restart times and backoffs need sub-second care)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


@dataclass
class PassOutcome:
    """What the pass wants from its caller: when to look again, which nodes it uses."""

    retry_after: float | None = None
    nodes: set[str] = field(default_factory=set)
    waiting_for_nodes: bool = False


class ClusterReconciler:
    """Reconcile InferenceClusters through one KubeAPI."""

    def __init__(
        self,
        api: KubeAPI,
        *,
        gateway_image: ProductImage = DEFAULT_PRODUCT_IMAGE,
        governance_default: RedisStoreSpec | None = None,
        admin_policy: AdminPolicy | None = None,
        clock: Callable[[], datetime] = utcnow,
        upgrade: UpgradeSettings = DEFAULT_UPGRADE,
    ) -> None:
        self.api = api
        self.gateway_image = gateway_image
        self.governance_default = governance_default
        self.admin_policy = admin_policy
        self.upgrade = upgrade
        self.clock = clock
        self.config_probe = ConfigProbe()
        self.running_requests = RunningRequests()

    async def reconcile(self, key: Key) -> PassOutcome:
        engines = Engines(config_probe=self.config_probe, running_requests=self.running_requests)
        observation = await observe(
            self.api, key, engines=engines, clock=self.clock, policy=self.admin_policy
        )
        plan = decide(
            observation,
            gateway_image=self.gateway_image,
            governance_default=self.governance_default,
            upgrade=self.upgrade,
        )
        try:
            await execute(self.api, plan, clock=self.clock)
        except ClusterAPIError as exc:
            if exc.status != HTTP_UNPROCESSABLE:
                raise
            # The API server refused an object rendered from a spec it accepted: the spec
            # cannot be applied, so say so in status (InvalidSpec, one Warning Event)
            # rather than retry the same write every few seconds (issue 25).
            message = f"the API server refused an object made from this spec: {exc}"
            refused = replace(observation, ic=None, spec_error=message)
            await execute(
                self.api, decide(refused, gateway_image=self.gateway_image), clock=self.clock
            )
            return PassOutcome()
        return PassOutcome(
            retry_after=plan.retry_after,
            nodes=set(plan.nodes),
            waiting_for_nodes=plan.waiting_for_nodes,
        )


__all__ = ["ClusterReconciler", "Key", "PassOutcome", "kind_of"]
