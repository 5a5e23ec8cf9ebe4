"""``sparkllm run``: start the operator (kopf) against the current kubeconfig.

Standalone by default (one operator process). With ``peering_name`` several operator
processes share a kopf peering object and only the highest-priority one acts, which is
how the Helm chart runs two replicas for availability.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence

import kopf
from prometheus_client import start_http_server

from sparkllm.api.admin_policy import admin_policy_from_env
from sparkllm.reconcile import handlers  # noqa: F401  (registers the kopf handlers)
from sparkllm.reconcile.context import OperatorContext
from sparkllm.reconcile.decide.upgrade import upgrade_settings_from
from sparkllm.render.governance_default import governance_default_from
from sparkllm.render.product_image import product_image_from


def run_operator(
    *,
    namespaces: Sequence[str] = (),
    kubeconfig: str | None = None,
    metrics_port: int | None = 8080,
    peering_name: str | None = None,
    priority: int = 0,
    liveness_endpoint: str | None = None,
    verbose: bool = False,
    resync_seconds: float = 60.0,
) -> int:
    """Run until SIGINT/SIGTERM. Watches ``namespaces``, or all namespaces when empty."""
    # Read before anything starts: a bad value is one clear error (exit 1), no traceback.
    governance_default = governance_default_from(os.environ)
    admin_policy = admin_policy_from_env(os.environ)  # the chart's policy; unset: no limits
    product_image = product_image_from(os.environ)  # the chart's image for every pod made
    upgrade = upgrade_settings_from(os.environ)  # the chart's upgrade.applyOperatorChanges
    if kubeconfig is not None:
        os.environ["KUBECONFIG"] = kubeconfig  # kopf's own login reads it too
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is noise
    if metrics_port:
        start_http_server(metrics_port)
    memo = OperatorContext(
        kubeconfig=kubeconfig,
        resync_seconds=resync_seconds,
        governance_default=governance_default,
        admin_policy=admin_policy,
        product_image=product_image,
        upgrade=upgrade,
    )
    asyncio.run(
        kopf.operator(
            clusterwide=not namespaces,
            namespaces=list(namespaces),
            standalone=peering_name is None,
            peering_name=peering_name,
            priority=priority,
            liveness_endpoint=liveness_endpoint,
            memo=memo,
        )
    )
    return 0
