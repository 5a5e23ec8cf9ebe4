"""``kubectl logs`` in the dev cluster (``devcluster.pod_logs``), without a cluster.

A harness copies each container's output into the CRI log format kwok serves (the
kubelet's ``<time> stdout F <line>``): complete lines only until the process ends, the
harness's own ``--- <time>`` lines left out, nothing copied twice; each pod gets a kwok
``Logs`` object owned by the pod, one file per container. That kwok serves these files
through ``kubectl logs job/...`` is tests/e2e/test_benchmark_job.py's.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparkllm.errors import ClusterAPIError
from sparkllm_dev.devcluster.pod_logs import PodLogs, cri_lines, cri_timestamp, logs_object

STAMP = "2026-12-02T04:00:00.123456000Z"
POD = {"metadata": {"name": "job-x-abc", "namespace": "llm", "uid": "u-1"}}


def test_complete_lines_become_cri_lines_and_the_harness_lines_are_left_out() -> None:
    data = b"--- 2026-12-02T04:00:00Z benchmark pod llm/x: sparkllm bench\nfirst\n\nsecond\npart"
    lines, used = cri_lines(data, timestamp=STAMP)
    assert lines == (
        f"{STAMP} stdout F first\n{STAMP} stdout F \n{STAMP} stdout F second\n".encode()
    )
    assert data[used:] == b"part"  # waits for its newline
    final = cri_lines(b"part", timestamp=STAMP, final=True)  # the process ended
    assert final == (f"{STAMP} stdout F part\n".encode(), 4)
    assert cri_lines(b"part", timestamp=STAMP) == (b"", 0)


def test_the_timestamp_is_rfc3339_with_nanoseconds() -> None:
    stamp = cri_timestamp(datetime(2026, 12, 2, 4, 0, 0, 123456, tzinfo=UTC))
    assert stamp == STAMP
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", stamp)


def test_the_logs_object_is_the_pods_and_names_a_file_per_container() -> None:
    files = {"router": Path("/l/router.log"), "admission": Path("/l/admission.log")}
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "job-x-abc", "uid": "u-1"}
    assert logs_object(POD, files) == {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Logs",
        "metadata": {"name": "job-x-abc", "namespace": "llm", "ownerReferences": [owner]},
        "spec": {
            "logs": [
                {"containers": ["admission"], "logsFile": "/l/admission.log"},
                {"containers": ["router"], "logsFile": "/l/router.log"},
            ]
        },
    }


class _Kube:
    def __init__(self, status: int | None = None) -> None:
        self.created: list[dict[str, Any]] = []
        self.status = status

    def create_or_replace_custom(self, *where: str, body: dict[str, Any]) -> None:
        if self.status is not None:
            raise ClusterAPIError("refused", status=self.status)
        self.created.append(body)


def test_a_pods_output_is_copied_once_and_its_last_line_when_it_ends(tmp_path: Path) -> None:
    kube = _Kube()
    output = tmp_path / "bench.log"
    output.write_bytes(b"--- 2026-12-02T04:00:00Z benchmark pod llm/x: sparkllm bench\n")
    logs = PodLogs(kube, root=tmp_path / "pod-logs")  # type: ignore[arg-type]
    logs.add(POD, {"bench": output})
    served = tmp_path / "pod-logs" / "llm_job-x-abc_u-1" / "bench.log"
    assert kube.created[0]["spec"]["logs"] == [{"containers": ["bench"], "logsFile": str(served)}]
    assert served.read_bytes() == b""  # kwok finds the file before the first line
    with output.open("ab") as out:
        out.write(b"# Benchmark\n| a |")
    logs.ship()
    logs.ship()  # nothing new: nothing twice
    assert [line.split(b" ", 3)[1:] for line in served.read_bytes().splitlines()] == [
        [b"stdout", b"F", b"# Benchmark"]
    ]
    logs.ship(final_uid="u-1")  # the process ended: its unfinished line too, then forgotten
    assert served.read_bytes().splitlines()[-1].endswith(b" stdout F | a |")
    with output.open("ab") as out:
        out.write(b"after\n")
    logs.ship()
    assert b"after" not in served.read_bytes()


def test_a_cluster_without_the_logs_api_is_said_once(tmp_path: Path, caplog: Any) -> None:
    kube = _Kube(status=404)
    logs = PodLogs(kube, root=tmp_path)  # type: ignore[arg-type]
    logs.add(POD, {"bench": tmp_path / "a.log"})
    logs.add({"metadata": {**POD["metadata"], "uid": "u-2"}}, {"bench": tmp_path / "b.log"})
    said = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
    assert said == ["kubectl logs not served: the cluster has no kwok Logs API (restart it)"]
