"""docs/install.md's "Air-gapped install", followed: every image and pull secret of every
object the operator then makes comes from the private registry.

The test reads the section's commands rather than repeating them, so a doc that drifts
fails here: it packages the chart (``helm package``: the file carried across, with the
CRDs), runs the section's ``helm install`` as ``helm template`` of that file with the same
``--set`` flags (``$DIGEST`` filled in), takes the operator's env from the rendered
StatefulSet (what ``sparkllm run`` reads: the image, its pull policy and pull secrets, the
administrator's policy), applies the section's ``sed`` to the sample, and renders what the
operator applies for it (``decide`` on a fresh object, with the network preflight's
bandwidth check on so its engine-image init container is there too), plus the benchmark
and acceptance Jobs. Every pod template must then name only the mirrored images, the
sparkllm one with the chart's pull policy, and carry ``regcred``; the rendered text must
not mention a public registry at all. The section's ``sparkllm render`` line must print
exactly that. Needs helm (``make binaries``).
"""

from __future__ import annotations

import copy
import io
import shlex
import tarfile
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm.api import validate_inference_cluster
from sparkllm.api.admin_policy import admin_policy_from_env
from sparkllm.cli import main as sparkllm_main
from sparkllm.offline import fresh_plan, render_file
from sparkllm.render.acceptance import AcceptanceRequest, render_acceptance_job
from sparkllm.render.benchmark import render_benchmark_job
from sparkllm.render.engine_cache import EngineCache
from sparkllm.render.model_staging import (
    render_staging_job,
    serve_args,
    stage_args,
    staging_digest,
)
from sparkllm.render.product_image import (
    IMAGE_ENV,
    PULL_POLICY_ENV,
    ProductImage,
    product_image_from,
)
from sparkllm.staging.plan import Copy
from tests.unit.test_chart_render import CHART, ROOT, one, run_helm

pytestmark = pytest.mark.needs_binary  # helm (make binaries)
JSON = dict[str, Any]
DOC = ROOT / "docs" / "install.md"
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
TEMPLATES = ROOT / "operator" / "sparkllm" / "render" / "templates"
DIGEST = "sha256:" + "5e" * 32  # what `skopeo inspect` would print
PUBLIC = ("ghcr.io", "nvcr.io", "docker.io", "lmsysorg")


def section_commands(heading: str = "## Air-gapped install") -> list[str]:
    """The shell commands of the doc section's ``sh`` blocks, continuation lines joined."""
    text = DOC.read_text()
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    body = text[start : end if end > 0 else None]
    commands: list[str] = []
    for block in body.split("```sh\n")[1:]:
        code = block.split("```", 1)[0].replace("\\\n", " ")
        commands += [line.strip() for line in code.splitlines() if line.strip()]
    return commands


def command(prefix: str) -> list[str]:
    """The words of the section's one command starting with ``prefix`` ($DIGEST filled)."""
    (found,) = [c for c in section_commands() if c.startswith(prefix)]
    return [w.replace("$DIGEST", DIGEST) for w in shlex.split(found, comments=True)]


def packaged_chart(directory: Path) -> Path:
    """``helm package charts/sparkllm`` as the section runs it, into ``directory``."""
    words = command("helm package")
    assert words[2:] == ["charts/sparkllm"], words
    run_helm("package", str(CHART), "--destination", str(directory))
    (tgz,) = directory.glob("*.tgz")
    return tgz


def operator_env(tgz: Path) -> dict[str, str]:
    """The operator container's env of the section's ``helm install``, as ``helm template``."""
    words = command("helm install")
    release, chart, flags = words[2], words[3], words[4:]
    assert chart == tgz.name, f"the doc installs {chart}, helm package made {tgz.name}"
    out = run_helm("template", release, str(tgz), *flags).stdout
    objs = [doc for doc in yaml.safe_load_all(out) if doc]
    (container,) = one(objs, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def mirrored(text: str) -> str:
    """``text`` (the sample) after the section's ``sed`` (one ``s#old#new#``)."""
    words = command("sed")
    assert words[2] == "manifests/samples/deepseek-v4-flash.yaml"
    _, old, new, _ = words[1].split("#")
    assert old in text
    return text.replace(old, new)


def mirrored_sample() -> JSON:
    """The sample after the section's ``sed``, with the bandwidth preflight on."""
    doc: JSON = yaml.safe_load(mirrored(SAMPLE.read_text()))
    assert doc["spec"]["engine"]["image"].startswith("registry.local/")
    network = doc["spec"].setdefault("network", {})
    network["preflight"] = {"mode": "gate", "minBusBandwidthGbps": 10}
    doc["metadata"]["namespace"] = "llm"
    return doc


def made_objects(doc: JSON, env: dict[str, str]) -> list[JSON]:
    """What the operator with ``env`` applies for ``doc``, and its two Jobs."""
    image = product_image_from(env)
    plan = fresh_plan(
        copy.deepcopy(doc),
        node_ips={},
        gateway_image=image,
        admin_policy=admin_policy_from_env(env),
    )
    ic = validate_inference_cluster(plan.target or doc)
    jobs = [
        render_benchmark_job(ic, user="alice", scenarios=None, image=image, generation=1),
        render_acceptance_job(
            ic, request=AcceptanceRequest(user="alice"), image=image, generation=1
        ),
        *staging_jobs(doc, image),
    ]
    return [*plan.apply, *jobs]


def staging_jobs(doc: JSON, image: ProductImage) -> list[JSON]:
    """The model-staging Jobs the operator makes for ``doc`` with a source: a download on
    one node and the server its successor copies from (docs/model-staging.md)."""
    staged = copy.deepcopy(doc)
    staged["spec"]["model"]["source"] = {
        "s3": {"endpoint": "https://s3.registry.local", "bucket": "models", "prefix": "ds/"}
    }
    ic = validate_inference_cluster(staged)
    digest = staging_digest(ic)
    download = Copy(target="spark-a0", source=None, source_address=None, wave=0)
    return [
        render_staging_job(ic, replica=0, rank=0, node="spark-a0", role="stage", digest=digest,
                           args=stage_args(ic, transfer=download, address=None), image=image),
        render_staging_job(ic, replica=0, rank=0, node="spark-a0", role="serve", digest=digest,
                           args=serve_args(ic, address="10.0.0.10"), image=image),
    ]  # fmt: skip


def pod_specs(objs: list[JSON]) -> Iterator[tuple[str, JSON]]:
    for obj in objs:
        template = (obj.get("spec") or {}).get("template")
        if template is not None:
            yield f"{obj['kind']}/{obj['metadata']['name']}", template["spec"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    tgz = packaged_chart(tmp_path_factory.mktemp("chart"))
    return tgz, operator_env(tgz)


def test_the_packaged_chart_carries_the_crds(installed: tuple[Path, dict[str, str]]) -> None:
    tgz, _ = installed
    with tarfile.open(tgz) as archive:
        packed = {
            Path(m.name).name: archive.extractfile(m).read()  # type: ignore[union-attr]
            for m in archive.getmembers()
            if m.name.startswith(("sparkllm/crds/", "sparkllm/files/crds/"))
        }  # files/crds/: the InferenceCluster CRD templates/crds.yaml applies; crds/: kopf's
    repo = {
        p.name: p.read_bytes() for d in ("crds", "files/crds") for p in (CHART / d).glob("*.yaml")
    }
    assert packed == repo
    assert "sparkllm.io_inferenceclusters.yaml" in packed


def test_every_pod_the_operator_makes_pulls_from_the_mirror(
    installed: tuple[Path, dict[str, str]],
) -> None:
    _, env = installed
    image = product_image_from(env)
    assert image == ProductImage(
        f"registry.local/sparkllm@{DIGEST}",
        "IfNotPresent",
        pull_secrets=("regcred",),
        engine_cache=EngineCache(root="/var/lib/sparkllm/engine-cache"),  # the chart's default
    )
    doc = mirrored_sample()
    engine = doc["spec"]["engine"]["image"]
    objs = made_objects(doc, env)
    pods = dict(pod_specs(objs))
    kinds = sorted({name.split("/")[0] for name in pods})
    assert kinds == ["Deployment", "Job", "StatefulSet"]
    # three ranks, the gateway, the benchmark and acceptance, a model stage and its server
    assert len(pods) == 3 + 1 + 2 + 2
    product_containers = set()
    for name, spec in pods.items():
        assert spec["imagePullSecrets"] == [{"name": "regcred"}], name
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            assert container["image"] in {image.reference, engine}, (name, container["name"])
            if container["image"] == image.reference:
                assert container["imagePullPolicy"] == "IfNotPresent"
                product_containers.add(container["name"])
    assert product_containers == {
        "engine-cache",  # the chart's engineCache.root is set by default
        "verify-network",
        "verify-model",
        "admission",
        "router",
        "bench",
        "stage-model",
    }
    text = yaml.safe_dump_all(objs)
    assert [registry for registry in PUBLIC if registry in text] == []


def test_render_prints_what_the_operator_applies(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """The section's ``sparkllm render`` line = the render with the operator's env."""
    _, env = installed
    path = tmp_path / "icl.yaml"
    doc = mirrored_sample()
    path.write_text(yaml.safe_dump(doc))
    words = command("sparkllm render")
    argv = [str(path) if w == "icl.yaml" else w for w in words[1:]]
    out = io.StringIO()
    with redirect_stdout(out):
        assert sparkllm_main(argv) == 0
    expected = render_file(
        str(path), node_ips={}, namespace=None, gateway_image=product_image_from(env)
    )
    assert out.getvalue() == expected
    assert f"registry.local/sparkllm@{DIGEST}" in expected


def test_the_pull_policy_reaches_every_container_of_the_sparkllm_image() -> None:
    env = {IMAGE_ENV: "registry.local/sparkllm:0.1.0", PULL_POLICY_ENV: "Always"}
    policies = {
        container["name"]: container["imagePullPolicy"]
        for _, spec in pod_specs(made_objects(mirrored_sample(), env))
        for container in [*spec.get("initContainers", []), *spec["containers"]]
    }
    assert policies == {
        "verify-network": "Always",
        "verify-bandwidth": "IfNotPresent",  # the engine image: tens of GB, pinned
        "verify-model": "Always",
        "launch-check": "IfNotPresent",  # the engine image too
        "engine": "IfNotPresent",
        "admission": "Always",
        "router": "Always",
        "bench": "Always",
        "stage-model": "Always",
    }


def test_no_pod_template_escapes_these_checks() -> None:
    """Every template that lays out containers is one whose pods the tests above saw."""
    with_pods = sorted(p.name for p in TEMPLATES.glob("*.j2") if "containers:" in p.read_text())
    assert with_pods == [
        "benchmark_job.yaml.j2",  # the benchmark and acceptance Jobs
        "gateway_deployment.yaml.j2",
        "model_staging_job.yaml.j2",  # a model source's stage and serve Jobs
        "rank_statefulset.yaml.j2",
    ]
