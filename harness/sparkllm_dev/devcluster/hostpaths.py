"""Where a simulated node keeps its files: an engine pod's volumes as local paths.

Why: kwok's nodes have no filesystem, yet the harness runs init containers (and the
SGLang simulator) as local processes, and what they read is named by paths as the
CONTAINER sees them (``--model-dir /models/M``). So each simulated node gets a directory
of its own that stands in for its root filesystem, ``<hosts root>/<node>/`` (default
``~/.cache/sparkllm/devcluster/hosts/``), and a container path is translated through
the container's ``volumeMounts`` to the directory that backs it on this machine. Tests
put different files on different "nodes" this way (one node's shard differs).

Volume kinds (anything else, e.g. persistentVolumeClaim or secret, is not provided):

- ``hostPath``: ``<hosts root>/<node>/<path>``. ``DirectoryOrCreate`` / ``FileOrCreate``
  create it; otherwise it must exist. An absent one is reported as unavailable and the
  harness leaves that container to kwok (a kubelet would fail the mount instead; the dev
  cluster's nodes hold no model unless a test puts one there).
- ``configMap``: a directory in the pod's scratch directory with one file per key (``data``
  as UTF-8, ``binaryData`` decoded) or the ``items`` chosen. A missing ConfigMap or key
  that is not ``optional`` keeps the container from starting until it appears (the
  kubelet's FailedMount retries).
- ``emptyDir``: a directory in the pod's scratch directory.
- ``projected``: a directory in the scratch directory with its ``configMap`` and
  ``downwardAPI`` (``fieldRef``) sources; ``serviceAccountToken`` and ``secret``
  sources are left out (the harness has no token to give).

Arguments are translated by prefix: a word equal to a mountPath, or under it, names the
local path instead (also the value of ``--flag=VALUE``); the longest mountPath wins, so
nested mounts work. Read-only mounts are not enforced.

The same translation turns an init container that runs our CLI into a local command
(``plan_step``): ``sparkllm ARGS`` becomes ``<python> -m sparkllm.cli ARGS`` with local
paths, and the container's ``terminationMessagePath`` a fresh file in the scratch
directory, passed as ``--termination-log``. The engine's ``--model-path`` is not
rewritten (``model_dir_env`` says why).
"""

from __future__ import annotations

import base64
import binascii
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

from sparkllm.sglang_contract.argv import option_value
from sparkllm_dev.devcluster import kubelet
from sparkllm_dev.devcluster.kubelet import JSON, ContainerConfigError
from sparkllm_dev.errors import DevClusterError

DEFAULT_TERMINATION_PATH: Final = "/dev/termination-log"
TERMINATION_LOG_OPTION: Final = "--termination-log"
# Where the simulator should read config.json / tokenizer.json (see ``model_dir_env``).
SIM_MODEL_DIR_ENV: Final = "SPARKLLM_SIM_MODEL_DIR"
MountKind = Literal["hostPath", "configMap", "emptyDir", "projected", "file"]
_CREATE_TYPES = {"DirectoryOrCreate": "directory", "FileOrCreate": "file"}
_KINDS: tuple[MountKind, ...] = ("hostPath", "configMap", "emptyDir", "projected")


class VolumeUnavailableError(DevClusterError):
    """A volume the harness cannot provide here (absent hostPath, unsupported kind)."""


class VolumeNotReadyError(ContainerConfigError):
    """A ConfigMap (or key) the volume needs is missing: retry until it exists."""


@dataclass(frozen=True)
class LocalMount:
    """One volumeMount: the container's path and the local path that backs it."""

    mount_path: str
    local: Path  # what mount_path is here: the volume's directory (+ subPath)
    kind: MountKind
    volume: str = ""
    root: Path | None = None  # scratch kinds: the volume's directory, where files go
    files: Mapping[str, bytes] = field(default_factory=dict)  # relative path -> content
    host_type: str = ""  # hostPath: its ``type``
    missing: str = ""  # why the content is not there yet (a ConfigMap or key is missing)


def host_path(hosts_root: Path, *, node: str, path: str) -> Path:
    """``<hosts root>/<node>/<path>``; DevClusterError for a relative or escaping path."""
    pure = PurePosixPath(path)
    if not pure.is_absolute() or ".." in pure.parts or not node or "/" in node:
        raise VolumeUnavailableError(f"hostPath {path!r} on node {node!r} cannot be mapped")
    return hosts_root.joinpath(node, *pure.parts[1:])


def _volumes(pod: Mapping[str, Any]) -> dict[str, JSON]:
    return {str(v["name"]): dict(v) for v in (pod.get("spec") or {}).get("volumes") or []}


def _config_map_sources(volume: Mapping[str, Any]) -> list[JSON]:
    if "configMap" in volume:
        return [dict(volume["configMap"])]
    sources = (volume.get("projected") or {}).get("sources") or []
    return [dict(s["configMap"]) for s in sources if "configMap" in s]


def config_map_names(pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[str]:
    """The ConfigMaps the container's mounts need (fetch them for ``plan_mounts``)."""
    volumes = _volumes(pod)
    names: list[str] = []
    for mount in container.get("volumeMounts") or []:
        for source in _config_map_sources(volumes.get(str(mount.get("name")), {})):
            if str(source.get("name", "")) not in names:
                names.append(str(source.get("name", "")))
    return names


def _projected_files(
    pod: Mapping[str, Any],
    projected: Mapping[str, Any],
    config_maps: Mapping[str, Mapping[str, Any] | None],
) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for source in projected.get("sources") or []:
        if "configMap" in source:
            name = str(source["configMap"].get("name", ""))
            files |= config_map_files(source["configMap"], config_maps.get(name))
        for item in (source.get("downwardAPI") or {}).get("items") or []:
            path = str((item.get("fieldRef") or {}).get("fieldPath", ""))
            value = kubelet.field_value(pod, path)
            if value is not None:
                files[str(item["path"])] = value.encode()
    return files


def config_map_files(
    source: Mapping[str, Any], config_map: Mapping[str, Any] | None, *, kind: str = "configmap"
) -> dict[str, bytes]:
    """The files a configMap volume shows (pure); VolumeNotReadyError for what is missing.

    ``kind`` names the object in the errors: a Secret volume is read the same way, its
    ``data`` given as ``binaryData`` (both base64) and ``kind="secret"`` (gateway_io).
    """
    name, optional = str(source.get("name", "")), bool(source.get("optional", False))
    if config_map is None:
        if optional:
            return {}
        raise VolumeNotReadyError(f"{kind} {name!r} not found (volume)")
    content: dict[str, bytes] = {
        k: str(v).encode() for k, v in (config_map.get("data") or {}).items()
    }
    for key, value in (config_map.get("binaryData") or {}).items():
        try:
            content[key] = base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise VolumeNotReadyError(f"{kind} {name!r} key {key!r}: bad base64") from exc
    items = source.get("items")
    if not items:
        return content
    chosen = {}
    for item in items:
        key = str(item["key"])
        if key not in content:
            if optional:
                continue
            raise VolumeNotReadyError(f"{kind} {name!r} has no key {key!r} (volume)")
        chosen[str(item.get("path") or key)] = content[key]
    return chosen


def plan_mounts(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    hosts_root: Path,
    scratch: Path,
    config_maps: Mapping[str, Mapping[str, Any] | None],
) -> list[LocalMount]:
    """Every volumeMount of ``container`` as a LocalMount (pure: nothing is touched).

    ``config_maps`` holds each of ``config_map_names`` fetched (None: not found); what is
    missing is recorded in ``LocalMount.missing`` for ``materialize`` to raise. Raises
    VolumeUnavailableError for a volume the harness does not provide.
    """
    volumes, node = _volumes(pod), str((pod.get("spec") or {}).get("nodeName") or "")
    mounts = []
    for mount in container.get("volumeMounts") or []:
        name, mount_path = str(mount["name"]), str(mount["mountPath"])
        volume = volumes.get(name)
        if volume is None:
            raise VolumeUnavailableError(f"volumeMount {name!r} names no volume of the pod")
        kinds = [kind for kind in _KINDS if kind in volume]
        if not kinds:
            others = ", ".join(sorted(set(volume) - {"name"}))
            raise VolumeUnavailableError(f"volume {name!r} ({others}) is not provided")
        kind, root, files, missing = kinds[0], scratch / "volumes" / name, {}, ""
        try:
            if kind == "configMap":
                source = volume["configMap"]
                files = config_map_files(source, config_maps.get(str(source.get("name", ""))))
            elif kind == "projected":
                files = _projected_files(pod, volume["projected"], config_maps)
        except VolumeNotReadyError as exc:
            missing = str(exc)
        if kind == "hostPath":
            root = host_path(hosts_root, node=node, path=str(volume["hostPath"]["path"]))
        sub_path = str(mount.get("subPath") or "")
        if PurePosixPath(sub_path).is_absolute() or ".." in PurePosixPath(sub_path).parts:
            raise VolumeUnavailableError(f"volumeMount {name!r}: bad subPath {sub_path!r}")
        mounts.append(
            LocalMount(
                mount_path=mount_path,
                local=root / sub_path if sub_path else root,
                kind=kind,
                volume=name,
                root=None if kind == "hostPath" else root,
                files=files,
                host_type=str(volume["hostPath"].get("type") or "") if kind == "hostPath" else "",
                missing=missing,
            )
        )
    return mounts


def materialize(mounts: Sequence[LocalMount]) -> None:
    """Create what the mounts need locally.

    Host paths are checked first: VolumeUnavailableError for an absent one (the container
    is not run), before VolumeNotReadyError for a missing ConfigMap (retried).
    """
    host_mounts = [m for m in mounts if m.kind == "hostPath"]
    try:
        for mount in host_mounts:
            create = _CREATE_TYPES.get(mount.host_type)
            if create == "directory":
                mount.local.mkdir(parents=True, exist_ok=True)
            elif create == "file":
                mount.local.parent.mkdir(parents=True, exist_ok=True)
                mount.local.touch(exist_ok=True)
            elif not mount.local.exists():
                raise VolumeUnavailableError(
                    f"hostPath for volume {mount.volume!r} is absent on this node: {mount.local}"
                )
        for mount in mounts:
            if mount.missing:
                raise VolumeNotReadyError(mount.missing)
            if mount.root is None:
                continue
            mount.root.mkdir(parents=True, exist_ok=True)
            for relative, content in mount.files.items():
                target = mount.root / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
    except OSError as exc:
        raise DevClusterError(f"cannot prepare the volumes: {exc}") from exc


def _translate_value(value: str, mounts: Sequence[LocalMount]) -> str:
    for mount in sorted(mounts, key=lambda m: len(m.mount_path), reverse=True):
        root = mount.mount_path.rstrip("/")
        if not root:
            continue  # a mount at "/" would capture every path: never translate by it
        if value == root:
            return str(mount.local)
        if value.startswith(root + "/"):
            return f"{mount.local}/{value[len(root) + 1 :]}"
    return value


def translate_path(word: str, mounts: Sequence[LocalMount]) -> str:
    """``word`` with a container path (alone or as ``--flag=PATH``) made local."""
    flag, equals, value = word.partition("=")
    if equals and flag.startswith("-"):
        return f"{flag}={_translate_value(value, mounts)}"
    return _translate_value(word, mounts)


def translate_args(words: Sequence[str], mounts: Sequence[LocalMount]) -> list[str]:
    return [translate_path(word, mounts) for word in words]


def model_dir_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    command: Sequence[str],
    *,
    hosts_root: Path,
) -> dict[str, str]:
    """``{SIM_MODEL_DIR_ENV: <local dir>}`` when the engine's ``--model-path`` is a hostPath
    that exists on the simulated node, else ``{}``.

    Not a rewritten ``--model-path``: the simulator reports its arguments in
    ``/get_server_info`` (``model_path``, ``launch_command``) and ConfigApplied compares
    them with the spec, so a local path there would be a false mismatch.
    """
    model_path = option_value(command, "--model-path")
    volumes = _volumes(pod)
    hostpath_mounts = [
        m for m in container.get("volumeMounts") or [] if "hostPath" in volumes.get(m["name"], {})
    ]
    if model_path is None or not hostpath_mounts:
        return {}
    try:
        mounts = plan_mounts(
            pod,
            {"volumeMounts": hostpath_mounts},
            hosts_root=hosts_root,
            scratch=hosts_root,
            config_maps={},
        )
    except DevClusterError:
        return {}
    local = _translate_value(model_path, mounts)
    return {SIM_MODEL_DIR_ENV: local} if local != model_path and Path(local).is_dir() else {}


# --- init containers: our own CLI as a local command ------------------------------


def sparkllm_cli_args(words: Sequence[str]) -> list[str] | None:
    """The CLI's arguments when ``words`` runs our own CLI; None for anything else."""
    if words and words[0].rsplit("/", 1)[-1] == "sparkllm":
        return list(words[1:])
    if (
        len(words) >= 3
        and words[0].rsplit("/", 1)[-1].startswith("python")
        and list(words[1:3]) == ["-m", "sparkllm.cli"]
    ):
        return list(words[3:])
    return None


@dataclass(frozen=True)
class InitStep:
    """One init container the harness runs: its local command and where outputs go."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    termination_file: Path
    log_path: Path
    policy: str
    as_written: str  # the command as the pod spec has it: logged, never a Secret's value


def plan_step(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    env: Mapping[str, str],
    mounts: Sequence[LocalMount],
    scratch: Path,
    python: str,
    log_path: Path,
) -> InitStep | None:
    """The local command for ``container`` (env resolved, mounts planned); None when it
    is not our CLI."""
    words = kubelet.command_line(container, env)
    args = sparkllm_cli_args(words)
    if args is None:
        return None
    name = str(container["name"])
    termination_file = scratch / "termination" / name
    message_path = str(container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH)
    file_mount = LocalMount(mount_path=message_path, local=termination_file, kind="file")
    local_args = translate_args(args, [*mounts, file_mount])
    if option_value(args, TERMINATION_LOG_OPTION) is None:
        local_args += [TERMINATION_LOG_OPTION, str(termination_file)]
    return InitStep(
        name=name,
        argv=(python, "-m", "sparkllm.cli", *local_args),
        env=dict(env),
        termination_file=termination_file,
        log_path=log_path,
        policy=str(container.get("terminationMessagePolicy") or "File"),
        as_written=shlex.join([*(container.get("command") or []), *(container.get("args") or [])]),
    )
