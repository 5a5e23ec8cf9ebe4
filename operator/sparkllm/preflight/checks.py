"""The per-node network checks a rank runs before its engine starts.

Why: on DGX Spark the fabric fails silently. NCCL falls back to a slower path (one PCIe
half of the QSFP port left out of NCCL_IB_HCA: ~3 GB/s instead of ~23.7 GB/s), or
registration fails late (``CmaTotal: 0``), or SGLang advertises the wrong address. Each
check below reads what the kernel says through :class:`HostView` and returns findings;
nothing here writes, so the same function runs on a node, in tests and on the dev
cluster. docs/network.md explains each check and its threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from sparkllm.preflight.findings import Check, Finding, Severity
from sparkllm.preflight.host import UNLIMITED, ZERO_GID, HostView, split_hca

# The GID type sysfs reports for RoCE v2 (drivers/infiniband/core/sysfs.c).
ROCE_V2 = "RoCE v2"
# The env SGLang reads for the address it advertises, in its order (utils.get_ip).
ADDRESS_ENV = ("SGLANG_HOST_IP", "HOST_IP")

AddressLookup = Callable[[str], Sequence[str]]


@dataclass(frozen=True, slots=True)
class NodeExpectations:
    """What ``spec.network`` asks of every node, plus the rank container's environment."""

    socket_interface: str
    ib_hcas: tuple[str, ...]
    gid_index: int
    roce_mtu: int | None = 9000
    socket_mtu: int | None = None
    environment: Mapping[str, str] | None = None


def check_node(
    host: HostView,
    *,
    node: str,
    expect: NodeExpectations,
    addresses: AddressLookup,
) -> list[Finding]:
    """Every per-node check, in the order docs/network.md lists them."""
    env = dict(expect.environment or {})
    roce_netdevs: list[str] = []
    findings = check_interface(
        host, node=node, interface=expect.socket_interface, mtu=expect.socket_mtu
    )
    for hca in expect.ib_hcas:
        hca_findings, netdevs = check_hca(host, node=node, hca=hca, gid_index=expect.gid_index)
        findings += hca_findings
        for netdev in netdevs:
            roce_netdevs.append(netdev)
            findings += check_interface(host, node=node, interface=netdev, mtu=expect.roce_mtu)
    findings += check_default_route(host, node=node, roce_netdevs=roce_netdevs)
    findings += check_memory(host, node=node)
    findings += check_nccl_conf(host, node=node, environment=env)
    findings += check_advertised_address(
        host,
        node=node,
        socket_interface=expect.socket_interface,
        environment=env,
        addresses=addresses,
    )
    return findings


def check_interface(host: HostView, *, node: str, interface: str, mtu: int | None) -> list[Finding]:
    """The interface exists, is up, and (when ``mtu`` is given) has that MTU."""

    def error(check: Check, message: str) -> Finding:
        return Finding(node=node, check=check, severity=Severity.ERROR, message=message)

    if not host.interface_exists(interface):
        return [error(Check.INTERFACE, f"interface {interface} does not exist")]
    out: list[Finding] = []
    state = host.operstate(interface)
    if state != "up":
        out.append(error(Check.INTERFACE, f"interface {interface} is {state or 'unknown'}, not up"))
    actual = host.mtu(interface)
    if mtu is not None and actual != mtu:
        out.append(error(Check.MTU, f"interface {interface} has MTU {actual}, expected {mtu}"))
    return out


def check_hca(
    host: HostView, *, node: str, hca: str, gid_index: int
) -> tuple[list[Finding], list[str]]:
    """The RDMA device exists, its port is ACTIVE, and the GID index is a RoCE v2 GID.

    Also returns the device's Ethernet interfaces, whose MTU and routes are checked next.
    """
    device, port = split_hca(hca)

    def error(check: Check, message: str) -> Finding:
        return Finding(node=node, check=check, severity=Severity.ERROR, message=message)

    if not host.hca_exists(device):
        return [error(Check.HCA, f"RDMA device {device} (ibHCAs) does not exist")], []
    out: list[Finding] = []
    state = host.hca_port_state(device, port)
    if state is None or "ACTIVE" not in state:
        out.append(error(Check.HCA, f"RDMA device {device} port {port} is {state or 'absent'}"))
    gid = host.gid(device, port, gid_index)
    gid_type = host.gid_type(device, port, gid_index)
    if gid is None or gid == ZERO_GID:
        out.append(error(Check.GID, f"{device} port {port} has no GID at index {gid_index}"))
    elif gid_type != ROCE_V2:
        out.append(
            error(
                Check.GID,
                f"{device} port {port} GID index {gid_index} is {gid_type or 'untyped'}, "
                f"not {ROCE_V2}",
            )
        )
    return out, host.hca_netdevs(device)


def check_default_route(host: HostView, *, node: str, roce_netdevs: Sequence[str]) -> list[Finding]:
    """No default route leaves through a RoCE port (traffic for the world goes elsewhere)."""
    return [
        Finding(
            node=node,
            check=Check.DEFAULT_ROUTE,
            severity=Severity.ERROR,
            message=f"the default route goes through RoCE interface {route.interface}",
        )
        for route in host.routes()
        if route.is_default and route.interface in roce_netdevs
    ]


def check_memory(host: HostView, *, node: str) -> list[Finding]:
    """Locked memory unlimited and a CMA area: what ``ibv_reg_mr`` needs for NCCL buffers."""
    out: list[Finding] = []
    memlock = host.memlock()
    if memlock is None:
        out.append(
            Finding(node, Check.MEMLOCK, Severity.WARNING, "locked-memory limit not readable")
        )
    elif memlock[0] != UNLIMITED:
        out.append(
            Finding(
                node,
                Check.MEMLOCK,
                Severity.ERROR,
                f"locked-memory limit is {memlock[0]} bytes, not unlimited "
                "(RDMA registration of NCCL buffers fails)",
            )
        )
    cma = host.meminfo_kb("CmaTotal")
    if not cma:
        out.append(
            Finding(
                node,
                Check.CMA,
                Severity.ERROR,
                f"CmaTotal is {cma if cma is not None else 'absent'} in /proc/meminfo "
                "(ibv_reg_mr fails with ENOMEM)",
            )
        )
    return out


def check_nccl_conf(host: HostView, *, node: str, environment: Mapping[str, str]) -> list[Finding]:
    """Settings in /etc/nccl.conf: the env wins over the file, so only the others apply."""
    conf = host.nccl_conf()
    out: list[Finding] = []
    for key, value in (conf or {}).items():
        if key in environment:
            message = f"/etc/nccl.conf sets {key}={value}; the rank's env overrides it"
            out.append(Finding(node, Check.NCCL_CONF, Severity.INFO, message))
        else:
            message = f"/etc/nccl.conf sets {key}={value}, which applies to every rank"
            out.append(Finding(node, Check.NCCL_CONF, Severity.WARNING, message))
    return out


def check_advertised_address(
    host: HostView,
    *,
    node: str,
    socket_interface: str,
    environment: Mapping[str, str],
    addresses: AddressLookup,
) -> list[Finding]:
    """SGLang advertises an address of the socket interface.

    SGLang takes SGLANG_HOST_IP, then HOST_IP, then the source address of the default
    route; the last is the socket interface's only when the default route goes through it.
    """
    for key in ADDRESS_ENV:
        if environment.get(key):
            value = environment[key]
            own = list(addresses(socket_interface))
            if value in own:
                return []
            message = f"{key}={value} is not an address of {socket_interface} ({own or 'none'})"
            return [Finding(node, Check.ADVERTISED_ADDRESS, Severity.ERROR, message)]
    defaults = [r.interface for r in host.routes() if r.is_default]
    if socket_interface in defaults:
        return []
    message = (
        f"SGLANG_HOST_IP is unset and the default route goes through "
        f"{defaults[0] if defaults else 'no interface'}, not {socket_interface}: SGLang "
        "would advertise another address"
    )
    return [Finding(node, Check.ADVERTISED_ADDRESS, Severity.ERROR, message)]
