"""``sparkllm-dev model-source``: the model staging journey (issue 31) on the running demo.

Why a command of its own: the demo's sample finds its model already on group a's nodes
(the demo writes it there, as a platform engineer's copy would sit there today). The other
way, ``spec.model.source``, needs three things a newcomer's machine does not have, which
this command provides on the demo so that the journey is ``kubectl apply`` and
``kubectl get icl -w``, as in docs/model-staging.md:

- a real S3-compatible server (versitygw, built from the Go module proxy by
  ``make binaries``; it checks every request's signature) on 127.0.0.1, over a directory
  of the demo's state, holding two revisions of a small but real model
  (``toy/v1/`` and ``toy/v2/``: 4 layers, 3 shards, a tokenizer; v2's weights differ), and
  the credentials Secret ``s3-creds`` the spec names;
- the administrator's leave to download from that host: a default install allows the
  Hugging Face Hub only (docs/security.md). The chart is rendered as ``helm upgrade --set
  policy.modelSources.allowedHosts=...`` would render it, its admission policy applied,
  and the operator restarted with the same policy (its two places, as the demo reads them);
- an InferenceCluster file (``toy`` on group b, spark-b0..b2) with that source.

The staging Jobs' pods run as the demo runs every Job's pods (``sparkllm-dev jobs``: one
process per pod on the node's address, its host directories under the demo's hosts
root), so the download and the two node-to-node copies are real transfers over
127.0.0.x. ``make demo-down`` stops the server with the rest. Only the GPU engine is
simulated.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

import yaml
from minio import Minio

from sparkllm.staging.args import COPIES_DIR
from sparkllm_dev.demo import (
    NAMESPACE,
    POLICY_ENV,
    SAMPLE,
    DemoPolicy,
    alive,
    chart_default_policy,
    pid_file,
    restart_operator,
)
from sparkllm_dev.devcluster import DevCluster
from sparkllm_dev.devcluster.toymodel import write_toy_model
from sparkllm_dev.errors import DevClusterError
from sparkllm_dev.s3_server import HOST, start_versitygw

NAME: Final = "model-source"  # the background process's name (pid file, log, demo down)
BUCKET: Final = "models"
REVISIONS: Final = {"toy/v1/": 8, "toy/v2/": 16}  # prefix -> the toy's hidden size
GROUP_B: Final = ("spark-b0", "spark-b1", "spark-b2")
OBJECT: Final = "toy"
MODEL_PATH: Final = "/models/toy"
SECRET: Final = "s3-creds"
ACCESS_KEY: Final = "demo"  # the server's one account, and the Secret's keys
SECRET_KEY: Final = "demo-secret"
CHART: Final = Path(__file__).resolve().parents[2] / "charts" / "sparkllm"
# What an administrator sets to allow this source (helm upgrade --set ...).
ALLOW_SOURCE: Final = (
    f"policy.modelSources.allowedHosts={{huggingface.co,{HOST}}},"
    f"policy.modelSources.plainHttpHosts={{{HOST}}}"
)


@dataclass(frozen=True)
class ModelSource:
    """The running server and what this command wrote."""

    endpoint: str
    manifest: Path
    sizes: dict[str, int]  # prefix -> the revision's bytes


def model_source_up(cluster: DevCluster) -> int:
    """Set the journey up on the running demo; print what to run next."""
    if not alive_process(cluster, "operator"):
        raise DevClusterError("the demo is not running: run `make demo` first")
    server = cluster.paths.binary("versitygw")
    helm = cluster.paths.binary("helm")
    missing = [p.name for p in (server, helm) if not p.exists()]
    if missing:
        raise DevClusterError(
            f"not built: {', '.join(missing)} (run `make binaries`, or `make demo-staging`)"
        )
    source = _serve(cluster, server)
    print(f"[model-source] S3 server (versitygw) {source.endpoint}, bucket {BUCKET}:")
    for prefix, size in source.sizes.items():
        print(f"[model-source]   {prefix}  a 4-layer toy model in 3 shards, {size} bytes")
    allowed = _allow_host(cluster, helm)
    print(
        "[model-source] the administrator's policy now allows it: the chart rendered with "
        f"{allowed}, its admission policy applied, the operator restarted with it"
    )
    _secret(cluster)
    print(f"[model-source] Secret {NAMESPACE}/{SECRET} (accessKeyId, secretAccessKey)")
    print(f"[model-source] {_fresh_nodes(cluster)}")
    print(f"[model-source] wrote {source.manifest}: InferenceCluster {OBJECT!r} on group b\n")
    print("Next, with the demo's export lines (`.venv/bin/sparkllm-dev status` prints them);")
    print("docs/model-staging.md, 'On the demo':")
    print(f"  kubectl apply -f {source.manifest}")
    print(f"  kubectl get icl {OBJECT} -w      # Staging:1/3:33% ... then Ready")
    print(f"  sed -i 's|toy/v1/|toy/v2/|' {source.manifest}   # a new revision, then apply again")
    return 0


def _fresh_nodes(cluster: DevCluster) -> str:
    """Group b's nodes without an earlier journey's copies, unless ``toy`` exists (its
    pods mount them). A real node keeps its copies (neither deleting the object nor a
    restart removes them); on the demo the journey starts from empty nodes each time, so
    that its first staging downloads and cleans nothing, as the docs show."""
    got = cluster.kubectl("get", "icl", OBJECT, "-n", NAMESPACE, check=False)
    if got.returncode == 0:
        return f"InferenceCluster {OBJECT!r} exists: group b's copies left as they are"
    copies = [_copies(cluster, node) for node in GROUP_B]
    for path in copies:
        shutil.rmtree(path, ignore_errors=True)
    return f"group b's nodes hold no copy of {OBJECT!r} ({_copies(cluster, '<node>')})"


def _copies(cluster: DevCluster, node: str) -> Path:
    """Where simulated ``node`` keeps the toy's copies (devcluster/hostpaths.py's rule)."""
    parent = PurePosixPath(MODEL_PATH)
    where = parent.parent / COPIES_DIR / parent.name
    return cluster.paths.state_dir / "hosts" / node / str(where).lstrip("/")


def alive_process(cluster: DevCluster, name: str) -> bool:
    path = pid_file(cluster, name)
    return path.exists() and alive(int(path.read_text()))


def _state(cluster: DevCluster) -> Path:
    return cluster.paths.state_dir / f"{NAME}.json"


def _serve(cluster: DevCluster, binary: Path) -> ModelSource:
    """versitygw in the background (once), both revisions uploaded, the object's file."""
    state = _state(cluster)
    if alive_process(cluster, NAME) and state.exists():
        port = int(json.loads(state.read_text())["port"])
    else:
        data = cluster.paths.state_dir / NAME / "s3"
        log = cluster.paths.state_dir / f"demo-{NAME}.log"
        with log.open("ab") as out:
            process, port = start_versitygw(
                binary, data=data, buckets=(BUCKET,), access_key=ACCESS_KEY,
                secret_key=SECRET_KEY, log=out, new_session=True,
            )  # fmt: skip
        pid_file(cluster, NAME).write_text(str(process.pid))
        state.write_text(json.dumps({"port": port}))
    endpoint = f"http://{HOST}:{port}"
    sizes = {
        prefix: _upload(cluster, endpoint, prefix, hidden) for prefix, hidden in REVISIONS.items()
    }
    manifest = cluster.paths.state_dir / f"{OBJECT}-staged.yaml"
    manifest.write_text(yaml.safe_dump(staged_object(endpoint), sort_keys=False))
    return ModelSource(endpoint=endpoint, manifest=manifest, sizes=sizes)


def _upload(cluster: DevCluster, endpoint: str, prefix: str, hidden: int) -> int:
    """One revision of the toy model under ``prefix``; its bytes."""
    root = write_toy_model(
        cluster.paths.state_dir / NAME / prefix.strip("/"), layers=4, shards=3, hidden=hidden
    )
    client = Minio(endpoint.removeprefix("http://"), access_key=ACCESS_KEY,
                   secret_key=SECRET_KEY, secure=False)  # fmt: skip
    total = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        key = prefix + path.relative_to(root).as_posix()
        client.put_object(BUCKET, key, io.BytesIO(data), len(data))
        total += len(data)
    return total


def staged_object(endpoint: str) -> dict[str, Any]:
    """The demo's sample as ``toy`` on group b, its model the toy one from the S3 server."""
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"] = {"name": OBJECT, "namespace": NAMESPACE}
    spec = doc["spec"]
    spec["placement"] = {"nodeGroups": [list(GROUP_B)]}
    model = spec["model"]
    model.update(path=MODEL_PATH, servedName=OBJECT, numLayers=4, expectedShards=3)
    model.pop("weightsGB", None)
    model["source"] = {
        "s3": {"endpoint": endpoint, "bucket": BUCKET, "prefix": next(iter(REVISIONS)),
               "credentialsSecretRef": {"name": SECRET}},
    }  # fmt: skip
    spec["engine"]["layerPartition"] = [1, 1, 2]
    return doc


def _allow_host(cluster: DevCluster, helm: Path) -> str:
    """The chart's policy with this host allowed, in both its places; the --set it used."""
    policy = allowing_policy(helm)
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-",
        input=yaml.safe_dump_all(policy.documents),
    )  # fmt: skip
    restart_operator(cluster, {POLICY_ENV: policy.env})
    return f"--set {ALLOW_SOURCE}"


def allowing_policy(helm: Path) -> DemoPolicy:
    """The chart rendered by ``helm`` with ``ALLOW_SOURCE``: its policy, in both places."""
    rendered = subprocess.run(
        [str(helm), "template", "sparkllm", str(CHART), "--namespace", "sparkllm-system",
         "--set", "crds.install=false", "--set", ALLOW_SOURCE],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if rendered.returncode != 0:
        raise DevClusterError(f"helm template failed: {rendered.stderr.strip()}")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as out:
        out.write(rendered.stdout)
        out.flush()
        return chart_default_policy(Path(out.name))


def _secret(cluster: DevCluster) -> None:
    created = cluster.kubectl(
        "create", "secret", "generic", SECRET, "-n", NAMESPACE,
        f"--from-literal=accessKeyId={ACCESS_KEY}", f"--from-literal=secretAccessKey={SECRET_KEY}",
        "--dry-run=client", "-o", "yaml",
    )  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=created.stdout)


__all__ = ["ALLOW_SOURCE", "ModelSource", "allowing_policy", "model_source_up", "staged_object"]
