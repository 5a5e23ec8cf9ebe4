"""The front door's HTTPS address, as ``spec.exposure.type`` chooses (api/exposure.py).

* ``HTTPRoute``: a Gateway API route from the user's Gateway to the front-door Service
  ``N``; TLS ends at the Gateway's HTTPS listener.
* ``Ingress``: an Ingress with TLS for one host, backed by the same Service; the Secret
  is the user's or cert-manager's (its issuer annotation).
* ``TLS``: no new object — the admission layer serves HTTPS itself from the Secret,
  mounted as a directory so a renewal reaches the pod (gateway/tls.py); the pod's probes
  switch to HTTPS. ``render/gateway.py`` asks this module for those pieces.
* ``ClusterIP``: nothing beyond the Service.

What they route goes to the admission layer, never to the engines: keys, caps and
governance stay in the path (docs/exposure.md). And they route only the API, paths under
``/v1`` (Prefix: ``/v1`` and ``/v1/...``, not ``/v1x``): the probes' ``/health`` and
``/ready`` are for the kubelet, and the metrics, whose series name every user with their
tokens, are on a port of their own that no Service carries (render/gateway.py).

Why the proxy timeouts are long: a generation streams for up to the router's request
timeout (render/router.py), and proxies cut much sooner by default (nginx 60 s, Envoy
15 s); the documents' Nginx was configured the same way. The nginx annotations are
harmless to other Ingress controllers.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Final

from sparkllm.api import InferenceCluster
from sparkllm.gateway_settings import GATEWAY_HTTP_PORT
from sparkllm.render.inference_pool import render_inference_pool
from sparkllm.render.names import COMPONENT_GATEWAY, cluster_labels, gateway_name, owner_reference
from sparkllm.render.objects import JSON, render_template, stamp_hash
from sparkllm.render.router import ROUTER_REQUEST_TIMEOUT_SECONDS

TLS_DIR: Final = "/etc/sparkllm/tls"
TLS_VOLUME: Final = "tls"
# Longer than the router's own request timeout, so its (clearer) timeout fires first.
PROXY_TIMEOUT_SECONDS: Final = ROUTER_REQUEST_TIMEOUT_SECONDS + 60
CERT_MANAGER_ANNOTATION: Final = {
    "Issuer": "cert-manager.io/issuer",
    "ClusterIssuer": "cert-manager.io/cluster-issuer",
}
NGINX: Final = "nginx.ingress.kubernetes.io/"
# The one path prefix exposure objects route: the OpenAI API and /v1/usage.
API_PATH_PREFIX: Final = "/v1"


def _common(ic: InferenceCluster) -> dict[str, object]:
    name = ic.metadata.name
    return {
        "name": gateway_name(name),
        "namespace": ic.metadata.namespace or "default",
        "labels": cluster_labels(name, COMPONENT_GATEWAY),
        "owner": owner_reference(name=name, uid=ic.metadata.uid or ""),
        "service": gateway_name(name),
        "port": GATEWAY_HTTP_PORT,
        "api_prefix": API_PATH_PREFIX,
    }


def render_http_route(ic: InferenceCluster) -> JSON | None:
    """The HTTPRoute of type HTTPRoute, else None."""
    route = ic.spec.exposure.http_route
    if ic.spec.exposure.type != "HTTPRoute" or route is None:
        return None
    parents = [ref.model_dump(by_alias=True, exclude_none=True) for ref in route.parent_refs]
    obj = render_template(
        "exposure_httproute.yaml.j2",
        parent_refs=parents,
        hostnames=list(route.hostnames),
        request_timeout=f"{PROXY_TIMEOUT_SECONDS}s",
        **_common(ic),
    )
    return stamp_hash(obj)


def ingress_annotations(ic: InferenceCluster) -> dict[str, str]:
    """nginx's proxy settings for long streams and the body cap; cert-manager's issuer."""
    ingress = ic.spec.exposure.ingress
    # One MiB above the gateway's own cap, so an oversized body gets its OpenAI-shaped 413.
    body_mib = -(-ic.spec.admission.max_body_bytes // (1024 * 1024)) + 1
    annotations = {
        f"{NGINX}proxy-read-timeout": str(PROXY_TIMEOUT_SECONDS),
        f"{NGINX}proxy-send-timeout": str(PROXY_TIMEOUT_SECONDS),
        f"{NGINX}proxy-buffering": "off",  # server-sent events token by token
        f"{NGINX}proxy-body-size": f"{body_mib}m",
    }
    if ingress is not None and ingress.cert_manager_issuer is not None:
        issuer = ingress.cert_manager_issuer
        annotations[CERT_MANAGER_ANNOTATION[issuer.kind]] = issuer.name
    return annotations


def render_ingress(ic: InferenceCluster) -> JSON | None:
    """The Ingress of type Ingress, else None."""
    ingress = ic.spec.exposure.ingress
    if ic.spec.exposure.type != "Ingress" or ingress is None:
        return None
    obj = render_template(
        "exposure_ingress.yaml.j2",
        annotations=ingress_annotations(ic),
        class_name=ingress.class_name,
        host=ingress.host,
        secret=ingress.tls_secret_name,
        **_common(ic),
    )
    return stamp_hash(obj)


def render_exposure(ic: InferenceCluster) -> list[JSON]:
    """The chosen exposure's object (none for ClusterIP and TLS) and the InferencePool.

    Applied last in a pass (after the ranks): where a CRD they need is missing, only they
    fail, never the front door or the replicas.
    """
    objs = (render_http_route(ic), render_ingress(ic), render_inference_pool(ic))
    return [obj for obj in objs if obj is not None]


# The pieces of the gateway pod for type TLS (render/gateway.py puts them in place).


def gateway_tls_settings(ic: InferenceCluster) -> dict[str, object]:
    """``tls_cert_file`` / ``tls_key_file`` for the admission layer, or nothing."""
    if ic.spec.exposure.tls is None:
        return {}
    return {"tls_cert_file": f"{TLS_DIR}/tls.crt", "tls_key_file": f"{TLS_DIR}/tls.key"}


def gateway_tls_mounts(ic: InferenceCluster) -> list[JSON]:
    if ic.spec.exposure.tls is None:
        return []
    return [{"name": TLS_VOLUME, "mountPath": TLS_DIR, "readOnly": True}]


def gateway_tls_volumes(ic: InferenceCluster) -> list[JSON]:
    """The TLS Secret as a directory (not subPath), so the kubelet swaps renewed files in."""
    tls = ic.spec.exposure.tls
    if tls is None:
        return []
    items = [{"key": key, "path": key} for key in ("tls.crt", "tls.key")]
    secret = {"secretName": tls.secret_name, "items": items, "defaultMode": 0o440}
    return [{"name": TLS_VOLUME, "secret": secret}]


def gateway_probe_scheme(ic: InferenceCluster) -> str:
    """The kubelet's probes speak HTTPS to a gateway that serves TLS (without verifying)."""
    return "HTTPS" if ic.spec.exposure.tls is not None else "HTTP"


__all__ = [
    "API_PATH_PREFIX",
    "PROXY_TIMEOUT_SECONDS",
    "TLS_DIR",
    "gateway_probe_scheme",
    "gateway_tls_mounts",
    "gateway_tls_settings",
    "gateway_tls_volumes",
    "ingress_annotations",
    "render_exposure",
    "render_http_route",
    "render_ingress",
]
