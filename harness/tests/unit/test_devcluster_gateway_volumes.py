"""Secret and ConfigMap volumes of the dev cluster's gateway pods (``devcluster.gateway_io``).

The harness plays the kubelet for gateway pods: it writes their Secret and ConfigMap
volumes in the kubelet's atomic ``..data`` layout and re-writes them when the object
changes. Shown here without a cluster: the rendered gateway pod's two such volumes (the
users' keys projected with the operator's Jobs' key, the governance policy with ``items``
and ``optional``) are found; the files shown follow the kubelet's rules (a projected
volume: every source's files in one directory, the Jobs' key as user ``sparkllm:bench``,
which the gateway's own key store then authenticates); an edit is one atomic swap that the
gateway's own ``PolicySource`` picks up; a missing non-optional object or key keeps a pod
from starting with the kubelet's words, and a running one keeps its files (logged once).
"""

from __future__ import annotations

import base64
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_render_gateway import cluster, container, pod_spec, render

from sparkllm.gateway.auth import ApiKeyStore
from sparkllm.gateway.governance.policy import Policy, PolicySource
from sparkllm.render.gateway import GOVERNANCE_DIR, GOVERNANCE_FILE, USER_KEYS_DIR
from sparkllm.render.names import BENCH_USER
from sparkllm_dev.devcluster.gateway_io import (
    SourceVolume,
    pod_volumes,
    sync_volume,
    sync_volumes,
    volume_files,
    write_atomic_volume,
)
from sparkllm_dev.devcluster.hostpaths import VolumeNotReadyError
from sparkllm_dev.devcluster.kubelet import JSON
from sparkllm_dev.errors import DevClusterError

POLICY_REF = {"policyConfigMapRef": {"name": "llm-policy", "key": "users.yaml"}}


def _policy_volume(directory: Path, *, optional: bool = True) -> SourceVolume:
    items = [{"key": "users.yaml", "path": GOVERNANCE_FILE}]
    source = {"name": "llm-policy", "items": items, "optional": optional}
    return SourceVolume("governance", "configMap", source, directory)


def _config_map(**data: str) -> JSON:
    return {"metadata": {"name": "llm-policy"}, "data": data}


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith(".."))


def test_the_rendered_gateway_pod_has_its_keys_and_policy_as_synced_volumes(
    tmp_path: Path,
) -> None:
    objects = render(cluster(admission__governance=POLICY_REF))
    pod: dict[str, Any] = {"metadata": {"name": "gw", "namespace": "ns"}, "spec": pod_spec(objects)}
    # What the API server adds to a pod with a token: not written here (a kubeconfig as
    # the pod's ServiceAccount stands for it), unlike the keys' projection.
    token = {"serviceAccountToken": {"path": "token"}}
    ca = {"configMap": {"name": "kube-root-ca.crt"}}
    pod["spec"]["volumes"].append(
        {"name": "kube-api-access-x", "projected": {"sources": [token, ca]}}
    )
    admission = container(objects, "admission")
    access = {
        "name": "kube-api-access-x",
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
    }
    admission["volumeMounts"].append(access)
    paths, volumes = pod_volumes(pod, admission, workdir=tmp_path, model_dir=tmp_path / "model")
    found = {v.volume: (v.kind, v.object_name, v.source.get("optional")) for v in volumes}
    assert found == {
        "user-keys": ("projected", "llm-user-keys,llm-bench-key", None),
        "governance": ("configMap", "llm-policy", True),
    }
    by_name = {v.volume: v.directory for v in volumes}
    assert paths[GOVERNANCE_DIR] == by_name["governance"]
    assert paths[USER_KEYS_DIR] == by_name["user-keys"]
    assert not by_name["governance"].exists()  # written by the first sync, not before
    assert paths[access["mountPath"]].is_dir()  # an empty directory, as an emptyDir


def test_a_policy_configmap_edit_is_one_swap_the_gateway_rereads(tmp_path: Path) -> None:
    volume = _policy_volume(tmp_path / "governance")
    assert sync_volume(volume, None)  # optional and missing: an empty volume
    assert _listing(volume.directory) == []
    source = PolicySource(volume.directory / GOVERNANCE_FILE, reload_interval=0)
    assert "not loaded" in str(source.current())  # the gateway's 503 names this
    first = "users: {bob: {requestsPerMinute: 1}}\n"
    assert sync_volume(volume, _config_map(**{"users.yaml": first, "other.yaml": "x: 1"}))
    assert _listing(volume.directory) == [GOVERNANCE_FILE]  # only the item chosen
    assert os.readlink(volume.directory / GOVERNANCE_FILE) == f"..data/{GOVERNANCE_FILE}"
    payload = os.readlink(volume.directory / "..data")
    policy = source.current()
    assert isinstance(policy, Policy)
    assert policy.for_user("bob").limits.requests_per_minute == 1
    assert not sync_volume(volume, _config_map(**{"users.yaml": first}))  # same file
    assert os.readlink(volume.directory / "..data") == payload
    lifted = "users: {bob: {requestsPerMinute: 100}}\n"
    assert sync_volume(volume, _config_map(**{"users.yaml": lifted}))
    assert os.readlink(volume.directory / "..data") != payload
    assert not (volume.directory / payload).exists()  # the old payload is gone
    policy = source.current()
    assert isinstance(policy, Policy)
    assert policy.for_user("bob").limits.requests_per_minute == 100
    assert source.reloads == 2
    assert sync_volume(volume, _config_map(other="x"))  # the key removed: optional, skipped
    assert _listing(volume.directory) == []


def test_a_secret_volume_decodes_its_data_and_maps_items_to_nested_paths(tmp_path: Path) -> None:
    secret = {"data": {"alice": base64.b64encode(b"k1").decode(), "bob": "azI="}}
    keys = SourceVolume("user-keys", "secret", {"secretName": "user-keys"}, tmp_path / "keys")
    assert sync_volume(keys, secret)
    assert _listing(keys.directory) == ["alice", "bob"]
    assert (keys.directory / "bob").read_bytes() == b"k2"
    items = [{"key": "alice", "path": "sub/alice.key"}]
    chosen = {"secretName": "user-keys", "items": items}
    assert volume_files("secret", chosen, secret) == {"sub/alice.key": b"k1"}
    nested = SourceVolume("keys", "secret", chosen, tmp_path / "nested")
    assert sync_volume(nested, secret)
    assert _listing(nested.directory) == ["sub"]
    assert os.readlink(nested.directory / "sub") == "..data/sub"
    assert (nested.directory / "sub" / "alice.key").read_bytes() == b"k1"
    with pytest.raises(DevClusterError, match=re.escape("without '..'")):
        write_atomic_volume(tmp_path / "bad", {"../escape": b"x"})


def test_the_keys_directory_holds_the_users_and_the_operators_jobs_key(tmp_path: Path) -> None:
    objects = render()
    (keys,) = [v for v in _volumes(objects, tmp_path) if v.volume == "user-keys"]
    users = {"data": {"alice": base64.b64encode(b"alice-key").decode()}}
    bench = {"data": {"token": base64.b64encode(b"bench-key").decode(), "other": "eA=="}}
    with pytest.raises(VolumeNotReadyError, match="secret 'llm-bench-key' not found"):
        sync_volume(keys, users, None)  # the operator has not generated it yet
    assert sync_volume(keys, users, bench)
    assert _listing(keys.directory) == ["alice", BENCH_USER]  # only the item chosen
    store = ApiKeyStore(keys.directory)  # the gateway's own reading of the directory
    assert store.authenticate(b"Bearer bench-key") == BENCH_USER
    assert store.authenticate(b"Bearer alice-key") == "alice"
    with pytest.raises(DevClusterError, match="projected downwardAPI not provided"):
        SourceVolume("v", "projected", {"sources": [{"downwardAPI": {}}]}, tmp_path).objects()


def _volumes(objects: dict[str, Any], workdir: Path) -> list[SourceVolume]:
    pod: dict[str, Any] = {"metadata": {"name": "gw", "namespace": "ns"}, "spec": pod_spec(objects)}
    admission = container(objects, "admission")
    return pod_volumes(pod, admission, workdir=workdir, model_dir=workdir / "model")[1]


def test_a_missing_source_that_is_not_optional_is_named_as_the_kubelet_does(
    tmp_path: Path,
) -> None:
    keys = SourceVolume("user-keys", "secret", {"secretName": "user-keys"}, tmp_path / "keys")
    with pytest.raises(VolumeNotReadyError, match="secret 'user-keys' not found"):
        sync_volume(keys, None)
    assert not keys.directory.exists()  # nothing written
    policy = _policy_volume(tmp_path / "governance", optional=False)
    no_key = re.escape("configmap 'llm-policy' has no key 'users.yaml'")
    with pytest.raises(VolumeNotReadyError, match=no_key):
        sync_volume(policy, _config_map(other="x"))
    with pytest.raises(VolumeNotReadyError, match="configmap 'llm-policy' not found"):
        sync_volume(policy, None)


def test_a_pod_does_not_start_without_its_source_and_a_running_one_keeps_its_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = _policy_volume(tmp_path / "governance", optional=False)
    objects: dict[str, JSON | None] = {"llm-policy": None}

    def sync(*, starting: bool) -> None:
        sync_volumes([policy], read=lambda _kind, name: objects[name], starting=starting,
                     pod="ns/gw")  # fmt: skip

    with pytest.raises(VolumeNotReadyError) as refused:
        sync(starting=True)
    assert str(refused.value) == (
        "MountVolume.SetUp failed for volume 'governance': configmap 'llm-policy' not found"
        " (volume)"
    )
    objects["llm-policy"] = _config_map(**{"users.yaml": "defaults: {weight: 2}\n"})
    with caplog.at_level(logging.INFO, logger="sparkllm_dev.devcluster.gateway_io"):
        sync(starting=True)
        objects["llm-policy"] = None  # deleted while the pod runs
        sync(starting=False)
        sync(starting=False)
    assert (policy.directory / GOVERNANCE_FILE).read_text() == "defaults: {weight: 2}\n"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "gateway ns/gw: MountVolume.SetUp failed for volume 'governance': configmap"
        " 'llm-policy' not found (volume) (keeping its files)"
    ]
    assert "gateway ns/gw: configMap llm-policy synced" in caplog.messages
    assert policy.problem
    objects["llm-policy"] = _config_map(**{"users.yaml": "defaults: {weight: 3}\n"})
    sync(starting=False)
    assert policy.problem == ""
    assert (policy.directory / GOVERNANCE_FILE).read_text() == "defaults: {weight: 3}\n"
