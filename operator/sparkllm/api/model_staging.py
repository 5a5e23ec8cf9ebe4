"""``spec.model.source``: where the operator downloads the model from, when it stages it.

Why: without a source the model must already sit at ``spec.model.path`` on every node
(today's behaviour, unchanged when ``source`` is absent). With one, the model is
downloaded once per node group and copied node to node over the group's own links
(``sparkllm stage-model``, docs/model-staging.md). What a source names is a download a
tenant asks a node to make, so its hosts are bounded by the administrator's policy
(``AdminPolicy.model_sources``, docs/security.md), and what it downloads must be pinned:
a Hugging Face revision is a commit, never a branch that moves under a running replica.

Exactly one of ``huggingFace``, ``s3`` and ``https`` is set. Credentials come from
Secrets in the InferenceCluster's namespace and never appear in the spec.
"""

import json
from typing import Annotated, Final, Literal

from pydantic import Field, StringConstraints

from sparkllm.api.common import LocalObjectReference, NodeName, SecretKeyReference
from sparkllm.api.rules import ApiModel, Rule, re2_search

DEFAULT_HF_ENDPOINT: Final = "https://huggingface.co"
COMMIT_PATTERN: Final = r"^[0-9a-f]{40}$"
HF_REPO_PATTERN: Final = r"^[A-Za-z0-9][-A-Za-z0-9_.]*(/[A-Za-z0-9][-A-Za-z0-9_.]*)?$"
# An http(s) URL with a host; no whitespace, no userinfo (credentials come from Secrets).
HTTPS_URL_PATTERN: Final = r"^https://[^\s/@]+(/[^\s]*)?$"
HTTP_URL_PATTERN: Final = r"^https?://[^\s/@]+(/[^\s]*)?$"
S3_BUCKET_PATTERN: Final = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
SHA256_PATTERN: Final = r"^[0-9a-f]{64}$"
# A relative path inside the model directory: no leading '/', no '..' segment.
RELATIVE_PATH_PATTERN: Final = r"^[^/\s][^\s]*$"
PARENT_SEGMENT_PATTERN: Final = r"(^|/)[.][.](/|$)"
MAX_URLS: Final = 4096
MAX_URL: Final = 2048

FanOut = Literal["Chain", "Tree"]

HttpsUrl = Annotated[
    str, StringConstraints(min_length=9, max_length=MAX_URL, pattern=HTTPS_URL_PATTERN)
]

PinnedRevision = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255),
    Rule(
        cel=f"self.matches('{COMMIT_PATTERN}')",
        message="huggingFace.revision must be a full 40-hex commit id: a branch or tag "
        "name moves, and every node must stage the same files",
        check=lambda revision: re2_search(COMMIT_PATTERN, revision),
    ),
]

RelativePath = Annotated[
    str,
    StringConstraints(min_length=1, max_length=1024, pattern=RELATIVE_PATH_PATTERN),
    Rule(
        cel=f"!self.matches('{PARENT_SEGMENT_PATTERN}')",
        message="https.urls[].path must stay inside the model directory: no '..' segment",
        check=lambda path: not re2_search(PARENT_SEGMENT_PATTERN, path),
    ),
]


class HuggingFaceSource(ApiModel):
    """A Hugging Face Hub repository (or a mirror speaking its API) at a pinned commit."""

    repo: Annotated[
        str, StringConstraints(min_length=1, max_length=192, pattern=HF_REPO_PATTERN)
    ] = Field(
        description="repo is the model repository, owner/name. Required. Example: "
        "deepseek-ai/DeepSeek-V4-Flash."
    )
    revision: PinnedRevision = Field(
        description="revision is the commit the files are taken from. Required; a full "
        "40-hex commit id (branch and tag names are refused: they move)."
    )
    endpoint: HttpsUrl | None = Field(
        default=None,
        description="endpoint is the Hub's base URL, for a mirror. Optional; default "
        "https://huggingface.co. Its host must be allowed by the administrator's policy.",
    )
    token_secret_ref: SecretKeyReference | None = Field(
        default=None,
        description="tokenSecretRef is the Secret key holding an access token, for gated or "
        "private repositories. Optional; default anonymous.",
    )


class S3Source(ApiModel):
    """An S3-compatible bucket and prefix holding the model directory's files."""

    endpoint: Annotated[
        str, StringConstraints(min_length=8, max_length=MAX_URL, pattern=HTTP_URL_PATTERN)
    ] = Field(
        description="endpoint is the S3 service's base URL. Required; https:// (http:// only "
        "where the administrator's policy allows that host: requests are signed, data is "
        "not encrypted). Example: https://s3.eu-central-1.amazonaws.com."
    )
    bucket: Annotated[
        str, StringConstraints(min_length=3, max_length=63, pattern=S3_BUCKET_PATTERN)
    ] = Field(description="bucket holding the model. Required; an S3 bucket name.")
    prefix: Annotated[str, StringConstraints(max_length=1024)] = Field(
        default="",
        description="prefix of the model's objects in the bucket; each object's key below "
        "it is its path in the model directory. Default '' (the whole bucket).",
    )
    region: Annotated[str, StringConstraints(min_length=1, max_length=64)] = Field(
        default="us-east-1",
        description="region the requests are signed for. Default us-east-1.",
    )
    credentials_secret_ref: LocalObjectReference | None = Field(
        default=None,
        description="credentialsSecretRef names a Secret with keys accessKeyId and "
        "secretAccessKey. Optional; default anonymous requests.",
    )


class HttpsFile(ApiModel):
    """One file fetched over HTTPS."""

    url: HttpsUrl = Field(description="url of the file. Required; https:// only.")
    sha256: Annotated[str, StringConstraints(max_length=64, pattern=SHA256_PATTERN)] | None = Field(
        default=None,
        description="sha256 the file must have (64 lowercase hex). Optional; strongly "
        "recommended: a mismatch fails the stage with HashMismatch.",
    )
    path: RelativePath | None = Field(
        default=None,
        description="path of the file in the model directory. Optional; default the URL's "
        "last path segment.",
    )


class HttpsSource(ApiModel):
    """A list of files, each at an HTTPS URL."""

    urls: tuple[HttpsFile, ...] = Field(
        min_length=1,
        max_length=MAX_URLS,
        description=f"urls lists the model's files. Required; 1 to {MAX_URLS} entries.",
    )


def _one_source(source: "ModelSourceSpec") -> bool:
    kinds = (source.hugging_face, source.s3, source.https)
    return sum(kind is not None for kind in kinds) == 1


class ModelSourceSpec(ApiModel):
    """Where to download the model from, and how to spread it over a node group."""

    cel_rules = (
        Rule(
            cel="[has(self.huggingFace), has(self.s3), has(self.https)].filter(x, x).size() == 1",
            message="model.source must set exactly one of huggingFace, s3 or https",
            check=_one_source,
        ),
    )

    hugging_face: HuggingFaceSource | None = Field(
        default=None, description="huggingFace downloads from the Hub or a mirror. Optional."
    )
    s3: S3Source | None = Field(
        default=None, description="s3 downloads from an S3-compatible bucket. Optional."
    )
    https: HttpsSource | None = Field(
        default=None, description="https downloads a list of files. Optional."
    )
    expected_bytes: int | None = Field(
        default=None,
        ge=1,
        le=10**15,
        description="expectedBytes is the model's total size in bytes, checked against the "
        "free space at model.path before any download (DiskFull). Optional; when absent the "
        "size the source reports is used.",
    )
    staging_node: NodeName | None = Field(
        default=None,
        description="stagingNode is the node of each group that downloads; the others copy "
        "from it or from each other. Optional; default the group's rank-0 node. A node "
        "outside a group leaves that group's default.",
    )
    fan_out: FanOut = Field(
        default="Chain",
        description="fanOut is the order of node-to-node copies: Chain (each node copies "
        "from the one before it in ring order, one link each) or Tree (each finished node "
        "serves two more). Default Chain: a ring of direct links has no other path.",
    )


# How a source is fetched and spread, not what it holds: a change of these is no new copy.
_NOT_CONTENT: Final = frozenset(
    {"expectedBytes", "stagingNode", "fanOut", "tokenSecretRef", "credentialsSecretRef"}
)


def source_identity(source: ModelSourceSpec) -> str:
    """What a copy is a copy of, as canonical JSON: the source's kind and location (repo and
    revision, endpoint, bucket and prefix, URLs and their hashes), without how it is fetched
    and spread (credentials' Secrets, expectedBytes, stagingNode, fanOut). Why: the
    operator's copy directory (its digest) and the stage's manifest both name a copy by
    it, so switching fanOut from Chain to Tree, or rotating a credentials Secret, is not a
    new revision (a full download and a roll of every replica)."""
    wire = source.model_dump(mode="json", by_alias=True, exclude_none=True)
    kept = {kind: value for kind, value in wire.items() if kind not in _NOT_CONTENT}
    for value in kept.values():
        if isinstance(value, dict):
            for key in _NOT_CONTENT & value.keys():
                del value[key]
    return json.dumps(kept, sort_keys=True)
