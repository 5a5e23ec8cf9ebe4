"""The model staging Jobs (``spec.model.source``): one per node to stage, one per serving node.

Why Jobs, and two kinds: a node's stage runs once to an end (``sparkllm stage-model`` exits
0 staged, 1 failed), and a finished Job is the durable record that the node holds the
copy of this source: the next pass, or an operator restarted, reads it back without any
state of its own. Serving is different: a finished node hands its copy to the nodes after
it (``--serve``) for as long as they copy, which only the operator knows, so a serve Job
runs until the operator deletes it (decide/staging.py: once every node it serves is
staged). A server that counted its peers itself would need to know about retries; the
operator already does, and re-creates a server when a failed copy is retried.

Every Job of a node group is pinned to its node (``nodeSelector`` on the hostname) on the
host network: the copies travel between the nodes' own addresses on the group's link
(``--peer http://<address>:8390``, ``--local-address``), as ``staging.plan`` ordered them.
The host directory that holds ``spec.model.path`` is mounted at the same path: the stage's
target is the digest's copy beside it (``render/model_layout.py``:
``<parent>/.sparkllm-models/<name>/<digest>``), staged in ``.../<name>/.staging/<digest>``
and renamed into place, on one file system. A **clean Job** per node, once every replica
and the gateway run the current digest, removes the older copies but the one before it
(``--clean --keep-previous 1``, decide/staging_clean.py).

Credentials come from the spec's Secrets as env (``HF_TOKEN``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``), never on the command line. The Job's name carries a digest of
the source and the target: a new source (or revision) is new Jobs, and the old ones are
deleted. Pure: a function of the spec, the plan and the operator's image.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path, PurePosixPath
from typing import Final, Literal

from sparkllm.api import InferenceCluster
from sparkllm.cli_args import command_line
from sparkllm.keys import (
    ANNOTATION_STAGING_NODE,
    LABEL_CLUSTER,
    LABEL_STAGING_DIGEST,
    LABEL_STAGING_REPLICA,
    LABEL_STAGING_ROLE,
)
from sparkllm.kube.kinds import JSON
from sparkllm.render.model_access import model_tolerations
from sparkllm.render.model_layout import host_model_dir, staging_digest
from sparkllm.render.names import LABEL_COMPONENT, cluster_labels, owner_reference
from sparkllm.render.objects import render_template
from sparkllm.render.pod_security import RESTRICTED_CONTAINER_SECURITY, restricted_pod_security
from sparkllm.render.product_image import ProductImage
from sparkllm.staging.args import StageModelArgs
from sparkllm.staging.plan import Copy

COMPONENT_STAGING: Final = "model-staging"
STAGING_PORT: Final = 8390  # a serving node's port on its own address (the group's link)
STAGING_CONTAINER: Final = "stage-model"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
Role = Literal["stage", "serve", "clean"]
ROLES: Final[tuple[Role, ...]] = ("stage", "serve", "clean")
KEEP_PREVIOUS: Final = 1  # the cleaning rule: the copy in use and the one before it
# A download or copy of a model moves ~170 GB through one process: page cache, not heap.
_RESOURCES: Final[JSON] = {
    "requests": {"cpu": "500m", "memory": "512Mi"},
    "limits": {"memory": "2Gi"},
}


def staging_job_name(
    cluster: str, *, replica: int, rank: int, role: Role, digest: str, node: str
) -> str:
    """``<cluster>-<role>-r<replica>-n<rank>-<8 hex>``, within a Job name's 63; the hex is
    of the source's digest and the node, so a replica moved to another group (a spare)
    stages its new nodes instead of finding the old group's Jobs."""
    mark = hashlib.sha256(f"{digest}/{node}".encode()).hexdigest()[:8]
    return f"{cluster[:30]}-{role}-r{replica}-n{rank}-{mark}"


def staging_labels(cluster: str, *, replica: int, role: Role, digest: str) -> dict[str, str]:
    return {
        **cluster_labels(cluster, COMPONENT_STAGING),
        LABEL_STAGING_REPLICA: str(replica),
        LABEL_STAGING_ROLE: role,
        LABEL_STAGING_DIGEST: digest,
    }


def staging_selector(cluster: str) -> str:
    """Every staging Job (and pod) of one InferenceCluster, of any source."""
    return f"{LABEL_COMPONENT}={COMPONENT_STAGING},{LABEL_CLUSTER}={cluster}"


def peer_url(address: str) -> str:
    return f"http://{address}:{STAGING_PORT}"


def credentials_env(ic: InferenceCluster) -> list[JSON]:
    """The source's credentials as env from the spec's Secrets (never on the command line)."""
    source = ic.spec.model.source
    if source is None:
        return []
    if source.hugging_face is not None and source.hugging_face.token_secret_ref is not None:
        ref = source.hugging_face.token_secret_ref
        return [_from_secret("HF_TOKEN", ref.name, ref.key)]
    if source.s3 is not None and source.s3.credentials_secret_ref is not None:
        name = source.s3.credentials_secret_ref.name
        return [
            _from_secret("AWS_ACCESS_KEY_ID", name, "accessKeyId"),
            _from_secret("AWS_SECRET_ACCESS_KEY", name, "secretAccessKey"),
        ]
    return []


def _from_secret(env: str, name: str, key: str) -> JSON:
    return {"name": env, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}}


def stage_args(ic: InferenceCluster, *, transfer: Copy, address: str | None) -> list[str]:
    """The stage's command line: ``--source`` on the downloader, ``--peer`` elsewhere."""
    model = ic.spec.model
    source = model.source
    assert source is not None
    # The Secrets' names stay out too: the command reads the credentials from its env.
    wire = source.model_dump(
        mode="json",
        by_alias=True,
        exclude_none=True,
        exclude={"hugging_face": {"token_secret_ref"}, "s3": {"credentials_secret_ref"}},
    )
    copying = transfer.source_address is not None
    args = StageModelArgs(
        target=Path(host_model_dir(ic)),
        source=None if copying else json.dumps(wire, separators=(",", ":"), sort_keys=True),
        peer=peer_url(transfer.source_address) if transfer.source_address else None,
        local_address=address if copying else None,
        expected_shards=model.expected_shards,
        expected_layers=model.num_layers,
    )
    return command_line(args)


def serve_args(ic: InferenceCluster, *, address: str) -> list[str]:
    args = StageModelArgs(
        target=Path(host_model_dir(ic)), serve=True, listen=f"{address}:{STAGING_PORT}"
    )
    return command_line(args)


def clean_args(ic: InferenceCluster) -> list[str]:
    """The cleaning rule on one node: beside the current copy, keep the newest
    :data:`KEEP_PREVIOUS` other finished copies, remove the rest (and unfinished ones)."""
    args = StageModelArgs(target=Path(host_model_dir(ic)), clean=True, keep_previous=KEEP_PREVIOUS)
    return command_line(args)


def render_staging_job(
    ic: InferenceCluster,
    *,
    replica: int,
    rank: int,
    node: str,
    role: Role,
    args: list[str],
    digest: str,
    image: ProductImage,
) -> JSON:
    """One staging Job (``args`` from :func:`stage_args` or :func:`serve_args`)."""
    name, namespace = ic.metadata.name, ic.metadata.namespace or "default"
    labels = staging_labels(name, replica=replica, role=role, digest=digest)
    return render_template(
        "model_staging_job.yaml.j2",
        name=staging_job_name(
            name, replica=replica, rank=rank, role=role, digest=digest, node=node
        ),
        namespace=namespace,
        labels=labels,
        annotations={ANNOTATION_STAGING_NODE: node},
        owner=owner_reference(name=name, uid=ic.metadata.uid or ""),
        pull_secrets=image.pod_pull_secrets(),
        pod_security=restricted_pod_security(),
        container_security=RESTRICTED_CONTAINER_SECURITY,
        node_selector={HOSTNAME_LABEL: node},
        tolerations=model_tolerations(ic),
        container_name=STAGING_CONTAINER,
        image=image.reference,
        pull_policy=image.pull_policy,
        args=args,
        env=credentials_env(ic) if role == "stage" else [],
        resources=_RESOURCES,
        models_dir=str(PurePosixPath(ic.spec.model.path).parent),
    )


__all__ = [
    "COMPONENT_STAGING",
    "KEEP_PREVIOUS",
    "ROLES",
    "STAGING_CONTAINER",
    "STAGING_PORT",
    "Role",
    "clean_args",
    "credentials_env",
    "peer_url",
    "render_staging_job",
    "serve_args",
    "stage_args",
    "staging_digest",  # its first home; render/model_layout.py now
    "staging_job_name",
    "staging_labels",
    "staging_selector",
]
