"""The cluster fixtures' pure parts (``sparkllm_dev.testing``), without a cluster: which
namespaces a shared operator watches, and what a test sees of its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkllm_dev.devcluster import DevCluster
from sparkllm_dev.devcluster.paths import DevPaths
from sparkllm_dev.testing import (
    QUICK_RESYNC,
    OperatorProcess,
    SharedOperatorView,
    namespace_name,
    shared_prefix,
)

OTHER = "ts123abcd-test-b-00001"
MINE = "ts123abcd-test-a-00002"


def _record(second: int, text: str) -> str:
    return f"2026-01-01 10:00:{second:02d},123 INFO sparkllm.reconcile {text}\n"


def test_each_flag_set_has_its_own_namespaces_and_names_stay_valid() -> None:
    plain, quick = shared_prefix(()), shared_prefix(QUICK_RESYNC)
    assert plain != quick
    assert plain.startswith("ts")
    assert quick.startswith("ts")
    assert shared_prefix(()) == plain  # stable within the session
    name = namespace_name("test_" + "x" * 80 + "[a-b/C]", prefix=quick)
    assert name.startswith(f"{quick}-test-")
    assert len(name) <= 63  # a namespace name is a DNS label
    assert name == name.lower()


def test_a_view_sees_its_namespaces_records_since_it_began(tmp_path: Path) -> None:
    log = tmp_path / "operator.log"
    log.write_text(_record(1, f"reconciled {MINE}/x in 0.1 s"))  # before the test began
    shared = OperatorProcess(DevCluster(DevPaths(root=tmp_path)), ["ts123abcd-*"], str(log))
    view = SharedOperatorView(shared, MINE)
    with log.open("a") as fh:
        fh.write(_record(2, f"reconcile of {OTHER}/y failed; retrying in 5 s"))
        fh.write("Traceback (most recent call last):\n  File ...\nClusterAPIError: 404\n")
        fh.write(_record(3, f"reconciled {MINE}/x in 0.2 s"))
        fh.write(_record(4, f"reconcile of {MINE}/x failed; retrying in 5 s"))
        fh.write("Traceback (most recent call last):\nValueError: mine\n")
        fh.write(_record(5, "kopf: a line naming no namespace"))
    seen = view.log()
    assert seen.count("reconciled ") == 1  # only the pass after the test began
    assert f"{MINE}/x in 0.2 s" in seen
    assert "ValueError: mine" in seen  # a record's traceback comes with it
    assert OTHER not in seen
    assert "404" not in seen
    assert "naming no namespace" not in seen


def test_a_view_cannot_stop_or_restart_the_shared_operator(tmp_path: Path) -> None:
    log = tmp_path / "operator.log"
    log.write_text("")
    shared = OperatorProcess(DevCluster(DevPaths(root=tmp_path)), ["ts123abcd-*"], str(log))
    view = SharedOperatorView(shared, MINE)
    with pytest.raises(RuntimeError, match="use `operator` to stop"):
        view.stop()
    with pytest.raises(RuntimeError, match="use `operator` to restart"):
        view.start("--resync-seconds", "1")
