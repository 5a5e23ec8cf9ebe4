"""``spec.exposure``: how clients reach the front door over HTTPS, and the InferencePool.

Why in the spec: the documents' users reached the model over HTTPS through Nginx, and a
cluster has one of three ways to give the front door (the admission layer's Service) an
HTTPS address — a Gateway API ``Gateway`` it already runs (the operator adds an
``HTTPRoute``), an Ingress controller (an ``Ingress`` with TLS from a Secret, which
cert-manager may fill), or neither (the admission layer serves TLS itself from a Secret).
The choice is one field, ``type``, with the section for that choice; the API server
refuses a section that does not match the type, so a half-configured exposure is an
error at ``kubectl apply`` rather than an object that silently routes nothing.

``inferencePool`` is separate from ``type``: an InferencePool (Gateway API Inference
Extension, ``inference.networking.k8s.io/v1``) lets a cluster's inference gateway pick
rank-0 pods by their load; traffic through it bypasses the admission layer, which
docs/exposure.md spells out.
"""

from typing import Annotated, Final, Literal

from pydantic import Field, StringConstraints

from sparkllm.api.common import DNS_LABEL_PATTERN, DnsSubdomain
from sparkllm.api.rules import ApiModel, Rule

# Gateway API's Hostname: a DNS name, optionally with one leading wildcard label.
HOSTNAME_PATTERN: Final = (
    r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
Hostname = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=HOSTNAME_PATTERN)]
DnsLabel = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
ExposureType = Literal["ClusterIP", "HTTPRoute", "Ingress", "TLS"]
MAX_PARENT_REFS: Final = 8
MAX_HOSTNAMES: Final = 16
DEFAULT_PICKER_PORT: Final = 9002  # the endpoint picker's gRPC ext-proc port


class ParentReference(ApiModel):
    """A Gateway (listener) the HTTPRoute attaches to."""

    name: DnsSubdomain = Field(description="name of the Gateway. Required.")
    namespace: DnsLabel | None = Field(
        default=None,
        description="namespace of the Gateway. Optional; default the InferenceCluster's. "
        "The Gateway's listener must allow routes from this namespace.",
    )
    section_name: DnsSubdomain | None = Field(
        default=None,
        description="sectionName is the Gateway listener to attach to (the HTTPS one). "
        "Optional; default every listener that accepts the route.",
    )


class HTTPRouteExposure(ApiModel):
    """An HTTPRoute from the cluster's Gateway to the front-door Service."""

    parent_refs: list[ParentReference] = Field(
        min_length=1,
        max_length=MAX_PARENT_REFS,
        description=f"parentRefs are the Gateways the route attaches to. Required; 1 to "
        f"{MAX_PARENT_REFS}. TLS is terminated by the Gateway's HTTPS listener.",
    )
    hostnames: list[Hostname] = Field(
        default_factory=list,
        max_length=MAX_HOSTNAMES,
        exclude_if=lambda v: not v,
        description=f"hostnames the route answers, e.g. llm.example.com. Optional (default "
        f"the listener's); at most {MAX_HOSTNAMES}.",
    )


class CertManagerIssuer(ApiModel):
    """A cert-manager issuer that fills the Ingress's TLS Secret."""

    kind: Literal["Issuer", "ClusterIssuer"] = Field(
        default="ClusterIssuer",
        description="kind of the issuer: Issuer (this namespace) or ClusterIssuer. Default "
        "ClusterIssuer.",
    )
    name: DnsSubdomain = Field(description="name of the issuer. Required.")


class IngressExposure(ApiModel):
    """An Ingress with TLS in front of the front-door Service."""

    class_name: DnsSubdomain | None = Field(
        default=None,
        description="className is the IngressClass (e.g. nginx). Optional; default the "
        "cluster's default class.",
    )
    host: Hostname = Field(description="host clients use, e.g. llm.example.com. Required.")
    tls_secret_name: DnsSubdomain = Field(
        description="tlsSecretName is the kubernetes.io/tls Secret with the certificate for "
        "host. Required; with certManagerIssuer cert-manager creates and renews it."
    )
    cert_manager_issuer: CertManagerIssuer | None = Field(
        default=None,
        description="certManagerIssuer asks cert-manager (through its Ingress annotation) "
        "for the certificate. Optional; unset, the Secret is provided by you.",
    )


class TLSExposure(ApiModel):
    """TLS served by the admission layer itself."""

    secret_name: DnsSubdomain = Field(
        description="secretName is the kubernetes.io/tls Secret (tls.crt, tls.key) the "
        "gateway serves. Required; a renewed certificate is picked up within seconds."
    )


class EndpointPicker(ApiModel):
    """The endpoint picker (EPP) Service the InferencePool delegates choices to."""

    name: DnsSubdomain = Field(
        description="name of the endpoint picker's Service, in this namespace. Required; "
        "it must be deployed separately (docs/exposure.md)."
    )
    port: int = Field(
        default=DEFAULT_PICKER_PORT,
        ge=1,
        le=65535,
        description=f"port of that Service. Default {DEFAULT_PICKER_PORT}.",
    )
    failure_mode: Literal["FailClose", "FailOpen"] = Field(
        default="FailClose",
        description="failureMode when the picker does not answer: FailClose refuses the "
        "request, FailOpen lets the gateway pick any pool member. Default FailClose.",
    )


class InferencePoolExposure(ApiModel):
    """One InferencePool over this cluster's serving rank-0 pods."""

    endpoint_picker: EndpointPicker = Field(
        description="endpointPicker is the EPP the pool refers to. Required."
    )


def _section_matches_type(exposure: "ExposureSpec") -> bool:
    sections = {
        "HTTPRoute": exposure.http_route,
        "Ingress": exposure.ingress,
        "TLS": exposure.tls,
    }
    return all(
        (exposure.type == kind) == (section is not None) for kind, section in sections.items()
    )


class ExposureSpec(ApiModel):
    """How the front door is reached over HTTPS, and whether an InferencePool is published."""

    cel_rules = (
        Rule(
            # has(self.type): the CRD's default for exposure ({}) is checked as written.
            cel="(has(self.type) && self.type == 'HTTPRoute') == has(self.httpRoute) && "
            "(has(self.type) && self.type == 'Ingress') == has(self.ingress) && "
            "(has(self.type) && self.type == 'TLS') == has(self.tls)",
            message="exposure.type names the one section that is set: httpRoute for "
            "HTTPRoute, ingress for Ingress, tls for TLS, none for ClusterIP",
            check=_section_matches_type,
            field_path=".type",
        ),
    )

    type: ExposureType = Field(
        default="ClusterIP",
        description="type of exposure. Default ClusterIP: the front-door Service only, "
        "plain HTTP inside the cluster. HTTPRoute: a Gateway API route from your Gateway. "
        "Ingress: an Ingress with TLS. TLS: the gateway itself serves HTTPS.",
    )
    http_route: HTTPRouteExposure | None = Field(
        default=None,
        description="httpRoute configures type HTTPRoute. Optional; only with that type.",
    )
    ingress: IngressExposure | None = Field(
        default=None, description="ingress configures type Ingress. Optional; only with that type."
    )
    tls: TLSExposure | None = Field(
        default=None, description="tls configures type TLS. Optional; only with that type."
    )
    inference_pool: InferencePoolExposure | None = Field(
        default=None,
        description="inferencePool publishes an inference.networking.k8s.io/v1 "
        "InferencePool selecting the serving rank-0 pods. Optional; needs the Gateway API "
        "Inference Extension CRDs and an endpoint picker.",
    )


__all__ = [
    "DEFAULT_PICKER_PORT",
    "CertManagerIssuer",
    "EndpointPicker",
    "ExposureSpec",
    "HTTPRouteExposure",
    "InferencePoolExposure",
    "IngressExposure",
    "ParentReference",
    "TLSExposure",
]
