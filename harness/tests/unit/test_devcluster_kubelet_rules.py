"""The engine harness's kubelet rules, pure: what the dev cluster's kubelet stand-in does
with a pod's env, volumes, probes, restarts, init containers and termination messages
(``devcluster.kubelet``, ``hostpaths``, ``init_containers``). No cluster: the harness on
the real control plane is harness/tests/integration/test_engine_harness.py.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.integration.test_reconcile import sample

from sparkllm.api import validate_inference_cluster
from sparkllm.render.ranks import EngineKeyRef, ReplicaPlan, render_rank_statefulset
from sparkllm_dev.devcluster import DevCluster, kubelet
from sparkllm_dev.devcluster import hostpaths as hp
from sparkllm_dev.devcluster import init_containers as ic

# The tests' dev cluster's addresses (the plugin chose its profile before this import).
RANK0_IP = DevCluster().node_ip("spark-b0")
KEY_ENV = "SPARKLLM_ENGINE_API_KEY"


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
    container, _launch_check = pod["spec"]["initContainers"]
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
