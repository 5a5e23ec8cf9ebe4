"""A simulated DGX Spark's network as the kernel shows it: a /sys, /proc and /etc tree.

Why: the network preflight (``sparkllm.preflight``) reads the fabric from sysfs and
procfs through a root, and neither this machine nor a kwok node has a ConnectX-7. Each
simulated Spark gets a tree laid out like a real one (its four RDMA devices, one per PCIe
half of each QSFP port, their netdevs, GIDs, routes, limits), healthy by default; a
:class:`Fault` breaks one thing the way it breaks on real nodes, so tests and the dev
cluster can show that the preflight names the node and the finding.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

# The Spark's RDMA devices and their netdevs (NVIDIA's playbooks; docs/network.md).
SPARK_HCAS: dict[str, str] = {
    "rocep1s0f0": "enp1s0f0np0",
    "rocep1s0f1": "enp1s0f1np1",
    "roceP2p1s0f0": "enP2p1s0f0np0",
    "roceP2p1s0f1": "enP2p1s0f1np1",
}
SOCKET_INTERFACE = "enP7s7"
ROCE_V2_GID = "0000:0000:0000:0000:0000:ffff:c0a8:{:04x}"


class Fault(StrEnum):
    """One misconfiguration, as reported on real Spark clusters."""

    MTU_1500 = "mtu-1500"
    MISSING_HCA = "missing-hca"
    GID_ROCE_V1 = "gid-roce-v1"
    DEFAULT_ROUTE_VIA_ROCE = "default-route-via-roce"
    MEMLOCK_LIMITED = "memlock-limited"
    CMA_ZERO = "cma-zero"
    NCCL_CONF = "nccl-conf"
    SOCKET_DOWN = "socket-down"


@dataclass(frozen=True)
class SparkFabric:
    """What to write for one node; ``faults`` break the healthy default."""

    host_index: int = 1
    faults: frozenset[Fault] = field(default_factory=frozenset)
    socket_interface: str = SOCKET_INTERFACE
    gid_index: int = 3
    address: str = "192.168.1.11"  # the socket interface's, in a /24 (the node's InternalIP)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _write_netdev(root: Path, name: str, *, mtu: int, up: bool) -> None:
    _write(root / "sys/class/net" / name / "mtu", f"{mtu}\n")
    _write(root / "sys/class/net" / name / "operstate", "up\n" if up else "down\n")


def _write_hca(root: Path, device: str, netdev: str, spec: SparkFabric) -> None:
    base = root / "sys/class/infiniband" / device
    port = base / "ports/1"
    _write(port / "state", "4: ACTIVE\n")
    gid_type = "IB/RoCE v1" if Fault.GID_ROCE_V1 in spec.faults else "RoCE v2"
    for index in range(4):
        _write(port / "gids" / str(index), ROCE_V2_GID.format(spec.host_index) + "\n")
        _write(port / "gid_attrs/types" / str(index), "IB/RoCE v1\n")
    _write(port / "gid_attrs/types" / str(spec.gid_index), gid_type + "\n")
    (base / "device/net" / netdev).mkdir(parents=True, exist_ok=True)


def _hex(address: ipaddress.IPv4Address) -> str:
    """/proc/net/route's spelling of an address: the 4 bytes little-endian, in hex."""
    return f"{int.from_bytes(address.packed, 'little'):08X}"


def _routes(spec: SparkFabric) -> str:
    network = ipaddress.IPv4Network(f"{spec.address}/24", strict=False)
    gateway = _hex(network.network_address + 1)
    default = SPARK_HCAS["rocep1s0f0"] if Fault.DEFAULT_ROUTE_VIA_ROCE in spec.faults else None
    rows = [
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT",
        f"{default or spec.socket_interface}\t00000000\t{gateway}\t0003\t0\t0\t100\t00000000"
        "\t0\t0\t0",
        f"{spec.socket_interface}\t{_hex(network.network_address)}\t00000000\t0001\t0\t0\t100"
        f"\t{_hex(network.netmask)}\t0\t0\t0",
    ]
    return "\n".join(rows) + "\n"


def _fib_trie(spec: SparkFabric) -> str:
    """The part of /proc/net/fib_trie the preflight reads: the local addresses."""
    rows = ["Main:", "  +-- 0.0.0.0/0 3 0 5"]
    for address in ("127.0.0.1", spec.address):
        rows += [f"     |-- {address}", "        /32 host LOCAL"]
    return "\n".join(rows) + "\n"


def write_spark_tree(root: Path, spec: SparkFabric | None = None) -> Path:
    """Write one Spark's tree under ``root`` (created) and return ``root``."""
    spec = spec or SparkFabric()
    _write_netdev(root, spec.socket_interface, mtu=1500, up=Fault.SOCKET_DOWN not in spec.faults)
    for number, (device, netdev) in enumerate(SPARK_HCAS.items()):
        if Fault.MISSING_HCA in spec.faults and number == len(SPARK_HCAS) - 1:
            continue
        mtu = 1500 if Fault.MTU_1500 in spec.faults and number == 0 else 9000
        _write_netdev(root, netdev, mtu=mtu, up=True)
        _write_hca(root, device, netdev, spec)
    _write(root / "proc/net/route", _routes(spec))
    _write(root / "proc/net/fib_trie", _fib_trie(spec))
    cma = 0 if Fault.CMA_ZERO in spec.faults else 65536
    _write(root / "proc/meminfo", f"MemTotal:       128000000 kB\nCmaTotal:       {cma} kB\n")
    memlock = (
        "8388608              8388608"
        if Fault.MEMLOCK_LIMITED in spec.faults
        else ("unlimited            unlimited")
    )
    _write(
        root / "proc/self/limits",
        "Limit                     Soft Limit           Hard Limit           Units\n"
        f"Max locked memory         {memlock}            bytes\n",
    )
    (root / "etc").mkdir(parents=True, exist_ok=True)  # the hostPath must exist
    # The RDMA character devices verify-bandwidth (and the engine) mount: one per device.
    for number in range(len(SPARK_HCAS)):
        _write(root / "dev/infiniband" / f"uverbs{number}", "")
    if Fault.NCCL_CONF in spec.faults:
        _write(root / "etc/nccl.conf", "# left over from a test\nNCCL_IB_USE_INLINE=1\n")
    return root
