"""The lifecycle the dev cluster's harnesses share (``devcluster.pod_supervisor``).

A fake harness stands in for the engine, gateway and benchmark harnesses: its pods are a
dict the test edits, its "processes" are records. Ticks are driven directly where the
order of one tick matters, and through the real thread where the lifecycle does.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sparkllm.errors import ClusterAPIError
from sparkllm_dev.devcluster import wait_until
from sparkllm_dev.devcluster.kubelet import JSON, ContainerConfigError
from sparkllm_dev.devcluster.pod_supervisor import (
    POD_ENDED,
    POD_GONE,
    SHUTTING_DOWN,
    PodSupervisor,
    pod_key,
    pods_by_uid,
    scratch_directory,
    stop_processes,
    stop_signal,
    utc_timestamp,
    wait_or_kill,
)
from sparkllm_dev.errors import DevClusterError

DEADLINE = 30  # seconds; generous, the machine is shared


def _pod(uid: str, *, phase: str = "Running", deleting: bool = False) -> JSON:
    meta: dict[str, Any] = {"uid": uid, "namespace": "ns", "name": f"pod-{uid}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-07-01T00:00:00Z"
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "image": "i"}]},
        "status": {"phase": phase, "hostIP": "127.0.0.11"},
    }


@dataclass
class _State:
    uid: str
    followed: int = 0


@dataclass
class _FakeHarness(PodSupervisor[_State]):
    """Records what the supervisor asks of a harness; ``refuse`` makes a start fail."""

    pods: dict[str, JSON] = field(default_factory=dict)
    refuse: dict[str, Exception] = field(default_factory=dict)
    not_yet: set[str] = field(default_factory=set)  # _start_pod returns None for these
    retire_fails: bool = False
    open_fails: bool = False
    events: list[tuple[str, str]] = field(default_factory=list)

    name, noun = "fake harness", "fake"
    tick_seconds = 0.02
    retry_seconds = 3600.0

    def __post_init__(self) -> None:
        super().__init__()

    def _open(self, resources: ExitStack) -> None:
        self.events.append(("open", ""))
        resources.callback(self.events.append, ("released", ""))
        if self.open_fails:
            raise DevClusterError("no API server")

    def _close(self) -> None:
        self.events.append(("close", ""))

    def _list_pods(self) -> dict[str, JSON]:
        return dict(self.pods)

    def _housekeep(self, pods: Mapping[str, JSON]) -> None:
        self.events.append(("housekeep", ",".join(sorted(pods))))

    def _start_pod(self, uid: str, pod: JSON) -> _State | None:
        self.events.append(("attempt", uid))
        if uid in self.refuse:
            raise self.refuse[uid]
        if uid in self.not_yet:
            return None
        self.events.append(("start", uid))
        return _State(uid)

    def _follow(self, state: _State, pod: JSON) -> None:
        state.followed += 1
        self.events.append(("follow", state.uid))

    def _retire(self, state: _State, *, why: str) -> None:
        if self.retire_fails:
            raise DevClusterError("cannot stop yet")
        self.events.append(("retire", f"{state.uid}: {why}"))

    def _drain(self) -> None:
        self.events.append(("drain", ""))

    def running(self) -> list[str]:
        return sorted(self._pod_states)

    def kinds(self, kind: str) -> list[str]:
        return [detail for what, detail in self.events if what == kind]


# --- one tick ----------------------------------------------------------------------------


def test_a_tick_stops_then_housekeeps_then_starts_then_follows() -> None:
    harness = _FakeHarness(pods={"old": _pod("old")})
    harness._tick()
    harness.events.clear()
    harness.pods = {"new": _pod("new")}
    harness._tick()
    assert harness.events == [
        ("retire", f"old: {POD_GONE}"),
        ("housekeep", "new"),
        ("attempt", "new"),
        ("start", "new"),
        ("follow", "new"),  # a new pod is followed in the tick that starts it
    ]
    assert harness.running() == ["new"]


@pytest.mark.parametrize(
    ("later", "why"),
    [
        (None, POD_GONE),
        (_pod("a", phase="Succeeded"), POD_ENDED),
        (_pod("a", phase="Failed"), POD_ENDED),
        (_pod("a", deleting=True), POD_ENDED),
        (_pod("a"), None),  # still running: kept, followed again
    ],
)
def test_a_pod_that_no_longer_runs_is_retired_with_its_reason(
    later: JSON | None, why: str | None
) -> None:
    harness = _FakeHarness(pods={"a": _pod("a")})
    harness._tick()
    harness.pods = {} if later is None else {"a": later}
    harness._tick()
    assert harness.kinds("retire") == ([] if why is None else [f"a: {why}"])
    assert harness.running() == ([] if why else ["a"])


@pytest.mark.parametrize("pod", [_pod("p", phase="Pending"), _pod("p", deleting=True)])
def test_a_pod_that_should_not_run_is_not_started(pod: JSON) -> None:
    harness = _FakeHarness(pods={"p": pod})
    harness._tick()
    assert harness.kinds("start") == []
    assert harness.running() == []


@dataclass
class _EagerHarness(_FakeHarness):
    """Retries a pod that could not start at the next tick."""

    retry_seconds = 0.0


@pytest.mark.parametrize(
    "error",
    [
        ContainerConfigError("secret s key k not found"),
        ClusterAPIError("503 unavailable", status=503),
        DevClusterError("service front.ns has no endpoint here yet"),
        OSError("no space left"),
    ],
)
def test_a_pod_that_cannot_start_is_retried_and_the_reason_logged_once(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    harness = _EagerHarness(pods={"a": _pod("a")}, refuse={"a": error})
    with caplog.at_level(logging.WARNING, logger=__name__):  # the harness's own logger
        for _ in range(3):
            harness._tick()
    assert harness.kinds("attempt") == ["a"] * 3
    messages = [r.getMessage() for r in caplog.records if r.name == __name__]
    assert messages == [f"fake ns/pod-a cannot start yet: {error}"]
    del harness.refuse["a"]
    harness._tick()
    assert harness.running() == ["a"]
    assert harness._deferred == {}


def test_a_pod_that_cannot_start_waits_retry_seconds() -> None:
    harness = _FakeHarness(pods={"a": _pod("a")}, refuse={"a": DevClusterError("not yet")})
    harness._tick()
    del harness.refuse["a"]
    harness._tick()  # the hour has not passed
    assert harness.kinds("attempt") == ["a"]
    assert harness.running() == []


def test_a_new_reason_is_logged_again_and_a_gone_pod_is_forgotten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    harness = _EagerHarness(pods={"a": _pod("a")}, refuse={"a": DevClusterError("first")})
    with caplog.at_level(logging.WARNING, logger=__name__):
        harness._tick()
        harness.refuse["a"] = DevClusterError("second")
        harness._tick()
    assert [r.getMessage() for r in caplog.records if r.name == __name__] == [
        "fake ns/pod-a cannot start yet: first",
        "fake ns/pod-a cannot start yet: second",
    ]
    harness.pods = {}
    harness._tick()
    assert harness._deferred == {}


def test_a_start_that_returns_nothing_is_tried_again_next_tick_silently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    harness = _FakeHarness(pods={"a": _pod("a")}, not_yet={"a"})
    with caplog.at_level(logging.DEBUG, logger=__name__):
        harness._tick()
        harness.not_yet.clear()
        harness._tick()
    assert harness.kinds("attempt") == ["a", "a"]
    assert harness.running() == ["a"]
    assert [r for r in caplog.records if r.name == __name__] == []


def test_a_retire_that_fails_keeps_the_pod_for_the_next_tick() -> None:
    harness = _FakeHarness(pods={"a": _pod("a")})
    harness._tick()
    harness.pods, harness.retire_fails = {}, True
    with pytest.raises(DevClusterError, match="cannot stop yet"):
        harness._tick()
    assert harness.running() == ["a"]
    harness.retire_fails = False
    harness._tick()
    assert harness.kinds("retire") == [f"a: {POD_GONE}"]
    assert harness.running() == []


# --- the thread --------------------------------------------------------------------------


def test_the_thread_ticks_until_stopped_then_retires_drains_and_closes() -> None:
    harness = _FakeHarness(pods={"a": _pod("a"), "b": _pod("b")})
    with harness as entered:
        assert entered is harness
        assert harness.events[0] == ("open", "")
        wait_until(lambda: harness.kinds("start") == ["a", "b"], timeout=DEADLINE, what="starts")
        with pytest.raises(DevClusterError, match="fake harness already started"):
            harness.start()
        follows = len(harness.kinds("follow"))
        wait_until(
            lambda: len(harness.kinds("follow")) >= follows + 4, timeout=DEADLINE, what="ticks"
        )
    assert sorted(harness.kinds("retire")) == [f"a: {SHUTTING_DOWN}", f"b: {SHUTTING_DOWN}"]
    assert harness.events[-3:] == [("drain", ""), ("close", ""), ("released", "")]
    assert harness.running() == []
    harness.stop()  # idempotent: releases nothing twice, starts nothing
    assert harness.kinds("released") == [""]
    assert harness.kinds("start") == ["a", "b"]


def test_a_failed_open_releases_what_it_took_and_starts_no_thread() -> None:
    harness = _FakeHarness(pods={"a": _pod("a")}, open_fails=True)
    with pytest.raises(DevClusterError, match="no API server"):
        harness.start()
    assert harness.events == [("open", ""), ("released", "")]
    harness.open_fails = False
    with harness:  # not "already started": it can be started again
        wait_until(lambda: harness.running() == ["a"], timeout=DEADLINE, what="a started")


def test_a_scratch_directory_goes_when_the_resources_close() -> None:
    with ExitStack() as resources:
        scratch = scratch_directory(resources, prefix="sparkllm-test-")
        (scratch / "sub").mkdir()
        (scratch / "sub" / "file").write_text("x")
        assert scratch.name.startswith("sparkllm-test-")
    assert not Path(scratch).exists()


class _UnexpectedError(RuntimeError):
    """A bug in a harness, as opposed to an API or dev-cluster failure."""


@dataclass
class _FlakyHarness(_FakeHarness):
    """Fails its first ticks: once as an API error, once unexpectedly."""

    failures: list[Exception] = field(default_factory=list)

    def _list_pods(self) -> dict[str, JSON]:
        if self.failures:
            raise self.failures.pop(0)
        return super()._list_pods()


def test_a_failed_tick_is_logged_and_the_next_one_retries(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures: list[Exception] = [ClusterAPIError("500 boom", status=500), _UnexpectedError("bug")]
    harness = _FlakyHarness(pods={"a": _pod("a")}, failures=failures)
    with caplog.at_level(logging.WARNING, logger=__name__), harness:
        wait_until(lambda: harness.running() == ["a"], timeout=DEADLINE, what="a started")
    records = [r for r in caplog.records if r.name == __name__]
    assert [r.getMessage() for r in records] == [
        "fake harness tick failed (retrying): 500 boom",
        "fake harness tick failed; retrying",
    ]
    assert records[0].exc_info is None  # an expected error: one line
    assert records[1].exc_info is not None  # a bug: with its traceback


# --- helpers -----------------------------------------------------------------------------

_IGNORES_SIGTERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)
_SLEEPS = "import sys, time\nprint('ready', flush=True)\ntime.sleep(600)\n"


def _child(code: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline() == b"ready\n"  # its signal handling is in place
    return process


def test_stop_processes_terminates_then_kills_what_ignores_sigterm() -> None:
    with (
        _child(_SLEEPS) as polite,
        _child(_IGNORES_SIGTERM) as stubborn,
        subprocess.Popen([sys.executable, "-c", "pass"]) as done,
    ):
        done.wait()
        stop_processes([polite, stubborn, done], grace_seconds=0.5)
        assert polite.returncode == -signal.SIGTERM
        assert stubborn.returncode == -signal.SIGKILL
        assert done.returncode == 0


def test_wait_or_kill_leaves_a_process_that_exits_in_time() -> None:
    with subprocess.Popen([sys.executable, "-c", "pass"]) as quick, _child(_SLEEPS) as slow:
        wait_or_kill([quick, slow], grace_seconds=0.2)
        assert quick.returncode == 0
        assert slow.returncode == -signal.SIGKILL


def test_stop_signal_sets_the_event_and_restores_the_handlers() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with stop_signal() as stop:
        assert not stop.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(timeout=DEADLINE)
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_pod_helpers() -> None:
    pods = [_pod("a"), _pod("b")]
    assert pod_key(pods[0]) == ("ns", "pod-a")
    assert pods_by_uid(pods) == {"a": pods[0], "b": pods[1]}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", utc_timestamp())
