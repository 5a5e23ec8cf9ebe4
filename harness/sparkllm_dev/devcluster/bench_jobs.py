"""Benchmark and acceptance Job pods in the dev cluster: kwok runs the pod, this runs it.

Why: kwok marks a benchmark or acceptance Job's pod (``app.kubernetes.io/component`` in
``benchmark``, ``acceptance``) Running and then nothing — it has no stage for a
container that exits — so the Job would never finish and the operator would never see a
summary. For every Running such pod on a simulated node this runs the pod's own command
(``sparkllm bench ...`` as ``<python> -m sparkllm.cli bench ...``) once, and when it
exits writes what a kubelet writes under ``restartPolicy: Never``: the container
``terminated`` (exit code, reason, message), phase ``Succeeded`` or ``Failed``. The
real Job controller then finishes the Job, and the operator reads the message.

What a kubelet and the cluster network would provide:

- env: ``$(VAR)`` and ``secretKeyRef`` resolved by the ``kubelet`` helpers, so the
  benchmark presents the user's key from the users' Secret. A missing Secret or key keeps
  the container waiting with ``CreateContainerConfigError`` in the pod's status, as a
  kubelet writes it, retried every 2 s; once it starts, ``running``.
- the ServiceAccount token, when the pod mounts one (the acceptance Job reads its
  InferenceCluster): ``KUBECONFIG`` authenticates as the pod's ServiceAccount (a
  TokenRequest token), so the Job's Role — not the harness's admin — is what allows it.
- volumes through ``hostpaths`` (emptyDir: scratch; hostPath: the simulated node's
  directory), but the model volume is ``model_dir`` when given, as ``GatewayPods`` maps it.
- the termination message: ``terminationMessagePath`` is a fresh local file (args naming
  it, ``--status-summary /dev/termination-log``, are translated), read with the
  kubelet's rules (``init_containers.termination_message``).
- cluster DNS: ``--base-url http://<service>.<namespace>.svc:<port>`` becomes what
  ``resolve_service(namespace, service, port)`` answers — for the gateway Service, the
  admission layer ``GatewayPods`` runs (``gateway_service_resolver``, in the same process
  as the tests run it; ``gateway_file_resolver``, from the endpoints file another process,
  ``sparkllm-dev gateways``, writes, as the demo runs them). Until it answers the
  container does not start (a client would find no endpoints).

Level-based: the supervisor thread (``pod_supervisor.PodSupervisor``, shared with the
engine harness and the gateway pods) lists benchmark pods every tick, runs each pod once,
reports its exit once, and stops a process whose pod is deleted (a cancel, the Job's
deadline). Not done: probes, resources, images, restart policies other than Never.
``sparkllm-dev jobs`` (``run_bench_jobs``) runs it on its own, beside the demo's gateways.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol
from urllib.parse import urlsplit

import yaml

from sparkllm.errors import ClusterAPIError
from sparkllm.render.gateway import GATEWAY_HTTP_PORT
from sparkllm.sglang_contract.argv import option_value
from sparkllm_dev.devcluster import engine_io, hostpaths, init_containers, kubelet
from sparkllm_dev.devcluster.cluster import DevCluster
from sparkllm_dev.devcluster.gateway_io import GatewayKube, service_account_kubeconfig
from sparkllm_dev.devcluster.gateway_pods import GatewayInfo
from sparkllm_dev.devcluster.kubelet import JSON
from sparkllm_dev.devcluster.pod_supervisor import (
    PodSupervisor,
    cli_logging,
    pod_key,
    pods_by_uid,
    scratch_directory,
    stop_processes,
    stop_signal,
    utc_timestamp,
)
from sparkllm_dev.errors import DevClusterError

logger = logging.getLogger(__name__)

# The model staging Jobs' pods (``sparkllm stage-model``) are run the same way: one
# process per pod on the simulated node's address (host network), volumes under its hosts
# root; a serve pod runs until the operator deletes it.
SELECTOR: Final = "app.kubernetes.io/component in (benchmark,acceptance,model-staging)"
STOP_GRACE_SECONDS: Final = 5.0
BASE_URL_OPTION: Final = "--base-url"
TERMINATION_FILE: Final = "termination-log"  # in the pod's scratch directory
KUBECONFIG_FILE: Final = "kubeconfig"  # in the pod's scratch directory: its ServiceAccount
# Where the token volume is mounted; the kubeconfig above stands for it.
SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
_DELETED, _EXITED = "pod deleted", "exited"  # why a run ends
_MODEL_VOLUME_KINDS: Final = frozenset({"hostPath", "persistentVolumeClaim"})
# (namespace, service, port) -> the local base URL that stands for it, or None (not yet).
ServiceResolver = Callable[[str, str, int], str | None]


# --- the rules, pure ---------------------------------------------------------------------


def service_address(url: str) -> tuple[str, str, int] | None:
    """(namespace, service, port) of ``http://<service>.<namespace>.svc[.cluster.local]:<port>``."""
    parts = urlsplit(url)
    labels = (parts.hostname or "").split(".")
    if labels[2:3] != ["svc"] or labels[3:] not in ([], ["cluster", "local"]):
        return None
    return labels[1], labels[0], parts.port or (443 if parts.scheme == "https" else 80)


def with_option(words: Sequence[str], option: str, value: str) -> list[str]:
    """``words`` with every ``option VALUE`` / ``option=VALUE`` set to ``value``."""
    return [
        value if index and words[index - 1] == option
        else f"{option}={value}" if word.startswith(option + "=")
        else word
        for index, word in enumerate(words)
    ]  # fmt: skip


def bench_argv(
    words: Sequence[str],
    *,
    python: str,
    mounts: Sequence[hostpaths.LocalMount],
    base_url: str | None,
) -> list[str]:
    """The local command for the container's ``words`` (our CLI; paths made local).

    ``mounts`` includes the termination-message file; ``base_url`` replaces the
    ``--base-url`` value when given. DevClusterError when ``words`` is not our CLI.
    """
    args = hostpaths.sparkllm_cli_args(words)
    if args is None:
        raise DevClusterError(f"not the sparkllm CLI: {words[:1]}")
    local = hostpaths.translate_args(args, mounts)
    if base_url is not None:
        local = with_option(local, BASE_URL_OPTION, base_url)
    return [python, "-m", "sparkllm.cli", *local]


def completed_status_patch(
    *, container: str, image: str, exit_code: int, message: str, started_at: str, finished_at: str
) -> JSON:
    """The pod status a kubelet writes when the one container of a Never-restart pod exits
    (strategic merge: ``running``/``waiting`` nulled so one state shows)."""
    succeeded = exit_code == 0
    terminated: JSON = {
        "exitCode": exit_code,
        "reason": "Completed" if succeeded else "Error",
        "startedAt": started_at,
        "finishedAt": finished_at,
    }
    if message:
        terminated["message"] = message
    reason = "PodCompleted" if succeeded else "PodFailed"
    conditions = [
        {"type": kind, "status": "False", "reason": reason, "lastTransitionTime": finished_at}
        for kind in ("Ready", "ContainersReady")
    ]
    entry = {
        "name": container, "image": image, "ready": False, "started": False, "restartCount": 0,
        "state": {"running": None, "waiting": None, "terminated": terminated},
    }  # fmt: skip
    phase = "Succeeded" if succeeded else "Failed"
    return {"status": {"phase": phase, "conditions": conditions, "containerStatuses": [entry]}}


class RunningGateways(Protocol):
    """What the resolver needs of ``GatewayPods``: the gateway pods it runs."""

    def gateways(self) -> tuple[GatewayInfo, ...]: ...


def gateway_service_resolver(gateways: RunningGateways) -> ServiceResolver:
    """Service ``N`` port 8000 -> the admission layer ``gateways`` runs for a pod of ``N``."""

    def resolve(namespace: str, service: str, port: int) -> str | None:
        running = ((g.namespace, g.pod, g.admission_url) for g in gateways.gateways())
        return _gateway_endpoint(running, namespace=namespace, service=service, port=port)

    return resolve


def gateway_file_resolver(state_file: Path) -> ServiceResolver:
    """The same from the endpoints file ``sparkllm-dev gateways`` keeps (``namespace/pod``
    -> admission URL), read at each call: the gateway pods run in another process."""

    def resolve(namespace: str, service: str, port: int) -> str | None:
        try:
            urls = json.loads(state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # not written yet (or being replaced): no endpoint yet
        running = []
        for key, url in urls.items() if isinstance(urls, dict) else ():
            pod_namespace, _, pod = str(key).partition("/")
            running.append((pod_namespace, pod, str(url)))
        return _gateway_endpoint(running, namespace=namespace, service=service, port=port)

    return resolve


def _gateway_endpoint(
    running: Iterable[tuple[str, str, str]], *, namespace: str, service: str, port: int
) -> str | None:
    """The URL of the first (namespace, pod, URL) that is a pod of Deployment ``service``."""
    if port != GATEWAY_HTTP_PORT:
        return None
    deployment_pod = re.compile(rf"{re.escape(service)}-[a-z0-9]+-[a-z0-9]+")
    for pod_namespace, pod, url in running:
        if pod_namespace == namespace and deployment_pod.fullmatch(pod):
            return url
    return None


# --- the shell ---------------------------------------------------------------------------


@dataclass
class _Run:
    uid: str
    key: tuple[str, str]
    container: JSON
    scratch: Path
    log_path: Path
    started_at: str
    process: subprocess.Popen[bytes]


class BenchJobs(PodSupervisor[_Run]):
    """Run every Running benchmark pod's ``sparkllm bench`` once, and report its exit."""

    name, noun = "benchmark pods", "benchmark pod"
    stop_grace_seconds = STOP_GRACE_SECONDS
    retry_seconds = 0.0  # every tick: the gateway's Service may answer any moment

    def __init__(
        self,
        cluster: DevCluster,
        *,
        resolve_service: ServiceResolver,
        namespace: str | None = None,
        model_dir: Path | None = None,
        hosts_root: Path | None = None,
        log_dir: Path | None = None,
        serve_logs: bool = False,
    ) -> None:
        super().__init__()
        self.cluster, self.resolve_service = cluster, resolve_service
        self.serve_logs = serve_logs
        self.namespace, self.model_dir = namespace, model_dir
        self.hosts_root = hosts_root or cluster.paths.state_dir / "hosts"
        self.log_dir = log_dir or cluster.paths.state_dir / "bench-jobs"
        self._done: set[str] = set()  # pods whose process ran (or cannot run): never again
        self._config_blocked: set[str] = set()  # pods shown CreateContainerConfigError
        self._kube: GatewayKube | None = None
        self._workdir: Path | None = None

    # --- the supervisor's hooks --------------------------------------------------------

    def _open(self, resources: ExitStack) -> None:
        self._kube = resources.enter_context(closing(GatewayKube(self.cluster.paths.kubeconfig)))
        self._workdir = scratch_directory(resources, prefix="sparkllm-bench-jobs-")
        if self.serve_logs:
            self._serve_logs(self._kube, root=self.cluster.paths.pod_logs_dir)

    def _list_pods(self) -> dict[str, JSON]:
        assert self._kube is not None
        return pods_by_uid(self._kube.list_pods_by_selector(SELECTOR, namespace=self.namespace))

    def _stop_reason(self, run: _Run, pod: JSON | None) -> str | None:
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return _DELETED  # a cancel, or the Job's deadline
        return _EXITED if run.process.poll() is not None else None

    def _retire(self, run: _Run, *, why: str) -> None:
        """Report an exit (once: the pod is never run again); stop a process still running."""
        if why == _EXITED:
            self._report(run)
        else:
            if why == _DELETED:
                logger.info("Job pod %s/%s deleted: stopping its process", *run.key)
            stop_processes([run.process], grace_seconds=STOP_GRACE_SECONDS)
        self._done.add(run.uid)
        shutil.rmtree(run.scratch, ignore_errors=True)

    def _housekeep(self, pods: Mapping[str, JSON]) -> None:
        self._done &= set(pods)

    def _container_outputs(self, run: _Run) -> dict[str, Path]:
        return {str(run.container.get("name", "")): run.log_path}

    def _may_start(self, uid: str, pod: JSON) -> bool:
        return uid not in self._done and kubelet.should_run(pod)

    def _start_pod(self, uid: str, pod: JSON) -> _Run:
        assert self._kube is not None
        assert self._workdir is not None
        key = pod_key(pod)
        container = dict((pod["spec"].get("containers") or [{}])[0])
        scratch = self._workdir / f"{key[0]}_{key[1]}_{uid}"
        log_path = self.log_dir / f"{key[0]}_{key[1]}.log"
        base = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        as_written = shlex.join([*container.get("command", []), *container.get("args", [])])
        header = f"--- {utc_timestamp()} Job pod {key[0]}/{key[1]}: {as_written}"
        try:
            argv, env = self._command(pod, container, scratch=scratch)
            process = engine_io.spawn_simulator(
                argv, env={**base, **env}, log_path=log_path, header=header
            )
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        logger.info("Job pod %s/%s started", *key)
        return _Run(uid, key, container, scratch, log_path, utc_timestamp(), process)

    def _command(
        self, pod: JSON, container: JSON, *, scratch: Path
    ) -> tuple[list[str], dict[str, str]]:
        """(argv, env) of the container as a local process; its files laid out in ``scratch``.

        DevClusterError while the ``--base-url`` Service has no endpoint here yet.
        """
        assert self._kube is not None
        namespace = str(pod["metadata"]["namespace"])
        refs = kubelet.key_refs(container)
        values = {ref: self._kube.read_key(ref, namespace=namespace) for ref in refs}
        env = kubelet.container_env(pod, container, values=values)
        words = kubelet.command_line(container, env)
        target = option_value(words, BASE_URL_OPTION)
        address = service_address(target) if target else None
        base_url = self.resolve_service(*address) if address else None
        if address is not None and base_url is None:
            raise DevClusterError(f"service {address[1]}.{address[0]} has no endpoint here yet")
        termination_file = scratch / TERMINATION_FILE
        message_path = str(container.get("terminationMessagePath") or "/dev/termination-log")
        mounts = [
            *self._mounts(pod, container, scratch=scratch),
            hostpaths.LocalMount(mount_path=message_path, local=termination_file, kind="file"),
        ]
        argv = bench_argv(words, python=sys.executable, mounts=mounts, base_url=base_url)
        if pod["spec"].get("automountServiceAccountToken"):
            env = {**env, "KUBECONFIG": str(self._account_kubeconfig(pod, scratch=scratch))}
        hostpaths.materialize(mounts)
        termination_file.parent.mkdir(parents=True, exist_ok=True)
        termination_file.write_bytes(b"")
        return argv, env

    def _account_kubeconfig(self, pod: JSON, *, scratch: Path) -> Path:
        """The pod's ServiceAccount as a kubeconfig (what in-cluster config would give)."""
        assert self._kube is not None
        namespace = str(pod["metadata"]["namespace"])
        account = str(pod["spec"].get("serviceAccountName") or "default")
        token = self._kube.service_account_token(account, namespace=namespace)
        admin = yaml.safe_load(self.cluster.paths.kubeconfig.read_text(encoding="utf-8"))
        path = scratch / KUBECONFIG_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(service_account_kubeconfig(admin, token=token)))
        path.chmod(0o600)
        return path

    def _mounts(self, pod: JSON, container: JSON, *, scratch: Path) -> list[hostpaths.LocalMount]:
        """The container's mounts made local; the model volume is ``model_dir`` if given; the
        ServiceAccount token's mount left out."""
        volumes = {str(v["name"]): v for v in pod["spec"].get("volumes") or []}
        model: list[JSON] = []
        rest: list[JSON] = []
        for mount in container.get("volumeMounts") or []:
            if mount.get("mountPath") == SERVICE_ACCOUNT_DIR:
                continue  # the token: KUBECONFIG stands for it (see _account_kubeconfig)
            kinds = set(volumes.get(str(mount["name"])) or {})
            is_model = self.model_dir is not None and bool(kinds & _MODEL_VOLUME_KINDS)
            (model if is_model else rest).append(mount)
        local = hostpaths.plan_mounts(
            pod, {"volumeMounts": rest}, hosts_root=self.hosts_root, scratch=scratch, config_maps={}
        )
        return local + [
            hostpaths.LocalMount(str(m["mountPath"]), self.model_dir or scratch, "hostPath")
            for m in model
        ]

    def _cannot_start(self, pod: JSON, exc: Exception) -> None:
        """A Secret or key the container's env needs is missing: what a kubelet writes,
        the container waiting with CreateContainerConfigError (the operator reads it)."""
        if not isinstance(exc, kubelet.ContainerConfigError) or isinstance(
            exc, hostpaths.VolumeNotReadyError
        ):
            return
        self._config_blocked.add(str(pod["metadata"]["uid"]))
        self._patch_container_state(pod, {"waiting": {
            "reason": "CreateContainerConfigError", "message": str(exc)}})  # fmt: skip

    def _started_after_all(self, pod: JSON) -> None:
        uid = str(pod["metadata"]["uid"])
        if uid in self._config_blocked:  # the Secret came: running, as a kubelet says
            self._config_blocked.discard(uid)
            self._patch_container_state(pod, {"running": {"startedAt": utc_timestamp()}})

    def _patch_container_state(self, pod: JSON, state: JSON) -> None:
        assert self._kube is not None
        container = dict((pod["spec"].get("containers") or [{}])[0])
        entry = {
            "name": container.get("name", ""), "image": container.get("image", ""),
            "ready": False, "restartCount": 0,
            "state": {"running": None, "waiting": None, "terminated": None, **state},
        }  # fmt: skip
        try:
            self._kube.patch_pod_status(
                *pod_key(pod), body={"status": {"containerStatuses": [entry]}}
            )
        except ClusterAPIError as exc:
            if exc.status != 404:
                raise

    def _report(self, run: _Run) -> None:
        """Write the exit into the pod status, as the kubelet would; once."""
        assert self._kube is not None
        code = kubelet.exit_code(run.process.returncode)
        log = _read(run.log_path).split(b"\n", 1)[-1]  # without the header line
        message = init_containers.termination_message(
            policy=str(run.container.get("terminationMessagePolicy") or "File"),
            file_bytes=_read(run.scratch / TERMINATION_FILE),
            log_bytes=log,
            exit_code=code,
        )
        patch = completed_status_patch(
            container=str(run.container.get("name", "")),
            image=str(run.container.get("image", "")),
            exit_code=code,
            message=message,
            started_at=run.started_at,
            finished_at=utc_timestamp(),
        )
        try:
            self._kube.patch_pod_status(run.key[0], run.key[1], body=patch)
        except ClusterAPIError as exc:
            if exc.status != 404:
                raise
        logger.info("Job pod %s/%s exited with %d", *run.key, code)


def run_bench_jobs(cluster: DevCluster, *, namespace: str | None, gateways_file: Path) -> int:
    """``sparkllm-dev jobs``: run benchmark and acceptance pods until SIGINT/SIGTERM, their
    ``--base-url`` resolved from the endpoints file of ``sparkllm-dev gateways``."""
    cli_logging("jobs")
    resolver = gateway_file_resolver(gateways_file)
    jobs = BenchJobs(cluster, resolve_service=resolver, namespace=namespace, serve_logs=True)
    with stop_signal() as stop, jobs:
        stop.wait()
    return 0


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


__all__ = [
    "BenchJobs", "ServiceResolver", "bench_argv", "completed_status_patch",
    "gateway_file_resolver", "gateway_service_resolver", "run_bench_jobs", "service_address",
    "with_option",
]  # fmt: skip
