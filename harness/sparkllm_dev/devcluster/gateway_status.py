"""What a kubelet would report for a gateway pod's two containers, as pure functions.

Why: kwok marks a container with a readiness probe not ready until someone probes it
(stages.yaml), and nothing probed the gateway's ``admission`` container, so the demo's
gateway pod showed 1/2 Ready forever — a fault that was not there. ``gateway_pods`` now
probes as the kubelet would, with the probes the rendered Deployment declares, and
writes the pod status from what it saw; the decisions are here, tested with plain
asserts:

- ``admission`` declares an httpGet readiness probe on its ``http`` port: it is probed on
  the local port the harness gave that listener (the pod's ports are moved to free
  loopback ports, ``gateway_io``), with the declared path, timeout and thresholds.
- ``router`` declares no readiness probe (smg listens on loopback only; its liveness is
  an exec probe): as under a kubelet, it is ready while its process runs.
- a container whose process exited is not ready and counts a restart (``kubelet``).

Not done, as for engine pods: liveness and startup probes (a hung container is shown
unready, not restarted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sparkllm_dev.devcluster import kubelet
from sparkllm_dev.devcluster.kubelet import JSON, ContainerView, ReadinessProbe


def local_readiness_probe(
    pod: Mapping[str, Any], container: Mapping[str, Any], *, host: str, ports: Mapping[int, int]
) -> ReadinessProbe | None:
    """The container's httpGet readiness probe aimed at ``host`` and the local port its
    declared port was moved to (``ports``: declared -> local); None without a probe.

    A probe on a port the harness did not move is returned unmoved: nothing answers it
    here, so the container stays unready, as a kubelet would show a probe that misses.
    """
    probe = kubelet.readiness_probe({**pod, "status": {"hostIP": host}}, container)
    if probe is None:
        return None
    parts = urlsplit(probe.url)
    port = parts.port
    if port is None or port not in ports:
        return probe
    netloc = f"{host}:{ports[port]}"
    return replace(probe, url=urlunsplit((parts.scheme, netloc, parts.path, parts.query, "")))


def started(view: ContainerView, *, now: str, has_probe: bool) -> ContainerView:
    """A container whose process (re)started: running, ready only without a probe."""
    return replace(view, running_since=now, ready=not has_probe)


def pod_status_patch(
    pod: Mapping[str, Any], views: Mapping[str, ContainerView], *, now: str
) -> JSON:
    """One status patch showing every container in ``views`` (Ready only if all are)."""
    current: dict[str, Any] = dict(pod)
    body: JSON = {"status": {}}
    for name, view in views.items():
        body = kubelet.status_patch(current, name, view, now=now)
        current = {**current, "status": {**(current.get("status") or {}), **body["status"]}}
    return body


__all__ = ["local_readiness_probe", "pod_status_patch", "started"]
