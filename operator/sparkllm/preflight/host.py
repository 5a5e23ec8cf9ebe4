"""What a node's kernel says about its network, read from /sys and /proc under a root.

Why roots (one each for sys, proc and etc): the checks must run in the rank's init
container on a DGX Spark (the host's /sys, /proc and /etc mounted, host network
namespace) and in tests and on the dev cluster over fixture trees laid out the same
way. Every read goes through :class:`HostView`, which joins the kernel path to its
root; parsing is pure and separate, so the file formats are tested on their own.

Paths (kernel documentation, ``Documentation/ABI/testing/sysfs-class-net`` and
``sysfs-class-infiniband``): ``sys/class/net/<if>/{mtu,operstate}``,
``sys/class/infiniband/<hca>/ports/<p>/{state,gids/<i>,gid_attrs/types/<i>}``,
``sys/class/infiniband/<hca>/device/net/<netdev>``, ``proc/net/route``,
``proc/meminfo``, ``proc/self/limits``, ``etc/nccl.conf``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
UNLIMITED = -1


@dataclass(frozen=True, slots=True)
class Route:
    """One line of /proc/net/route (addresses as the kernel prints them: little-endian hex)."""

    interface: str
    destination: str
    mask: str

    @property
    def is_default(self) -> bool:
        return self.destination == "00000000" and self.mask == "00000000"

    def contains(self, address: str) -> bool:
        """Whether an IPv4 address (dotted) lies in this route's network."""
        value = int.from_bytes(ipaddress.IPv4Address(address).packed, "little")
        return value & int(self.mask, 16) == int(self.destination, 16)


def parse_routes(text: str) -> list[Route]:
    """The IPv4 routing table (/proc/net/route: a header, then tab-separated rows)."""
    rows = [line.split() for line in text.splitlines()[1:] if line.strip()]
    return [Route(interface=r[0], destination=r[1], mask=r[7]) for r in rows if len(r) >= 8]


def parse_local_addresses(fib_trie: str) -> list[str]:
    """The node's own IPv4 addresses: /proc/net/fib_trie entries marked ``/32 host LOCAL``."""
    found: list[str] = []
    last: str | None = None
    for line in fib_trie.splitlines():
        text = line.strip()
        if text.startswith("|-- "):
            last = text[4:]
        elif text == "/32 host LOCAL" and last and last not in found:
            found.append(last)
    return found


def parse_meminfo_kb(text: str, key: str) -> int | None:
    """A /proc/meminfo value in kB (``CmaTotal:  0 kB``), None when the key is absent."""
    match = re.search(rf"^{re.escape(key)}:\s+(\d+)", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def parse_memlock(text: str) -> tuple[int, int] | None:
    """Soft and hard ``Max locked memory`` of /proc/<pid>/limits; -1 means unlimited."""
    for line in text.splitlines():
        if not line.startswith("Max locked memory"):
            continue
        fields = line[len("Max locked memory") :].split()
        if len(fields) < 2:
            return None
        soft, hard = (UNLIMITED if v == "unlimited" else int(v) for v in fields[:2])
        return soft, hard
    return None


def parse_nccl_conf(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of an nccl.conf, as NCCL reads them (``#`` starts a comment)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def split_hca(name: str) -> tuple[str, int]:
    """``rocep1s0f0:1`` -> (``rocep1s0f0``, 1); without a port, port 1 (NCCL's default)."""
    device, _, port = name.partition(":")
    return device, int(port) if port else 1


@dataclass(frozen=True, slots=True)
class HostView:
    """A node's /sys, /proc and /etc, each where this process sees it.

    On a node they are ``/sys``, ``/proc``, ``/etc`` or the host's, mounted into an init
    container (``/host/sys`` ...); in tests, three directories of one fixture tree.
    """

    sys: Path
    proc: Path
    etc: Path

    @classmethod
    def under(cls, root: Path) -> HostView:
        """The view of a whole tree: ``root/sys``, ``root/proc``, ``root/etc``."""
        return cls(sys=root / "sys", proc=root / "proc", etc=root / "etc")

    def _path(self, relative: str) -> Path:
        top, _, rest = relative.partition("/")
        base = {"sys": self.sys, "proc": self.proc, "etc": self.etc}[top]
        return base / rest

    def _read(self, relative: str) -> str | None:
        try:
            return self._path(relative).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def interface_exists(self, interface: str) -> bool:
        return self._path(f"sys/class/net/{interface}").is_dir()

    def operstate(self, interface: str) -> str | None:
        text = self._read(f"sys/class/net/{interface}/operstate")
        return text.strip() if text is not None else None

    def mtu(self, interface: str) -> int | None:
        text = self._read(f"sys/class/net/{interface}/mtu")
        return int(text.strip()) if text is not None and text.strip().isdigit() else None

    def hca_exists(self, device: str) -> bool:
        return self._path(f"sys/class/infiniband/{device}").is_dir()

    def hca_port_state(self, device: str, port: int) -> str | None:
        text = self._read(f"sys/class/infiniband/{device}/ports/{port}/state")
        return text.strip() if text is not None else None

    def hca_netdevs(self, device: str) -> list[str]:
        """The Ethernet interfaces behind an RDMA device (its PCI function's ``net/``)."""
        net = self._path(f"sys/class/infiniband/{device}/device/net")
        return sorted(p.name for p in net.iterdir()) if net.is_dir() else []

    def gid(self, device: str, port: int, index: int) -> str | None:
        text = self._read(f"sys/class/infiniband/{device}/ports/{port}/gids/{index}")
        return text.strip() if text is not None else None

    def gid_type(self, device: str, port: int, index: int) -> str | None:
        path = f"sys/class/infiniband/{device}/ports/{port}/gid_attrs/types/{index}"
        text = self._read(path)
        return text.strip() if text is not None else None

    def routes(self) -> list[Route]:
        return parse_routes(self._read("proc/net/route") or "")

    def meminfo_kb(self, key: str) -> int | None:
        return parse_meminfo_kb(self._read("proc/meminfo") or "", key)

    def text(self, relative: str) -> str | None:
        """A file's text by its kernel path (``proc/meminfo``); None when unreadable."""
        return self._read(relative)

    def memlock(self) -> tuple[int, int] | None:
        return parse_memlock(self._read("proc/self/limits") or "")

    def ipv4_addresses(self, interface: str) -> list[str]:
        """The interface's addresses: local ones inside a network routed via the interface.

        /sys does not list addresses; /proc/net/fib_trie lists the local ones without
        their interface, and /proc/net/route's non-default routes say which interface
        each connected network is on (with hostNetwork, the node's namespace).
        """
        local = parse_local_addresses(self._read("proc/net/fib_trie") or "")
        nets = [r for r in self.routes() if r.interface == interface and not r.is_default]
        return [a for a in local if any(n.contains(a) for n in nets)]

    def nccl_conf(self) -> dict[str, str] | None:
        text = self._read("etc/nccl.conf")
        return parse_nccl_conf(text) if text is not None else None
