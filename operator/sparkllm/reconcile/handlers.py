"""kopf wiring: every trigger runs the same coalesced reconcile pass.

Handlers stay thin. The InferenceCluster's resume/create/update handlers wait for a
pass (so kopf retries it on error); pod, StatefulSet and node watch events and a slow
resync loop (OperatorContext, not a kopf timer: kopf timers put a finalizer on every
object) only request one. kopf's own bookkeeping goes to annotations (never ``.status``),
and kopf posts no Events of its own — no "handler succeeded" noise; the reconciler posts
ours.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from sparkllm.api import GROUP, PLURAL, VERSION
from sparkllm.errors import ClusterAPIError
from sparkllm.keys import LABEL_CLUSTER
from sparkllm.reconcile import metrics
from sparkllm.reconcile.context import OperatorContext
from sparkllm.render.placement import node_facts

logger = logging.getLogger(__name__)
ENGINE_SELECTOR = {LABEL_CLUSTER: kopf.PRESENT}


def _ctx(memo: Any) -> OperatorContext:
    """kopf types memo as Any; ours is always an OperatorContext (see runner)."""
    assert isinstance(memo, OperatorContext)
    return memo


@kopf.on.startup()
async def startup(*, settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.enabled = False  # our Events are posted by the reconciler itself
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    settings.peering.stealth = True
    await _ctx(memo).start()


@kopf.on.cleanup()
async def cleanup(*, memo: Any, **_: Any) -> None:
    await _ctx(memo).stop()


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
async def on_cluster(*, name: str, namespace: str | None, memo: Any, **_: Any) -> None:
    context = _ctx(memo)
    key = (namespace or "default", name)
    context.known.add(key)
    try:
        await context.reconcile_now(key)
    except ClusterAPIError as exc:
        raise kopf.TemporaryError(str(exc), delay=5) from exc


@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_cluster_event(
    *, type: str, name: str, namespace: str | None, memo: Any, **_: Any
) -> None:
    """Any change of the object, the on-demand annotations included, requests a pass.

    kopf's change detection drops every annotation under its storage prefix, and ours is
    ``sparkllm.io`` — the prefix of ``sparkllm.io/restart``, ``/benchmark`` and
    ``/acceptance`` too — so without this an annotation alone waited for the resync
    (up to a minute). A pass that finds nothing to do writes nothing, so the events of
    our own status writes end there.
    """
    if type != "DELETED":
        _ctx(memo).trigger((namespace or "default", name))


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)
async def on_cluster_deleted(*, name: str, namespace: str | None, memo: Any, **_: Any) -> None:
    metrics.forget_cluster(namespace or "default", name)
    _ctx(memo).forget((namespace or "default", name))


@kopf.on.event("pods", labels=ENGINE_SELECTOR)
async def on_rank_pod(*, labels: kopf.Labels, namespace: str | None, memo: Any, **_: Any) -> None:
    _ctx(memo).trigger((namespace or "default", str(labels[LABEL_CLUSTER])))


@kopf.on.event("apps", "v1", "statefulsets", labels=ENGINE_SELECTOR)
async def on_rank_statefulset(
    *, labels: kopf.Labels, namespace: str | None, memo: Any, **_: Any
) -> None:
    _ctx(memo).trigger((namespace or "default", str(labels[LABEL_CLUSTER])))


@kopf.on.event("nodes")
async def on_node(*, type: str, body: kopf.Body, name: str, memo: Any, **_: Any) -> None:
    _ctx(memo).node_changed(name, None if type == "DELETED" else node_facts(dict(body)))
