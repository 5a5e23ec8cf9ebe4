"""The docs' blocks that quote or feed the API server, against a real one.

tests/unit/test_docs_blocks.py checks these blocks offline (the spec fragments with the
pydantic model, the quoted refusals against the CRD's CEL messages); here the dev
cluster's kube-apiserver judges them as ``kubectl apply --dry-run=server`` would: every
``check: spec-fragment`` block, merged into the sample, is accepted, and every refusal
docs/api.md quotes is the API server's own words for the spec that line names. One
server-side dry-run create per block, nothing stored; the CRD fixture is the one
test_api_server_validation.py installs (a few seconds when the cluster is up).
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes
import pytest
import yaml

from sparkllm_dev.devcluster import DevCluster
from tests.integration.test_api_server_validation import _dry_run_create, crd_installed
from tests.unit.test_docs_blocks import BLOCKS, Block, merged, sample_manifest

pytestmark = pytest.mark.cluster
__all__ = ["crd_installed"]  # the fixture, shared

SPEC_FRAGMENTS = [b for b in BLOCKS if b.kind == "check" and b.arg == "spec-fragment"]
(REFUSALS,) = [b for b in BLOCKS if b.kind == "check" and b.arg == "crd-messages"]


def _api(cluster: DevCluster) -> kubernetes.client.CustomObjectsApi:
    client = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(cluster.paths.kubeconfig)
    )
    return kubernetes.client.CustomObjectsApi(client)


def _named(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    manifest["metadata"] = {"name": name}
    return manifest


def test_every_spec_fragment_is_accepted_by_the_api_server(
    crd_installed: DevCluster, namespace: str
) -> None:
    api = _api(crd_installed)
    refused = []
    for index, block in enumerate(SPEC_FRAGMENTS):
        manifest = _named(merged(sample_manifest(), yaml.safe_load(block.text)), f"doc-{index}")
        accepted, message = _dry_run_create(api, manifest, namespace=namespace)
        refused += [] if accepted else [f"{block.where}: {message}"]
    assert not refused, "\n".join(refused)


def _spec_for(line: str) -> dict[str, Any]:
    """The sample with the one flag or variable a quoted refusal names."""
    field, _, rest = line.split(": ", 2)
    offender = rest.rsplit(": ", 1)[1]
    manifest = sample_manifest()
    engine = manifest["spec"]["engine"]
    if field == "spec.engine.extraArgs":
        engine["extraArgs"] = [offender]
    elif field == "spec.engine.env":
        engine["env"] = [{"name": offender, "value": "1"}]
    else:
        raise AssertionError(f"{REFUSALS.where}: no spec known for {field}")
    return manifest


@pytest.mark.parametrize("line", REFUSALS.text.split("\n"), ids=lambda line: line[-30:])
def test_api_md_quotes_the_api_servers_refusal(
    crd_installed: DevCluster, namespace: str, line: str
) -> None:
    name = "doc-" + re.sub(r"[^a-z0-9]+", "-", line.rsplit(": ", 1)[1].lower()).strip("-")
    accepted, message = _dry_run_create(
        _api(crd_installed), _named(_spec_for(line), name), namespace=namespace
    )
    assert not accepted, f"{REFUSALS.where}: the API server accepted {line.rsplit(': ', 1)[1]}"
    assert line in message, f"{REFUSALS.where}: the API server says:\n{message}"


def test_blocks_are_found() -> None:
    assert SPEC_FRAGMENTS, "no spec fragments found"
    assert isinstance(REFUSALS, Block)
