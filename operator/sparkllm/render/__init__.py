"""Pure rendering: an InferenceCluster spec -> the Kubernetes objects that realise it.

No I/O, no clock: reconcile hands in what it observed (node addresses, which group
each replica holds, restart generations) and applies what comes out. The CLI's
``sparkllm render`` uses the same functions, so what a reviewer sees in GitOps is what
the operator applies.
"""

from __future__ import annotations

from sparkllm.api import InferenceCluster
from sparkllm.render.objects import JSON
from sparkllm.render.product_image import DEFAULT_PRODUCT_IMAGE, ProductImage
from sparkllm.render.ranks import (
    EngineKeyRef,
    ReplicaPlan,
    render_rank_statefulset,
    render_replica_service,
)


def render_replica(
    ic: InferenceCluster,
    *,
    plan: ReplicaPlan,
    engine_key: EngineKeyRef,
    tools_image: ProductImage = DEFAULT_PRODUCT_IMAGE,
) -> list[JSON]:
    """Every object of one replica: its rank StatefulSets (rank order) and its Service."""
    objects = [
        render_rank_statefulset(
            ic, plan=plan, rank=rank, engine_key=engine_key, tools_image=tools_image
        )
        for rank in range(ic.spec.engine.nodes_per_replica)
    ]
    objects.append(render_replica_service(ic, replica=plan.index))
    return objects


__all__ = ["EngineKeyRef", "ProductImage", "ReplicaPlan", "render_replica"]
