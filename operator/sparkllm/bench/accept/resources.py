"""Acceptance point 5, resource safety over the run window: restarts, PSI, swap, OOM, XID, RDMA.

Why from these sources: rank restarts are what the operator counts
(``status.replicaStatuses[*].restarts`` of the InferenceCluster, read before and after the
run); the node and GPU facts come from the metrics the chart's alerts already use
(node-exporter: ``node_pressure_memory_waiting_seconds_total``, swap from
``node_memory_Swap*``, ``node_vmstat_oom_kill``, ``node_infiniband_port_*``; DCGM:
``DCGM_FI_DEV_XID_ERRORS``), queried from Prometheus over exactly the run's window.
Without a Prometheus URL, or when a query returns no series, the row says
``not measured`` — a missing source is never a pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

import httpx

from sparkllm.bench.accept.rows import Row, Verdict

SECTION: Final = "resources"
PSI_WAITING_RATIO_MAX: Final = 0.01


class NodeQuery(NamedTuple):
    """One resource row: the PromQL (``{sel}`` and ``{w}`` filled in) and when it fails."""

    name: str
    promql: str
    limit: float
    basis: str


def node_queries(window_s: int) -> tuple[NodeQuery, ...]:
    w = f"{max(window_s, 60)}s"
    return (
        NodeQuery(
            "memory pressure (PSI)",
            f"max(increase(node_pressure_memory_waiting_seconds_total{{sel}}[{w}]))"
            f" / {max(window_s, 60)}",
            PSI_WAITING_RATIO_MAX,
            f"node-exporter memory PSI 'some' waiting share over {w} <= {PSI_WAITING_RATIO_MAX}",
        ),
        NodeQuery(
            "swap",
            "max(min_over_time((node_memory_SwapTotal_bytes{sel}"
            f" - node_memory_SwapFree_bytes{{sel}})[{w}:]))",
            0,
            f"swap in use throughout {w} (sustained) must be 0 bytes",
        ),
        NodeQuery(
            "OOM kills",
            f"sum(increase(node_vmstat_oom_kill{{sel}}[{w}]))",
            0,
            f"kernel OOM kills (node_vmstat_oom_kill) over {w} must be 0",
        ),
        NodeQuery(
            "GPU XID errors",
            f"max(max_over_time(DCGM_FI_DEV_XID_ERRORS[{w}]))",
            0,
            f"DCGM_FI_DEV_XID_ERRORS over {w} must be 0",
        ),
        NodeQuery(
            "RDMA port errors",
            f"sum(increase(node_infiniband_port_errors_received_total{{sel}}[{w}]))"
            f" + sum(increase(node_infiniband_port_discards_received_total{{sel}}[{w}]))",
            0,
            f"InfiniBand/RoCE port receive errors + discards over {w} must be 0",
        ),
    )


def node_selector(nodes: Sequence[str], *, label: str = "instance") -> str:
    """A PromQL matcher for the replica's nodes (the label value may carry a :port)."""
    if not nodes:
        return ""
    alternatives = "|".join(node.replace(".", "\\\\.") for node in nodes)
    return f'{{{label}=~"({alternatives})(:[0-9]+)?"}}'


def _value(payload: Mapping[str, Any]) -> float | None:
    result = (payload.get("data") or {}).get("result") or []
    values = [float(sample["value"][1]) for sample in result if "value" in sample]
    return max(values) if values else None


async def _query(
    client: httpx.AsyncClient, *, url: str, promql: str, end: float
) -> tuple[float | None, str]:
    """(the largest value or None, why None) of one instant query at ``end``."""
    try:
        reply = await client.get(
            f"{url.rstrip('/')}/api/v1/query", params={"query": promql, "time": f"{end:.3f}"}
        )
        reply.raise_for_status()
        value = _value(reply.json())
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        return None, f"query failed: {type(exc).__name__}: {str(exc)[:120]}"
    return value, f"no series for {promql}"


async def prometheus_rows(
    client: httpx.AsyncClient,
    *,
    url: str | None,
    window_s: int,
    end: float,
    selector: str = "",
) -> list[Row]:
    """One row per :func:`node_queries` entry; ``not measured`` without data."""
    rows = []
    for query in node_queries(window_s):
        promql = query.promql.replace("{sel}", selector)
        value, why = (None, "no Prometheus URL")
        if url is not None:
            value, why = await _query(client, url=url, promql=promql, end=end)
        if value is None:
            verdict: Verdict = "not measured"
        elif value > query.limit:
            verdict, why = "fail", f"{value:g} > {query.limit:g} ({promql})"
        else:
            verdict, why = "pass", f"{value:g}"
        rows.append(
            Row(section=SECTION, name=query.name, verdict=verdict, basis=query.basis, detail=why)
        )
    return rows


def restart_count(status: Mapping[str, Any] | None) -> int | None:
    """Gang restarts so far over the InferenceCluster's replicas (None: no status)."""
    if status is None:
        return None
    replicas = status.get("replicaStatuses")
    if not isinstance(replicas, list):
        return None
    return sum(int(r.get("restarts") or 0) for r in replicas if isinstance(r, Mapping))


def restarts_row(*, before: int | None, after: int | None, what: str = "run") -> Row:
    basis = f"status.replicaStatuses[*].restarts before and after the {what}: no increase"
    name = "rank restarts" if what == "run" else f"rank restarts during the {what}"
    if before is None or after is None:
        return Row(
            section=SECTION,
            name=name,
            verdict="not measured",
            basis=basis,
            detail="no InferenceCluster status read",
        )
    if after > before:
        return Row(
            section=SECTION,
            name=name,
            verdict="fail",
            basis=basis,
            detail=f"{after - before} gang restart(s) ({before} -> {after})",
        )
    return Row(
        section=SECTION, name=name, verdict="pass", basis=basis, detail=f"{after} total, none new"
    )
