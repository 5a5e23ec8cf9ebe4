"""Local I/O helpers of the dev cluster's gateway pods: ports, volumes, credentials.

Also the pure rewrites of the router's rendered args for running it on this machine
(``localize_router_args``, ``with_worker_url``), shared by the harness, tests and benches.

Split from ``gateway_pods`` (the supervisor) because these are the kubelet-like chores —
free loopback ports for the pod's listeners, Secret and ConfigMap volumes in the
kubelet's atomic ``..data`` layout, a kubeconfig that authenticates as the pod's
ServiceAccount, and the API calls behind them — and each can be tested on its own.

Secret, ConfigMap and projected volumes are one mechanism with a kind (``SourceVolume``):
the files the kubelet would show (every key or the ``items`` chosen, ``optional``
honoured: the reading of ``hostpaths.config_map_files``, which the engine harness uses
too; a projected volume shows its Secret and ConfigMap sources' files together, as the
gateway's keys directory holds the users' keys and the operator's Jobs' key), written
with one atomic swap and re-synced by the supervisor every tick, so a key added to the
users' Secret or an edited governance policy reaches the running gateway as it would in
a cluster. A missing object or key that is not ``optional`` keeps the pod from starting
(the kubelet's ``MountVolume.SetUp failed``); once running, the pod keeps its files.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

from sparkllm.errors import ClusterAPIError
from sparkllm.sglang_contract.argv import flag_name, option_value, replace_option_values
from sparkllm_dev.devcluster import engine_io
from sparkllm_dev.devcluster.hostpaths import VolumeNotReadyError, config_map_files
from sparkllm_dev.devcluster.kubelet import JSON
from sparkllm_dev.errors import DevClusterError

logger = logging.getLogger(__name__)

SELECTOR = "app.kubernetes.io/component=gateway"
TOKEN_SECONDS = 2 * 3600
ObjectKind = Literal["secret", "configMap"]  # what a volume (or a projected source) reads
VolumeKind = Literal["secret", "configMap", "projected"]
VOLUME_KINDS: Final[tuple[VolumeKind, ...]] = ("secret", "configMap", "projected")
# A volume's object as read: None when it does not exist.
ReadObject = Callable[[ObjectKind, str], JSON | None]
# Router flags whose values are the pod's own ports and addresses: rewritten to free
# loopback ports (several gateway pods, and other engineers, share this machine).
ROUTER_PORT_FLAGS = ("--port", "--health-check-port", "--prometheus-port")
ROUTER_HOST_FLAGS = ("--host", "--prometheus-host")
# Router flags of its Kubernetes discovery (a flag and the values that follow it).
ROUTER_DISCOVERY_FLAGS = frozenset(
    {
        "--service-discovery",
        "--selector",
        "--service-discovery-namespace",
        "--service-discovery-port",
    }
)


def free_port(host: str) -> int:
    """A port nothing listens on at ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def localize_router_args(args: Sequence[str], *, ports: Mapping[str, int]) -> list[str]:
    """The router's args with its listeners on 127.0.0.1 and the given ports.

    ``ports`` maps each flag of ``ROUTER_PORT_FLAGS`` present in ``args`` to a port. A flag
    may be written ``--port 1`` or ``--port=1``; the rewrite keeps the form, and a value
    attached to another flag (``--api-key=--port``) is never taken for a flag.
    """
    present = [flag for flag in ROUTER_PORT_FLAGS if option_value(args, flag) is not None]
    missing = [flag for flag in present if flag not in ports]
    if missing:
        raise DevClusterError(f"no local port for router flag {missing[0]}")
    values = {flag: "127.0.0.1" for flag in ROUTER_HOST_FLAGS}
    values |= {flag: str(ports[flag]) for flag in present}
    return replace_option_values(args, values)


def with_worker_url(args: Sequence[str], *, url: str) -> list[str]:
    """The router's args with Kubernetes discovery swapped for one fixed worker URL.

    For running smg outside a cluster (tests, benchmarks): each discovery flag is dropped
    with the values after it, in either form (``--selector a=b`` or ``--selector=a=b``).
    """
    out: list[str] = []
    skipping = False
    for word in args:
        name = flag_name(word)
        if name is not None:
            skipping = name in ROUTER_DISCOVERY_FLAGS
        if not skipping:
            out.append(word)
    return [*out, "--worker-urls", url]


@dataclass
class SourceVolume:
    """A Secret, ConfigMap or projected volume of a gateway pod, kept as the kubelet keeps it."""

    volume: str  # the pod's volume name
    kind: VolumeKind
    source: JSON  # the volume's ``secret`` / ``configMap`` / ``projected`` stanza
    directory: Path  # where its files are, in the kubelet's layout
    written: dict[str, bytes] | None = None  # the files last written (None: never)
    problem: str = ""  # why the last sync kept the files as they were ("" if it did not)

    def objects(self) -> list[tuple[ObjectKind, JSON]]:
        """Each object the volume shows, as (kind, its stanza as a volume of that kind).

        One for a Secret or ConfigMap volume; a projected volume's sources in order (a
        Secret source's ``name`` is a Secret volume's ``secretName``). DevClusterError for a
        projected source the harness does not provide (downward API, token, bundles).
        """
        if self.kind != "projected":
            return [(self.kind, self.source)]
        found: list[tuple[ObjectKind, JSON]] = []
        for entry in self.source.get("sources") or []:
            if "secret" in entry:
                secret = dict(entry["secret"])
                found.append(("secret", {**secret, "secretName": secret.pop("name", "")}))
            elif "configMap" in entry:
                found.append(("configMap", dict(entry["configMap"])))
            else:
                kinds = ", ".join(sorted(entry))
                raise DevClusterError(f"volume {self.volume!r}: projected {kinds} not provided")
        return found

    @property
    def object_name(self) -> str:
        """The Secret's or ConfigMap's name (a projected volume's, joined by commas)."""
        return ",".join(_object_name(kind, source) for kind, source in self.objects())


def _synced(stanza: Mapping[str, Any], kind: VolumeKind) -> bool:
    """Whether the harness writes this volume's files: a Secret or ConfigMap volume, or a
    projection of those only. The ServiceAccount token's projection (``kube-api-access-*``)
    is not: a kubeconfig as the pod's ServiceAccount stands for it."""
    sources = (stanza.get("sources") or []) if kind == "projected" else [{kind: stanza}]
    return all(set(entry) <= {"secret", "configMap"} for entry in sources)


def _object_name(kind: ObjectKind, source: Mapping[str, Any]) -> str:
    return str(source.get("secretName" if kind == "secret" else "name") or "")


def pod_volumes(
    pod: Mapping[str, Any], container: Mapping[str, Any], *, workdir: Path, model_dir: Path
) -> tuple[dict[str, Path], list[SourceVolume]]:
    """(mountPath -> local directory, its Secret, ConfigMap and projected volumes) for a
    container.

    The model volume (hostPath or PVC) is ``model_dir``; any other kind (emptyDir) a fresh
    directory under ``workdir``, as are the synced volumes' directories.
    """
    volumes = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or []}
    paths: dict[str, Path] = {}
    sources: list[SourceVolume] = []
    for mount in container.get("volumeMounts") or []:
        name = str(mount["name"])
        volume = volumes.get(name) or {}
        local = workdir / "volumes" / name
        kinds = [kind for kind in VOLUME_KINDS if kind in volume and _synced(volume[kind], kind)]
        if kinds:
            sources.append(SourceVolume(name, kinds[0], dict(volume[kinds[0]]), local))
        elif "hostPath" in volume or "persistentVolumeClaim" in volume:
            local = model_dir
        else:
            local.mkdir(parents=True, exist_ok=True)
        paths[str(mount["mountPath"])] = local
    return paths, sources


def volume_files(
    kind: ObjectKind, source: Mapping[str, Any], obj: Mapping[str, Any] | None
) -> dict[str, bytes]:
    """The files a Secret or ConfigMap volume shows for ``obj`` (None: not found), as the
    kubelet computes them: every key, or the ``items`` chosen; a missing object or key is
    skipped when the volume is ``optional``, else VolumeNotReadyError names it."""
    if kind == "configMap":
        return config_map_files(source, obj, kind="configmap")
    # A Secret's data is base64, as a ConfigMap's binaryData: one reading for both.
    as_config_map = None if obj is None else {"binaryData": obj.get("data") or {}}
    return config_map_files({**source, "name": source.get("secretName", "")}, as_config_map,
                            kind="secret")  # fmt: skip


def sync_volume(volume: SourceVolume, *objects: Mapping[str, Any] | None) -> bool:
    """One kubelet sync of ``volume`` from its objects (one per ``volume.objects()``, None
    when not found): rewrite the files when they changed.

    True when the files were (re)written. VolumeNotReadyError when a non-optional object
    or key is missing: nothing is written, so a running pod keeps the files it has (the
    kubelet's failed remount), and a starting one must not start.
    """
    sources = volume.objects()
    if len(objects) != len(sources):
        raise DevClusterError(f"volume {volume.volume!r}: {len(sources)} objects to read")
    files: dict[str, bytes] = {}
    for (kind, source), obj in zip(sources, objects, strict=True):
        files.update(volume_files(kind, source, obj))  # later sources win, as the kubelet's
    if files == volume.written:
        return False
    write_atomic_volume(volume.directory, files)
    volume.written = files
    return True


def sync_volumes(
    volumes: Sequence[SourceVolume],
    *,
    read: ReadObject,
    starting: bool,
    pod: str,
) -> None:
    """The kubelet's sync of a pod's Secret, ConfigMap and projected volumes: each object is
    read (``read(kind, name)``, None if not found) and a volume rewritten when its files
    changed.

    A missing non-optional object or key raises VolumeNotReadyError at ``starting`` (the
    supervisor logs that the pod cannot start yet, and retries); later the volume keeps
    its files and the problem is logged once, as the kubelet's failed remount.
    """
    for volume in volumes:
        try:
            objects = [read(kind, _object_name(kind, src)) for kind, src in volume.objects()]
            written = sync_volume(volume, *objects)
        except VolumeNotReadyError as exc:
            why = f"MountVolume.SetUp failed for volume {volume.volume!r}: {exc}"
            if starting:
                raise VolumeNotReadyError(why) from exc
            if why != volume.problem:
                logger.warning("gateway %s: %s (keeping its files)", pod, why)
            volume.problem = why
            continue
        volume.problem = ""
        if written:
            logger.info("gateway %s: %s %s synced", pod, volume.kind, volume.object_name)


def write_atomic_volume(directory: Path, files: Mapping[str, bytes]) -> None:
    """Lay ``files`` out as the kubelet does: ``..data`` -> a timestamped dir, each
    top-level name -> ``..data/name`` (a path ``a/b`` shows as ``a`` -> ``..data/a``).

    The swap of ``..data`` is one atomic rename, so a reader never sees a half-written set.
    """
    tops = {_top_level(path) for path in files}
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("..%Y_%m_%d_%H_%M_%S.%f")
    payload = Path(tempfile.mkdtemp(prefix=stamp, dir=directory))
    for path, value in files.items():
        (payload / path).parent.mkdir(parents=True, exist_ok=True)
        (payload / path).write_bytes(value)
    link = directory / "..data_tmp"
    link.unlink(missing_ok=True)
    link.symlink_to(payload.name)
    previous = os.readlink(directory / "..data") if (directory / "..data").is_symlink() else None
    os.replace(link, directory / "..data")
    for top in tops:
        if not (directory / top).is_symlink():
            (directory / top).symlink_to(Path("..data") / top)
    for entry in directory.iterdir():
        if not entry.name.startswith("..") and entry.name not in tops:
            entry.unlink()  # a key removed from the Secret or ConfigMap
    if previous is not None:
        shutil.rmtree(directory / previous, ignore_errors=True)


def _top_level(path: str) -> str:
    parts = PurePosixPath(path).parts
    if not parts or parts[0] == "/" or ".." in parts or parts[0].startswith(".."):
        raise DevClusterError(f"volume file path {path!r} must be relative, without '..'")
    return parts[0]


def service_account_kubeconfig(dev_kubeconfig: Mapping[str, Any], *, token: str) -> JSON:
    """A kubeconfig for the dev cluster's API server that authenticates with ``token``."""
    contexts = {c["name"]: c["context"] for c in dev_kubeconfig.get("contexts") or []}
    current = contexts.get(str(dev_kubeconfig.get("current-context")))
    clusters = {c["name"]: c["cluster"] for c in dev_kubeconfig.get("clusters") or []}
    if current is None or current.get("cluster") not in clusters:
        raise DevClusterError("dev cluster kubeconfig has no usable current context")
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "gateway",
        "clusters": [{"name": "dev", "cluster": clusters[current["cluster"]]}],
        "users": [{"name": "gateway", "user": {"token": token}}],
        "contexts": [{"name": "gateway", "context": {"cluster": "dev", "user": "gateway"}}],
    }  # fmt: skip


class GatewayKube(engine_io.KubeClient):
    """The engine harness's API client, plus the calls a gateway pod needs."""

    def read_volume_source(self, kind: ObjectKind, name: str, *, namespace: str) -> JSON | None:
        """The Secret or ConfigMap a volume shows, as JSON; None when it does not exist."""
        if kind == "configMap":
            return self.read_config_map(name, namespace=namespace)
        try:
            return self._json(self.core.read_namespaced_secret, name, namespace)
        except ClusterAPIError as exc:
            if exc.status == 404:
                return None
            raise

    def service_account_token(self, name: str, *, namespace: str) -> str:
        body = {"spec": {"audiences": [], "expirationSeconds": TOKEN_SECONDS}}
        create = self.core.create_namespaced_service_account_token
        return str(self._json(create, name, namespace, body)["status"]["token"])
