"""The engine harness's pod watch when the API server ends it with an in-stream error.

A real kube-apiserver whose watch cache has dropped the requested resourceVersion
answers the watch with HTTP 200 and then one ERROR event carrying a 410 Status (its
``errWatcher``). Reproducing that on the dev cluster takes minutes of pod churn (the
cache keeps 75 s of events), so these tests replay the apiserver's exact bytes from a
loopback HTTP server instead; the watch code under test is the real ``kubernetes``
client. The pod cache must take the 410 as "list again", not die with its thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from tests.unit.loopback_http import JSONHandler, serving

from sparkllm_dev.devcluster import engine_io
from sparkllm_dev.devcluster.kubelet import JSON

EXPIRED = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version: 344 (1203)",
        "reason": "Expired",
        "code": 410,
    },
}


def _pod(name: str, version: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": version,
        },
        "spec": {"containers": [{"name": "engine", "image": "sim"}]},
    }


class _Server(JSONHandler):
    """Pod lists and watches as the apiserver sends them; every watch ends with a 410."""

    lists: ClassVar[list[str]] = []
    watches: ClassVar[list[str]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server calls it by this name
        if "watch=true" in self.path:
            type(self).watches.append(self.path)
            body = b"".join(
                json.dumps(event).encode() + b"\n"
                for event in ({"type": "ADDED", "object": _pod("late", "1202")}, EXPIRED)
            )
        else:
            type(self).lists.append(self.path)
            number = len(type(self).lists)
            listing = {
                "apiVersion": "v1",
                "kind": "PodList",
                "metadata": {"resourceVersion": str(1300 + number)},
                "items": [_pod(f"listed-{number}", str(1300 + number))],
            }
            body = json.dumps(listing).encode()
        self.answer(body)


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[engine_io.KubeClient]:
    _Server.lists, _Server.watches = [], []
    with serving(_Server) as url:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": url}}],
                    "users": [{"name": "u", "user": {}}],
                    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "x",
                }
            )
        )
        client = engine_io.KubeClient(kubeconfig)
        yield client
        client.close()


def test_an_in_stream_410_is_a_watch_expiry_after_the_events_before_it(
    kube: engine_io.KubeClient,
) -> None:
    seen: list[JSON] = []

    def watch() -> None:
        stale = engine_io._new_watch()
        seen.extend(kube.watch_pods(namespace="ns", resource_version="344", watch=stale))

    with pytest.raises(engine_io.WatchExpiredError) as raised:
        watch()
    assert raised.value.status == 410
    assert seen == [{"type": "ADDED", "object": _pod("late", "1202")}]
    assert "resourceVersion=344" in _Server.watches[0]


def test_the_pod_cache_relists_after_a_410_and_keeps_watching(
    kube: engine_io.KubeClient,
) -> None:
    changes = threading.Semaphore(0)
    cache = engine_io.PodCache(kube, namespace="ns", on_change=changes.release)
    cache.start()
    try:
        assert cache.synced.wait(timeout=10)
        # list, watch (ADDED then 410), list again, watch again: the thread lived through it
        for _ in range(4):
            assert changes.acquire(timeout=10)
        assert cache._thread.is_alive()
        assert len(_Server.lists) >= 2
        second_list_version = "1302"
        assert any(f"resourceVersion={second_list_version}" in path for path in _Server.watches)
        assert "uid-listed-1" not in cache.snapshot()  # a relist replaces, not merges
    finally:
        cache.stop()
    assert not cache._thread.is_alive()


def test_an_unforeseen_error_is_logged_and_the_watch_relists(
    kube: engine_io.KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []
    relisted = threading.Event()

    def on_change() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in the supervisor's hook")
        relisted.set()

    cache = engine_io.PodCache(kube, namespace="ns", on_change=on_change)
    with caplog.at_level("ERROR", logger=engine_io.logger.name):
        cache.start()
        try:
            assert relisted.wait(timeout=10)
            assert cache._thread.is_alive()
        finally:
            cache.stop()
    assert len(_Server.lists) >= 2
    broke = [r for r in caplog.records if "engine pod watch broke" in r.getMessage()]
    assert broke
    assert broke[0].exc_info is not None
    assert "a bug in the supervisor's hook" in str(broke[0].exc_info[1])
