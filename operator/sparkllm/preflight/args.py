"""``sparkllm verify-network``'s options, one type for its parser and the init container.

The rank pods' network init container (``render/network_preflight.py``) fills one in from
``spec.network`` and writes it with ``cli_args.command_line``; the command's parser is
built from the same fields (``preflight/verify.py``). The collective's own options are
``bandwidth.BandwidthArgs`` (that module runs alone in the engine image).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from sparkllm.cli_args import option
from sparkllm.integrity.args import DEFAULT_TERMINATION_LOG


@dataclass(frozen=True, kw_only=True)
class VerifyNetworkArgs:
    """What ``sparkllm verify-network`` expects of the node, in the order its pods write it."""

    COMMAND: ClassVar[tuple[str, ...]] = ("verify-network",)

    socket_interface: str = option("--socket-interface", help="spec.network.socketInterface")
    gid_index: int = option("--gid-index", help="spec.network.ibGIDIndex")
    roce_mtu: int | None = option("--roce-mtu", default=None, help="expected MTU of RoCE ports")
    ib_hca: tuple[str, ...] = option("--ib-hca", help="one of ibHCAs (once per HCA)")
    socket_mtu: int | None = option("--socket-mtu", default=None, help="expected socket MTU")
    sys_dir: Path | None = option("--sys-dir", default=None, help="/sys (over --root)")
    proc_dir: Path | None = option("--proc-dir", default=None, help="/proc (over --root)")
    etc_dir: Path | None = option("--etc-dir", default=None, help="/etc (over --root)")
    gate: bool = option("--gate", default=False, help="exit 1 when a check fails")
    copy_bandwidth_module: Path | None = option(
        "--copy-bandwidth-module",
        default=None,
        help="copy sparkllm.preflight (stdlib only) here for verify-bandwidth's PYTHONPATH",
    )
    root: Path = option("--root", default=Path("/"), help="where sys, proc, etc are")
    node: str = option("--node", default="", help="node name (default: $NODE_NAME)")
    termination_log: str = option("--termination-log", default=DEFAULT_TERMINATION_LOG)


@dataclass(frozen=True, kw_only=True)
class VerifyMemoryArgs:
    """What ``sparkllm verify-memory`` compares the node's free memory with: the rank's
    share of the capacity plan (``render/memory_preflight.py`` fills it in)."""

    COMMAND: ClassVar[tuple[str, ...]] = ("verify-memory",)

    rank: int = option("--rank", default=0, always=True, help="the rank's node rank in the plan")
    weights_gb: float | None = option(
        "--weights-gb", default=None, help="the rank's weights in the plan (GB); unset: no plan"
    )
    kv_pool_gb: float = option("--kv-pool-gb", default=0.0, help="the rank's planned KV pool")
    reserve_gb: float | None = option(
        "--reserve-gb", default=None, help="what SGLang takes outside its static budget (GB)"
    )
    proc_dir: Path = option("--proc-dir", default=Path("/proc"), help="the host's /proc")
    gate: bool = option("--gate", default=False, help="exit 1 when a check fails")
    node: str = option("--node", default="", help="node name (default: $NODE_NAME)")
    termination_log: str = option("--termination-log", default=DEFAULT_TERMINATION_LOG)
