"""The administrator's policy: which images, host paths, nodes and hosts tenants may use.

Why: an InferenceCluster becomes pods that run ``spec.engine.image`` on the nodes the
spec names, with host networking, RDMA devices and ``spec.model.path`` mounted from the
host — so the right to create one is node-level access (docs/security.md). The cluster
administrator bounds it operator-wide, in the chart's ``policy`` values, and the bound is
enforced twice: first by the API server (a ValidatingAdmissionPolicy the chart renders
from the same values, charts/sparkllm/templates/admission-policy.yaml), then here, by the
operator, before it creates anything — for an object admitted before the policy was
tightened, or on a cluster where the binding was removed. Both halves report the same
message, naming the field, the value and what is allowed.

The rules, each a list the administrator writes (``*`` alone allows anything):

- ``images.allowedRepositories``: the image's repository (without tag and digest) equals
  an entry, or starts with an entry ending in ``/`` (a registry or namespace);
  ``images.requireDigest`` also asks for ``@sha256:``.
- ``modelPaths.allowedPrefixes``: a hostPath model directory (no PersistentVolumeClaim)
  is an entry or below it, with no ``..`` segment. Entries are whole path components:
  ``/models`` allows ``/models/x``, not ``/models-x``.
- ``placement``: per namespace (``namespaces``, else ``default``), the node names
  ``spec.placement.nodeGroups`` may list and the label keys ``nodeGroupLabel`` may be.
  A label key is the administrator's way to hand a namespace a set of nodes (only node
  administrators set node labels); label values are read at reconcile time, which an
  admission check cannot see, so the key is what is checked.
- ``exposure.allowedHosts``: every host the front door claims (the Ingress host, each
  HTTPRoute hostname; an HTTPRoute without hostnames claims the whole listener, allowed
  only by ``*``) equals an entry, or is below an entry ``*.suffix``. A wildcard host
  (``*.corp.example.com``) is allowed only when listed as such.
- ``exposure.allowedIssuers``: the cert-manager issuer (kind and name; name ``*`` for
  every issuer of that kind).
- ``modelSources.allowedHosts``: every host ``spec.model.source`` downloads from (the
  Hugging Face endpoint, default huggingface.co; the S3 endpoint; each HTTPS URL) equals
  an entry or is below an entry ``*.suffix``. Default: ``huggingface.co`` only (a node
  downloading from any host a tenant names is a request from inside the cluster's
  network; docs/security.md). ``modelSources.plainHttpHosts``: the hosts an S3 endpoint
  may reach over plain ``http://`` (default none).

Pure: :func:`policy_violations` is a function of the policy and the object. The operator
reads the policy from its env (:data:`POLICY_ENV`, JSON, set by the chart), ``sparkllm
render`` from a YAML file (:func:`admin_policy_from_yaml`; the CLI reads the file).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from sparkllm.api.model_staging import DEFAULT_HF_ENDPOINT, ModelSourceSpec
from sparkllm.api.spec import InferenceCluster
from sparkllm.errors import SparkllmError, SpecError
from sparkllm.manifest_file import yaml_problem

POLICY_ENV: Final = "SPARKLLM_ADMIN_POLICY"
ANY: Final = "*"


class PolicyDeniedError(SpecError):
    """The spec is valid but outside the administrator's policy (reason PolicyDenied)."""


class PolicyModel(BaseModel):
    """camelCase on the wire (the chart's values), unknown keys refused, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class ImagePolicy(PolicyModel):
    """``policy.images``: where engine images may come from."""

    allowed_repositories: tuple[str, ...] = (
        "nvcr.io/nvidia/sglang",
        "lmsysorg/sglang",
        "docker.io/lmsysorg/sglang",
    )
    require_digest: bool = False


class ModelPathPolicy(PolicyModel):
    """``policy.modelPaths``: which host directories may be mounted as the model."""

    allowed_prefixes: tuple[str, ...] = ("/models",)


class NodeRule(PolicyModel):
    """The nodes one namespace may use: node names, and node-group label keys."""

    nodes: tuple[str, ...] = ()
    node_group_labels: tuple[str, ...] = ()


class PlacementPolicy(PolicyModel):
    """``policy.placement``: per namespace the nodes it may use; ``default`` for the rest."""

    default: NodeRule = NodeRule(nodes=(ANY,), node_group_labels=(ANY,))
    namespaces: dict[str, NodeRule] = Field(default_factory=dict)

    def rule_for(self, namespace: str) -> NodeRule:
        return self.namespaces.get(namespace, self.default)


class IssuerRef(PolicyModel):
    """A cert-manager issuer a tenant may ask for (name ``*``: any of that kind)."""

    kind: Literal["Issuer", "ClusterIssuer"]
    name: str = Field(min_length=1)


class ExposurePolicy(PolicyModel):
    """``policy.exposure``: the hosts and certificate issuers tenants may claim."""

    allowed_hosts: tuple[str, ...] = ()
    allowed_issuers: tuple[IssuerRef, ...] = ()


class ModelSourcePolicy(PolicyModel):
    """``policy.modelSources``: the hosts ``spec.model.source`` may download from."""

    allowed_hosts: tuple[str, ...] = ("huggingface.co",)
    plain_http_hosts: tuple[str, ...] = ()


class AdminPolicy(PolicyModel):
    """The chart's ``policy`` values (without ``enabled``); defaults equal the chart's."""

    images: ImagePolicy = ImagePolicy()
    model_paths: ModelPathPolicy = ModelPathPolicy()
    placement: PlacementPolicy = PlacementPolicy()
    exposure: ExposurePolicy = ExposurePolicy()
    model_sources: ModelSourcePolicy = ModelSourcePolicy()


def policy_violations(ic: InferenceCluster, policy: AdminPolicy) -> list[str]:
    """Every way ``ic`` leaves ``policy``, one message each (empty: allowed)."""
    spec = ic.spec
    problems: list[str] = []
    image = spec.engine.image
    repositories = policy.images.allowed_repositories
    if not any(_repository_allowed(repository_of(image), entry) for entry in repositories):
        problems.append(
            f"spec.engine.image '{image}' is not from an allowed repository "
            f"(allowed: {_listing(repositories)})"
        )
    if policy.images.require_digest and "@sha256:" not in image:
        problems.append(
            f"spec.engine.image '{image}' is not pinned by digest (the administrator "
            "requires @sha256:)"
        )
    model = spec.model
    prefixes = policy.model_paths.allowed_prefixes
    if model.persistent_volume_claim is None and not path_allowed(model.path, prefixes):
        problems.append(
            f"spec.model.path '{model.path}' is not under an allowed host path prefix "
            f"(allowed: {_listing(prefixes)})"
        )
    elif model.source is not None and not path_strictly_below(model.path, prefixes):
        # The staging Jobs mount the path's PARENT read-write and write the copies there
        # (render/model_layout.copy_dir): at a prefix itself, that parent is outside it.
        problems.append(
            f"spec.model.path '{model.path}' is not strictly below an allowed host path "
            "prefix, as spec.model.source needs: the staged copies are written in the "
            "path's parent, which the staging Jobs mount read-write "
            f"(allowed: {_listing(prefixes)})"
        )
    problems.extend(_placement_violations(ic, policy.placement))
    problems.extend(_exposure_violations(ic, policy.exposure))
    if model.source is not None:
        problems.extend(source_violations(model.source, policy.model_sources))
    return problems


def enforce(ic: InferenceCluster, policy: AdminPolicy) -> None:
    """Raise :class:`PolicyDeniedError` naming every field of ``ic`` outside ``policy``."""
    problems = policy_violations(ic, policy)
    if problems:
        raise PolicyDeniedError("; ".join(problems))


def repository_of(image: str) -> str:
    """``host:5000/a/b:tag@sha256:..`` -> ``host:5000/a/b`` (the CEL rule's twin)."""
    name = image.split("@", 1)[0]
    colon = name.rfind(":")
    return name[:colon] if colon > name.rfind("/") else name


def path_allowed(path: str, prefixes: tuple[str, ...]) -> bool:
    """``path`` is a prefix or below one, by whole components, with no ``..`` segment."""
    if ".." in path.split("/"):
        return False
    return any(
        path == prefix or path.startswith(prefix if prefix.endswith("/") else prefix + "/")
        for prefix in prefixes
    )


def path_strictly_below(path: str, prefixes: tuple[str, ...]) -> bool:
    """``path`` is below a prefix by at least one whole component, so that its parent is
    the prefix or below it. Empty and ``.`` components do not count (``/models/.`` is
    ``/models``); a ``..`` anywhere refuses the path. The CEL rule's twin."""
    if ".." in path.split("/"):
        return False
    parts = _components(path)
    return any(
        parts.startswith(base + "/") if base else parts != "" for base in map(_components, prefixes)
    )


def _components(path: str) -> str:
    """``/a//b/./c/`` -> ``a/b/c``: the path's components, joined, without empty or ``.``."""
    return "/".join(part for part in path.split("/") if part not in ("", "."))


def host_allowed(host: str, patterns: tuple[str, ...]) -> bool:
    """``host`` is listed, or below a listed ``*.suffix`` without being a wildcard itself."""
    return any(
        pattern in (ANY, host)
        or (pattern.startswith("*.") and not host.startswith("*") and host.endswith(pattern[1:]))
        for pattern in patterns
    )


def _repository_allowed(repository: str, entry: str) -> bool:
    if entry == ANY:
        return True
    return repository.startswith(entry) if entry.endswith("/") else repository == entry


def _allowed(value: str, entries: tuple[str, ...]) -> bool:
    return ANY in entries or value in entries


def _listing(entries: tuple[str, ...]) -> str:
    return ", ".join(entries) if entries else "none"


def _placement_violations(ic: InferenceCluster, policy: PlacementPolicy) -> list[str]:
    namespace = ic.metadata.namespace or "default"
    rule = policy.rule_for(namespace)
    placement = ic.spec.placement
    if placement.node_groups is not None:
        denied = [
            n for group in placement.node_groups for n in group if not _allowed(n, rule.nodes)
        ]
        if denied:
            return [
                f"spec.placement.nodeGroups names nodes namespace '{namespace}' may not use: "
                f"{', '.join(denied)} (allowed: {_listing(rule.nodes)})"
            ]
        return []
    label = placement.node_group_label or ""
    if not _allowed(label, rule.node_group_labels):
        return [
            f"spec.placement.nodeGroupLabel '{label}' is not a node group label namespace "
            f"'{namespace}' may use (allowed: {_listing(rule.node_group_labels)})"
        ]
    return []


def _exposure_violations(ic: InferenceCluster, policy: ExposurePolicy) -> list[str]:
    exposure, hosts = ic.spec.exposure, policy.allowed_hosts
    allowed = f"(allowed: {_listing(hosts)})"
    problems: list[str] = []
    ingress, route = exposure.ingress, exposure.http_route
    if ingress is not None and not host_allowed(ingress.host, hosts):
        problems.append(
            f"spec.exposure.ingress.host '{ingress.host}' is not an allowed host {allowed}"
        )
    if route is not None and not route.hostnames and ANY not in hosts:
        problems.append(
            "spec.exposure.httpRoute.hostnames is empty, which claims every host of the "
            f"Gateway listener {allowed}"
        )
    denied = [host for host in route.hostnames if not host_allowed(host, hosts)] if route else []
    if denied:
        problems.append(
            "spec.exposure.httpRoute.hostnames has hosts that are not allowed: "
            f"{', '.join(denied)} {allowed}"
        )
    issuer = ingress.cert_manager_issuer if ingress is not None else None
    if issuer is not None and not any(
        ref.kind == issuer.kind and ref.name in (ANY, issuer.name) for ref in policy.allowed_issuers
    ):
        listing = _listing(tuple(f"{r.kind}/{r.name}" for r in policy.allowed_issuers))
        problems.append(
            f"spec.exposure.ingress.certManagerIssuer {issuer.kind}/{issuer.name} is not an "
            f"allowed issuer (allowed: {listing})"
        )
    return problems


def source_violations(source: ModelSourceSpec, policy: ModelSourcePolicy) -> list[str]:
    """Every host of ``source`` outside ``policy``, one message each (empty: allowed)."""
    allowed = f"(allowed: {_listing(policy.allowed_hosts)})"
    problems: list[str] = []
    for field, url in source_urls(source):
        scheme, _, rest = url.partition("://")
        host = rest.split("/", 1)[0].rsplit(":", 1)[0].lower()
        if not host_allowed(host, policy.allowed_hosts):
            problems.append(f"{field} host '{host}' is not an allowed model source {allowed}")
        elif scheme == "http" and not host_allowed(host, policy.plain_http_hosts):
            problems.append(
                f"{field} '{url}' is plain http, allowed only for the hosts in "
                f"modelSources.plainHttpHosts (allowed: {_listing(policy.plain_http_hosts)})"
            )
    return problems


def source_urls(source: ModelSourceSpec) -> list[tuple[str, str]]:
    """(field path, URL) of every place ``source`` downloads from."""
    prefix = "spec.model.source"
    if source.hugging_face is not None:
        endpoint = source.hugging_face.endpoint or DEFAULT_HF_ENDPOINT
        return [(f"{prefix}.huggingFace.endpoint", endpoint)]
    if source.s3 is not None:
        return [(f"{prefix}.s3.endpoint", source.s3.endpoint)]
    files = source.https.urls if source.https is not None else ()
    return [(f"{prefix}.https.urls[{i}].url", f.url) for i, f in enumerate(files)]


def admin_policy_from(values: Any, *, where: str) -> AdminPolicy:
    """The policy in ``values`` (the chart's ``policy`` mapping; ``enabled`` is ignored).

    Validated as JSON in strict mode, as the chart's schema is: ``"true"`` is no boolean.
    Raises SparkllmError naming ``where`` and the field when a value is not a policy.
    """
    if not isinstance(values, Mapping):
        raise SparkllmError(f"the admin policy {where} is not a mapping")
    fields = {key: value for key, value in values.items() if key != "enabled"}
    try:
        return AdminPolicy.model_validate_json(json.dumps(fields), strict=True)
    except TypeError as exc:
        raise SparkllmError(f"the admin policy {where} is not JSON data: {exc}") from exc
    except ValidationError as exc:
        lines = [
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
            for e in exc.errors(include_url=False)
        ]
        raise SparkllmError(f"the admin policy {where} is invalid: {'; '.join(lines)}") from exc


def admin_policy_from_env(environ: Mapping[str, str]) -> AdminPolicy | None:
    """The operator's policy from :data:`POLICY_ENV` (JSON); None when unset (no limits)."""
    text = environ.get(POLICY_ENV, "").strip()
    if not text:
        return None
    try:
        values = json.loads(text)
    except ValueError as exc:
        raise SparkllmError(f"{POLICY_ENV} is not JSON: {exc}") from exc
    return admin_policy_from(values, where=f"in {POLICY_ENV}")


def admin_policy_from_yaml(text: str, *, where: str) -> AdminPolicy:
    """The policy in a YAML document: the ``policy`` mapping itself, or chart values
    holding it under ``policy`` (unset keys take the chart's defaults)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SparkllmError(f"the admin policy {where} is not YAML: {yaml_problem(exc)}") from exc
    if isinstance(doc, Mapping) and "policy" in doc:
        doc = doc["policy"]
    return admin_policy_from(doc, where=where)
