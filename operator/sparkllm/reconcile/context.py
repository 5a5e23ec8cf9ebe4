"""The operator's runtime state, handed to every kopf handler as ``memo``.

One KubeAPI client, one reconciler, one coalescer, and the small index that turns a
node event into the InferenceClusters it concerns (those whose replicas run on the
node, and those waiting for nodes to place a replica). Node events come with every
heartbeat; only a change in what the operator reads (readiness, address, labels)
triggers passes. Nodes are shared: when an InferenceCluster releases nodes (scaled down,
deleted), the ones waiting for a node group get a pass at once.

A pass never crash-loops on a bad spec: decide turns a ``SpecError`` into an InvalidSpec
status and Event, and should one escape anyway it is logged as one line (no traceback)
and not retried on a timer — the object's next change brings the next pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sparkllm.api import Reason
from sparkllm.api.admin_policy import AdminPolicy
from sparkllm.api.governance_store import RedisStoreSpec
from sparkllm.errors import ClusterAPIError, SpecError
from sparkllm.kube.client import KubeAPI, load_configuration
from sparkllm.kube.kinds import INFERENCE_CLUSTER
from sparkllm.reconcile import metrics
from sparkllm.reconcile.crd_check import check_installed_crd
from sparkllm.reconcile.decide.actions import PendingEvent
from sparkllm.reconcile.decide.upgrade import DEFAULT_UPGRADE, UpgradeSettings
from sparkllm.reconcile.events import event_manifest
from sparkllm.reconcile.reconciler import ClusterReconciler, Key, PassOutcome
from sparkllm.reconcile.triggers import Coalescer
from sparkllm.render.placement import NodeFacts
from sparkllm.render.product_image import DEFAULT_PRODUCT_IMAGE, ProductImage

logger = logging.getLogger("sparkllm.reconcile")


@dataclass
class OperatorContext:
    """Shared by all handlers (kopf copies memo shallowly: the members are shared)."""

    kubeconfig: str | None = None
    resync_seconds: float = 60.0
    governance_default: RedisStoreSpec | None = None  # the chart's governance.redis
    admin_policy: AdminPolicy | None = None  # the chart's policy
    product_image: ProductImage = DEFAULT_PRODUCT_IMAGE  # the chart's image, pull secrets
    upgrade: UpgradeSettings = DEFAULT_UPGRADE  # the chart's upgrade.applyOperatorChanges
    _runtime: dict[str, object] = field(default_factory=dict)
    _node_users: dict[str, set[Key]] = field(default_factory=dict)
    _waiting: set[Key] = field(default_factory=set)
    _node_facts: dict[str, NodeFacts] = field(default_factory=dict)
    known: set[Key] = field(default_factory=set)
    crd_problem: str | None = None  # the installed CRD is older than this operator
    _crd_warned: set[Key] = field(default_factory=set)  # objects told so (an Event each)

    async def start(self) -> None:
        api = KubeAPI(load_configuration(self.kubeconfig))
        try:
            self.crd_problem = await check_installed_crd(api)
        except ClusterAPIError as exc:  # not fatal: the CRD is checked, not needed, here
            logger.warning("could not read the installed CRD to compare its schema: %s", exc)
        reconciler = ClusterReconciler(
            api,
            gateway_image=self.product_image,
            governance_default=self.governance_default,
            admin_policy=self.admin_policy,
            upgrade=self.upgrade,
        )
        self._runtime["api"] = api
        self._runtime["reconciler"] = reconciler
        self._runtime["coalescer"] = Coalescer(action=self._pass)
        self._runtime["resync"] = asyncio.get_running_loop().create_task(self._resync())

    async def _resync(self) -> None:
        """Safety net: a pass per known cluster every ``resync_seconds`` (reads only)."""
        while True:
            await asyncio.sleep(self.resync_seconds)
            for key in list(self.known):
                self.trigger(key)

    async def stop(self) -> None:
        resync = self._runtime.get("resync")
        if isinstance(resync, asyncio.Task):
            resync.cancel()
        api = self._runtime.get("api")
        if isinstance(api, KubeAPI):
            await api.aclose()

    @property
    def coalescer(self) -> Coalescer:
        value = self._runtime["coalescer"]
        assert isinstance(value, Coalescer)
        return value

    @property
    def reconciler(self) -> ClusterReconciler:
        value = self._runtime["reconciler"]
        assert isinstance(value, ClusterReconciler)
        return value

    async def _pass(self, key: Key) -> None:
        started = time.monotonic()
        try:
            outcome: PassOutcome = await self.reconciler.reconcile(key)
        except Exception as exc:
            metrics.RECONCILE_SECONDS.labels(result="error").observe(time.monotonic() - started)
            metrics.RECONCILE_ERRORS.labels(error=type(exc).__name__).inc()
            if isinstance(exc, SpecError):  # the user's to fix: retried when it changes
                logger.warning("reconcile of %s/%s refused: %s", *key, exc)
                return
            raise
        elapsed = time.monotonic() - started
        metrics.RECONCILE_SECONDS.labels(result="ok").observe(elapsed)
        # The next pass the object asked for, said on the same line: an object that is not
        # waiting for anything (Ready, or a spec only its owner can fix) must say none.
        later = outcome.retry_after
        then = "" if later is None else f"; next pass in {max(later, 0.05):.1f} s"
        logger.info("reconciled %s/%s in %.3f s%s", *key, elapsed, then)
        self._record_nodes(key, outcome.nodes)
        if self.crd_problem is not None and key not in self._crd_warned:
            await self._warn_crd(key)
        if outcome.waiting_for_nodes:
            self._waiting.add(key)
        else:
            self._waiting.discard(key)
        if later is not None:
            self.coalescer.trigger_later(key, max(later, 0.05))

    async def _warn_crd(self, key: Key) -> None:
        """The CRDOutdated Warning on ``key``, once per operator start. The CRD is read
        again first: one upgraded since the start (as the Event tells the user to) is
        no longer reported, and the metric drops to 0, without restarting the operator."""
        api = self._runtime["api"]
        assert isinstance(api, KubeAPI)
        try:
            self.crd_problem = await check_installed_crd(api)
        except ClusterAPIError as exc:  # keep the last answer
            logger.warning("could not read the installed CRD to compare its schema: %s", exc)
        obj = await api.get(INFERENCE_CLUSTER, key[1], key[0])
        if obj is None or self.crd_problem is None:
            return
        event = PendingEvent(True, Reason.CRD_OUTDATED, self.crd_problem)
        await api.create(event_manifest(obj, event, now=datetime.now(UTC)))
        self._crd_warned.add(key)

    def _record_nodes(self, key: Key, nodes: set[str]) -> None:
        """Remember the nodes ``key`` uses; nodes it released may place a waiting object."""
        released = False
        for node, users in self._node_users.items():
            if key in users and node not in nodes:
                users.discard(key)
                released = True
        for node in nodes:
            self._node_users.setdefault(node, set()).add(key)
        if released:
            self._trigger_waiting(but=key)

    def _trigger_waiting(self, *, but: Key | None = None) -> None:
        for waiting in self._waiting - {but}:
            self.trigger(waiting)

    async def reconcile_now(self, key: Key) -> None:
        await self.coalescer.run(key)

    def trigger(self, key: Key) -> None:
        if "coalescer" in self._runtime:
            self.coalescer.trigger(key)

    def forget(self, key: Key) -> None:
        self.known.discard(key)
        self._waiting.discard(key)
        self._record_nodes(key, set())
        if "coalescer" in self._runtime:
            self.coalescer.forget(key)

    def node_changed(self, name: str, facts: NodeFacts | None) -> None:
        """Trigger the clusters a node change concerns; ignore heartbeat-only updates."""
        before = self._node_facts.get(name)
        if facts is None:
            self._node_facts.pop(name, None)
        else:
            self._node_facts[name] = facts
        if before == facts:
            return
        for key in self._node_users.get(name, set()) | self._waiting:
            self.trigger(key)
