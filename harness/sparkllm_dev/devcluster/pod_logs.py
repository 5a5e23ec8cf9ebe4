"""``kubectl logs`` in the dev cluster: the harnesses' output files, served by kwok.

Why: kwok plays every kubelet but runs no container, so it has no log to serve; asked for
one, the API server went to the node by its name (``lookup spark-a2: no such host``). kwok
can serve a pod's logs from files: a ``Logs`` object (``kwok.x-k8s.io/v1alpha1``, the
pod's namespace and name) lists, per container, a file in the CRI log format the kubelet
keeps (``<RFC 3339 time> stdout F <line>``). The API server reaches kwok on the node's
InternalIP (``cluster.KUBELET_ADDRESS_ARGS``; kwokctl enables the Logs CRD), so what is
left is here: the harness that runs a pod's processes (engines, gateway pods, Jobs' pods)
creates the pod's ``Logs`` object — owned by the pod, so it goes with it — and copies each
container's output, which goes to a plain file as before, into its CRI file every tick:
under ``<state dir>/pod-logs/<namespace>_<pod>_<uid>/<container>.log``, the kubelet's
``/var/log/pods`` layout. The harness's own lines in those files (``--- <time> ...``,
naming the command it ran) are left out: the container did not write them.

``cri_lines`` (pure) is the format; ``PodLogs`` the files and the API calls. A pod's lines
reach ``kubectl logs`` within a tick (``-f`` follows them); ``--previous`` is not kept (a
restart appends to the same file).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from sparkllm.errors import ClusterAPIError
from sparkllm_dev.devcluster import engine_io
from sparkllm_dev.devcluster.kubelet import JSON

logger = logging.getLogger(__name__)

LOGS_GROUP, LOGS_VERSION, LOGS_PLURAL = "kwok.x-k8s.io", "v1alpha1", "logs"
# What the harnesses write above a process's output (engine_io.spawn_process's header).
HARNESS_LINE: Final = re.compile(rb"^--- \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
MAX_CHUNK: Final = 4 * 1024 * 1024  # read per file per tick; the rest comes next tick


def cri_timestamp(now: datetime) -> str:
    """The CRI log's time format (RFC 3339 with nanoseconds, UTC)."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def cri_lines(data: bytes, *, timestamp: str, final: bool = False) -> tuple[bytes, int]:
    """(the CRI log lines for the complete lines of ``data``, how many bytes they used).

    A line without its newline waits for the rest (unless ``final``: the process ended);
    the harness's own lines are dropped. Every line is one full (``F``) stdout entry.
    """
    end = len(data) if final else data.rfind(b"\n") + 1
    out = bytearray()
    for line in data[:end].splitlines():
        if HARNESS_LINE.match(line):
            continue
        out += timestamp.encode() + b" stdout F " + line + b"\n"
    return bytes(out), end


def logs_object(pod: Mapping[str, object], files: Mapping[str, Path]) -> JSON:
    """kwok's ``Logs`` for ``pod``: each container's CRI file; owned by the pod."""
    meta = pod["metadata"]
    assert isinstance(meta, Mapping)
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    return {
        "apiVersion": f"{LOGS_GROUP}/{LOGS_VERSION}",
        "kind": "Logs",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "ownerReferences": [owner],
        },
        "spec": {
            "logs": [
                {"containers": [name], "logsFile": str(path)}
                for name, path in sorted(files.items())
            ]
        },
    }


@dataclass
class _Copy:
    """One container's output file and its CRI copy: how far it was read."""

    source: Path
    target: Path
    offset: int = 0


class PodLogs:
    """The pods' CRI log files and their ``Logs`` objects, for one harness."""

    def __init__(self, kube: engine_io.KubeClient, *, root: Path) -> None:
        self.kube, self.root = kube, root
        self._copies: dict[str, list[_Copy]] = {}  # pod uid -> its containers' copies
        self._unavailable = ""  # why Logs objects cannot be made here (said once)

    def add(self, pod: Mapping[str, object], outputs: Mapping[str, Path]) -> None:
        """Serve ``outputs`` (container name -> the file its process writes) for ``pod``."""
        meta = pod["metadata"]
        assert isinstance(meta, Mapping)
        uid = str(meta["uid"])
        directory = self.root / f"{meta['namespace']}_{meta['name']}_{uid}"
        directory.mkdir(parents=True, exist_ok=True)
        files = {name: directory / f"{name}.log" for name in outputs}
        copies = []
        for name, source in outputs.items():
            # A harness restarted while the pod ran: its copy so far stays, what follows
            # is added; a new pod's copy starts with everything its processes wrote.
            start = _size(source) if _size(files[name]) else 0
            copies.append(_Copy(source, files[name], offset=start))
            files[name].touch()
        self._copies[uid] = copies
        self._create(logs_object(pod, files))

    def ship(self, *, final_uid: str | None = None) -> None:
        """Copy what every container wrote since the last call (``final_uid``: that pod's
        processes ended, so its last unfinished line too; then it is forgotten)."""
        stamp = cri_timestamp(datetime.now(UTC))
        for uid, copies in list(self._copies.items()):
            for copy in copies:
                _ship(copy, timestamp=stamp, final=uid == final_uid)
        if final_uid is not None:
            self._copies.pop(final_uid, None)

    def _create(self, body: JSON) -> None:
        if self._unavailable:
            return
        try:
            self.kube.create_or_replace_custom(LOGS_GROUP, LOGS_VERSION, LOGS_PLURAL, body=body)
        except ClusterAPIError as exc:
            if exc.status == 404:  # a cluster started without the Logs CRD
                self._unavailable = "the cluster has no kwok Logs API (restart it)"
                logger.warning("kubectl logs not served: %s", self._unavailable)
                return
            logger.warning("pod %s: Logs not created: %s", body["metadata"]["name"], exc)


def _ship(copy: _Copy, *, timestamp: str, final: bool) -> None:
    try:
        with copy.source.open("rb") as source:
            source.seek(copy.offset)
            data = source.read(MAX_CHUNK)
    except OSError:
        return  # not written yet
    lines, used = cri_lines(data, timestamp=timestamp, final=final and len(data) < MAX_CHUNK)
    if lines:
        with copy.target.open("ab") as target:
            target.write(lines)
    copy.offset += used


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


__all__ = ["PodLogs", "cri_lines", "cri_timestamp", "logs_object"]
