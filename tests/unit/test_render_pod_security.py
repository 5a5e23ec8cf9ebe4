"""What every pod the operator makes may do, as rendered (issue 25 item 3).

Each pod kind (a rank, the gateway, the benchmark and acceptance Jobs) is rendered for
three variants of the sample, and every container is checked: no privilege escalation,
every capability dropped and only IPC_LOCK added (engine image, RDMA), seccomp
RuntimeDefault, the sparkllm image as non-root 65532 on a read-only root, the engine as
``spec.engine.runAsUser`` says, hostPaths typed and mounted read-only, the GPU taint
tolerated only where the pod must run on a Spark, a ServiceAccount token only where the
pod uses the API.

The claims (``CLAIMS``: the Pod Security Admission level each pod kind meets in each
variant) are checked on the real API server by tests/integration/test_render_matches.py;
docs/pod-security.md carries the tables ``security_table`` and ``claims_table`` print,
and the last tests fail when the page and the rendering part ways.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from sparkllm.api import InferenceCluster, validate_inference_cluster
from sparkllm.render import EngineKeyRef, ReplicaPlan, render_replica
from sparkllm.render.acceptance import AcceptanceRequest, render_acceptance_job
from sparkllm.render.benchmark import render_benchmark_job
from sparkllm.render.gateway import render_gateway
from sparkllm.render.pod_security import TOOLS_USER
from sparkllm.render.product_image import DEFAULT_PRODUCT_IMAGE

JSON = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
DOC = ROOT / "docs" / "pod-security.md"
TOOLS_IMAGE: Final = DEFAULT_PRODUCT_IMAGE
KEY = EngineKeyRef(secret="deepseek-v4-flash-engine-key", key="token")
USER: Final = "alice"
KINDS: Final = ("rank", "gateway", "benchmark", "acceptance")
LEVELS: Final = ("privileged", "baseline", "restricted")  # laxest first

# Spec changes over the sample (section -> fields; None removes a field).
VARIANTS: Final[dict[str, dict[str, dict[str, Any]]]] = {
    # The sample as shipped, with the network preflight on (all four rank containers).
    "sample": {"network": {"preflight": {"mode": "gate"}}},
    # Model on a PVC, no host networking (no RDMA), the engine as the image's user.
    "pvc": {
        "model": {"persistentVolumeClaim": {"claimName": "weights"}},
        "network": {"hostNetwork": False},
    },
    # The same with a non-root engine.
    "pvc-nonroot": {
        "model": {"persistentVolumeClaim": {"claimName": "weights"}},
        "network": {"hostNetwork": False},
        "engine": {"runAsUser": 1000, "runAsGroup": 1000},
    },
}

# (variant, pod kind) -> the strictest Pod Security level the pod meets, and why not the
# next stricter one.
CLAIMS: Final[dict[tuple[str, str], tuple[str, str]]] = {
    ("sample", "rank"): ("privileged", "hostNetwork and its hostPort, hostPath volumes, IPC_LOCK"),
    ("sample", "gateway"): ("privileged", "the model's hostPath volume"),
    ("sample", "benchmark"): ("privileged", "the model's hostPath volume"),
    ("sample", "acceptance"): ("privileged", "the model's hostPath volume"),
    ("pvc", "rank"): ("baseline", "the engine runs as the image's user: no runAsNonRoot"),
    ("pvc", "gateway"): ("restricted", ""),
    ("pvc", "benchmark"): ("restricted", ""),
    ("pvc", "acceptance"): ("restricted", ""),
    ("pvc-nonroot", "rank"): ("restricted", ""),
    ("pvc-nonroot", "gateway"): ("restricted", ""),
    ("pvc-nonroot", "benchmark"): ("restricted", ""),
    ("pvc-nonroot", "acceptance"): ("restricted", ""),
}


def sample_doc(changes: dict[str, dict[str, Any]], *, namespace: str = "llm") -> JSON:
    """The sample with ``changes`` (spec section -> fields; None removes a field)."""
    doc: JSON = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"].update(namespace=namespace, uid="00000000-0000-0000-0000-000000000001")
    for section, fields in changes.items():
        target = doc["spec"].setdefault(section, {})
        for key, value in copy.deepcopy(fields).items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
    return doc


def sample_with(changes: dict[str, dict[str, Any]], *, namespace: str = "llm") -> InferenceCluster:
    return validate_inference_cluster(sample_doc(changes, namespace=namespace))


def variant_cluster(variant: str, *, namespace: str = "llm") -> InferenceCluster:
    return sample_with(VARIANTS[variant], namespace=namespace)


def job_pod_templates(ic: InferenceCluster) -> dict[str, JSON]:
    """The benchmark and acceptance Jobs' pod templates (Jobs exist only on request)."""
    bench = render_benchmark_job(ic, user=USER, scenarios=None, image=TOOLS_IMAGE, generation=1)
    accept = render_acceptance_job(
        ic, request=AcceptanceRequest(user=USER), image=TOOLS_IMAGE, generation=1
    )
    return {"benchmark": bench["spec"]["template"], "acceptance": accept["spec"]["template"]}


def pod_templates(ic: InferenceCluster) -> dict[str, JSON]:
    """Pod kind -> its pod template (metadata and spec), as the operator renders it."""
    nodes = tuple(n for group in ic.spec.placement.node_groups or () for n in group)[:3]
    plan = ReplicaPlan(index=0, group_key="group-0", nodes=nodes, rank0_ip="10.0.0.10",
                       generation=1, node_ips=("10.0.0.10", "10.0.0.11", "10.0.0.12"))  # fmt: skip
    ranks = [o for o in render_replica(ic, plan=plan, engine_key=KEY) if o["kind"] == "StatefulSet"]
    gateway = next(
        o
        for o in render_gateway(ic, engine_key=KEY, gateway_image=TOOLS_IMAGE)
        if o["kind"] == "Deployment"
    )
    objects = {"rank": ranks[1], "gateway": gateway}
    return {
        **{kind: obj["spec"]["template"] for kind, obj in objects.items()},
        **job_pod_templates(ic),
    }


def all_containers(spec: JSON) -> list[JSON]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def effective(spec: JSON, container: JSON, field: str) -> Any:
    """A security field as the kubelet applies it: the container's, else the pod's."""
    ctx = container.get("securityContext") or {}
    return ctx[field] if field in ctx else (spec.get("securityContext") or {}).get(field)


def cases() -> list[tuple[str, str, JSON, InferenceCluster]]:
    out = []
    for variant in VARIANTS:
        ic = variant_cluster(variant)
        for kind, template in pod_templates(ic).items():
            out.append((variant, kind, template["spec"], ic))
    return out


CASES: Final = cases()
IDS: Final = [f"{variant}-{kind}" for variant, kind, _, _ in CASES]


# --- every container --------------------------------------------------------------------


@pytest.mark.parametrize(("variant", "kind", "spec", "ic"), CASES, ids=IDS)
def test_no_escalation_all_capabilities_dropped_ipc_lock_only_for_rdma(
    variant: str, kind: str, spec: JSON, ic: InferenceCluster
) -> None:
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in all_containers(spec):
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False, container["name"]
        assert ctx["capabilities"]["drop"] == ["ALL"], container["name"]
        assert "privileged" not in ctx
        engine_image = container["image"] == ic.spec.engine.image
        # launch-check runs the engine image with nothing added: it only parses arguments.
        rdma = engine_image and ic.spec.network.host_network and container["name"] != "launch-check"
        assert ctx["capabilities"].get("add", []) == (["IPC_LOCK"] if rdma else [])
    assert spec.get("hostNetwork", False) is (kind == "rank" and ic.spec.network.host_network)
    assert "hostPID" not in spec
    assert "hostIPC" not in spec


@pytest.mark.parametrize(("variant", "kind", "spec", "ic"), CASES, ids=IDS)
def test_users_sparkllm_image_non_root_engine_as_the_spec_says(
    variant: str, kind: str, spec: JSON, ic: InferenceCluster
) -> None:
    engine = ic.spec.engine
    for container in all_containers(spec):
        name = container["name"]
        if container["image"] == ic.spec.engine.image:
            # The user's SGLang image: its own user unless spec.engine.runAsUser is set.
            assert effective(spec, container, "runAsUser") == engine.run_as_user, name
            assert effective(spec, container, "runAsGroup") == engine.run_as_group, name
            non_root = True if engine.run_as_user is not None else None
            assert effective(spec, container, "runAsNonRoot") is non_root, name
            assert container["securityContext"]["readOnlyRootFilesystem"] is False
        else:
            assert container["image"] == TOOLS_IMAGE.reference
            assert effective(spec, container, "runAsNonRoot") is True, name
            assert effective(spec, container, "runAsUser") == TOOLS_USER, name
            assert effective(spec, container, "runAsGroup") == TOOLS_USER, name
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, name


@pytest.mark.parametrize(("variant", "kind", "spec", "ic"), CASES, ids=IDS)
def test_host_paths_are_typed_and_mounted_read_only_and_so_is_the_model(
    variant: str, kind: str, spec: JSON, ic: InferenceCluster
) -> None:
    volumes = {v["name"]: v for v in spec["volumes"]}
    for volume in volumes.values():
        if "hostPath" in volume:
            assert volume["hostPath"]["type"] == "Directory", volume  # never "" (unchecked)
        if "persistentVolumeClaim" in volume:
            assert volume["persistentVolumeClaim"]["readOnly"] is True
    for container in all_containers(spec):
        for mount in container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if "hostPath" in volume or mount["name"] == "model":
                assert mount.get("readOnly") is True, (container["name"], mount)


@pytest.mark.parametrize(("variant", "kind", "spec", "ic"), CASES, ids=IDS)
def test_gpu_taint_tolerated_only_where_the_pod_must_run_on_a_spark(
    variant: str, kind: str, spec: JSON, ic: InferenceCluster
) -> None:
    on_sparks = kind == "rank" or ic.spec.model.persistent_volume_claim is None
    tolerations = spec.get("tolerations", [])
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert (gpu in tolerations) is on_sparks
    for toleration in tolerations:
        assert toleration.get("key"), "no toleration of every taint"
        if toleration["effect"] == "NoExecute":
            assert toleration["tolerationSeconds"] <= 30  # shorter than the default 300 s
    assert ("affinity" in spec) is on_sparks  # the model's nodes, or anywhere


@pytest.mark.parametrize(("variant", "kind", "spec", "ic"), CASES, ids=IDS)
def test_service_account_token_only_where_the_pod_uses_the_api(
    variant: str, kind: str, spec: JSON, ic: InferenceCluster
) -> None:
    # The gateway's router watches pods and its admission layer reads its own
    # InferenceCluster; the acceptance checklist reads its restarts from status.
    uses_api = kind in ("gateway", "acceptance")
    assert spec["automountServiceAccountToken"] is uses_api
    assert ("serviceAccountName" in spec) is uses_api
    assert spec["enableServiceLinks"] is False


def test_a_non_root_engine_covers_verify_bandwidth_too() -> None:
    ic = sample_with(
        {
            "engine": {"runAsUser": 1000, "runAsGroup": 1000},
            "network": {"preflight": {"mode": "gate"}},
        }
    )
    spec = pod_templates(ic)["rank"]["spec"]
    engine_side = [c for c in all_containers(spec) if c["image"] == ic.spec.engine.image]
    assert [c["name"] for c in engine_side] == ["verify-bandwidth", "launch-check", "engine"]
    for container in engine_side:
        added = [] if container["name"] == "launch-check" else ["IPC_LOCK"]
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": False,
            "capabilities": {"drop": ["ALL"], **({"add": added} if added else {})},
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
        }


# --- the tables in docs/pod-security.md -------------------------------------------------


def _user(spec: JSON, container: JSON) -> str:
    uid = effective(spec, container, "runAsUser")
    if uid is None:
        return "image's own (root in the SGLang images)"
    group = effective(spec, container, "runAsGroup")
    return f"{uid}:{group} non-root" if effective(spec, container, "runAsNonRoot") else str(uid)


def _host_paths(spec: JSON, container: JSON) -> str:
    volumes = {v["name"]: v for v in spec["volumes"]}
    paths = []
    for mount in container.get("volumeMounts", []):
        host = volumes[mount["name"]].get("hostPath")
        if host is None:
            continue
        at = "" if mount["mountPath"] == host["path"] else f" at `{mount['mountPath']}`"
        ro = "ro" if mount.get("readOnly") else "rw"
        paths.append(f"`{host['path']}`{at} ({host['type']}, {ro})")
    return "<br>".join(paths) or "—"


def _tolerations(spec: JSON) -> str:
    words = []
    for toleration in spec.get("tolerations", []):
        key = toleration["key"].removeprefix("node.kubernetes.io/")
        seconds = toleration.get("tolerationSeconds")
        words.append(f"{key} {toleration['effect']}" + (f" {seconds} s" if seconds else ""))
    return "<br>".join(words) or "—"


def security_table(variant: str) -> str:
    """One row per pod kind and container of ``variant``, as docs/pod-security.md shows."""
    ic = variant_cluster(variant)
    header = (
        "| pod | container | image | user | seccomp | privilege escalation | capabilities "
        "| root filesystem | host network | hostPaths (type) | tolerations | SA token |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for kind, template in pod_templates(ic).items():
        spec = template["spec"]
        for container in all_containers(spec):
            ctx = container["securityContext"]
            caps = "drop ALL" + "".join(f", add {c}" for c in ctx["capabilities"].get("add", []))
            cells = [
                kind,
                container["name"]
                + (" (init)" if container in spec.get("initContainers", []) else ""),
                "engine" if container["image"] == ic.spec.engine.image else "sparkllm",
                _user(spec, container),
                spec["securityContext"]["seccompProfile"]["type"],
                "yes" if ctx["allowPrivilegeEscalation"] else "no",
                caps,
                "read-only" if ctx["readOnlyRootFilesystem"] else "writable",
                "yes" if spec.get("hostNetwork") else "no",
                _host_paths(spec, container),
                _tolerations(spec),
                "yes" if spec["automountServiceAccountToken"] else "no",
            ]
            rows.append("| " + " | ".join(cells) + " |\n")
    return header + "".join(rows)


def claims_table() -> str:
    header = "| variant | " + " | ".join(KINDS) + " |\n" + "|---" * (len(KINDS) + 1) + "|\n"
    rows = []
    for variant in VARIANTS:
        cells = []
        for kind in KINDS:
            level, why = CLAIMS[(variant, kind)]
            cells.append(f"**{level}**" + (f" ({why})" if why else ""))
        rows.append(f"| `{variant}` | " + " | ".join(cells) + " |\n")
    return header + "".join(rows)


def _block(name: str) -> str:
    text = DOC.read_text()
    match = re.search(f"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", text, re.DOTALL)
    assert match, f"docs/pod-security.md has no {name} block"
    return match.group(1)


@pytest.mark.parametrize("variant", ["sample", "pvc-nonroot"])
def test_docs_show_the_rendered_security_table(variant: str) -> None:
    expected = security_table(variant)
    assert _block(f"table-{variant}") == expected, f"docs/pod-security.md should read:\n{expected}"


def test_docs_show_the_claimed_levels() -> None:
    expected = claims_table()
    assert _block("levels") == expected, f"docs/pod-security.md should read:\n{expected}"


def test_claims_cover_every_variant_and_kind_with_a_reason_below_restricted() -> None:
    assert set(CLAIMS) == {(v, k) for v in VARIANTS for k in KINDS}
    for (variant, kind), (level, why) in CLAIMS.items():
        assert level in LEVELS
        assert bool(why) is (level != "restricted"), (variant, kind)
