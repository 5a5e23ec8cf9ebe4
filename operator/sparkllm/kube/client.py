"""The one module that talks to the Kubernetes API (besides kopf's own watches).

Why our own thin layer over httpx instead of the generated client: the operator needs a
handful of verbs — get, list by label, server-side apply, delete, status patch — on a
fixed set of kinds, and wants them async (kopf runs on asyncio), typed as plain dicts
(the render layer produces dicts), and with errors in sparkllm's own vocabulary. The
kubernetes package is still used for what it does well: loading a kubeconfig or the
in-cluster service account into a Configuration (certificates, tokens, refresh).

Every write is server-side apply with ONE field manager (``sparkllm-operator``) and
``force=true``: this controller owns the fields it sets; a conflict with another manager
is resolved in its favour, like every controller that uses SSA.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import httpx
import kubernetes.client
import kubernetes.config
from kubernetes.config.config_exception import ConfigException

from sparkllm.errors import ClusterAPIError, ConflictError
from sparkllm.kube.kinds import JSON, OPTIONAL_API_GROUPS, Kind, kind_of

FIELD_MANAGER = "sparkllm-operator"


def load_configuration(kubeconfig: str | None = None) -> kubernetes.client.Configuration:
    """In-cluster service account first (unless a kubeconfig is named), else kubeconfig."""
    cfg = kubernetes.client.Configuration()
    if kubeconfig is None:
        try:
            kubernetes.config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            return cfg
        except ConfigException:
            pass
    try:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=cfg
        )
    except (ConfigException, OSError) as exc:
        raise ClusterAPIError(f"cannot load Kubernetes credentials: {exc}") from exc
    return cfg


LOG_TIMEOUT_SECONDS = 5.0


class KubeAPI:
    """Async access to the API server for the operator's own writes and reads."""

    def __init__(self, cfg: kubernetes.client.Configuration, *, timeout: float = 30) -> None:
        self._cfg = cfg
        context = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.verify_ssl else None
        if context is not None and cfg.cert_file and cfg.key_file:
            context.load_cert_chain(cfg.cert_file, cfg.key_file)
        self._client = httpx.AsyncClient(
            base_url=cfg.host,
            verify=context if context is not None else False,
            timeout=timeout,
            headers={"User-Agent": FIELD_MANAGER, "Accept": "application/json"},
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    def _auth(self) -> dict[str, str]:
        # kubernetes-client 37 keeps the token under "BearerToken" ("authorization" is the
        # old alias); this call also runs the in-cluster refresh hook for rotating tokens.
        token = self._cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
        return {"Authorization": token} if token else {}

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json: Any = None,
        content_type: str | None = None,
        read_seconds: float | None = None,
    ) -> httpx.Response:
        headers = self._auth()
        if content_type:
            headers["Content-Type"] = content_type
        try:
            if read_seconds is not None:
                return await self._client.request(
                    method, path, params=params, json=json, headers=headers, timeout=read_seconds
                )
            return await self._client.request(
                method, path, params=params, json=json, headers=headers
            )
        except httpx.HTTPError as exc:
            raise ClusterAPIError(f"{method} {path}: {exc}") from exc

    @staticmethod
    def _raise_for(response: httpx.Response, what: str) -> None:
        if response.is_success:
            return
        try:
            message = response.json().get("message", response.text)
        except ValueError:
            message = response.text
        error_cls = ConflictError if response.status_code == 409 else ClusterAPIError
        raise error_cls(f"{what}: {response.status_code} {message}", status=response.status_code)

    # --- reads ----------------------------------------------------------------------

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON | None:
        """The object, or None when it does not exist."""
        response = await self._request("GET", kind.object_path(name, namespace))
        if response.status_code == 404:
            return None
        self._raise_for(response, f"get {kind.kind} {namespace}/{name}")
        result: JSON = response.json()
        return result

    async def list(
        self, kind: Kind, namespace: str | None = None, *, selector: str | None = None
    ) -> list[JSON]:
        params = {"labelSelector": selector} if selector else None
        response = await self._request("GET", kind.collection_path(namespace), params=params)
        if response.status_code == 404 and kind.api_version.startswith(OPTIONAL_API_GROUPS):
            return []  # CRDs the cluster may lack: none of these objects exist then
        self._raise_for(response, f"list {kind.plural} in {namespace or 'all namespaces'}")
        items: list[JSON] = response.json().get("items", [])
        return items

    async def pod_log(
        self, name: str, namespace: str, *, container: str, tail_lines: int, limit_bytes: int
    ) -> str | None:
        """The last ``tail_lines`` lines (at most ``limit_bytes``) of a pod's container log;
        None when the pod or its log is not there (not started, gone; 400/404)."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
        params = {
            "container": container, "tailLines": str(tail_lines), "limitBytes": str(limit_bytes)
        }  # fmt: skip
        # Short: the API server asks the node's kubelet, and a pass must not wait on one
        # node that is slow to answer (the stage then comes from the pod's state).
        response = await self._request("GET", path, params=params, read_seconds=LOG_TIMEOUT_SECONDS)
        if response.status_code in {400, 404}:
            return None
        self._raise_for(response, f"log of pod {namespace}/{name}")
        return response.text

    async def kind_served(self, kind: Kind) -> bool:
        """Whether the API server serves this kind (e.g. the Prometheus operator's CRDs)."""
        group_version = kind.api_version
        path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
        response = await self._request("GET", path)
        if response.status_code == 404:
            return False
        self._raise_for(response, f"discover {group_version}")
        return any(r.get("name") == kind.plural for r in response.json().get("resources", []))

    # --- writes ---------------------------------------------------------------------

    async def apply(self, obj: Mapping[str, Any]) -> JSON:
        """Server-side apply ``obj`` with our field manager; return the live object."""
        kind = kind_of(obj)
        meta = obj["metadata"]
        response = await self._request(
            "PATCH",
            kind.object_path(meta["name"], meta.get("namespace")),
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            json=obj,
            content_type="application/apply-patch+yaml",
        )
        if response.status_code == 404 and kind.api_version.startswith(OPTIONAL_API_GROUPS):
            raise ClusterAPIError(
                f"apply {kind.kind} {meta.get('namespace')}/{meta['name']}: this cluster does "
                f"not serve {kind.api_version} {kind.plural}: install its CRDs or change the "
                "spec that asks for it (docs/exposure.md)",
                status=404,
            )
        self._raise_for(response, f"apply {kind.kind} {meta.get('namespace')}/{meta['name']}")
        result: JSON = response.json()
        return result

    async def apply_status(self, kind: Kind, name: str, namespace: str, status: JSON) -> JSON:
        """Server-side apply of the status subresource (our manager owns .status)."""
        body = {
            "apiVersion": kind.api_version,
            "kind": kind.kind,
            "metadata": {"name": name, "namespace": namespace},
            "status": status,
        }
        response = await self._request(
            "PATCH",
            kind.object_path(name, namespace) + "/status",
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            json=body,
            content_type="application/apply-patch+yaml",
        )
        self._raise_for(response, f"apply status of {kind.kind} {namespace}/{name}")
        result: JSON = response.json()
        return result

    async def merge_patch(
        self, kind: Kind, name: str, namespace: str | None, patch: Mapping[str, Any]
    ) -> JSON | None:
        """JSON merge patch (for fields we do not own, e.g. removing a user's annotation)."""
        response = await self._request(
            "PATCH",
            kind.object_path(name, namespace),
            json=patch,
            content_type="application/merge-patch+json",
        )
        if response.status_code == 404:
            return None
        self._raise_for(response, f"patch {kind.kind} {namespace}/{name}")
        result: JSON = response.json()
        return result

    async def create(self, obj: Mapping[str, Any]) -> JSON | None:
        """Create ``obj``; None when it already exists (for generated, never-rewritten data)."""
        kind = kind_of(obj)
        namespace = obj["metadata"].get("namespace")
        response = await self._request(
            "POST",
            kind.collection_path(namespace),
            params={"fieldManager": FIELD_MANAGER},
            json=obj,
        )
        if response.status_code == 409:
            return None
        name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
        self._raise_for(response, f"create {kind.kind} {namespace}/{name}")
        result: JSON = response.json()
        return result

    async def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        grace_seconds: int | None = None,
    ) -> bool:
        """Delete (optionally only if the uid still matches); False when already gone."""
        body: JSON = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        if uid is not None:
            body["preconditions"] = {"uid": uid}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        response = await self._request("DELETE", kind.object_path(name, namespace), json=body)
        if response.status_code == 404:
            return False
        if response.status_code == 409 and uid is not None:
            return False  # a newer object of that name exists: not ours to delete
        self._raise_for(response, f"delete {kind.kind} {namespace}/{name}")
        return True
