"""Per-node network preflight over fixture trees: a healthy Spark passes, each fault is named.

The trees come from the harness's ``write_spark_tree`` (a DGX Spark's /sys, /proc and
/etc laid out as the kernel shows them); each test breaks one thing and asserts the
finding names the node, the check and the cause.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sparkllm.cli import main as cli_main
from sparkllm.preflight import (
    Check,
    Finding,
    HostView,
    NodeExpectations,
    Severity,
    check_node,
    failed,
    summarize,
)
from sparkllm.preflight.findings import from_json, to_json
from sparkllm.preflight.host import parse_memlock, parse_nccl_conf, parse_routes, split_hca
from sparkllm_dev.devcluster.fabric import SPARK_HCAS, Fault, SparkFabric, write_spark_tree

ADDRESS = "192.168.1.11"
EXPECT = NodeExpectations(
    socket_interface="enP7s7",
    ib_hcas=tuple(SPARK_HCAS),
    gid_index=3,
    environment={"SGLANG_HOST_IP": ADDRESS, "NCCL_IB_HCA": ",".join(SPARK_HCAS)},
)


def _addresses(interface: str) -> list[str]:
    return [ADDRESS] if interface == "enP7s7" else []


def _run(tmp_path: Path, *faults: Fault, expect: NodeExpectations = EXPECT) -> list[Finding]:
    root = write_spark_tree(tmp_path / "spark-2", SparkFabric(faults=frozenset(faults)))
    return check_node(HostView.under(root), node="spark-2", expect=expect, addresses=_addresses)


def _errors(findings: list[Finding]) -> list[tuple[str, Check, str]]:
    return [(f.node, f.check, f.message) for f in failed(findings)]


def test_a_healthy_spark_has_no_finding(tmp_path: Path) -> None:
    assert _run(tmp_path) == []
    assert summarize([]) == "all network checks passed"


def test_a_socket_interface_that_is_down(tmp_path: Path) -> None:
    assert _errors(_run(tmp_path, Fault.SOCKET_DOWN)) == [
        ("spark-2", Check.INTERFACE, "interface enP7s7 is down, not up")
    ]


def test_a_missing_socket_interface(tmp_path: Path) -> None:
    expect = replace(EXPECT, socket_interface="eth9", environment={"SGLANG_HOST_IP": ADDRESS})
    errors = _errors(_run(tmp_path, expect=expect))
    assert errors[0] == ("spark-2", Check.INTERFACE, "interface eth9 does not exist")
    assert errors[1][1] is Check.ADVERTISED_ADDRESS


def test_a_roce_port_with_mtu_1500(tmp_path: Path) -> None:
    assert _errors(_run(tmp_path, Fault.MTU_1500)) == [
        ("spark-2", Check.MTU, "interface enp1s0f0np0 has MTU 1500, expected 9000")
    ]


def test_the_socket_mtu_is_checked_only_when_set(tmp_path: Path) -> None:
    expect = replace(EXPECT, socket_mtu=9000)
    assert _errors(_run(tmp_path, expect=expect)) == [
        ("spark-2", Check.MTU, "interface enP7s7 has MTU 1500, expected 9000")
    ]


def test_a_missing_pcie_half(tmp_path: Path) -> None:
    assert _errors(_run(tmp_path, Fault.MISSING_HCA)) == [
        ("spark-2", Check.HCA, "RDMA device roceP2p1s0f1 (ibHCAs) does not exist")
    ]


def test_a_gid_index_that_is_not_roce_v2(tmp_path: Path) -> None:
    errors = _errors(_run(tmp_path, Fault.GID_ROCE_V1))
    assert len(errors) == 4
    assert errors[0] == (
        "spark-2",
        Check.GID,
        "rocep1s0f0 port 1 GID index 3 is IB/RoCE v1, not RoCE v2",
    )


def test_an_empty_gid_index(tmp_path: Path) -> None:
    expect = replace(EXPECT, ib_hcas=("rocep1s0f1:1",), gid_index=7)
    assert _errors(_run(tmp_path, expect=expect)) == [
        ("spark-2", Check.GID, "rocep1s0f1 port 1 has no GID at index 7")
    ]


def test_a_default_route_through_a_roce_port(tmp_path: Path) -> None:
    errors = _errors(_run(tmp_path, Fault.DEFAULT_ROUTE_VIA_ROCE))
    assert errors == [
        (
            "spark-2",
            Check.DEFAULT_ROUTE,
            "the default route goes through RoCE interface enp1s0f0np0",
        )
    ]


def test_a_limited_locked_memory(tmp_path: Path) -> None:
    [error] = _errors(_run(tmp_path, Fault.MEMLOCK_LIMITED))
    assert error[:2] == ("spark-2", Check.MEMLOCK)
    assert "8388608 bytes, not unlimited" in error[2]


def test_a_kernel_without_cma(tmp_path: Path) -> None:
    [error] = _errors(_run(tmp_path, Fault.CMA_ZERO))
    assert error[:2] == ("spark-2", Check.CMA)
    assert error[2].startswith("CmaTotal is 0 in /proc/meminfo")


def test_nccl_conf_overrides_are_reported(tmp_path: Path) -> None:
    findings = _run(tmp_path, Fault.NCCL_CONF)
    assert failed(findings) == []
    assert findings == [
        Finding(
            "spark-2",
            Check.NCCL_CONF,
            Severity.WARNING,
            "/etc/nccl.conf sets NCCL_IB_USE_INLINE=1, which applies to every rank",
        )
    ]
    assert summarize(findings) == "1 warnings"


def test_nccl_conf_keys_the_env_sets_are_info(tmp_path: Path) -> None:
    root = write_spark_tree(tmp_path / "n")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/nccl.conf").write_text("NCCL_IB_HCA=mlx5_0\n")
    [finding] = check_node(HostView.under(root), node="n", expect=EXPECT, addresses=_addresses)
    assert finding.severity is Severity.INFO


def test_the_advertised_address_must_be_the_socket_interfaces(tmp_path: Path) -> None:
    expect = replace(EXPECT, environment={"SGLANG_HOST_IP": "10.0.0.5"})
    assert _errors(_run(tmp_path, expect=expect)) == [
        (
            "spark-2",
            Check.ADVERTISED_ADDRESS,
            "SGLANG_HOST_IP=10.0.0.5 is not an address of enP7s7 (['192.168.1.11'])",
        )
    ]


def test_without_sglang_host_ip_the_default_route_decides(tmp_path: Path) -> None:
    expect = replace(EXPECT, environment={})
    assert _errors(_run(tmp_path, expect=expect)) == []
    errors = _errors(_run(tmp_path, Fault.DEFAULT_ROUTE_VIA_ROCE, expect=expect))
    assert [e[1] for e in errors] == [Check.DEFAULT_ROUTE, Check.ADVERTISED_ADDRESS]
    assert "goes through enp1s0f0np0, not enP7s7" in errors[1][2]


def test_findings_round_trip_as_a_termination_message(tmp_path: Path) -> None:
    findings = _run(tmp_path, Fault.CMA_ZERO, Fault.NCCL_CONF, Fault.MTU_1500)
    assert from_json(to_json(findings)) == findings
    assert summarize(findings, limit=1).startswith("spark-2: MTU (error): interface enp1s0f0np0")
    assert summarize(findings, limit=1).endswith("and 1 more errors; 1 warnings")
    with pytest.raises(ValueError, match="must be a JSON list"):
        from_json('{"node": "x"}')


def test_parsers() -> None:
    assert parse_memlock("Max locked memory  unlimited  unlimited  bytes\n") == (-1, -1)
    assert parse_memlock("Max open files 1024 4096 files\n") is None
    assert parse_nccl_conf("A=1 # c\n# B=2\n\nC = x=y\n") == {"A": "1", "C": "x=y"}
    assert split_hca("mlx5_0:2") == ("mlx5_0", 2)
    assert split_hca("rocep1s0f0") == ("rocep1s0f0", 1)
    [route] = parse_routes("Iface\tDestination\n" + "eth0 00000000 0 3 0 0 0 00000000 0 0 0\n")
    assert route.is_default
    assert route.interface == "eth0"


def test_verify_network_cli_reports_and_gates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("SGLANG_HOST_IP", "HOST_IP"):
        monkeypatch.delenv(key, raising=False)
    root = write_spark_tree(tmp_path / "tree", SparkFabric(faults=frozenset({Fault.CMA_ZERO})))
    log = tmp_path / "termination-log"
    args = ["verify-network", "--root", str(root), "--node", "spark-3", "--socket-interface"]
    args += ["enP7s7", "--gid-index", "3", "--roce-mtu", "9000", "--termination-log", str(log)]
    args += [arg for hca in SPARK_HCAS for arg in ("--ib-hca", hca)]
    assert cli_main(args) == 0
    [finding] = from_json(log.read_text())
    assert (finding.node, finding.check) == ("spark-3", Check.CMA)
    assert "[verify-network] spark-3: CMA (error): CmaTotal is 0" in capsys.readouterr().out
    assert cli_main([*args, "--gate"]) == 1


def test_the_socket_interfaces_address_is_read_from_proc(tmp_path: Path) -> None:
    root = write_spark_tree(tmp_path / "n", SparkFabric(address="10.20.30.40"))
    host = HostView.under(root)
    assert host.ipv4_addresses("enP7s7") == ["10.20.30.40"]
    assert host.ipv4_addresses("enp1s0f0np0") == []
    expect = replace(EXPECT, environment={"SGLANG_HOST_IP": "10.20.30.40"})
    assert check_node(host, node="n", expect=expect, addresses=host.ipv4_addresses) == []


def test_any_address_routed_via_the_interface_is_its_own(tmp_path: Path) -> None:
    # The dev cluster's nodes have loopback-range InternalIPs (127.0.0.21 ...).
    root = write_spark_tree(tmp_path / "n", SparkFabric(address="127.0.0.22"))
    assert "127.0.0.22" in HostView.under(root).ipv4_addresses("enP7s7")
