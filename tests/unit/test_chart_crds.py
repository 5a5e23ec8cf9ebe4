"""The CRDs ship in three places and must not drift from the generated ``crds/``.

``crds/`` is generated from the pydantic models (hack/gen-crd.sh); the Helm chart (in
``files/crds/``, applied by ``templates/crds.yaml`` so ``helm upgrade`` updates them) and the
kustomize base carry byte-identical copies (hack/sync-chart-crds.sh). kopf's peering CRDs
live in the chart (and, copied, in the kustomize HA overlay) and must name the group and
plurals kopf 1.45 looks for, or HA operators would pause forever.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "crds"
COPIES = (ROOT / "charts" / "sparkllm" / "files" / "crds", ROOT / "manifests" / "base" / "crds")
PEERING = ROOT / "charts" / "sparkllm" / "crds" / "kopf.dev_peerings.yaml"
SOURCE_NAMES = sorted(p.name for p in SOURCE.glob("*.yaml"))


def test_there_is_a_crd_to_ship() -> None:
    assert "sparkllm.io_inferenceclusters.yaml" in SOURCE_NAMES


@pytest.mark.parametrize("copy_dir", COPIES, ids=lambda p: str(p.relative_to(ROOT)))
@pytest.mark.parametrize("name", SOURCE_NAMES)
def test_copy_is_identical_to_the_generated_crd(copy_dir: Path, name: str) -> None:
    copy = copy_dir / name
    assert copy.is_file(), f"{copy} missing: run hack/sync-chart-crds.sh"
    assert copy.read_bytes() == (SOURCE / name).read_bytes(), (
        f"{copy} drifted from crds/{name}: run hack/sync-chart-crds.sh"
    )


@pytest.mark.parametrize("copy_dir", COPIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_copies_hold_nothing_else(copy_dir: Path) -> None:
    extra = {p.name for p in copy_dir.glob("*.yaml")} - set(SOURCE_NAMES) - {PEERING.name}
    assert not extra, f"{copy_dir} has CRDs that crds/ does not: {sorted(extra)}"


def test_peering_crds_are_what_kopf_looks_for() -> None:
    from kopf._cogs.structs import references  # kopf's own selectors, private but exact

    crds = {d["spec"]["names"]["plural"]: d for d in yaml.safe_load_all(PEERING.read_text())}
    for selector, scope in (
        (references.CLUSTER_PEERINGS_K, "Cluster"),
        (references.NAMESPACED_PEERINGS_K, "Namespaced"),
    ):
        crd = crds[selector.any_name]
        assert crd["spec"]["group"] == selector.group
        assert crd["spec"]["scope"] == scope
        assert [v["name"] for v in crd["spec"]["versions"]] == [selector.version]
    ha_copy = ROOT / "manifests" / "overlays" / "ha" / PEERING.name
    assert ha_copy.read_bytes() == PEERING.read_bytes()


def test_sync_script_reports_no_drift() -> None:
    result = subprocess.run(
        ["bash", str(ROOT / "hack" / "sync-chart-crds.sh"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
