"""Issue 28 items 4 and 5 on the dev cluster: a start you can watch, and a restart that
finds its kernels compiled.

The operator runs with the chart's engine cache setting (``SPARKLLM_ENGINE_CACHE_ROOT``);
the engine harness serves the simulators' output as the pods' logs (kwok's Logs API, as
``sparkllm-dev engines`` does), which is where the operator reads each rank's stage. The
simulator prints SGLang's own start lines on its start model, scaled to 5 % (a cold start
~22 s, a warm one ~11 s: the JIT step is 12 s cold, 0.5 s warm). ``kubectl get icl -w``
runs beside the start; its lines are printed (run with ``-s`` to see them) and must show
the weights loading shard by shard, the kernel/graph capture and the start's duration.
Then ``sparkllm.io/restart=now``: the new generation's ranks find the JIT marker the
first start left in the node's cache directory and start faster than the cold one did.
"""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from sparkllm.render.engine_cache import cache_key
from sparkllm.sglang_contract.start_log import FIRED_UP
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.devcluster.engines import EngineHarness
from sparkllm_dev.sim.start import JIT_MARKER
from sparkllm_dev.testing import OperatorProcess
from tests.integration.test_faults import GROUP_A, ready_at, replica_status
from tests.integration.test_reconcile import NAME, apply, sample

pytestmark = pytest.mark.cluster
CACHE_ROOT = "/var/lib/sparkllm/engine-cache"
SCALE = "0.05"
ROOT = Path(__file__).resolve().parents[2]


class _Watch:
    """``kubectl get icl NAME -w``, its lines collected as they come."""

    def __init__(self, cluster: DevCluster, namespace: str) -> None:
        self.proc = subprocess.Popen(
            [str(cluster.paths.binary("kubectl")), "--kubeconfig", str(cluster.paths.kubeconfig),
             "-n", namespace, "get", "icl", NAME, "-w"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> list[str]:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.thread.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return self.lines


@pytest.fixture
def cached_operator(
    devcluster: DevCluster, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """The operator with an engine cache root, and an engine harness serving pod logs;
    yields the simulated nodes' root directory."""
    devcluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    devcluster.wait_established("inferenceclusters.sparkllm.io")
    monkeypatch.setenv("SPARKLLM_ENGINE_CACHE_ROOT", CACHE_ROOT)
    proc = OperatorProcess(devcluster, [namespace], str(tmp_path / "operator.log"))
    proc.start()
    hosts = tmp_path / "hosts"
    harness = EngineHarness(
        devcluster, namespace=namespace, log_dir=tmp_path / "engines", hosts_root=hosts,
        sim_args=(f"--sim-start-scale={SCALE}",), serve_logs=True,
    )  # fmt: skip
    with harness:
        yield hosts
        devcluster.kubectl("delete", "icl", "--all", "-n", namespace, "--wait=false", check=False)
        proc.stop()


def _start_column(lines: list[str]) -> list[str]:
    """The START column of each watched row (the header names the columns)."""
    header = lines[0].split()
    at = header.index("START")
    return [row.split()[at] for row in lines[1:] if len(row.split()) == len(header)]


def _events(cluster: DevCluster, namespace: str) -> list[str]:
    out = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "reason=StartStage",
        "-o", "jsonpath={range .items[*]}{.message}{'\\n'}{end}",
    ).stdout  # fmt: skip
    return [line for line in str(out).splitlines() if line]


_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] (.*)$")


def _engine_seconds(cluster: DevCluster, namespace: str) -> tuple[float, str]:
    """Rank 0's engine start in its own log (the simulator's timestamps): seconds from
    "Load weight begin." to "fired up", and what its JIT line said of the cache."""
    text = str(cluster.kubectl("logs", f"{NAME}-r0-rank0-0", "-n", namespace).stdout)
    stamps: dict[str, datetime] = {}
    cache = ""
    for line in text.splitlines():
        found = _STAMP.match(line)
        if found is None:
            continue
        at = datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f")
        if "Load weight begin." in found[2]:
            stamps = {"begin": at}  # the last start's (one log per pod)
        elif FIRED_UP in found[2]:
            stamps["ready"] = at
        elif "Try DeepGEMM JIT Compiling for" in found[2]:
            cache = found[2].split("(")[-2].rstrip(") ")
    return (stamps["ready"] - stamps["begin"]).total_seconds(), cache


def _start_seconds(obj: dict[str, Any]) -> int:
    return int(replica_status(obj)["lastStartSeconds"])


def test_the_start_is_watched_stage_by_stage_and_a_restart_hits_the_cache(
    devcluster: DevCluster, namespace: str, cached_operator: Path
) -> None:
    apply(devcluster, namespace, sample(GROUP_A))
    watch = _Watch(devcluster, namespace)  # the object exists: -w follows it
    cold = wait_until(ready_at(devcluster, namespace, 1), timeout=180, what="Ready (cold start)")
    cold_seconds, cold_engine = _start_seconds(cold), _engine_seconds(devcluster, namespace)
    watch = _Restart(devcluster, namespace, watch).run()
    warm = wait_until(ready_at(devcluster, namespace, 2), timeout=180, what="Ready (warm restart)")
    warm_seconds, warm_engine = _start_seconds(warm), _engine_seconds(devcluster, namespace)
    lines = watch.stop()
    print("\n$ kubectl get icl -w   # a cold start, then sparkllm.io/restart=now")
    print("\n".join(lines))
    print(f"whole start (lastStartSeconds): cold {cold_seconds} s, warm restart {warm_seconds} s")
    print(
        f"rank 0's engine, 'Load weight begin.' -> 'fired up': cold {cold_engine[0]:.1f} s "
        f"({cold_engine[1]}), warm {warm_engine[0]:.1f} s ({warm_engine[1]})"
    )
    starts = _start_column(lines)
    assert any(re.fullmatch(r"LoadingWeights:\d+/46:\d+s/\d+s", s) for s in starts), starts
    assert any(s.startswith("KernelCapture:") for s in starts), starts
    assert f"Ready:{cold_seconds}s" in starts
    # the restart is estimated from the cold start while it runs
    assert any(s.endswith(f"~{cold_seconds}s") for s in starts), starts
    assert starts[-1] == f"Ready:{warm_seconds}s"
    # the cache: each node's directory for this image holds what the cold start compiled
    image = str(sample(GROUP_A)["spec"]["engine"]["image"])
    for node in GROUP_A:
        marker = cached_operator / node / CACHE_ROOT.lstrip("/") / namespace / cache_key(image)
        assert (marker / JIT_MARKER).is_file(), node
    # the JIT step is 12 s cold and 0.5 s warm at this scale: the engine's part of the warm
    # start is faster by most of that (the whole start also holds the init containers,
    # tens of seconds on a busy 2-core machine, which swamp the difference there)
    assert cold_engine[1] == "cold: compiling"
    assert warm_engine[1] == "cache hit"
    assert warm_engine[0] <= cold_engine[0] - 6, (cold_engine, warm_engine)
    events = _events(devcluster, namespace)
    assert any("LoadingWeights" in e and "shards" in e for e in events), events
    assert any("KernelCapture" in e for e in events), events
    assert any(f"last start took {cold_seconds} s" in e for e in events), events


class _Restart:
    """``sparkllm.io/restart=now`` once the first start's Ready row was watched."""

    def __init__(self, cluster: DevCluster, namespace: str, watch: _Watch) -> None:
        self.cluster, self.namespace, self.watch = cluster, namespace, watch

    def run(self) -> _Watch:
        wait_until(
            lambda: any("Ready:" in line for line in self.watch.lines),
            timeout=30, what="the watch's Ready row",
        )  # fmt: skip
        self.cluster.kubectl(
            "annotate", "icl", NAME, "-n", self.namespace, "sparkllm.io/restart=now"
        )
        return self.watch
