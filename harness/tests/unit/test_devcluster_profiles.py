"""Two dev clusters side by side (issue #16 item 8): the demo's and the tests' share nothing
that would let one disturb the other, the demo keeps what it had, and `down` of one never
touches the other's processes. Also how `make test` and `make unit` run pytest."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sparkllm_dev import cli
from sparkllm_dev.devcluster import DevCluster
from sparkllm_dev.devcluster.nodes import spark_nodes
from sparkllm_dev.devcluster.paths import (
    DEMO,
    PROFILE_ENV,
    PROFILES,
    TEST,
    ClusterProfile,
    DevPaths,
    active_profile,
)
from sparkllm_dev.errors import DevClusterError


def _cluster(root: Path, profile: ClusterProfile) -> DevCluster:
    return DevCluster(DevPaths(root=root, profile=profile))


def test_the_demo_keeps_its_cluster() -> None:
    paths = DevPaths(root=Path("/c"), profile=DEMO)
    assert (DEMO.cluster_name, paths.state_dir, paths.cluster_dir) == (
        "sparkllm",
        Path("/c/devcluster"),
        Path("/c/kwok/clusters/sparkllm"),
    )
    assert paths.kubeconfig == Path("/c/devcluster/kubeconfig")
    assert DEMO.operator_metrics_port == 18080
    # What kwokctl picks by itself on an idle machine, written down.
    assert DEMO.ports() == {
        "kubeSchedulerPort": 32761,
        "kubeControllerManagerPort": 32762,
        "kwokControllerPort": 32763,
        "kubeApiserverPort": 32764,
        "etcdPort": 32765,
        "etcdPeerPort": 32766,
    }
    nodes = _cluster(Path("/c"), DEMO).nodes()
    assert [n.ip for n in nodes] == [n.ip for n in spark_nodes()]
    assert nodes[0].ip == "127.0.0.11"


def test_the_tests_cluster_shares_nothing_with_the_demos() -> None:
    demo, test = DevPaths(Path("/c"), DEMO), DevPaths(Path("/c"), TEST)
    assert demo.bin_dir == test.bin_dir  # only the binaries are shared
    assert TEST.cluster_name != DEMO.cluster_name
    for where in ("state_dir", "kwok_workdir", "cluster_dir", "kubeconfig"):
        mine, theirs = str(getattr(test, where)), str(getattr(demo, where))
        assert not (mine + "/").startswith(theirs + "/"), where
        assert not (theirs + "/").startswith(mine + "/"), where
    assert not set(TEST.ports().values()) & set(DEMO.ports().values())
    assert TEST.operator_metrics_port != DEMO.operator_metrics_port
    demo_ips = {n.ip for n in _cluster(Path("/c"), DEMO).nodes()}
    test_nodes = _cluster(Path("/c"), TEST).nodes()
    assert [n.name for n in test_nodes] == [n.name for n in spark_nodes()]  # same shapes
    assert {n.ip for n in test_nodes}.isdisjoint(demo_ips)
    assert _cluster(Path("/c"), TEST).node_ip("spark-b1") == "127.0.0.122"


def test_every_profile_owns_its_ports_addresses_and_directories() -> None:
    profiles = list(PROFILES.values())
    for i, one in enumerate(profiles):
        ips = {n.ip for n in _cluster(Path("/c"), one).nodes()}
        for other in profiles[i + 1 :]:
            assert not set(one.ports().values()) & set(other.ports().values())
            assert one.operator_metrics_port != other.operator_metrics_port
            assert one.cluster_name != other.cluster_name
            assert one.state_dir_name != other.state_dir_name
            assert one.kwok_dir_name != other.kwok_dir_name
            assert ips.isdisjoint({n.ip for n in _cluster(Path("/c"), other).nodes()})


def test_node_addresses_stay_in_loopback() -> None:
    assert spark_nodes(address_base=100)[-1].ip == "127.0.0.123"
    with pytest.raises(ValueError, match="no loopback addresses"):
        spark_nodes(address_base=240)
    with pytest.raises(DevClusterError, match="no simulated node 'spark-c0'"):
        _cluster(Path("/c"), TEST).node_ip("spark-c0")


def test_profile_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_ENV)
    assert active_profile() is DEMO
    monkeypatch.setenv(PROFILE_ENV, "test")
    assert active_profile() is TEST
    monkeypatch.setenv(PROFILE_ENV, "staging")
    with pytest.raises(DevClusterError, match="'staging' is not a dev cluster; choose one of"):
        active_profile()


def test_the_plugin_puts_the_tests_on_their_own_cluster() -> None:
    # inherited by every child a test starts
    assert os.environ[PROFILE_ENV] in {"test", "test2", "test3", "test4", "test5"}
    assert DevCluster().paths.profile is PROFILES[os.environ[PROFILE_ENV]]


@pytest.fixture
def fake_processes(tmp_path: Path) -> Iterator[dict[str, int]]:
    """An 'etcd' run from the demo's cluster directory and a 'kube-apiserver' run from the
    shared bin directory naming the tests' cluster directory (both really sleep)."""
    demo_etcd = DevPaths(tmp_path, DEMO).cluster_dir / "bin" / "etcd"
    shared = DevPaths(tmp_path, TEST).binary("kube-apiserver")
    for exe in (demo_etcd, shared):
        exe.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy("/bin/sh", exe)
    test_dir = f"--data-dir={DevPaths(tmp_path, TEST).cluster_dir}/etcd"
    procs = {
        "demo": subprocess.Popen([demo_etcd, "-c", "sleep 60; :"]),
        "test": subprocess.Popen([shared, "-c", "sleep 60; :", "sh", test_dir]),
    }
    yield {name: proc.pid for name, proc in procs.items()}
    for proc in procs.values():
        proc.kill()
        proc.wait()


def test_each_cluster_finds_only_its_own_processes(
    tmp_path: Path, fake_processes: dict[str, int]
) -> None:
    # Each fake shell forks its `sleep`; for an instant the child still looks like its parent
    # (same executable, same arguments), so wait for the fork to have exec'd.
    expected = {
        DEMO.name: [("etcd", fake_processes["demo"])],
        TEST.name: [("kube-apiserver", fake_processes["test"])],
    }
    seen: dict[str, list[tuple[str, int]]] = {}
    for _ in range(100):
        seen = {p.name: _cluster(tmp_path, p)._our_processes() for p in (DEMO, TEST)}
        if seen == expected:
            break
        time.sleep(0.05)
    assert seen == expected


def test_a_busy_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        profile = replace(TEST, name="busy", port_base=busy)
        with pytest.raises(DevClusterError, match=rf"port {busy} \(kubeSchedulerPort of the busy"):
            _cluster(tmp_path, profile)._require_free_ports()


def test_cli_acts_on_the_chosen_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARKLLM_CACHE", str(tmp_path))
    monkeypatch.setenv(PROFILE_ENV, "test")
    assert cli.main(["--cluster", "demo", "status"]) == 3  # nothing runs under tmp_path
    out = capsys.readouterr().out
    assert "cluster:     demo (kwokctl sparkllm)" in out
    assert f"kubeconfig:  {tmp_path}/devcluster/kubeconfig" in out
    assert os.environ[PROFILE_ENV] == "demo"  # for the processes a command starts
    assert cli.main(["status"]) == 3  # no --cluster: the environment's
    assert f"{tmp_path}/devcluster/kubeconfig" in capsys.readouterr().out
    monkeypatch.setenv(PROFILE_ENV, "test")
    assert cli.main(["status"]) == 3
    assert f"{tmp_path}/devcluster-test/kubeconfig" in capsys.readouterr().out
    assert sorted(PROFILES) == ["demo", "test", "test2", "test3", "test4", "test5"]


def test_make_test_and_make_unit_shuffle_and_print_the_slowest() -> None:
    root = Path(__file__).resolve().parents[3]
    makefile = (root / "Makefile").read_text()
    recipes = {}
    for target in ("unit", "test"):
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert "pytest tests harness/tests" in recipe, target
        assert "--durations=15" in recipe, target  # the 15 slowest tests, then the total
        assert "no:randomly" not in recipe, target  # pytest-randomly shuffles, seed printed
        recipes[target] = recipe
    assert "HYPOTHESIS_PROFILE=ci" in recipes["test"]
    # No-cluster tests on xdist workers; the cluster tests in one process, never in parallel.
    assert "-n $(WORKERS)" in recipes["unit"]
    halves = [line for line in recipes["test"].splitlines() if "pytest tests" in line]
    assert len(halves) == 2
    assert '-m "not cluster" -n $(WORKERS)' in halves[0]
    # The cluster tests: one worker per dev cluster, a module's tests on one worker.
    assert "-m cluster -n $(words $(CLUSTERS)) --dist loadfile" in halves[1]
    assert "SPARKLLM_DEVCLUSTERS=" in recipes["test"]
    assert '"pytest-xdist==' in (root / "pyproject.toml").read_text()
    assert '-m "not cluster and not needs_binary"' in makefile  # UNIT_TESTS
    assert "$(UNIT_TESTS)" in recipes["unit"]
    # The plugin that shuffles is a pinned dev dependency, loaded in every test run.
    assert '"pytest-randomly==' in (root / "pyproject.toml").read_text()


def test_each_xdist_worker_takes_its_own_cluster() -> None:
    from sparkllm_dev.testing import CLUSTERS_ENV, worker_profile

    both = {CLUSTERS_ENV: "test, test2"}
    assert worker_profile({**both, "PYTEST_XDIST_WORKER": "gw0"}) == "test"
    assert worker_profile({**both, "PYTEST_XDIST_WORKER": "gw1"}) == "test2"
    assert worker_profile(both) is None  # not a worker: $SPARKLLM_DEVCLUSTER decides
    assert worker_profile({"PYTEST_XDIST_WORKER": "gw1"}) is None  # no list given
    with pytest.raises(pytest.UsageError, match="2 cluster\\(s\\) for more xdist workers"):
        worker_profile({**both, "PYTEST_XDIST_WORKER": "gw2"})
    with pytest.raises(pytest.UsageError, match="demo is not a test profile"):
        worker_profile({CLUSTERS_ENV: "test,demo", "PYTEST_XDIST_WORKER": "gw0"})
