"""``spec.model.source`` (sparkllm.api.model_staging) and its bound in the admin policy.

Each rule accepted and refused with the message users see; the policy's host allow-list
(default: the Hugging Face Hub only) and its plain-http list.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from sparkllm.api import validate_inference_cluster
from sparkllm.api.admin_policy import (
    AdminPolicy,
    admin_policy_from,
    path_strictly_below,
    policy_violations,
)
from sparkllm.api.model_staging import ModelSourceSpec, source_identity
from sparkllm.errors import SpecError
from sparkllm_dev.testing import ROOT

SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
HF = {"huggingFace": {"repo": "deepseek-ai/DeepSeek-V4-Flash", "revision": COMMIT}}
S3 = {"s3": {"endpoint": "http://minio.store:9000", "bucket": "models", "prefix": "ds/"}}
HTTPS = {"https": {"urls": [{"url": "https://files.corp.example/m/config.json"}]}}


def with_source(source: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"].update(namespace="llm", uid="u", generation=1)
    doc["spec"]["model"]["source"] = copy.deepcopy(source)
    return doc


@pytest.mark.parametrize("source", [HF, S3, HTTPS])
def test_each_kind_of_source_is_accepted(source: dict[str, Any]) -> None:
    ic = validate_inference_cluster(with_source(source))
    assert ic.spec.model.source is not None
    wire = ic.spec.model.source.to_wire()
    (kind,) = source
    assert wire[kind].items() >= source[kind].items()
    assert wire["fanOut"] == "Chain"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({}, "exactly one of huggingFace, s3 or https"),
        (HF | S3, "exactly one of huggingFace, s3 or https"),
        (
            {"huggingFace": {"repo": "a/b", "revision": "main"}},
            "must be a full 40-hex commit id",
        ),
        (
            {"huggingFace": {"repo": "a/b", "revision": COMMIT.upper()}},
            "must be a full 40-hex commit id",
        ),
        ({"https": {"urls": [{"url": "http://x.example/a"}]}}, "should match pattern"),
        (
            {"https": {"urls": [{"url": "https://x.example/a", "path": "../etc/passwd"}]}},
            "must stay inside the model directory",
        ),
        ({"https": {"urls": [{"url": "https://x.example/a", "sha256": "abc"}]}}, "sha256"),
        ({"https": {"urls": []}}, "at least 1 item"),
        ({"s3": {"endpoint": "https://s3.example", "bucket": "A_B"}}, "bucket"),
    ],
)
def test_invalid_sources_are_refused_with_a_clear_message(
    source: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        ModelSourceSpec.model_validate(source)


def test_a_source_cannot_be_combined_with_a_claim() -> None:
    doc = with_source(HF)
    doc["spec"]["model"]["persistentVolumeClaim"] = {"claimName": "weights"}
    with pytest.raises(SpecError, match=r"cannot be combined with model\.persistentVolumeClaim"):
        validate_inference_cluster(doc)


def test_the_default_policy_allows_the_hub_and_nothing_else() -> None:
    assert policy_violations(validate_inference_cluster(with_source(HF)), AdminPolicy()) == []
    mirror = {"huggingFace": HF["huggingFace"] | {"endpoint": "https://hf.mirror.example"}}
    assert policy_violations(validate_inference_cluster(with_source(mirror)), AdminPolicy()) == [
        "spec.model.source.huggingFace.endpoint host 'hf.mirror.example' is not an allowed "
        "model source (allowed: huggingface.co)"
    ]
    problems = policy_violations(validate_inference_cluster(with_source(HTTPS)), AdminPolicy())
    assert problems == [
        "spec.model.source.https.urls[0].url host 'files.corp.example' is not an allowed "
        "model source (allowed: huggingface.co)"
    ]


def test_plain_http_needs_its_own_listing() -> None:
    ic = validate_inference_cluster(with_source(S3))
    listed = admin_policy_from({"modelSources": {"allowedHosts": ["*.store"]}}, where="test")
    assert policy_violations(ic, listed) == [
        "spec.model.source.s3.endpoint 'http://minio.store:9000' is plain http, allowed only "
        "for the hosts in modelSources.plainHttpHosts (allowed: none)"
    ]
    both = admin_policy_from(
        {"modelSources": {"allowedHosts": ["*.store"], "plainHttpHosts": ["minio.store"]}},
        where="test",
    )
    assert policy_violations(ic, both) == []


_S3 = {"endpoint": "https://s3.corp.example", "bucket": "models", "prefix": "ds/v1/"}


@pytest.mark.parametrize(
    "change",
    [
        {"fanOut": "Tree"},
        {"stagingNode": "spark-a1"},
        {"expectedBytes": 168_270_000_000},
        {"s3": {**_S3, "credentialsSecretRef": {"name": "rotated"}}},
    ],
)
def test_how_a_source_is_fetched_is_not_what_the_copy_is(change: dict[str, Any]) -> None:
    """The copy's digest (render/model_layout.py) and the stage manifest's key both come
    from ``source_identity``: a new fan-out, downloader, size hint or credentials Secret
    is no new revision (no download, no roll of every replica)."""
    base = ModelSourceSpec.model_validate({"s3": _S3})
    assert source_identity(ModelSourceSpec.model_validate({"s3": _S3, **change})) == (
        source_identity(base)
    )


@pytest.mark.parametrize(
    "source",
    [
        {"s3": {**_S3, "prefix": "ds/v2/"}},
        {"s3": {**_S3, "bucket": "other"}},
        {"s3": {**_S3, "endpoint": "https://mirror.corp.example"}},
        {"https": {"urls": [{"url": "https://files.corp.example/ds/v1/model.safetensors"}]}},
    ],
)
def test_what_a_source_holds_is_its_identity(source: dict[str, Any]) -> None:
    base = ModelSourceSpec.model_validate({"s3": _S3})
    assert source_identity(ModelSourceSpec.model_validate(source)) != source_identity(base)


@pytest.mark.parametrize(
    ("path", "prefixes", "below"),
    [
        ("/models/ds", ("/models",), True),
        ("/models/ds", ("/models/",), True),
        ("/models/a/b", ("/models",), True),
        ("/models", ("/models",), False),  # the copies would go in '/'
        ("/models/", ("/models",), False),
        ("/models/.", ("/models",), False),  # '.' is not a component
        ("/models//", ("/models/",), False),
        ("/models/../models/ds", ("/models",), False),
        ("/models-evil/ds", ("/models",), False),
        ("/ds", ("/",), True),
        ("/", ("/",), False),
        ("/x/ds", ("/models", "/x"), True),
    ],
)
def test_strictly_below_a_prefix_by_whole_components(
    path: str, prefixes: tuple[str, ...], below: bool
) -> None:
    assert path_strictly_below(path, prefixes) is below


def test_with_a_source_the_path_must_lie_strictly_below_a_prefix() -> None:
    """The staging Jobs mount the path's parent read-write: at the prefix itself, that
    parent ('/') would be outside every allowed prefix. Without a source it is allowed."""
    doc = with_source(HF)
    doc["spec"]["model"]["path"] = "/models"
    assert policy_violations(validate_inference_cluster(doc), AdminPolicy()) == [
        "spec.model.path '/models' is not strictly below an allowed host path prefix, as "
        "spec.model.source needs: the staged copies are written in the path's parent, which "
        "the staging Jobs mount read-write (allowed: /models)"
    ]
    del doc["spec"]["model"]["source"]
    assert policy_violations(validate_inference_cluster(doc), AdminPolicy()) == []
