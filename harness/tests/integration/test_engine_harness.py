"""The engine harness on the real control plane: kwok runs the pod, the simulator the engine.

Each test creates, in its own namespace, one-pod StatefulSets shaped like the operator's
rank StatefulSets and runs a harness scoped to that namespace (so other engineers' pods
on the shared dev cluster are never touched), with the simulated nodes' files under the
test's own temporary directory. The first tests pin the kubelet's rules
(``devcluster.kubelet``, ``hostpaths``, ``init_containers``) with plain asserts; they
need no cluster.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.test_reconcile import sample
from tests.unit.test_integrity_fixtures import make_model_dir, shard_name

from sparkllm.api import validate_inference_cluster
from sparkllm.integrity import ModelSummary
from sparkllm.render.ranks import EngineKeyRef, ReplicaPlan, render_rank_statefulset
from sparkllm_dev.devcluster import ContainerFault, DevCluster, FaultInjector, kubelet, wait_until
from sparkllm_dev.devcluster import hostpaths as hp
from sparkllm_dev.devcluster import init_containers as ic
from sparkllm_dev.devcluster.engines import EngineHarness, EngineInfo
from sparkllm_dev.errors import DevClusterError

# The tests' dev cluster's addresses (the plugin chose its profile before this import).
RANK0_NODE, RANK0_IP = "spark-b0", DevCluster().node_ip("spark-b0")
WORKER_NODE, WORKER_IP = "spark-b1", DevCluster().node_ip("spark-b1")
KEY_ENV = "SPARKLLM_ENGINE_API_KEY"
STARTUP_SECONDS = 4  # the simulator's /health answers 503 this long: the not-Ready window
DEADLINE = 90  # seconds; generous, the machine is busy


# --- the kubelet's rules, pure --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("--api-key $(KEY)", "--api-key s3cret"),
        ("$(KEY)$(KEY)", "s3crets3cret"),
        ("$(MISSING)", "$(MISSING)"),  # undefined: left as written
        ("$$(KEY)", "$(KEY)"),  # escaped
        ("$$$(KEY)", "$s3cret"),
        ("cost $5", "cost $5"),
        ("$(KEY", "$(KEY"),  # unterminated
        ("end$", "end$"),
        ("", ""),
    ],
)
def test_references_expand_like_the_kubelet(text: str, expanded: str) -> None:
    assert kubelet.expand_references(text, {"KEY": "s3cret"}) == expanded


def _env_pod(env: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"nodeName": "spark-b0", "containers": [{"name": "engine", "env": env}]},
        "status": {"hostIP": RANK0_IP, "podIP": RANK0_IP},
    }


def test_container_env_resolves_values_refs_and_fields_in_order() -> None:
    secret = kubelet.KeyRef(kind="Secret", name="k", key="token")
    optional = kubelet.KeyRef(kind="ConfigMap", name="c", key="gone", optional=True)
    pod = _env_pod(
        [
            {"name": "A", "value": "1"},
            {"name": "B", "value": "$(A)-$(C)"},  # C is defined later: stays verbatim
            {"name": "C", "value": "3"},
            {"name": KEY_ENV, "valueFrom": {"secretKeyRef": {"name": "k", "key": "token"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {
                "name": "OPT",
                "valueFrom": {"configMapKeyRef": {"name": "c", "key": "gone", "optional": True}},
            },
        ]
    )
    container = pod["spec"]["containers"][0]
    assert kubelet.key_refs(container) == [secret, optional]
    env = kubelet.container_env(pod, container, values={secret: "s3cret", optional: None})
    assert env == {"A": "1", "B": "1-$(C)", "C": "3", KEY_ENV: "s3cret", "IP": RANK0_IP}


def test_a_missing_required_secret_key_keeps_the_container_from_starting() -> None:
    pod = _env_pod([{"name": "K", "valueFrom": {"secretKeyRef": {"name": "k", "key": "t"}}}])
    with pytest.raises(kubelet.ContainerConfigError, match="secret 'k' has no key 't'"):
        kubelet.container_env(pod, pod["spec"]["containers"][0], values={})


@pytest.mark.parametrize(
    ("returncode", "code", "reason"), [(0, 0, "Completed"), (1, 1, "Error"), (-9, 137, "Error")]
)
def test_exit_shows_as_a_container_exit(returncode: int, code: int, reason: str) -> None:
    state = kubelet.terminated_state(returncode=returncode, started_at="t0", finished_at="t1")
    assert (state["exitCode"], state["reason"]) == (code, reason)


@pytest.mark.parametrize(("restarts", "seconds"), [(1, 10), (2, 20), (3, 40), (6, 300), (9, 300)])
def test_crash_backoff_doubles_to_five_minutes(restarts: int, seconds: float) -> None:
    assert kubelet.crash_backoff_seconds(restarts) == seconds


def test_status_patch_moves_transition_time_only_on_a_flip() -> None:
    pod = _env_pod([])
    pod["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "t0"},
        {"type": "ContainersReady", "status": "False", "lastTransitionTime": "t0"},
    ]
    view = kubelet.ContainerView(running_since="t1", ready=False, restart_count=0)
    patch = kubelet.status_patch(pod, "engine", view, now="t2")["status"]
    times = {c["type"]: (c["status"], c["lastTransitionTime"]) for c in patch["conditions"]}
    assert times == {"Ready": ("False", "t2"), "ContainersReady": ("False", "t0")}
    [entry] = patch["containerStatuses"]
    assert entry["state"] == {"running": {"startedAt": "t1"}}
    assert (entry["ready"], entry["started"], entry["restartCount"]) == (False, True, 0)


@pytest.mark.parametrize(
    ("http_get", "url"),
    [
        ({"path": "/health", "port": 30000}, f"http://{RANK0_IP}:30000/health"),
        ({"path": "health", "port": "http"}, f"http://{RANK0_IP}:30000/health"),  # named port
        ({"port": "30000", "host": "127.0.0.5"}, "http://127.0.0.5:30000/"),
        ({"port": "metrics"}, None),  # no such container port: no probe
    ],
)
def test_readiness_probe_resolves_to_the_node_address(
    http_get: dict[str, Any], url: str | None
) -> None:
    pod = _env_pod([])
    container = {"ports": [{"name": "http", "containerPort": 30000}]}
    container["readinessProbe"] = {"httpGet": http_get, "failureThreshold": 5}
    probe = kubelet.readiness_probe(pod, container)
    assert (probe.url if probe else None) == url
    if probe is not None:
        assert (probe.timeout_seconds, probe.failure_threshold, probe.success_threshold) == (
            1.0,
            5,
            1,
        )


def test_a_restart_the_pod_already_shows_is_adopted_not_erased() -> None:
    pod = _env_pod([])
    last = {"exitCode": 137, "reason": "OOMKilled"}
    pod["status"]["containerStatuses"] = [
        {"name": "engine", "restartCount": 1, "lastState": {"terminated": last}}
    ]
    view = kubelet.ContainerView(running_since="t1", ready=True, restart_count=0)
    adopted = kubelet.with_observed_restarts(view, pod, "engine")
    assert (adopted.restart_count, adopted.last_terminated) == (1, last)
    crashed = kubelet.after_exit(adopted, returncode=1, finished_at="t2", backoff_seconds=20)
    assert crashed.restart_count == 2
    assert crashed.last_terminated == {
        "exitCode": 1,
        "reason": "Error",
        "startedAt": "t1",
        "finishedAt": "t2",
    }
    assert (crashed.running_since, crashed.ready) == (None, False)
    assert kubelet.with_observed_restarts(crashed, pod, "engine") == crashed


# --- init containers and the simulated nodes' files, pure -----------------------------

HOSTS = Path("/hosts")


@pytest.mark.parametrize(
    ("node", "path", "local"),
    [
        ("spark-a1", "/models/M", "/hosts/spark-a1/models/M"),
        ("spark-b2", "/models/M/", "/hosts/spark-b2/models/M"),
        ("spark-b2", "/", "/hosts/spark-b2"),
        ("spark-a1", "models/M", None),  # relative
        ("spark-a1", "/models/../etc", None),  # escapes
        ("", "/models/M", None),  # no node
    ],
)
def test_a_host_path_lives_under_its_node(node: str, path: str, local: str | None) -> None:
    if local is None:
        with pytest.raises(hp.VolumeUnavailableError):
            hp.host_path(HOSTS, node=node, path=path)
    else:
        assert hp.host_path(HOSTS, node=node, path=path) == Path(local)


def _volume_pod(volumes: list[dict[str, Any]], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    pod = _env_pod([])
    pod["spec"]["volumes"] = volumes
    pod["spec"]["containers"][0]["volumeMounts"] = mounts
    return pod


def test_each_volume_kind_maps_to_a_local_path() -> None:
    pod = _volume_pod(
        [
            {"name": "model", "hostPath": {"path": "/models/M", "type": "Directory"}},
            {"name": "sums", "configMap": {"name": "cm", "items": [{"key": "S", "path": "x/s"}]}},
            {"name": "all", "configMap": {"name": "cm"}},
            {"name": "scratch", "emptyDir": {}},
            {
                "name": "api",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"path": "token"}},
                        {"configMap": {"name": "cm", "items": [{"key": "S", "path": "ca.crt"}]}},
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ]
                },
            },
        ],
        [
            {"name": "model", "mountPath": "/models/M", "readOnly": True},
            {"name": "model", "mountPath": "/shard", "subPath": "a.safetensors"},
            {"name": "sums", "mountPath": "/etc/sums"},
            {"name": "all", "mountPath": "/etc/all"},
            {"name": "scratch", "mountPath": "/tmp/w"},
            {"name": "api", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ],
    )
    config_map = {"data": {"S": "abc"}, "binaryData": {"B": base64.b64encode(b"\0\1").decode()}}
    mounts = hp.plan_mounts(
        pod,
        pod["spec"]["containers"][0],
        hosts_root=HOSTS,
        scratch=Path("/s"),
        config_maps={"cm": config_map},
    )
    assert [(m.mount_path, str(m.local), m.kind) for m in mounts] == [
        ("/models/M", "/hosts/spark-b0/models/M", "hostPath"),
        ("/shard", "/hosts/spark-b0/models/M/a.safetensors", "hostPath"),
        ("/etc/sums", "/s/volumes/sums", "configMap"),
        ("/etc/all", "/s/volumes/all", "configMap"),
        ("/tmp/w", "/s/volumes/scratch", "emptyDir"),
        ("/var/run/secrets/kubernetes.io/serviceaccount", "/s/volumes/api", "projected"),
    ]
    assert dict(mounts[2].files) == {"x/s": b"abc"}
    assert dict(mounts[3].files) == {"S": b"abc", "B": b"\0\1"}
    assert dict(mounts[5].files) == {"ca.crt": b"abc", "namespace": b"ns"}  # no token
    assert hp.config_map_names(pod, pod["spec"]["containers"][0]) == ["cm"]


@pytest.mark.parametrize(
    ("volume", "config_maps"),
    [
        ({"persistentVolumeClaim": {"claimName": "c"}}, {}),
        ({"secret": {"secretName": "s"}}, {}),
        ({"hostPath": {"path": "relative"}}, {}),
    ],
)
def test_volumes_it_does_not_provide(volume: dict[str, Any], config_maps: dict[str, Any]) -> None:
    pod = _volume_pod([{"name": "v", **volume}], [{"name": "v", "mountPath": "/v"}])
    with pytest.raises(hp.VolumeUnavailableError):
        hp.plan_mounts(
            pod, pod["spec"]["containers"][0], hosts_root=HOSTS, scratch=Path("/s"),
            config_maps=config_maps,
        )  # fmt: skip


@pytest.mark.parametrize(
    ("source", "config_map"),
    [
        ({"name": "cm"}, None),
        ({"name": "cm", "items": [{"key": "K"}]}, {"data": {"J": "1"}}),
    ],
)
def test_a_missing_config_map_or_key_holds_the_container(
    tmp_path: Path, source: dict[str, Any], config_map: dict[str, Any] | None
) -> None:
    pod = _volume_pod([{"name": "v", "configMap": source}], [{"name": "v", "mountPath": "/v"}])
    container = pod["spec"]["containers"][0]
    mounts = hp.plan_mounts(
        pod, container, hosts_root=tmp_path, scratch=tmp_path, config_maps={"cm": config_map}
    )
    with pytest.raises(hp.VolumeNotReadyError, match="configmap 'cm'"):
        hp.materialize(mounts)


def test_an_absent_host_path_outranks_a_missing_config_map(tmp_path: Path) -> None:
    """The dev cluster's nodes hold no model by default: such a container is not run at
    all, rather than retried forever for its checksum manifest."""
    pod = _volume_pod(
        [
            {"name": "sums", "configMap": {"name": "cm"}},
            {"name": "model", "hostPath": {"path": "/models/M", "type": "Directory"}},
        ],
        [{"name": "sums", "mountPath": "/sums"}, {"name": "model", "mountPath": "/models/M"}],
    )
    container = pod["spec"]["containers"][0]
    mounts = hp.plan_mounts(
        pod, container, hosts_root=tmp_path, scratch=tmp_path, config_maps={"cm": None}
    )
    with pytest.raises(hp.VolumeUnavailableError, match="absent on this node"):
        hp.materialize(mounts)
    (tmp_path / "spark-b0" / "models" / "M").mkdir(parents=True)
    with pytest.raises(hp.VolumeNotReadyError):
        hp.materialize(mounts)


def test_volumes_are_written_where_their_mounts_point(tmp_path: Path) -> None:
    pod = _volume_pod(
        [{"name": "sums", "configMap": {"name": "cm"}}, {"name": "w", "emptyDir": {}}],
        [
            {"name": "sums", "mountPath": "/etc/S", "subPath": "S"},
            {"name": "w", "mountPath": "/w"},
            {"name": "w", "mountPath": "/w2", "subPath": "sub"},
        ],
    )
    mounts = hp.plan_mounts(
        pod, pod["spec"]["containers"][0], hosts_root=tmp_path, scratch=tmp_path / "s",
        config_maps={"cm": {"data": {"S": "sums", "T": "t"}}},
    )  # fmt: skip
    hp.materialize(mounts)
    assert Path(hp.translate_path("/etc/S", mounts)).read_text() == "sums"
    assert (tmp_path / "s" / "volumes" / "sums" / "T").read_text() == "t"
    assert Path(hp.translate_path("/w", mounts)).is_dir()
    assert hp.translate_path("/w2/x", mounts) == f"{tmp_path}/s/volumes/w/sub/x"


def test_an_optional_config_map_may_be_missing() -> None:
    volume = {"name": "v", "configMap": {"name": "cm", "optional": True}}
    pod = _volume_pod([volume], [{"name": "v", "mountPath": "/v"}])
    container = pod["spec"]["containers"][0]
    [mount] = hp.plan_mounts(
        pod, container, hosts_root=HOSTS, scratch=Path("/s"), config_maps={"cm": None}
    )
    assert (mount.files, mount.missing) == ({}, "")


@pytest.mark.parametrize(
    ("word", "translated"),
    [
        ("/models/M", "/hosts/n/M"),
        ("/models/M/config.json", "/hosts/n/M/config.json"),
        ("--model-dir=/models/M", "--model-dir=/hosts/n/M"),
        ("/models/M-other", "/models/M-other"),  # a sibling, not under the mount
        ("/models", "/models"),
        ("/etc/sums/SHA256SUMS", "/s/sums/SHA256SUMS"),
        ("/models/M/nested/x", "/s/nested/x"),  # the longest mountPath wins
        ("verify-model", "verify-model"),
        ("a=/models/M", "a=/models/M"),  # only --flag=VALUE is split
    ],
)
def test_arguments_translate_by_mount_path_prefix(word: str, translated: str) -> None:
    mounts = [
        hp.LocalMount(mount_path="/models/M", local=Path("/hosts/n/M"), kind="hostPath"),
        hp.LocalMount(mount_path="/etc/sums/", local=Path("/s/sums"), kind="configMap"),
        hp.LocalMount(mount_path="/models/M/nested", local=Path("/s/nested"), kind="emptyDir"),
    ]
    assert hp.translate_path(word, mounts) == translated


@pytest.mark.parametrize(
    ("words", "args"),
    [
        (["sparkllm", "verify-model", "--x"], ["verify-model", "--x"]),
        (["/usr/local/bin/sparkllm", "plan"], ["plan"]),
        (["python3", "-m", "sparkllm.cli", "verify-model"], ["verify-model"]),
        (["sh", "-c", "sparkllm verify-model"], None),
        (["python3", "-m", "sglang.launch_server"], None),
        ([], None),
    ],
)
def test_only_our_own_cli_runs(words: list[str], args: list[str] | None) -> None:
    assert hp.sparkllm_cli_args(words) == args


def _rendered_rank_pod(*, checksums: bool) -> dict[str, Any]:
    """The pod the operator's real render gives rank 1 of the sample, bound to spark-a1."""
    doc = sample(["spark-a0", "spark-a1", "spark-a2"])
    if checksums:
        doc["spec"]["model"]["checksums"] = {"configMapRef": {"name": "sums"}}
    cluster = validate_inference_cluster({**doc, "metadata": {"name": "m", "namespace": "ns"}})
    plan = ReplicaPlan(
        index=0, group_key="g", nodes=("spark-a0", "spark-a1", "spark-a2"),
        rank0_ip=DevCluster().node_ip("spark-a0"), generation=1,
    )  # fmt: skip
    sts = render_rank_statefulset(cluster, plan=plan, rank=1, engine_key=EngineKeyRef("k", "t"))
    spec = {**sts["spec"]["template"]["spec"], "nodeName": "spark-a1"}
    return {"metadata": {"name": "m-r0-rank1-0", "namespace": "ns", "uid": "u1"}, "spec": spec}


def test_the_rendered_verify_container_runs_our_cli_on_the_nodes_files() -> None:
    pod = _rendered_rank_pod(checksums=True)
    [container] = pod["spec"]["initContainers"]
    mounts = hp.plan_mounts(
        pod, container, hosts_root=HOSTS, scratch=Path("/s"), config_maps={"sums": {"data": {}}}
    )
    step = hp.plan_step(
        pod, container, env={}, mounts=mounts, scratch=Path("/s"), python="py",
        log_path=Path("/l"),
    )  # fmt: skip
    assert step is not None
    model = "/hosts/spark-a1/models/DeepSeek-V4-Flash-NVFP4"
    assert step.argv == (
        "py", "-m", "sparkllm.cli", "verify-model", "--model-dir", model,
        "--expected-shards", "46", "--expected-layers", "43",
        "--checksums", "/s/volumes/checksums/SHA256SUMS",
        "--termination-log", "/s/termination/verify-model",
    )  # fmt: skip
    assert step.policy == "File"
    assert step.as_written.startswith("sparkllm verify-model --model-dir /models/")


def test_an_explicit_termination_log_is_the_kubelets_file() -> None:
    container = {"name": "c", "command": ["sparkllm"], "args": ["x", "--termination-log=/dev/t"]}
    container["terminationMessagePath"] = "/dev/t"
    step = hp.plan_step(
        _env_pod([]), container, env={}, mounts=[], scratch=Path("/s"), python="py",
        log_path=Path("/l"),
    )  # fmt: skip
    assert step is not None
    assert step.argv[3:] == ("x", "--termination-log=/s/termination/c")


def test_the_engine_model_dir_is_offered_not_rewritten(tmp_path: Path) -> None:
    pod = _rendered_rank_pod(checksums=False)
    [engine] = pod["spec"]["containers"]
    command = kubelet.command_line(engine, {})
    assert hp.model_dir_env(pod, engine, command, hosts_root=tmp_path) == {}  # absent
    local = tmp_path / "spark-a1" / "models" / "DeepSeek-V4-Flash-NVFP4"
    local.mkdir(parents=True)
    env = hp.model_dir_env(pod, engine, command, hosts_root=tmp_path)
    assert env == {hp.SIM_MODEL_DIR_ENV: str(local)}
    assert "/models/DeepSeek-V4-Flash-NVFP4" in command  # --model-path stays as the spec has it


@pytest.mark.parametrize(
    ("policy", "file_bytes", "log_bytes", "code", "message"),
    [
        ("File", b'{"ok":true}', b"log", 0, '{"ok":true}'),
        ("File", b"", b"boom", 1, ""),
        ("FallbackToLogsOnError", b"", b"a\nboom\n", 1, "a\nboom\n"),
        ("FallbackToLogsOnError", b"", b"fine\n", 0, ""),  # only on failure
        ("FallbackToLogsOnError", b"msg", b"boom", 1, "msg"),
        ("File", b"x" * 5000 + b"END", b"", 0, "x" * 4093 + "END"),  # the last 4096 bytes
        ("FallbackToLogsOnError", b"", b"".join(b"%d\n" % i for i in range(100)), 1,
         "".join(f"{i}\n" for i in range(20, 100))),  # the last 80 lines
    ],
)  # fmt: skip
def test_the_termination_message_follows_the_policy(
    policy: str, file_bytes: bytes, log_bytes: bytes, code: int, message: str
) -> None:
    got = ic.termination_message(
        policy=policy, file_bytes=file_bytes, log_bytes=log_bytes, exit_code=code
    )
    assert got == message


def test_init_statuses_replace_kwoks_and_gate_the_pod() -> None:
    pod = _env_pod([])
    pod["status"]["conditions"] = [
        {"type": "Initialized", "status": "True", "lastTransitionTime": "t0"},
    ]
    pod["status"]["initContainerStatuses"] = [
        {"name": "verify", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    ]
    container = {"name": "verify", "image": "img"}
    waiting = ic.waiting_view(container)
    failed = ic.exited_view(
        replace(waiting, state={"running": {"startedAt": "t1"}}),
        returncode=1, message='{"ok":false}', started_at="t1", finished_at="t2",
        backoff_message="back-off 10s restarting failed container=verify",
    )  # fmt: skip
    assert (failed.passed, failed.restart_count) == (False, 1)
    assert failed.state == {
        "waiting": {
            "reason": "CrashLoopBackOff",
            "message": "back-off 10s restarting failed container=verify",
        }
    }
    assert failed.last_terminated == {
        "exitCode": 1, "reason": "Error", "message": '{"ok":false}',
        "startedAt": "t1", "finishedAt": "t2",
    }  # fmt: skip
    engine = kubelet.ContainerView(
        running_since=None, ready=False, restart_count=0, waiting_reason="PodInitializing"
    )
    body = kubelet.status_patch(pod, "engine", engine, now="t3")
    status = ic.with_init_status(body, pod, [failed], now="t3")["status"]
    [entry] = status["initContainerStatuses"]
    assert (entry["ready"], entry["restartCount"], entry["lastState"]) == (
        False, 1, {"terminated": failed.last_terminated},
    )  # fmt: skip
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Initialized"]["status"] == "False"
    assert conditions["Initialized"]["lastTransitionTime"] == "t3"
    assert conditions["Initialized"]["message"] == "containers with incomplete status: [verify]"
    assert conditions["Ready"]["status"] == "False"
    [engine_entry] = status["containerStatuses"]
    assert engine_entry["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert engine_entry["started"] is False

    passed = ic.exited_view(
        failed, returncode=0, message='{"ok":true}', started_at="t4", finished_at="t5",
        backoff_message="",
    )  # fmt: skip
    assert passed.passed
    assert passed.restart_count == 1  # a success does not reset the count
    assert passed.state["terminated"]["message"] == '{"ok":true}'
    pod["status"]["conditions"] = status["conditions"]
    status = ic.with_init_status({"status": {"conditions": []}}, pod, [passed], now="t6")["status"]
    initialized = next(c for c in status["conditions"] if c["type"] == "Initialized")
    assert (initialized["status"], initialized["lastTransitionTime"]) == ("True", "t6")
    assert status["initContainerStatuses"][0]["ready"] is True


def test_a_container_the_harness_does_not_run_keeps_kwoks_completion() -> None:
    pod = _env_pod([])
    kwok = {"exitCode": 0, "reason": "Completed", "startedAt": "t0", "finishedAt": "t0"}
    pod["status"]["initContainerStatuses"] = [{"name": "other", "state": {"terminated": kwok}}]
    kept = ic.completed_as_observed(pod, {"name": "other", "image": "busybox"}, "t9")
    assert (kept.passed, kept.state) == (True, {"terminated": kwok})
    made = ic.completed_as_observed(pod, {"name": "absent", "image": "busybox"}, "t9")
    assert made.passed
    assert made.state["terminated"]["finishedAt"] == "t9"


# --- the harness on the dev cluster ----------------------------------------------------


def _rank_statefulset(
    name: str, *, node: str, node_rank: int, nnodes: int, key_secret: str | None
) -> dict[str, Any]:
    """A one-pod StatefulSet shaped like the operator's rank ``node_rank``."""
    args = [
        "--model-path", "/models/x", "--served-model-name", "m", "--nnodes", str(nnodes),
        "--node-rank", str(node_rank), "--pp-size", str(nnodes), "--tp-size", "1",
        "--host", "0.0.0.0", "--port", "30000", "--enable-metrics",
    ]  # fmt: skip
    env: list[dict[str, Any]] = [{"name": "SGLANG_PP_LAYER_PARTITION", "value": "20,23"}]
    container: dict[str, Any] = {
        "name": "engine",
        "image": "registry.invalid/sglang:0.5.23",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": args,
        "env": env,
        "ports": [{"name": "http", "containerPort": 30000}],
    }
    if nnodes > 1:
        args += ["--dist-init-addr", f"{RANK0_IP}:5000"]
    if key_secret is not None:
        args.append(f"--api-key=$({KEY_ENV})")  # one word, as the operator renders it
        env.append(
            {"name": KEY_ENV, "valueFrom": {"secretKeyRef": {"name": key_secret, "key": "token"}}}
        )
        container["readinessProbe"] = {
            "httpGet": {"path": "/health", "port": 30000, "scheme": "HTTP"},
            "periodSeconds": 10,
            "timeoutSeconds": 25,
        }
    labels = {
        "app": name,
        "app.kubernetes.io/component": "engine",
        "sparkllm.io/rank": str(node_rank),
    }
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [term]
                            }
                        }
                    },
                    "containers": [container],
                },
            },
        },
    }


def _apply(cluster: DevCluster, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))


def _pod(cluster: DevCluster, namespace: str, name: str) -> dict[str, Any] | None:
    found = cluster.kubectl("get", "-n", namespace, "pod", name, "-o", "json", check=False)
    if found.returncode != 0:
        return None
    pod: dict[str, Any] = json.loads(found.stdout)
    return pod


def _ready(pod: dict[str, Any] | None) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _container(pod: dict[str, Any] | None) -> dict[str, Any]:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def _get(url: str) -> int | None:
    """The HTTP status at ``url``, or None when nothing answers."""
    try:
        return httpx.get(url, timeout=5, trust_env=False).status_code
    except httpx.HTTPError:
        return None


def _engine(harness: EngineHarness, pod: str) -> EngineInfo | None:
    return next((e for e in harness.engines() if e.pod == pod and e.pid is not None), None)


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


@contextlib.contextmanager
def _running_harness(
    devcluster: DevCluster, namespace: str, tmp_path: Path, *, crash_backoff_seconds: float = 10.0
) -> Iterator[EngineHarness]:
    for url in (f"http://{RANK0_IP}:30000/health", f"http://{WORKER_IP}:30000/health"):
        assert _get(url) is None, f"something already listens at {url}: another harness?"
    engines = EngineHarness(
        devcluster,
        namespace=namespace,
        sim_args=["--sim-startup-seconds", str(STARTUP_SECONDS)],
        log_dir=tmp_path / "engines",
        hosts_root=tmp_path / "hosts",
        crash_backoff_seconds=crash_backoff_seconds,
    )
    try:
        engines.start()
    except DevClusterError as exc:
        pytest.fail(f"engine harness did not start: {exc}")
    yield engines
    running = [e.pid for e in engines.engines() if e.pid is not None]
    engines.stop()
    assert engines.engines() == ()
    assert [pid for pid in running if _alive(pid)] == [], "stop() left a simulator behind"


@pytest.fixture
def harness(devcluster: DevCluster, namespace: str, tmp_path: Path) -> Iterator[EngineHarness]:
    with _running_harness(devcluster, namespace, tmp_path) as engines:
        yield engines


@pytest.fixture
def engine_key(devcluster: DevCluster, namespace: str) -> str:
    """A Secret ``engine-key`` with a random ``token``; returns the token."""
    token = secrets.token_hex(16)
    devcluster.kubectl(
        "create",
        "secret",
        "generic",
        "engine-key",
        "-n",
        namespace,
        f"--from-literal=token={token}",
    )
    stored = devcluster.kubectl_json("get", "secret", "engine-key", "-n", namespace)
    assert base64.b64decode(stored["data"]["token"]).decode() == token
    return token


def _apply_rank0(devcluster: DevCluster, namespace: str) -> None:
    rank0 = _rank_statefulset("r0", node=RANK0_NODE, node_rank=0, nnodes=1, key_secret="engine-key")
    _apply(devcluster, namespace, rank0)


def _ready_pod(devcluster: DevCluster, namespace: str, name: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        pod = _pod(devcluster, namespace, name)
        return pod if _ready(pod) else None

    return wait_until(ready, timeout=DEADLINE, what=f"pod {name} Ready")


def _start_rank0(devcluster: DevCluster, namespace: str, harness: EngineHarness) -> EngineInfo:
    _apply_rank0(devcluster, namespace)
    engine = wait_until(lambda: _engine(harness, "r0-0"), timeout=DEADLINE, what="rank 0 engine")
    _ready_pod(devcluster, namespace, "r0-0")
    return engine


@pytest.mark.cluster
def test_rank0_is_ready_only_once_health_answers_and_its_key_comes_from_the_secret(
    devcluster: DevCluster, namespace: str, harness: EngineHarness, engine_key: str
) -> None:
    _apply_rank0(devcluster, namespace)
    engine = wait_until(lambda: _engine(harness, "r0-0"), timeout=DEADLINE, what="rank 0 engine")
    assert engine.node_ip == RANK0_IP
    # From here on the harness owns readiness (kwok's first status said Ready at once).
    seen_unready_while_starting = []

    def ready_implies_health() -> bool:
        pod = _pod(devcluster, namespace, "r0-0")  # pod first, then /health: never stale
        health = _get(f"http://{RANK0_IP}:30000/health")
        if _ready(pod):
            assert health == 200, "pod Ready while its engine's /health does not answer 200"
            assert _container(pod)["ready"] is True
            return True
        if health != 200:
            seen_unready_while_starting.append(health)
        return False

    wait_until(ready_implies_health, timeout=DEADLINE, interval=0.05, what="rank 0 Ready")
    assert seen_unready_while_starting, "never saw the pod not Ready while the engine started"

    models = f"http://{RANK0_IP}:30000/v1/models"
    with httpx.Client(trust_env=False, timeout=5) as client:
        served = client.get(models, headers={"Authorization": f"Bearer {engine_key}"})
        assert served.status_code == 200
        assert [m["id"] for m in served.json()["data"]] == ["m"]
        assert client.get(models).status_code == 401
        assert client.get(models, headers={"Authorization": "Bearer $(X)"}).status_code == 401
    log = engine.log_path.read_text()
    assert "SIMULATOR" in log
    assert "role=rank 0 HTTP API" in log
    assert f"$({KEY_ENV})" in log
    assert engine_key not in log


@pytest.mark.cluster
@pytest.mark.usefixtures("engine_key")
@pytest.mark.parametrize("ending", ["deleted", "failed"])
def test_an_ended_pod_stops_its_simulator_and_its_replacement_gets_a_new_one(
    devcluster: DevCluster,
    namespace: str,
    harness: EngineHarness,
    faults: FaultInjector,
    ending: str,
) -> None:
    old = _start_rank0(devcluster, namespace, harness)
    assert old.pid is not None
    if ending == "deleted":
        faults.delete_pod(namespace=namespace, pod="r0-0")
    else:  # phase Failed; the StatefulSet controller then replaces the pod
        faults.fail_container(namespace=namespace, pod="r0-0", mode=ContainerFault.FAILED)
    wait_until(lambda: not _alive(old.pid or 0), timeout=DEADLINE, what="old simulator exit")

    def replacement() -> EngineInfo | None:
        engine = _engine(harness, "r0-0")
        return engine if engine is not None and engine.uid != old.uid else None

    new = wait_until(replacement, timeout=DEADLINE, what="a simulator for the new pod")
    assert new.pid != old.pid
    assert new.log_path != old.log_path  # the log is per pod uid
    _ready_pod(devcluster, namespace, "r0-0")
    assert _get(f"http://{RANK0_IP}:30000/health") == 200

    devcluster.kubectl("scale", "-n", namespace, "statefulset/r0", "--replicas=0")
    wait_until(lambda: harness.engines() == (), timeout=DEADLINE, what="no engine left")
    health = f"http://{RANK0_IP}:30000/health"
    wait_until(lambda: _get(health) is None, timeout=DEADLINE, what="the port to stop answering")
    wait_until(lambda: not _alive(new.pid or 0), timeout=DEADLINE, what="simulator exit")


@pytest.mark.cluster
@pytest.mark.usefixtures("engine_key")
def test_a_crashed_simulator_shows_as_a_container_restart(
    devcluster: DevCluster, namespace: str, harness: EngineHarness
) -> None:
    engine = _start_rank0(devcluster, namespace, harness)
    assert engine.pid is not None
    os.kill(engine.pid, signal.SIGKILL)

    def restarted_once() -> dict[str, Any] | None:
        pod = _pod(devcluster, namespace, "r0-0")
        return pod if _container(pod).get("restartCount") == 1 else None

    pod = wait_until(restarted_once, timeout=DEADLINE, what="restartCount 1")
    status = _container(pod)
    assert status["lastState"]["terminated"]["exitCode"] == 137  # 128 + SIGKILL
    assert status["lastState"]["terminated"]["reason"] == "Error"
    # The kubelet's back-off is 10 s: the first status after the crash is still waiting.
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["ready"] is False
    assert not _ready(pod)

    # Like a kubelet with restartPolicy Always, the harness starts the engine again.
    def running_again() -> EngineInfo | None:
        again = _engine(harness, "r0-0")
        return again if again is not None and again.pid != engine.pid else None

    wait_until(running_again, timeout=DEADLINE, what="the engine restarted after back-off")
    pod = _ready_pod(devcluster, namespace, "r0-0")
    status = _container(pod)
    assert status["restartCount"] == 1
    assert "running" in status["state"]
    assert status["lastState"]["terminated"]["exitCode"] == 137


@pytest.mark.cluster
def test_a_worker_rank_gets_a_worker_simulator_and_keeps_kwoks_status(
    devcluster: DevCluster, namespace: str, harness: EngineHarness
) -> None:
    worker = _rank_statefulset("r1", node=WORKER_NODE, node_rank=1, nnodes=2, key_secret=None)
    _apply(devcluster, namespace, worker)
    engine = wait_until(lambda: _engine(harness, "r1-0"), timeout=DEADLINE, what="worker engine")
    assert engine.node_ip == WORKER_IP
    health = f"http://{WORKER_IP}:30000/health"
    wait_until(lambda: _get(health) == 200, timeout=DEADLINE, what="worker /health 200")
    assert _get(f"http://{WORKER_IP}:30000/v1/models") == 404  # no API on ranks > 0
    log = engine.log_path.read_text()
    assert "role=worker dummy health server" in log
    assert "layer_partition=[20, 23]" in log  # the container's env reached the process
    pod = _pod(devcluster, namespace, "r1-0")
    assert _ready(pod)
    assert _container(pod)["ready"] is True
    assert _container(pod)["restartCount"] == 0


# --- init containers on the dev cluster -------------------------------------------------

MODEL = "/models/tiny"
SHARDS = 3


def _with_verify_init(sts: dict[str, Any], *, checksums: str | None) -> dict[str, Any]:
    """Add the operator's verify-model init container (hostPath model, optional manifest)."""
    spec = sts["spec"]["template"]["spec"]
    args = ["verify-model", "--model-dir", MODEL, "--expected-shards", str(SHARDS),
            "--expected-layers", "6"]  # fmt: skip
    mounts = [{"name": "model", "mountPath": MODEL, "readOnly": True}]
    spec["volumes"] = [{"name": "model", "hostPath": {"path": MODEL, "type": "Directory"}}]
    if checksums is not None:
        args += ["--checksums", "/etc/sparkllm/checksums/SHA256SUMS"]
        mounts.append({"name": "sums", "mountPath": "/etc/sparkllm/checksums", "readOnly": True})
        spec["volumes"].append({"name": "sums", "configMap": {"name": checksums}})
    spec["automountServiceAccountToken"] = False  # as the operator renders ranks
    spec["initContainers"] = [
        {
            "name": "verify-model",
            "image": "ghcr.io/sparkllm/sparkllm:0.1.0",
            "command": ["sparkllm"],
            "args": args,
            "terminationMessagePolicy": "File",
            "volumeMounts": mounts,
        }
    ]
    spec["containers"][0]["volumeMounts"] = [{"name": "model", "mountPath": MODEL}]
    return sts


def _worker_with_init(*, checksums: str | None = None) -> dict[str, Any]:
    worker = _rank_statefulset("r1", node=WORKER_NODE, node_rank=1, nnodes=2, key_secret=None)
    return _with_verify_init(worker, checksums=checksums)


def _node_model(tmp_path: Path, node: str) -> Path:
    return make_model_dir(tmp_path / "hosts" / node / MODEL.lstrip("/"), layers=6, shards=SHARDS)


def _init_status(pod: dict[str, Any] | None) -> dict[str, Any]:
    statuses = ((pod or {}).get("status") or {}).get("initContainerStatuses") or [{}]
    return dict(statuses[0])


def _pod_condition(pod: dict[str, Any] | None, kind: str) -> str | None:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == kind), None)


@pytest.mark.cluster
def test_init_containers_run_on_the_nodes_files_before_the_engine(
    devcluster: DevCluster, namespace: str, harness: EngineHarness, tmp_path: Path
) -> None:
    model = _node_model(tmp_path, WORKER_NODE)
    sums = "".join(
        f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n"
        for path in sorted(model.iterdir())
    )
    devcluster.kubectl(
        "create", "configmap", "sums", "-n", namespace, f"--from-literal=SHA256SUMS={sums}"
    )
    _apply(devcluster, namespace, _worker_with_init(checksums="sums"))

    def verified() -> dict[str, Any] | None:
        pod = _pod(devcluster, namespace, "r1-0")
        return (
            pod
            if "message" in (_init_status(pod).get("state") or {}).get("terminated", {})
            else None
        )

    pod = wait_until(verified, timeout=DEADLINE, what="verify-model's termination message")
    terminated = _init_status(pod)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    summary = ModelSummary.from_message(terminated["message"])
    assert (summary.ok, summary.shards, summary.mode) == (True, SHARDS, "sha256")
    assert summary.files == len(list(model.iterdir()))
    [run] = harness.init_runs()
    assert (run.pod, run.node, run.container, run.exit_code) == (
        "r1-0",
        WORKER_NODE,
        "verify-model",
        0,
    )
    assert run.message == terminated["message"]
    assert "verified: digest" in run.log_path.read_text()

    engine = wait_until(lambda: _engine(harness, "r1-0"), timeout=DEADLINE, what="worker engine")
    pod = _ready_pod(devcluster, namespace, "r1-0")
    assert _pod_condition(pod, "Initialized") == "True"
    started = _container(pod)["state"]["running"]["startedAt"]
    assert terminated["finishedAt"] <= started  # RFC 3339 in UTC: compares as text
    assert engine.initializing is False
    health = f"http://{WORKER_IP}:30000/health"
    wait_until(lambda: _get(health) == 200, timeout=DEADLINE, what="worker /health 200")
    assert "role=worker dummy health server" in engine.log_path.read_text()


@pytest.mark.cluster
def test_a_failing_init_container_backs_off_and_holds_the_engine_back(
    devcluster: DevCluster, namespace: str, tmp_path: Path
) -> None:
    model = _node_model(tmp_path, WORKER_NODE)
    missing = model / shard_name(1, SHARDS)
    kept = missing.read_bytes()
    missing.unlink()
    with _running_harness(devcluster, namespace, tmp_path, crash_backoff_seconds=2) as harness:
        _apply(devcluster, namespace, _worker_with_init())

        def backing_off() -> dict[str, Any] | None:
            pod = _pod(devcluster, namespace, "r1-0")
            waiting = (_init_status(pod).get("state") or {}).get("waiting") or {}
            return pod if waiting.get("reason") == "CrashLoopBackOff" else None

        pod = wait_until(backing_off, timeout=DEADLINE, interval=0.1, what="Init:CrashLoopBackOff")
        status = _init_status(pod)
        last = status["lastState"]["terminated"]
        assert (last["exitCode"], last["reason"]) == (1, "Error")
        summary = ModelSummary.from_message(last["message"])
        assert summary.ok is False
        assert f"shard {missing.name}" in (summary.error or "")
        assert status["restartCount"] >= 1
        assert status["ready"] is False
        assert _container(pod)["state"] == {"waiting": {"reason": "PodInitializing"}}
        assert (_pod_condition(pod, "Initialized"), _pod_condition(pod, "Ready")) == (
            "False",
            "False",
        )
        [info] = [e for e in harness.engines() if e.pod == "r1-0"]
        assert (info.pid, info.initializing) == (None, True)
        assert not info.log_path.exists(), "the engine ran although its init container failed"
        assert {run.exit_code for run in harness.init_runs()} == {1}

        missing.write_bytes(kept)  # the files are fixed: the next attempt passes
        engine = wait_until(lambda: _engine(harness, "r1-0"), timeout=DEADLINE, what="engine")
        pod = _ready_pod(devcluster, namespace, "r1-0")
        status = _init_status(pod)
        assert status["state"]["terminated"]["exitCode"] == 0
        assert status["restartCount"] >= 1  # the failed attempts stay counted
        assert status["lastState"]["terminated"]["exitCode"] == 1
        assert harness.init_runs()[-1].exit_code == 0
        assert engine.initializing is False
