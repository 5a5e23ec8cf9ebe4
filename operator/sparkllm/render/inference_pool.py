"""One InferencePool per InferenceCluster: the gang's single endpoints, for an inference gateway.

Why rank 0 only: the Gateway API Inference Extension and llm-d see pods, not gangs. A
replica is one pipeline over several nodes, and only its rank 0 speaks HTTP; ranks > 0
would be dead endpoints. The pool selects exactly what the front door's own router
selects (``render/router.py``: this cluster, rank 0, component engine, serving "true"),
so a rank-0 pod is a member only while it is not being drained for a scale-down, and it
is Ready (the kubelet's probe, rank 0's readiness in ``render/ranks.py``) only while the
whole pipeline serves: the pool never holds a half-started gang. After a gang restart
the new rank-0 pod carries the same labels and takes its place.

The endpoint picker (EPP) is not deployed by the operator: it is the inference
gateway's component (one per pool), configured for SGLang's metrics
(``sglang:num_queue_reqs``, ``sglang:token_usage``; docs/exposure.md).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from sparkllm.api import InferenceCluster
from sparkllm.render.names import COMPONENT_ENGINE, cluster_labels, owner_reference
from sparkllm.render.objects import JSON, render_template, stamp_hash
from sparkllm.render.router import engine_discovery_selector
from sparkllm.sglang_contract.fields import ENGINE_HTTP_PORT


def inference_pool_name(cluster: str) -> str:
    return cluster


def render_inference_pool(ic: InferenceCluster) -> JSON | None:
    """The InferencePool when ``spec.exposure.inferencePool`` is set, else None."""
    pool = ic.spec.exposure.inference_pool
    if pool is None:
        return None
    name = ic.metadata.name
    picker = pool.endpoint_picker
    obj = render_template(
        "inference_pool.yaml.j2",
        name=inference_pool_name(name),
        namespace=ic.metadata.namespace or "default",
        labels=cluster_labels(name, COMPONENT_ENGINE),
        owner=owner_reference(name=name, uid=ic.metadata.uid or ""),
        selector=engine_discovery_selector(name),
        port=ENGINE_HTTP_PORT,
        picker=picker.name,
        picker_port=picker.port,
        failure_mode=picker.failure_mode,
    )
    return stamp_hash(obj)


__all__ = ["inference_pool_name", "render_inference_pool"]
