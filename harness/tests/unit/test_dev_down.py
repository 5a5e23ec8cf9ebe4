"""``sparkllm-dev down`` on a cluster whose demo runs stops the demo's processes too.

Why: the newcomer's ``sparkllm-dev --cluster demo down`` took the control plane away and
left the operator, engine, gateway and Jobs' harnesses running against nothing. The pid
files are the demo's own (``demo-NAME.pid`` in the cluster's state directory); the cache
root is a temporary one, so no real cluster is touched (none runs there: ``down`` finds no
kwokctl and no control-plane process of it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sparkllm_dev.cli import main
from sparkllm_dev.demo import stop_demo_processes
from sparkllm_dev.devcluster import DevCluster
from sparkllm_dev.devcluster.paths import PROFILE_ENV, PROFILES, DevPaths


def _demo_process(state_dir: Path, name: str) -> subprocess.Popen[bytes]:
    """A process standing for the demo's ``name`` harness, with the demo's pid file; reaped
    as soon as it ends (a zombie child would still answer ``kill(pid, 0)``)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    threading.Thread(target=proc.wait, daemon=True).start()
    (state_dir / f"demo-{name}.pid").write_text(str(proc.pid))
    return proc


def test_down_stops_the_demo_processes_of_its_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPARKLLM_CACHE", str(tmp_path))
    # `--cluster demo` sets SPARKLLM_DEVCLUSTER for the commands it starts: restored after,
    # so the tests that run next in this process stay on their own cluster.
    monkeypatch.setenv(PROFILE_ENV, os.environ.get(PROFILE_ENV, ""))
    demo_state = DevPaths(root=tmp_path, profile=PROFILES["demo"]).state_dir
    other_state = DevPaths(root=tmp_path, profile=PROFILES["test4"]).state_dir
    demo_state.mkdir(parents=True)
    other_state.mkdir(parents=True)
    procs = {n: _demo_process(demo_state, n) for n in ("operator", "engines", "gateways")}
    other = _demo_process(other_state, "operator")  # another profile's demo: left alone
    try:
        assert main(["--cluster", "demo", "down"]) == 0
        for name, proc in procs.items():
            assert proc.wait(timeout=5) is not None, name
            assert not (demo_state / f"demo-{name}.pid").exists()
        assert other.poll() is None
        assert (other_state / "demo-operator.pid").exists()
        out = capsys.readouterr().out
        stopped = "the operator, the engine harness, the gateway pods' harness"
        assert f"[devcluster] stopped the demo on it: {stopped}\n" in out
        assert "demo cluster down; no process of it left" in out
    finally:
        for proc in (*procs.values(), other):
            proc.kill()


def test_stale_pid_files_are_removed_and_not_named(tmp_path: Path) -> None:
    cluster = DevCluster(DevPaths(root=tmp_path, profile=PROFILES["demo"]))
    cluster.paths.state_dir.mkdir(parents=True)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    pid_file = cluster.paths.state_dir / "demo-jobs.pid"
    pid_file.write_text(ended.stdout.strip())
    assert stop_demo_processes(cluster) == []
    assert not pid_file.exists()
