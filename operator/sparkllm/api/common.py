"""Small building blocks shared by the spec's sections: Kubernetes names and references.

Kubernetes has precise rules for the names a spec may mention (node names are DNS
subdomains, label keys are qualified names, Secret keys are config keys). Encoding them
once, with the same limits the API server applies to the objects themselves, means a
typo is rejected at ``kubectl apply`` instead of surfacing later as a pod that never
schedules. Every string and list carries a maximum length: the API server estimates the
worst-case cost of each CEL rule from those bounds and refuses a CRD whose cost is
unbounded.
"""

from typing import Annotated

from pydantic import Field, StringConstraints

from sparkllm.api.rules import ApiModel

# RFC 1123 subdomain (node names, Secret and ConfigMap names, PVC names).
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# RFC 1035 label (names that become Service names, which must start with a letter).
DNS_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# Qualified name: optional DNS-subdomain prefix and '/', then a name of at most 63 chars.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
# A key inside a Secret or ConfigMap.
CONFIG_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# A POSIX-style environment variable name.
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

MAX_NAME = 253
MAX_LABEL_KEY = 317

DnsSubdomain = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_NAME, pattern=DNS_SUBDOMAIN_PATTERN)
]
LabelKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_LABEL_KEY, pattern=LABEL_KEY_PATTERN)
]
ConfigKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_NAME, pattern=CONFIG_KEY_PATTERN)
]
NodeName = DnsSubdomain


class LocalObjectReference(ApiModel):
    """A reference to an object by name, in the InferenceCluster's namespace."""

    name: DnsSubdomain = Field(
        description="name of the referenced object, in the InferenceCluster's namespace. "
        "Required; a DNS subdomain of at most 253 characters."
    )


class SecretKeyReference(ApiModel):
    """One key of a Secret in the InferenceCluster's namespace."""

    name: DnsSubdomain = Field(
        description="name of the Secret, in the InferenceCluster's namespace. Required; a "
        "DNS subdomain of at most 253 characters."
    )
    key: ConfigKey = Field(
        default="token",
        description="key is the Secret data key holding the value. Default token; at most "
        "253 characters of [-._a-zA-Z0-9].",
    )


class ConfigMapKeyReference(ApiModel):
    """One key of a ConfigMap in the InferenceCluster's namespace."""

    name: DnsSubdomain = Field(
        description="name of the ConfigMap, in the InferenceCluster's namespace. Required; "
        "a DNS subdomain of at most 253 characters."
    )
    key: ConfigKey = Field(
        default="SHA256SUMS",
        description="key is the ConfigMap data key holding the manifest. Default "
        "SHA256SUMS; at most 253 characters of [-._a-zA-Z0-9].",
    )


class EnvVar(ApiModel):
    """One environment variable: a literal name and value (no valueFrom, by design)."""

    name: Annotated[
        str, StringConstraints(min_length=1, max_length=128, pattern=ENV_NAME_PATTERN)
    ] = Field(
        description="name of the variable. Required; a C identifier of at most 128 "
        "characters; unique within the list."
    )
    value: Annotated[str, StringConstraints(max_length=4096)] = Field(
        default="",
        description="value of the variable, taken literally (no $(VAR) expansion is "
        "promised). Default empty; at most 4096 characters. Never put credentials here: "
        "they would appear in the pod spec.",
    )
