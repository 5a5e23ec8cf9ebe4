"""Init containers of engine pods, run for real before the engine: our own CLI only.

Why: every rank pod checks its node's model copy in an init container (``sparkllm
verify-model``), and the JSON summary it leaves in its termination message is how the
operator proves ModelVerified across nodes. kwok's pod-ready stage marks init containers
Completed without running them and without a message, so on the dev cluster nothing
would ever be verified. The engine harness therefore runs them like a kubelet, before it
starts the engine's simulator.

What runs: an init container whose command is our own CLI (``sparkllm ARGS`` or ``python
-m sparkllm.cli ARGS``, run as ``<python> -m sparkllm.cli ARGS``) or the bandwidth module
(``bandwidth_step``), ``$(VAR)`` expanded (``kubelet``), container paths translated to the
simulated node's files (``hostpaths``). The harness has no images, so another image's init
container, or one whose volumes it cannot provide (the hostPath is absent on the
simulated node), is not run: it keeps kwok's status (Completed, no message), logged once.
This module owns the status rules (pure, first) and ``InitSequence``, the runner the
supervisor advances once per tick without waiting; ``hostpaths.plan_step`` the command.

Kubelet behaviour mirrored:

- in spec order, one at a time; the engine starts only once every one exited 0.
- ``terminationMessagePath`` (default ``/dev/termination-log``) is a fresh empty file per
  run, and ``--termination-log <that file>`` is appended unless the args name it
  already. Policy ``File``: the message is the file's last 4096 bytes;
  ``FallbackToLogsOnError``: when the file is empty and the exit code is not 0, the
  log's last 80 lines (at most 2048 bytes).
- status: ``waiting: PodInitializing`` before its turn, ``running`` while it runs,
  ``terminated`` (exit code 0, reason Completed, message, times) once it passed;
  condition ``Initialized`` False (ContainersNotInitialized) until all passed; the
  engine ``waiting: PodInitializing`` and not Ready meanwhile.
- a failure under restartPolicy Always (``kubectl`` shows ``Init:CrashLoopBackOff``):
  ``restartCount`` + 1, ``lastState.terminated`` (exit code, reason Error, message),
  ``state.waiting.reason: CrashLoopBackOff``; the same container runs again after the
  kubelet's back-off (10 s doubling to 300 s); those that passed are not run again.

Not mirrored: the pod phase stays Running (a kubelet shows Pending until the init
containers pass, but kwok's pod-ready stage would then mark the pod Running again);
``workingDir``, resources, securityContext and read-only mounts are ignored.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from sparkllm_dev.devcluster import engine_io, hostpaths, kubelet, launch_step
from sparkllm_dev.devcluster.bandwidth_step import is_bandwidth, plan_init_step
from sparkllm_dev.devcluster.kubelet import JSON
from sparkllm_dev.errors import DevClusterError

logger = logging.getLogger(__name__)

TERMINATION_MESSAGE_MAX_BYTES: Final = 4096
FALLBACK_LOG_MAX_BYTES: Final = 2048
FALLBACK_LOG_MAX_LINES: Final = 80
STOP_GRACE_SECONDS: Final = 5.0


# --- the rules, pure ----------------------------------------------------------------


def termination_message(*, policy: str, file_bytes: bytes, log_bytes: bytes, exit_code: int) -> str:
    """What the kubelet puts in ``state.terminated.message``."""
    message = file_bytes[-TERMINATION_MESSAGE_MAX_BYTES:]
    if not message.strip() and exit_code != 0 and policy == "FallbackToLogsOnError":
        lines = log_bytes.splitlines(keepends=True)[-FALLBACK_LOG_MAX_LINES:]
        message = b"".join(lines)[-FALLBACK_LOG_MAX_BYTES:]
    return message.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class InitView:
    """What the pod status says of one init container; the harness derives it."""

    name: str
    image: str
    state: JSON
    restart_count: int = 0
    last_terminated: JSON | None = None
    image_id: str = ""

    @property
    def passed(self) -> bool:
        terminated = self.state.get("terminated") or {}
        return bool(terminated) and terminated.get("exitCode") == 0


def waiting_view(container: Mapping[str, Any], *, restart_count: int = 0) -> InitView:
    return InitView(
        name=str(container["name"]),
        image=str(container.get("image") or ""),
        state={"waiting": {"reason": "PodInitializing"}},
        restart_count=restart_count,
    )


def completed_as_observed(
    pod: Mapping[str, Any], container: Mapping[str, Any], now: str
) -> InitView:
    """A container the harness does not run: as kwok shows it (Completed), kept so."""
    view = waiting_view(container)
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if status.get("name") == view.name and terminated.get("exitCode") == 0:
            return replace(view, state={"terminated": dict(terminated)})
    state = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
    return replace(view, state={"terminated": state})


def exited_view(
    view: InitView, *, returncode: int, message: str, started_at: str, finished_at: str,
    backoff_message: str,
) -> InitView:  # fmt: skip
    """The container after its process exited: Completed, or failed and backing off."""
    terminated = kubelet.terminated_state(
        returncode=returncode, started_at=started_at, finished_at=finished_at
    )
    terminated["message"] = message
    if terminated["exitCode"] == 0:
        return replace(view, state={"terminated": terminated})
    return replace(
        view,
        state={"waiting": {"reason": "CrashLoopBackOff", "message": backoff_message}},
        restart_count=view.restart_count + 1,
        last_terminated=terminated,
    )


def status_entry(view: InitView) -> JSON:
    return {
        "name": view.name,
        "image": view.image,
        **({"imageID": view.image_id} if view.image_id else {}),
        "ready": view.passed,
        "started": "running" in view.state,
        "restartCount": view.restart_count,
        "state": view.state,
        "lastState": {"terminated": view.last_terminated} if view.last_terminated else {},
    }


def with_init_status(
    patch: JSON, pod: Mapping[str, Any], views: Sequence[InitView], *, now: str
) -> JSON:
    """``patch`` (from ``kubelet.status_patch``) plus initContainerStatuses (sent whole,
    replacing kwok's) and the Initialized condition."""
    status = patch["status"]
    pending = [view.name for view in views if not view.passed]
    wanted = "False" if pending else "True"
    previous: JSON = next(
        (
            c
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") == "Initialized"
        ),
        {},
    )
    initialized = {
        "type": "Initialized",
        "status": wanted,
        "reason": "ContainersNotInitialized" if pending else None,
        "message": f"containers with incomplete status: [{' '.join(pending)}]" if pending else None,
        "lastTransitionTime": now
        if previous.get("status") != wanted
        else previous.get("lastTransitionTime", now),
    }
    status["conditions"] = [initialized, *status.get("conditions", [])]
    status["initContainerStatuses"] = [status_entry(view) for view in views]
    return patch


# --- running them -------------------------------------------------------------------


@dataclass(frozen=True)
class InitRun:
    """One finished run of an init container (``EngineHarness.init_runs()``)."""

    namespace: str
    pod: str
    uid: str
    node: str
    container: str
    exit_code: int
    message: str
    log_path: Path


class InitSequence:
    """One pod's init containers, advanced one step per supervisor tick (never waits)."""

    def __init__(
        self,
        *,
        pod: Mapping[str, Any],
        steps: Sequence[hostpaths.InitStep | None],
        views: Sequence[InitView],
        scratch: Path,
        backoff_initial: float,
    ) -> None:
        meta = pod["metadata"]
        self.namespace, self.pod = str(meta["namespace"]), str(meta["name"])
        self.uid, self.node = str(meta["uid"]), str(pod["spec"].get("nodeName") or "")
        self.views = tuple(views)  # steps that are None are already passed
        self._steps = tuple(steps)
        self._scratch = scratch
        self._backoff_initial = backoff_initial
        self._process: subprocess.Popen[bytes] | None = None
        self._index = -1
        self._log_offset = 0
        self._restart_at = 0.0

    @property
    def done(self) -> bool:
        return all(view.passed for view in self.views)

    def outputs(self) -> dict[str, Path]:
        """Container name -> the file its runs write, for each init container run here."""
        return {step.name: step.log_path for step in self._steps if step is not None}

    def poll(self, *, now: str) -> InitRun | None:
        """Reap a finished run (returned), or start the next container when it is due."""
        if self._process is not None:
            returncode = self._process.poll()
            return None if returncode is None else self._finish(returncode, now=now)
        if self.done or time.monotonic() < self._restart_at:
            return None
        self._index = next(i for i, view in enumerate(self.views) if not view.passed)
        step = self._steps[self._index]
        assert step is not None, "a container the harness does not run counts as passed"
        try:
            step.termination_file.parent.mkdir(parents=True, exist_ok=True)
            step.termination_file.write_bytes(b"")  # the kubelet's fresh, empty file
            self._log_offset = step.log_path.stat().st_size if step.log_path.exists() else 0
        except OSError as exc:
            raise DevClusterError(f"init container {step.name}: {exc}") from exc
        self._process = engine_io.spawn_process(
            step.argv,
            env=step.env,
            log_path=step.log_path,
            header=f"--- {now} engine harness: init container {step.name}: {step.as_written}",
        )
        self._set(replace(self.views[self._index], state={"running": {"startedAt": now}}))
        logger.info("init container %s of %s/%s started", step.name, self.namespace, self.pod)
        return None

    def _finish(self, returncode: int, *, now: str) -> InitRun:
        step, view = self._steps[self._index], self.views[self._index]
        assert step is not None
        self._process = None
        file_bytes, log_bytes = _read(step.termination_file), _read(step.log_path)
        code = kubelet.exit_code(returncode)
        message = termination_message(
            policy=step.policy,
            file_bytes=file_bytes,
            log_bytes=log_bytes[self._log_offset :],
            exit_code=code,
        )
        backoff = kubelet.crash_backoff_seconds(
            view.restart_count + 1, initial=self._backoff_initial
        )
        started_at = str((view.state.get("running") or {}).get("startedAt") or now)
        self._set(
            exited_view(
                view,
                returncode=returncode,
                message=message,
                started_at=started_at,
                finished_at=now,
                backoff_message=f"back-off {backoff:g}s restarting failed container="
                f"{step.name} pod={self.pod}_{self.namespace}({self.uid})",
            )
        )
        if code != 0:
            self._restart_at = time.monotonic() + backoff
            logger.warning(
                "init container %s of %s/%s exited with %d; back-off %gs",
                step.name, self.namespace, self.pod, code, backoff,
            )  # fmt: skip
        return InitRun(
            namespace=self.namespace, pod=self.pod, uid=self.uid, node=self.node,
            container=step.name, exit_code=code, message=message, log_path=step.log_path,
        )  # fmt: skip

    def _set(self, view: InitView) -> None:
        self.views = (*self.views[: self._index], view, *self.views[self._index + 1 :])

    def close(self) -> None:
        """Stop a running init container (SIGTERM, then SIGKILL) and drop the scratch dir."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self._scratch, ignore_errors=True)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def build_sequence(
    pod: Mapping[str, Any],
    *,
    kube: engine_io.KubeClient,
    hosts_root: Path,
    log_dir: Path,
    python: str,
    base_env: Mapping[str, str],
    backoff_initial: float,
    now: str,
) -> InitSequence | None:
    """The init containers of ``pod`` the harness runs; None when it runs none of them.

    Raises ``kubelet.ContainerConfigError`` (a Secret/ConfigMap it needs is missing) or
    ClusterAPIError: the caller retries later.
    """
    containers = (pod.get("spec") or {}).get("initContainers") or []
    meta = pod["metadata"]
    prefix = f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
    if not containers:
        return None
    scratch = Path(tempfile.mkdtemp(prefix=f"sparkllm-init-{meta['name']}-"))
    steps: list[hostpaths.InitStep | None] = []
    views: list[InitView] = []
    try:
        for container in containers:
            as_written = [*(container.get("command") or []), *(container.get("args") or [])]
            step, why = (
                None,
                "its command is not the sparkllm CLI, the bandwidth module nor the launch check",
            )
            if (
                hostpaths.sparkllm_cli_args(as_written) is not None
                or is_bandwidth(as_written)
                or launch_step.is_launch_check(as_written)
            ):
                log_path = log_dir / f"{prefix}.{container['name']}.log"
                step, why = _plan(pod, container, kube=kube, hosts_root=hosts_root,
                                  scratch=scratch, python=python, base_env=base_env,
                                  log_path=log_path)  # fmt: skip
            if step is None:
                logger.info(
                    "init container %s of %s/%s not run (kwok's status stands): %s",
                    container["name"], meta["namespace"], meta["name"], why,
                )  # fmt: skip
                views.append(completed_as_observed(pod, container, now))
            else:
                views.append(waiting_view(container, restart_count=_restarts(pod, step.name)))
            digest = launch_step.node_image(pod, hosts_root=hosts_root).get("digest")
            views[-1] = replace(
                views[-1], image_id=kubelet.image_id(views[-1].image, node_digest=digest)
            )
            steps.append(step)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if all(step is None for step in steps):
        shutil.rmtree(scratch, ignore_errors=True)
        return None
    return InitSequence(
        pod=pod, steps=steps, views=views, scratch=scratch, backoff_initial=backoff_initial
    )


def _plan(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    kube: engine_io.KubeClient,
    hosts_root: Path,
    scratch: Path,
    python: str,
    base_env: Mapping[str, str],
    log_path: Path,
) -> tuple[hostpaths.InitStep | None, str]:
    """Resolve env and volumes of one of our init containers: (step, why it is None)."""
    namespace = str(pod["metadata"]["namespace"])
    values = {ref: kube.read_key(ref, namespace=namespace) for ref in kubelet.key_refs(container)}
    env = kubelet.container_env(pod, container, values=values)
    config_maps = {
        name: kube.read_config_map(name, namespace=namespace)
        for name in hostpaths.config_map_names(pod, container)
    }
    try:
        mounts = hostpaths.plan_mounts(
            pod, container, hosts_root=hosts_root, scratch=scratch, config_maps=config_maps
        )
        hostpaths.materialize(mounts)
    except hostpaths.VolumeUnavailableError as exc:
        return None, str(exc)
    launch = launch_step.plan_step(
        pod, container, env={**base_env, **env}, scratch=scratch, python=python,
        log_path=log_path, hosts_root=hosts_root,
    )  # fmt: skip
    if launch is not None:
        return launch, ""
    return plan_init_step(  # our CLI, or the bandwidth module (bandwidth_step)
        pod, container, env={**base_env, **env}, mounts=mounts, scratch=scratch,
        python=python, log_path=log_path,
    )  # fmt: skip


def _restarts(pod: Mapping[str, Any], name: str) -> int:
    """The restart count the pod shows for init container ``name`` (never written down)."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") == name:
            return int(status.get("restartCount") or 0)
    return 0
