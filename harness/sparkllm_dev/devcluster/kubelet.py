"""What a kubelet decides for an engine pod, as pure functions: no I/O, no clock.

Why: kwok marks pods Running but runs nothing, so the engine harness (``engines.py``)
runs the SGLang simulator in each engine pod's place. The decisions that takes — does
this pod run here, with which command line and environment, where is its readiness
probe, what does the pod status say after a start, a probe result or a crash — are the
kubelet's, and Kubernetes defines them precisely. Kept pure they are tested with plain
asserts, and the harness stays a thin shell of threads, processes and API calls.

Kubelet behaviour mirrored (and nothing more):

- ``$(VAR)`` in command, args and env values expands from the container's env: ``$$``
  escapes a ``$``, an undefined name stays ``$(VAR)`` verbatim, and an env value sees
  only the variables defined before it.
- env ``valueFrom``: ``secretKeyRef`` and ``configMapKeyRef`` (the caller fetches them),
  ``fieldRef`` for the usual pod fields. A missing key that is not ``optional`` keeps the
  container from starting (the kubelet's CreateContainerConfigError). ``envFrom`` and
  ``resourceFieldRef`` are not supported: the operator renders neither.
- readiness ``httpGet``: a port by number or by container-port name, 200 <= status < 400
  is success. The host defaults to the node IP, where the simulator listens (with
  ``hostNetwork``, as the operator renders ranks, the pod IP is the node IP anyway).
- a container that exits under ``restartPolicy: Always``: ``restartCount`` + 1,
  ``lastState.terminated`` with the exit code (128 + signal when killed) and reason
  ``Error`` (``Completed`` for 0), state ``waiting: CrashLoopBackOff``, not ready, and a
  restart after a back-off of 10 s doubling up to 300 s.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from sparkllm.errors import SpecError

JSON = dict[str, Any]
ENGINE_COMPONENT_SELECTOR: Final = "app.kubernetes.io/component=engine"
ENGINE_CONTAINER: Final = "engine"
BACKOFF_INITIAL_SECONDS: Final = 10.0
BACKOFF_MAX_SECONDS: Final = 300.0
_FIELD_LABEL = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


class ContainerConfigError(SpecError):
    """The container cannot start: a Secret or ConfigMap key it needs is missing."""


def expand_references(text: str, variables: Mapping[str, str]) -> str:
    """Expand ``$(VAR)`` exactly like the kubelet (k8s.io/kubernetes third_party expansion)."""
    out: list[str] = []
    cursor = 0
    while cursor < len(text):
        char = text[cursor]
        if char != "$" or cursor + 1 == len(text):
            out.append(char)
            cursor += 1
            continue
        following = text[cursor + 1]
        if following == "$":  # `$$` is an escaped `$`
            out.append("$")
            cursor += 2
        elif following == "(":
            closer = text.find(")", cursor + 2)
            if closer == -1:  # an unterminated reference stays as written
                out.append("$(")
                cursor += 2
                continue
            name = text[cursor + 2 : closer]
            out.append(variables.get(name, f"$({name})"))
            cursor = closer + 1
        else:
            out.append("$" + following)
            cursor += 2
    return "".join(out)


@dataclass(frozen=True)
class KeyRef:
    """One env value that lives in a Secret or a ConfigMap of the pod's namespace."""

    kind: Literal["Secret", "ConfigMap"]
    name: str
    key: str
    optional: bool = False


_REF_FIELDS: Final[tuple[tuple[str, Literal["Secret", "ConfigMap"]], ...]] = (
    ("secretKeyRef", "Secret"),
    ("configMapKeyRef", "ConfigMap"),
)


def _key_ref(env_var: Mapping[str, Any]) -> KeyRef | None:
    source = env_var.get("valueFrom") or {}
    for field, kind in _REF_FIELDS:
        ref = source.get(field)
        if ref:
            return KeyRef(
                kind=kind,
                name=str(ref.get("name", "")),
                key=str(ref["key"]),
                optional=bool(ref.get("optional", False)),
            )
    return None


def key_refs(container: Mapping[str, Any]) -> list[KeyRef]:
    """The Secret/ConfigMap keys the container's env needs: fetch them for ``container_env``."""
    refs = (_key_ref(env_var) for env_var in container.get("env") or [])
    return [ref for ref in refs if ref is not None]


def field_value(pod: Mapping[str, Any], path: str) -> str | None:
    """A ``fieldRef`` (env or downwardAPI volume) of the pod; None when not supported."""
    meta, spec, status = (pod.get(part) or {} for part in ("metadata", "spec", "status"))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
    }
    if path in simple:
        return simple[path]
    found = _FIELD_LABEL.match(path)
    if found:
        return (meta.get(found.group(1)) or {}).get(found.group(2))
    return None


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    values: Mapping[KeyRef, str | None],
) -> dict[str, str]:
    """The container's environment, in order, with ``$(VAR)`` expanded in literal values.

    ``values`` holds each of ``key_refs(container)`` resolved (None: the key is missing).
    Raises ContainerConfigError for a missing key that is not optional.
    """
    env: dict[str, str] = {}
    for env_var in container.get("env") or []:
        name = str(env_var["name"])
        if "value" in env_var or not env_var.get("valueFrom"):
            env[name] = expand_references(str(env_var.get("value") or ""), env)
            continue
        ref = _key_ref(env_var)
        if ref is not None:
            value = values.get(ref)
            if value is None and not ref.optional:
                raise ContainerConfigError(
                    f"{ref.kind.lower()} {ref.name!r} has no key {ref.key!r} (env {name})"
                )
        else:
            field_path = (env_var["valueFrom"].get("fieldRef") or {}).get("fieldPath", "")
            value = field_value(pod, str(field_path))
        if value is not None:
            env[name] = value
    return env


def engine_container(pod: Mapping[str, Any]) -> JSON | None:
    """The container the simulator stands in for: ``engine``, else the first one."""
    containers = (pod.get("spec") or {}).get("containers") or []
    named = [c for c in containers if c.get("name") == ENGINE_CONTAINER]
    chosen = named or containers
    return dict(chosen[0]) if chosen else None


def host_ip(pod: Mapping[str, Any]) -> str | None:
    """The pod's node address when it is a simulated node's (loopback), else None."""
    address = (pod.get("status") or {}).get("hostIP")
    try:
        return str(address) if address and ipaddress.ip_address(address).is_loopback else None
    except ValueError:
        return None


def should_run(pod: Mapping[str, Any]) -> bool:
    """True when a kubelet would have the pod's containers running on a simulated node."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    return (
        not meta.get("deletionTimestamp")
        and status.get("phase") == "Running"
        and host_ip(pod) is not None
        and engine_container(pod) is not None
    )


def command_line(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The container's command + args after the kubelet's ``$(VAR)`` expansion."""
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    return [expand_references(str(word), env) for word in words]


def simulator_argv(
    *, python: str, node_ip: str, sim_args: Sequence[str], command: Sequence[str]
) -> list[str]:
    """``python -m sparkllm_dev.sim --sim-host IP <sim_args> -- <command>``."""
    return [python, "-m", "sparkllm_dev.sim", "--sim-host", node_ip, *sim_args, "--", *command]


@dataclass(frozen=True)
class ReadinessProbe:
    """An httpGet readiness probe, resolved to a URL on the simulated node."""

    url: str
    timeout_seconds: float
    failure_threshold: int
    success_threshold: int
    headers: tuple[tuple[str, str], ...] = ()


def readiness_probe(pod: Mapping[str, Any], container: Mapping[str, Any]) -> ReadinessProbe | None:
    """The container's httpGet readiness probe; None when it has none (or not httpGet)."""
    probe = container.get("readinessProbe") or {}
    http = probe.get("httpGet")
    host = (http or {}).get("host") or host_ip(pod)
    if not http or not host:
        return None
    port = http.get("port")
    if isinstance(port, str) and not port.isdigit():
        named = [p for p in container.get("ports") or [] if p.get("name") == port]
        if not named:
            return None
        port = named[0]["containerPort"]
    path = str(http.get("path") or "/")
    scheme = str(http.get("scheme") or "HTTP").lower()
    return ReadinessProbe(
        url=f"{scheme}://{host}:{int(port)}{path if path.startswith('/') else '/' + path}",
        timeout_seconds=float(probe.get("timeoutSeconds") or 1),
        failure_threshold=int(probe.get("failureThreshold") or 3),
        success_threshold=int(probe.get("successThreshold") or 1),
        headers=tuple((h["name"], h["value"]) for h in http.get("httpHeaders") or []),
    )


def probe_succeeded(status_code: int) -> bool:
    """The kubelet's rule for httpGet probes."""
    return 200 <= status_code < 400


def exit_code(returncode: int) -> int:
    """A process's exit as a container exit code: killed by signal N shows as 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def crash_backoff_seconds(restarts: int, *, initial: float = BACKOFF_INITIAL_SECONDS) -> float:
    """CrashLoopBackOff before restart number ``restarts`` (1-based): 10 s doubling to 300 s."""
    delay: float = initial * 2.0 ** max(restarts - 1, 0)
    return min(delay, max(BACKOFF_MAX_SECONDS, initial))


@dataclass(frozen=True)
class ContainerView:
    """What the harness knows of the engine container; the status is derived from it."""

    running_since: str | None  # RFC 3339 start of the current run; None while backing off
    ready: bool
    restart_count: int
    last_terminated: JSON | None = None
    waiting_message: str = ""
    waiting_reason: str = "CrashLoopBackOff"  # PodInitializing while init containers run
    image_id: str = ""  # status imageID: the digest the node pulled (``image_id``)


def image_id(image: str, *, node_digest: str | None = None) -> str:
    """The ``imageID`` a node shows for ``image`` (containerd's ``repo@sha256:...``).

    A reference pinned by digest pulls that digest everywhere; a tag resolves to the
    digest its registry serves — here a stable function of the reference, unless the
    node's image store holds another build (``node_digest``: the fault injector's).
    """
    repository, _, digest = image.partition("@")
    if digest:
        return image
    if not node_digest:
        node_digest = "sha256:" + hashlib.sha256(image.encode()).hexdigest()
    name, colon, tag = repository.rpartition(":")
    return f"{name if colon and '/' not in tag else repository}@{node_digest}"


def observed_restarts(pod: Mapping[str, Any], container_name: str) -> tuple[int, JSON | None]:
    """(restartCount, lastState.terminated) the pod status shows for the container."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container_name:
            terminated = (status.get("lastState") or {}).get("terminated")
            return int(status.get("restartCount") or 0), terminated or None
    return 0, None


def terminated_state(*, returncode: int, started_at: str, finished_at: str) -> JSON:
    """``lastState.terminated`` for a process that exited with ``returncode``."""
    code = exit_code(returncode)
    return {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": started_at,
        "finishedAt": finished_at,
    }


def after_exit(
    view: ContainerView, *, returncode: int, finished_at: str, backoff_seconds: float
) -> ContainerView:
    """The container once its process exited: restarted once more, backing off, not ready."""
    return ContainerView(
        running_since=None,
        ready=False,
        restart_count=view.restart_count + 1,
        last_terminated=terminated_state(
            returncode=returncode,
            started_at=view.running_since or finished_at,
            finished_at=finished_at,
        ),
        waiting_message=f"back-off {backoff_seconds:g}s restarting failed container",
    )


def with_observed_restarts(
    view: ContainerView, pod: Mapping[str, Any], container_name: str
) -> ContainerView:
    """``view``, taking the pod's restart count and last state when the pod shows more
    restarts (a fault someone else wrote, e.g. kwok's container-restart stage)."""
    restarts, last = observed_restarts(pod, container_name)
    if restarts <= view.restart_count:
        return view
    return replace(view, restart_count=restarts, last_terminated=last)


def status_patch(
    pod: Mapping[str, Any], container_name: str, view: ContainerView, *, now: str
) -> JSON:
    """A strategic-merge patch of the pod status that makes it show ``view``.

    Conditions merge by type (a transition time moves only when the status flips);
    ``containerStatuses`` is sent whole, the other containers' entries as they are.
    """
    status = pod.get("status") or {}
    live = [dict(s) for s in status.get("containerStatuses") or []]
    others_ready = all(s.get("ready") for s in live if s.get("name") != container_name)
    entry = next((s for s in live if s.get("name") == container_name), None)
    if entry is None:
        entry = {"name": container_name, "image": _image_of(pod, container_name)}
        live.append(entry)
    if view.running_since is not None:
        state: JSON = {"running": {"startedAt": view.running_since}}
    else:
        waiting = {"reason": view.waiting_reason}
        state = {
            "waiting": waiting | ({"message": view.waiting_message} if view.waiting_message else {})
        }
    entry.update(
        ready=view.ready,
        started=view.running_since is not None,
        restartCount=view.restart_count,
        state=state,
        lastState={"terminated": view.last_terminated} if view.last_terminated else {},
    )
    if view.image_id:
        entry["imageID"] = view.image_id
    all_ready = view.ready and others_ready
    unready = " ".join(sorted(str(s["name"]) for s in live if not s.get("ready")))
    conditions = []
    for kind in ("ContainersReady", "Ready"):
        previous: JSON = next(
            (c for c in status.get("conditions") or [] if c.get("type") == kind), {}
        )
        wanted = "True" if all_ready else "False"
        changed = previous.get("status") != wanted
        conditions.append(
            {
                "type": kind,
                "status": wanted,
                "reason": None if all_ready else "ContainersNotReady",
                "message": None if all_ready else f"containers with unready status: [{unready}]",
                "lastTransitionTime": now if changed else previous.get("lastTransitionTime", now),
            }
        )
    return {"status": {"conditions": conditions, "containerStatuses": live}}


def _image_of(pod: Mapping[str, Any], container_name: str) -> str:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == container_name:
            return str(container.get("image") or "")
    return ""
