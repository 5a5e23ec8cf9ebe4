"""``spec.network``, ``spec.restartPolicy``, ``spec.monitoring``: how replicas run and heal.

These sections change no model behaviour; they decide whether the ranks can reach each
other (RoCE host networking and the NCCL/Gloo settings the DGX Spark playbooks use), how
patiently a replica is restarted when one rank drops (a model load takes minutes, so a
slow start is not a failure, and a restart loop must stop), and what the operator
publishes for Prometheus. Defaults are the documents' three-node ring.
"""

import re
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator
from pydantic_core import PydanticCustomError

from sparkllm.api.common import LABEL_KEY_PATTERN, MAX_LABEL_KEY
from sparkllm.api.quarantine import QuarantineSpec
from sparkllm.api.rules import ApiModel, Rule
from sparkllm.sglang_contract.fields import ENGINE_HTTP_PORT

# Linux interface names: at most 15 bytes, no '/' or whitespace.
INTERFACE_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,15}$"
# An RDMA device for NCCL_IB_HCA, optionally with its port: rocep1s0f0 or mlx5_0:1.
HCA_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*(:[0-9]{1,3})?$"

Seconds = Annotated[int, Field(ge=1, le=86_400)]

BackoffSeconds = Annotated[
    tuple[Seconds, ...],
    Field(min_length=1, max_length=16),
    Rule(
        cel="self.isSorted()",
        message="backoffSeconds must not decrease: each restart waits at least as long "
        "as the one before",
        check=lambda steps: list(steps) == sorted(steps),
    ),
]


class NetworkPreflightSpec(ApiModel):
    """The network preflight every rank runs before its engine (docs/network.md)."""

    mode: Literal["gate", "warn", "off"] = Field(
        default="off",
        description="mode is what the network preflight does. gate: each rank's init "
        "container verify-network checks its node (interfaces, MTU, HCAs, GID, routes, "
        "locked memory, CMA, /etc/nccl.conf, SGLang's address), then verify-bandwidth "
        "measures the bus bandwidth across the ranks; an error fails the rank's init "
        "container, so the engine does not start; warn: the same checks, reported in condition "
        "NetworkVerified, the engine starts anyway; off: no check, no condition. Default "
        "off (existing replicas keep their pods unchanged; warn is recommended).",
    )
    min_bus_bandwidth_gbps: float = Field(
        default=150,
        ge=0,
        le=100_000,
        description="minBusBandwidthGbps is the lowest all_reduce bus bandwidth (Gb/s, as "
        "nccl-tests computes it, at 128 MiB) the replica's ranks must reach in the "
        "collective init container verify-bandwidth runs across them with the engine "
        "image's NCCL before the engine starts; below it NetworkVerified is False (and in "
        "gate mode no engine starts). Default 150: the documents' slowest link, 183.5 Gb/s, "
        "less 18 %, and 6x the ~24 Gb/s of a missing PCIe half (docs/network.md); 0 skips "
        "the collective.",
    )


class NetworkSpec(ApiModel):
    """RoCE host networking for NCCL and Gloo between the ranks of a replica."""

    host_network: bool = Field(
        default=True,
        description="hostNetwork runs every rank in its node's network namespace, which "
        "RoCE needs (the RDMA NICs are the node's). Default true; false is only for "
        "clusters without RDMA and is not a supported production setting.",
    )
    socket_interface: Annotated[
        str, StringConstraints(pattern=INTERFACE_NAME_PATTERN, max_length=15)
    ] = Field(
        default="enP7s7",
        description="socketInterface is the NIC for NCCL's and Gloo's socket traffic and "
        "the rendezvous (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME): the management NIC, "
        "since in a three-node ring no 200G subnet spans all nodes. Default enP7s7; a "
        "Linux interface name of 1 to 15 characters.",
    )
    ib_hcas: Annotated[
        tuple[Annotated[str, StringConstraints(pattern=HCA_PATTERN, max_length=64)], ...],
        Field(min_length=1, max_length=16),
    ] = Field(
        default=("rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1"),
        alias="ibHCAs",
        description="ibHCAs are the RDMA devices NCCL may use (NCCL_IB_HCA). Default the "
        "DGX Spark's four: rocep1s0f0, rocep1s0f1, roceP2p1s0f0, roceP2p1s0f1; 1 to 16 "
        "device names, each optionally with :port.",
    )
    ib_gid_index: int = Field(
        default=3,
        ge=0,
        le=255,
        alias="ibGIDIndex",
        description="ibGIDIndex is the RoCE GID index (NCCL_IB_GID_INDEX); 3 selects RoCE "
        "v2 over IPv4 on the Spark's ConnectX-7. Default 3; 0 to 255.",
    )
    topology: Literal["ring", "switch"] = Field(
        default="ring",
        description="topology is how the nodes are cabled. ring: direct 200G links between "
        "nodes (sets NCCL_IB_SUBNET_AWARE_ROUTING=1, NCCL_IB_MERGE_NICS=0, "
        "NCCL_NET_PLUGIN=none); switch: a 200G switch, vendor NCCL defaults. Default ring.",
    )
    roce_mtu: int = Field(
        default=9000,
        ge=1280,
        le=9216,
        alias="roceMTU",
        description="roceMTU is the MTU the network preflight expects on the Ethernet "
        "interfaces behind ibHCAs (jumbo frames, as the DGX Spark playbooks set). Default "
        "9000; 1280 to 9216.",
    )
    socket_mtu: int | None = Field(
        default=None,
        ge=576,
        le=9216,
        alias="socketMTU",
        description="socketMTU is the MTU the network preflight expects on socketInterface. "
        "Optional: unset, the socket interface's MTU is not checked (the management NIC "
        "usually runs 1500); 576 to 9216.",
    )
    preflight: NetworkPreflightSpec = Field(
        default=NetworkPreflightSpec(),
        description="preflight is the network check before a replica serves (condition "
        "NetworkVerified). Default mode off.",
    )
    dist_init_port: Annotated[
        int,
        Field(ge=1024, le=65535),
        # A field rule, not an object rule: the API server checks CEL rules against the
        # object's schema default ({}) as written, where an object rule would find no
        # distInitPort key.
        Rule(
            cel=f"self != {ENGINE_HTTP_PORT}",
            message=f"distInitPort must differ from {ENGINE_HTTP_PORT}, the port rank 0 "
            "serves the API on (host networking shares the node's ports)",
            check=lambda port: port != ENGINE_HTTP_PORT,
        ),
    ] = Field(
        default=5000,
        description="distInitPort is the TCP port on rank 0's node where the ranks "
        "rendezvous (the port of --dist-init-addr). Default 5000; 1024 to 65535, not "
        f"{ENGINE_HTTP_PORT}.",
    )


class RestartPolicySpec(ApiModel):
    """How a replica is restarted, as a whole, when one of its ranks drops."""

    startup_grace_seconds: int = Field(
        default=1800,
        ge=0,
        le=86_400,
        description="startupGraceSeconds is how long a starting replica may stay not-ready "
        "before it counts as failed: loading the weights takes minutes. Default 1800; 0 "
        "to 86400.",
    )
    backoff_seconds: BackoffSeconds = Field(
        default=(10, 30, 60, 300),
        description="backoffSeconds are the waits before successive gang restarts of a "
        "replica; the last one repeats. Default [10, 30, 60, 300]; 1 to 16 non-decreasing "
        "entries of 1 to 86400.",
    )
    max_restarts_per_hour: int = Field(
        default=6,
        ge=0,
        le=60,
        description="maxRestartsPerHour caps gang restarts of one replica in a sliding "
        "hour; past it the replica is marked Degraded, no longer restarted, and an alert "
        "fires. Default 6; 0 (never restart automatically) to 60.",
    )
    quarantine: QuarantineSpec = Field(
        default=QuarantineSpec(),
        description="quarantine says when a node that keeps failing replicas is kept from "
        "this object's replicas, and when it is used again (docs/operator.md, Spare groups "
        "and quarantine). Default: more than 2 failures in 3600 s, used again after 1800 s "
        "Ready.",
    )


# The Prometheus Operator's Duration (monitoring.coreos.com/v1, e.g. 15s, 1m30s) without
# its "0": what a PodMonitor's interval accepts, so the operator never renders one the API
# server refuses.
SCRAPE_INTERVAL_PATTERN = (
    r"^(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$"
)
# A label value: at most 63 characters, alphanumeric at both ends.
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# Label key prefixes the operator sets on the monitors itself (what it prunes by).
RESERVED_LABEL_PREFIXES = ("sparkllm.io/", "app.kubernetes.io/")

LabelValue = Annotated[str, StringConstraints(max_length=63, pattern=LABEL_VALUE_PATTERN)]


def _no_reserved_key(labels: dict[str, str]) -> bool:
    return not any(key.startswith(RESERVED_LABEL_PREFIXES) for key in labels)


MonitorLabels = Annotated[
    dict[str, LabelValue],
    Field(max_length=16),
    Rule(
        # startsWith costs the prefix's length, so this stays cheap for the API server;
        # the keys' syntax (a map key has no schema) is checked by the operator.
        cel="self.all(k, "
        + " && ".join(f"!k.startsWith('{prefix}')" for prefix in RESERVED_LABEL_PREFIXES)
        + ")",
        message="labels must not use the keys the operator sets (sparkllm.io/, app.kubernetes.io/)",
        check=_no_reserved_key,
    ),
]


class MonitoringSpec(ApiModel):
    """What the operator publishes for Prometheus (only when the cluster serves PodMonitor).

    Why PodMonitors: every rank runs with host networking behind no Service of its own
    (only rank 0 has one), and the front door's metrics ports are deliberately in no
    Service (nothing exposed may route them), so Prometheus must scrape the pods.
    Alert rules are not made per object: the chart's PrometheusRule covers every
    InferenceCluster, with its thresholds in one place (docs/monitoring.md).
    """

    service_monitor: bool = Field(
        default=True,
        description="serviceMonitor creates two PodMonitors owned by this object: N-engines "
        "(every rank's SGLang /metrics on port http, target labels sparkllm_io_cluster, "
        "sparkllm_io_replica, sparkllm_io_rank) and N-gateway (the front door's ports "
        "metrics and router-metrics, target label sparkllm_io_cluster), when the cluster "
        "serves monitoring.coreos.com/v1 PodMonitor; the Monitored condition says whether "
        "they exist. Default true.",
    )
    interval: Annotated[
        str, StringConstraints(min_length=2, max_length=32, pattern=SCRAPE_INTERVAL_PATTERN)
    ] = Field(
        default="15s",
        description="interval is how often Prometheus scrapes every endpoint of both "
        "PodMonitors, a Prometheus duration (e.g. 15s, 1m). Default 15s.",
    )
    labels: MonitorLabels = Field(
        default_factory=dict,
        exclude_if=lambda labels: not labels,  # absent on the wire, as the API server keeps it
        description="labels are added to both PodMonitors, for a Prometheus that selects "
        "monitors by label (kube-prometheus-stack: release: <its release name>). At most "
        "16; not under sparkllm.io/ or app.kubernetes.io/. Optional.",
    )

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, labels: dict[str, str]) -> dict[str, str]:
        """Each key is a label key (checked here: the CRD cannot give a map's keys a
        pattern, and a CEL regex over an unbounded key exceeds the API server's cost
        budget); a bad one would otherwise surface only when the PodMonitor is refused."""
        for key in labels:
            if len(key) > MAX_LABEL_KEY or not re.fullmatch(LABEL_KEY_PATTERN, key):
                raise PydanticCustomError(
                    "label_key",
                    "labels must have label keys ([prefix/]name, the name at most 63 "
                    "characters, e.g. release): '"
                    + key.replace("{", "(").replace("}", ")")
                    + "' is not one",
                )
        return labels
