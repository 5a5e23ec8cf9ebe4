"""The tests' plain reads (``kubectl get ... -o json``) over one kept-alive API connection.

Why: the cluster tests poll objects through ``DevCluster.kubectl_json``, and each call
used to start a kubectl process (~90 ms of CPU: a Go binary's start, the kubeconfig, its
discovery cache, a new TLS handshake, and the API server's side of that handshake). In
``make test`` that was ~1,900 processes and ~170 s of CPU on a 2-core machine whose
cluster half is CPU-bound. A get of one object, or a list, is one HTTP GET: this module
serves it over a kept-alive HTTPS connection and answers with the JSON kubectl prints.

What kubectl adds, done the same way here:
- resource names (``sts``, ``icl``, ``kopfpeerings.kopf.dev``, ``Pod``) are resolved
  by the API server's discovery, read once per client (and again when a name is unknown:
  a CRD installed since), first match in discovery order, as kubectl's REST mapper;
- a list prints as ``{"apiVersion": "v1", "kind": "List", "items": [...]}`` with each
  item's apiVersion and kind set (the API server leaves them out of built-in lists);
- managedFields are left out (kubectl's default, ``--show-managed-fields=false``);
- a missing object is an error naming it (``Error from server (NotFound): ...``).
Anything else — other verbs, output options, several names, a flag not parsed here, a
resource discovery does not know — returns None and the caller runs kubectl.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from sparkllm.errors import ClusterAPIError
from sparkllm.kube.client import load_configuration
from sparkllm.kube.kinds import Kind
from sparkllm_dev.errors import DevClusterError

JSON = dict[str, Any]

# Aggregated discovery (one request per root, every group's resources in it), served by
# kube-apiserver since 1.30.
DISCOVERY_ACCEPT = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

_VALUE_FLAGS = {
    "-n": "namespace",
    "--namespace": "namespace",
    "-l": "selector",
    "--selector": "selector",
    "--field-selector": "field_selector",
}
_ALL_NAMESPACES = {"-A", "--all-namespaces"}


@dataclass(frozen=True)
class GetRequest:
    """A parsed ``kubectl get``: resource names (comma-separated), at most one name."""

    resources: tuple[str, ...]
    name: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    selector: str | None = None
    field_selector: str | None = None


def parse_get(args: Sequence[str]) -> GetRequest | None:
    """The plain get these args ask for, or None when kubectl must run them."""
    if not args or args[0] != "get":
        return None
    values: dict[str, str] = {}
    positional: list[str] = []
    all_namespaces = False
    rest = list(args[1:])
    while rest:
        arg = rest.pop(0)
        flag, eq, inline = arg.partition("=")
        if arg in _ALL_NAMESPACES:
            all_namespaces = True
        elif flag in _VALUE_FLAGS:
            if eq:
                value = inline
            elif rest:
                value = rest.pop(0)
            else:
                return None
            if _VALUE_FLAGS[flag] in values:
                return None
            values[_VALUE_FLAGS[flag]] = value
        elif arg.startswith("-"):
            return None  # an option of kubectl's own (output, sorting, --raw ...)
        else:
            positional.append(arg)
    if not positional or len(positional) > 2:
        return None
    if "/" in positional[0]:  # kind/name
        if len(positional) != 1:
            return None
        resource, _, slashed = positional[0].partition("/")
        if not slashed:
            return None
        positional = [resource, slashed]
    resources = tuple(positional[0].split(","))
    name = positional[1] if len(positional) == 2 else None
    if not all(resources) or (
        name is not None
        and (
            len(resources) > 1
            or all_namespaces
            or "selector" in values
            or "field_selector" in values
        )
    ):
        return None
    return GetRequest(
        resources=resources,
        name=name,
        namespace=values.get("namespace"),
        all_namespaces=all_namespaces,
        selector=values.get("selector"),
        field_selector=values.get("field_selector"),
    )


def _names(resource: JSON) -> set[str]:
    """Every name kubectl accepts for a discovered resource (without its group)."""
    names = {resource["resource"], resource.get("singularResource") or ""}
    names.update(resource.get("shortNames") or [])
    kind = (resource.get("responseKind") or {}).get("kind")
    if kind:
        names.add(kind.lower())
    return {n.lower() for n in names if n}


def discovered_kinds(roots: Sequence[JSON]) -> list[tuple[frozenset[str], str, Kind]]:
    """(names, group, Kind) for every top-level resource, in discovery order (the
    preferred version first in each group), from aggregated discovery documents."""
    found: list[tuple[frozenset[str], str, Kind]] = []
    for root in roots:
        for group in root.get("items") or []:
            group_name = (group.get("metadata") or {}).get("name") or ""
            for version in group.get("versions") or []:
                api_version = (
                    f"{group_name}/{version['version']}" if group_name else version["version"]
                )
                for resource in version.get("resources") or []:
                    if "get" not in (resource.get("verbs") or []):
                        continue
                    kind = Kind(
                        api_version=api_version,
                        kind=(resource.get("responseKind") or {}).get("kind") or "",
                        plural=resource["resource"],
                        namespaced=resource.get("scope") == "Namespaced",
                    )
                    found.append((frozenset(_names(resource)), group_name, kind))
    return found


def resolve(kinds: Sequence[tuple[frozenset[str], str, Kind]], resource: str) -> Kind | None:
    """The kind ``resource`` names (``sts``, ``pods``, ``kopfpeerings.kopf.dev``), as
    kubectl resolves it: the first match in discovery order; group-qualified when dotted."""
    wanted = resource.lower()
    for names, _group, kind in kinds:
        if wanted in names:
            return kind
    for names, group, kind in kinds:
        if group and wanted.endswith(f".{group}") and wanted.removesuffix(f".{group}") in names:
            return kind
    return None


class ApiReads:
    """One kept-alive HTTPS client for a kubeconfig, rebuilt when the file changes (a
    cluster brought down and up again has new certificates)."""

    def __init__(self, kubeconfig: Path) -> None:
        self._kubeconfig = kubeconfig
        self._lock = threading.Lock()
        self._stamp: float | None = None
        self._client: httpx.Client | None = None
        self._kinds: list[tuple[frozenset[str], str, Kind]] | None = None
        self._default_namespace = "default"

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client, self._kinds, self._stamp = None, None, None

    def _session(self) -> httpx.Client:
        stamp = self._kubeconfig.stat().st_mtime
        if self._client is None or stamp != self._stamp:
            self._drop()
            cfg = load_configuration(str(self._kubeconfig))
            context = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.verify_ssl else None
            if context is not None and cfg.cert_file and cfg.key_file:
                context.load_cert_chain(cfg.cert_file, cfg.key_file)
            token = cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
            headers = {"Accept": "application/json", "User-Agent": "sparkllm-dev-tests"}
            if token:
                headers["Authorization"] = token
            self._client = httpx.Client(
                base_url=cfg.host,
                verify=context if context is not None else False,
                headers=headers,
                timeout=30,
            )
            self._default_namespace = _context_namespace(self._kubeconfig)
            self._stamp = stamp
        return self._client

    def _kind(self, client: httpx.Client, resource: str) -> Kind | None:
        for fresh in (False, True):
            if self._kinds is None or fresh:
                roots = [
                    _get(client, root, headers={"Accept": DISCOVERY_ACCEPT})
                    for root in ("/api", "/apis")
                ]
                self._kinds = discovered_kinds(roots)
            kind = resolve(self._kinds, resource)
            if kind is not None:
                return kind
        return None

    def get(self, request: GetRequest) -> JSON | None:
        """kubectl's JSON for the request, or None when kubectl must answer it."""
        with self._lock:
            try:
                return self._get(request)
            except (httpx.HTTPError, OSError, ClusterAPIError):
                # a cluster down or restarted, a dropped connection: kubectl decides
                self._drop()
                return None

    def _get(self, request: GetRequest) -> JSON | None:
        client = self._session()
        kinds = [self._kind(client, resource) for resource in request.resources]
        if any(kind is None for kind in kinds):
            return None
        namespace = None if request.all_namespaces else request.namespace or self._default_namespace
        if request.name is not None:
            kind = kinds[0]
            assert kind is not None
            response = client.get(kind.object_path(request.name, _ns(kind, namespace)))
            if response.status_code == 404 and _names_object(response, request.name):
                raise DevClusterError(
                    f"kubectl get {request.resources[0]} {request.name} exited 1: "
                    f"Error from server (NotFound): {response.json().get('message')}"
                )
            if not response.is_success:
                self._kinds = None
                return None
            obj: JSON = response.json()
            return _printed(obj)
        items: list[JSON] = []
        params = {}
        if request.selector:
            params["labelSelector"] = request.selector
        if request.field_selector:
            params["fieldSelector"] = request.field_selector
        for kind in kinds:
            assert kind is not None
            response = client.get(kind.collection_path(_ns(kind, namespace)), params=params)
            if not response.is_success:
                self._kinds = None
                return None  # a bad selector, a CRD gone: kubectl's own error
            for item in response.json().get("items") or []:
                items.append(_printed({"apiVersion": kind.api_version, "kind": kind.kind, **item}))
        return {
            "apiVersion": "v1",
            "items": items,
            "kind": "List",
            "metadata": {"resourceVersion": ""},
        }


def _printed(obj: JSON) -> JSON:
    """The object as ``kubectl get -o json`` prints it: without metadata.managedFields
    (kubectl's ``--show-managed-fields=false``, its default)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


def _ns(kind: Kind, namespace: str | None) -> str | None:
    return namespace if kind.namespaced else None


def _names_object(response: httpx.Response, name: str) -> bool:
    """A 404 about the object itself (not a path the server does not serve)."""
    try:
        details = response.json().get("details") or {}
    except ValueError:
        return False
    return bool(details.get("name") == name)


def _get(client: httpx.Client, path: str, *, headers: dict[str, str]) -> JSON:
    response = client.get(path, headers=headers)
    response.raise_for_status()
    document: JSON = response.json()
    return document


def _context_namespace(kubeconfig: Path) -> str:
    """The current context's namespace, as kubectl defaults to it."""
    config = yaml.safe_load(kubeconfig.read_text()) or {}
    current = config.get("current-context")
    for context in config.get("contexts") or []:
        if context.get("name") == current:
            return str((context.get("context") or {}).get("namespace") or "default")
    return "default"
