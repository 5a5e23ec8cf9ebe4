"""Progress of one node's stage, as JSON lines (stdout) and a progress file (latest line).

Why both: phase 2's operator reads a node's progress into status (bytes, rate, ETA,
stage) and the Job's log is what ``kubectl logs`` shows a person. One record per line::

    {"event": "progress", "stage": "Downloading", "file": "model-00001-of-00003.safetensors",
     "bytesDone": 1048576, "bytesTotal": 4194304, "rateBytesPerSecond": 52428800.0,
     "etaSeconds": 0.06, "time": 1764716400.0}

``event`` is ``start``, ``progress`` (at most every ``interval`` seconds), ``retry`` (a
dropped connection resumed, or a corrupted file fetched again: ``reason``, ``message``),
``stage`` (a new state), ``done`` or ``failed`` (``reason``, ``message``). The progress
file is replaced atomically (write + rename), so a reader never sees half a record.
The clocks are injected: the rate and ETA are a function of the calls, testable without
waiting. :func:`read_record` reads a line back into a typed record, and
:meth:`ProgressRecord.node_stage` into the plan's per-node stage (phase 2's status).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from sparkllm.staging.plan import NodeStage, StageReason, StageState


class Progress:
    """Counts bytes across files and reports them; one instance per stage run."""

    def __init__(
        self,
        *,
        out: TextIO | None = sys.stdout,
        file: Path | None = None,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._out, self._file, self._interval = out, file, interval
        self._clock, self._wall = clock, wall
        self._started = clock()
        self._last_report = -interval
        self.stage = StageState.PENDING
        self.bytes_done = 0
        self.bytes_total = 0
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def set_stage(self, stage: StageState, *, total: int | None = None) -> None:
        self.stage = stage
        if total is not None:
            self.bytes_total = total
        self.emit("stage")

    def add(self, count: int, *, file: str) -> None:
        """``count`` more bytes are on disk; report when ``interval`` has passed.
        Thread-safe: the Hub client writes several files at once."""
        with self._lock:
            self.bytes_done += count
            now = self._clock()
            due = now - self._last_report >= self._interval
            if due:
                self._last_report = now
        if due:
            self.emit("progress", file=file)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        elapsed = max(self._clock() - self._started, 1e-9)
        rate = self.bytes_done / elapsed
        left = max(self.bytes_total - self.bytes_done, 0)
        record: dict[str, Any] = {
            "event": event,
            "stage": str(self.stage),
            **fields,
            "bytesDone": self.bytes_done,
            "bytesTotal": self.bytes_total,
            "rateBytesPerSecond": round(rate, 1),
            "etaSeconds": round(left / rate, 2) if rate > 0 else None,
            "time": round(self._wall(), 3),
        }
        self.records.append(record)
        line = json.dumps(record, separators=(",", ":"))
        if self._out is not None:
            print(line, file=self._out, flush=True)
        if self._file is not None:
            partial = self._file.with_name(self._file.name + ".tmp")
            partial.write_text(line + "\n", encoding="utf-8")
            os.replace(partial, self._file)
        return record

    def retry(self, reason: StageReason, message: str, *, file: str) -> None:
        self.emit("retry", reason=str(reason), message=message, file=file)

    def failed(self, reason: StageReason, message: str) -> None:
        self.stage = StageState.FAILED
        self.emit("failed", reason=str(reason), message=message)


@dataclass(frozen=True, slots=True)
class ProgressRecord:
    """One record read back (phase 2: a node's progress file or last log line -> status)."""

    event: str
    stage: StageState
    bytes_done: int
    bytes_total: int
    rate_bytes_per_second: float
    eta_seconds: float | None
    reason: StageReason | None = None
    message: str = ""

    def node_stage(self, node: str) -> NodeStage:
        """The node's stage this record says (a ``failed`` record carries its reason)."""
        return NodeStage(
            node=node,
            state=self.stage,
            reason=self.reason if self.stage is StageState.FAILED else None,
            message=self.message if self.stage is StageState.FAILED else "",
        )


def read_record(line: str) -> ProgressRecord | None:
    """A progress line -> its record; None for anything else (a log line, half a line)."""
    try:
        raw = json.loads(line)
        reason = raw.get("reason")
        return ProgressRecord(
            event=str(raw["event"]),
            stage=StageState(raw["stage"]),
            bytes_done=int(raw["bytesDone"]),
            bytes_total=int(raw["bytesTotal"]),
            rate_bytes_per_second=float(raw["rateBytesPerSecond"]),
            eta_seconds=None if raw.get("etaSeconds") is None else float(raw["etaSeconds"]),
            reason=StageReason(reason) if reason is not None else None,
            message=str(raw.get("message", "")),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
