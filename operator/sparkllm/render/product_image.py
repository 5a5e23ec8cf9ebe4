"""The operator's own image, and how every pod the operator makes pulls it.

Why one setting: the chart installs the operator from ``image.repository`` with
``image.tag`` or ``image.digest``, ``image.pullPolicy`` and ``imagePullSecrets``; every pod
the operator then makes runs sparkllm code from the same image — the gateway's admission
and router containers, the ranks' ``verify-network`` and ``verify-model`` init containers,
the benchmark and acceptance Jobs. Had each kept a default of its own, an install from a
private or air-gapped registry would start the operator and leave the front door and every
rank in ImagePullBackOff. The chart hands the four settings to the operator as env
(:data:`IMAGE_ENV`, :data:`PULL_POLICY_ENV`, :data:`PULL_SECRETS_ENV`); ``sparkllm render``
takes them as flags of the same meaning, so a GitOps render matches what the operator
applies.

Pull secrets are a pod's ``imagePullSecrets``, so every pod the operator makes carries
them, the rank pods too: the kubelet offers each of them for every image of the pod, so an
engine image mirrored into the same registry pulls with the same Secret. They are names of
Secrets in the InferenceCluster's namespace (a pod cannot use another namespace's), which
the operator never reads. An engine image in yet another private registry takes its Secret
from the namespace's ``default`` ServiceAccount (``imagePullSecrets``), which the rank pods
run as; the API has no spec field for it (docs/install.md, "Air-gapped install").

The pull policy applies to the containers running this image; the engine containers keep
``IfNotPresent`` for the spec's pinned image, which is tens of gigabytes.

Pure: no I/O; the env is read once by ``sparkllm run`` and handed in.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from sparkllm import __version__
from sparkllm.api.common import DNS_SUBDOMAIN_PATTERN, MAX_NAME
from sparkllm.api.engine import LATEST_TAG_PATTERN, PINNED_IMAGE_PATTERN
from sparkllm.errors import SparkllmError
from sparkllm.render.engine_cache import NO_ENGINE_CACHE, EngineCache, engine_cache_from
from sparkllm.render.objects import JSON

PullPolicy = Literal["Always", "IfNotPresent", "Never"]
_POLICIES: Final[dict[str, PullPolicy]] = {
    "Always": "Always",
    "IfNotPresent": "IfNotPresent",
    "Never": "Never",
}
PULL_POLICIES: Final = tuple(_POLICIES)
DEFAULT_REPOSITORY: Final = "ghcr.io/sparkllm/sparkllm"
# The chart's appVersion is the package version (tests/unit/test_chart_render.py).
DEFAULT_IMAGE: Final = f"{DEFAULT_REPOSITORY}:{__version__}"
DEFAULT_PULL_POLICY: Final[PullPolicy] = "IfNotPresent"

# The operator's env, written by the chart (templates/operator.yaml).
IMAGE_ENV: Final = "SPARKLLM_IMAGE"
PULL_POLICY_ENV: Final = "SPARKLLM_IMAGE_PULL_POLICY"
PULL_SECRETS_ENV: Final = "SPARKLLM_IMAGE_PULL_SECRETS"  # comma-separated Secret names
ENV_NAMES: Final = (IMAGE_ENV, PULL_POLICY_ENV, PULL_SECRETS_ENV)
# ``sparkllm render``'s flags of the same meaning (cli.py).
FLAG_NAMES: Final = ("--image", "--image-pull-policy", "--image-pull-secret")


@dataclass(frozen=True)
class ProductImage:
    """The sparkllm image every operator-made pod runs, and how it is pulled."""

    reference: str = DEFAULT_IMAGE
    pull_policy: PullPolicy = DEFAULT_PULL_POLICY
    pull_secrets: tuple[str, ...] = ()
    # Where rank pods keep their engine caches on the node (render/engine_cache.py): an
    # operator setting like the image, handed to every rank pod the same way.
    engine_cache: EngineCache = NO_ENGINE_CACHE

    def pod_pull_secrets(self) -> list[JSON]:
        """The pod's ``imagePullSecrets`` (empty: the field is left out)."""
        return [{"name": name} for name in self.pull_secrets]


# What every setting left unset means: the image of this package's version, as published.
DEFAULT_PRODUCT_IMAGE: Final = ProductImage()


def product_image(
    *,
    reference: str | None,
    pull_policy: str | None,
    pull_secrets: Sequence[str],
    names: tuple[str, str, str] = FLAG_NAMES,
) -> ProductImage:
    """The settings checked; an empty one takes its default. ``names`` (the env's or the
    flags') name the setting in the one-line error."""
    image = (reference or "").strip() or DEFAULT_IMAGE
    if not re.search(PINNED_IMAGE_PATTERN, image) or re.search(LATEST_TAG_PATTERN, image):
        raise SparkllmError(
            f"{names[0]}: {image!r} is not an image pinned to a tag or a digest "
            "(e.g. registry.local/sparkllm:0.1.0 or registry.local/sparkllm@sha256:<64 hex>), "
            "or uses :latest"
        )
    policy = _POLICIES.get((pull_policy or "").strip() or DEFAULT_PULL_POLICY)
    if policy is None:
        raise SparkllmError(f"{names[1]}: {pull_policy!r} is not one of {', '.join(_POLICIES)}")
    secrets = tuple(name.strip() for name in pull_secrets if name.strip())
    for name in secrets:
        if len(name) > MAX_NAME or not re.match(DNS_SUBDOMAIN_PATTERN, name):
            raise SparkllmError(f"{names[2]}: {name!r} is not a Secret name (DNS subdomain)")
    return ProductImage(reference=image, pull_policy=policy, pull_secrets=secrets)


def product_image_from(environ: Mapping[str, str]) -> ProductImage:
    """The operator's image settings from its env (the chart's), defaults where unset;
    with the engine cache's root and cap (``SPARKLLM_ENGINE_CACHE_*``)."""
    image = product_image(
        reference=environ.get(IMAGE_ENV),
        pull_policy=environ.get(PULL_POLICY_ENV),
        pull_secrets=environ.get(PULL_SECRETS_ENV, "").split(","),
        names=ENV_NAMES,
    )
    return replace(image, engine_cache=engine_cache_from(environ))


__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_PRODUCT_IMAGE",
    "DEFAULT_PULL_POLICY",
    "ENV_NAMES",
    "FLAG_NAMES",
    "IMAGE_ENV",
    "PULL_POLICIES",
    "PULL_POLICY_ENV",
    "PULL_SECRETS_ENV",
    "ProductImage",
    "PullPolicy",
    "product_image",
    "product_image_from",
]
