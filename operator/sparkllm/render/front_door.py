"""Where clients reach an InferenceCluster: ``status.frontDoor``.

Why in status: the front door's Service is named after the object and its port is fixed,
and the exposure's URL follows from the spec; someone looking for the model (``kubectl
get icl -o wide``, a dashboard, a script) should read them, not know the naming rule.
``clusterURL`` is the Service as a pod reaches it (HTTPS when the gateway serves TLS
itself); ``url`` is what a client outside uses when the spec exposes the front door under
a host name (the Ingress's host, or the HTTPRoute's first host name that is not a
wildcard), else the same in-cluster URL. The operator reads no Ingress or Gateway status
for it: the host is what the spec asks for, known before any controller acts.

Pure: a function of the spec.
"""

from __future__ import annotations

from sparkllm.api import InferenceCluster
from sparkllm.gateway_settings import GATEWAY_HTTP_PORT
from sparkllm.render.exposure import gateway_probe_scheme
from sparkllm.render.names import gateway_name
from sparkllm.render.objects import JSON


def external_url(ic: InferenceCluster) -> str | None:
    """``https://<host>`` of an Ingress or HTTPRoute exposure, else None."""
    exposure = ic.spec.exposure
    hosts: list[str] = []
    if exposure.type == "Ingress" and exposure.ingress is not None:
        hosts = [exposure.ingress.host]
    elif exposure.type == "HTTPRoute" and exposure.http_route is not None:
        hosts = list(exposure.http_route.hostnames)
    named = [host for host in hosts if not host.startswith("*")]
    return f"https://{named[0]}" if named else None


def front_door_status(ic: InferenceCluster) -> JSON:
    """``status.frontDoor``: the Service, its port, the in-cluster URL and the client URL."""
    service = gateway_name(ic.metadata.name)
    namespace = ic.metadata.namespace or "default"
    scheme = gateway_probe_scheme(ic).lower()
    cluster_url = f"{scheme}://{service}.{namespace}.svc:{GATEWAY_HTTP_PORT}"
    return {
        "service": service,
        "port": GATEWAY_HTTP_PORT,
        "clusterURL": cluster_url,
        "url": external_url(ic) or cluster_url,
    }


__all__ = ["external_url", "front_door_status"]
