"""spec.admission.governance rendered: the policy ConfigMap mounted as a directory (so
edits reach the gateway without a restart) and its path in the gateway's config."""

from __future__ import annotations

from pathlib import Path

from sparkllm.gateway.config import load_gateway_config
from sparkllm.render.gateway import GOVERNANCE_DIR, admission_env
from sparkllm_dev.devcluster.kubelet import expand_references
from tests.unit.test_render_gateway import ENGINE_KEY, cluster, container, pod_spec, render


def test_no_policy_renders_no_volume_and_no_setting() -> None:
    objects = render()
    assert "governance" not in {v["name"] for v in pod_spec(objects)["volumes"]}
    env = {e["name"] for e in container(objects, "admission")["env"]}
    assert "SPARKLLM_GATEWAY_GOVERNANCE_POLICY_PATH" not in env


def test_the_policy_configmap_is_mounted_whole_and_optional() -> None:
    ref = {"policyConfigMapRef": {"name": "llm-policy", "key": "users.yaml"}}
    ic = cluster(admission__governance=ref)
    objects = render(ic)
    volume = next(v for v in pod_spec(objects)["volumes"] if v["name"] == "governance")
    assert volume["configMap"] == {
        "name": "llm-policy",
        "items": [{"key": "users.yaml", "path": "policy.yaml"}],
        "optional": True,
    }
    mount = next(m for m in container(objects, "admission")["volumeMounts"]
                 if m["name"] == "governance")  # fmt: skip
    assert mount == {"name": "governance", "mountPath": GOVERNANCE_DIR, "readOnly": True}
    assert "subPath" not in mount  # a subPath mount never sees the ConfigMap's updates
    environ = {
        e["name"]: expand_references(e["value"], {})
        for e in admission_env(ic, engine_key=ENGINE_KEY)
        if "value" in e
    }
    config = load_gateway_config([], environ=environ)
    assert config.governance_policy_path == Path(GOVERNANCE_DIR) / "policy.yaml"
