"""Which ``kubectl get`` calls the kept-alive API reader serves, and how it names kinds.

The reader must answer only what it answers exactly as kubectl would; every other call
goes to kubectl (parse_get returns None). The JSON itself is compared with kubectl's on
a live cluster by the cluster tests that read through ``kubectl_json``.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkllm.kube.kinds import Kind
from sparkllm_dev.devcluster.api_reads import GetRequest, discovered_kinds, parse_get, resolve


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("get", "icl", "x", "-n", "ns"), GetRequest(("icl",), "x", "ns")),
        (("get", "nodes"), GetRequest(("nodes",))),
        (
            ("get", "pods", "-A", "-l", "a=b"),
            GetRequest(("pods",), all_namespaces=True, selector="a=b"),
        ),
        (("get", "sts,svc", "--namespace=ns"), GetRequest(("sts", "svc"), namespace="ns")),
        (
            ("get", "events", "-n", "ns", "--field-selector=reason=X"),
            GetRequest(("events",), namespace="ns", field_selector="reason=X"),
        ),
        (("get", "crd/foo"), GetRequest(("crd",), "foo")),
    ],
)
def test_plain_gets_are_served(args: tuple[str, ...], expected: GetRequest) -> None:
    assert parse_get(args) == expected


@pytest.mark.parametrize(
    "args",
    [
        ("apply", "-f", "-"),
        ("get",),
        ("get", "--raw", "/readyz"),
        ("get", "pods", "--show-labels"),
        ("get", "pod", "a", "b"),
        ("get", "pod", "a", "-l", "x=y"),
        ("get", "pod", "a", "-A"),
        ("get", "sts,svc", "a"),
        ("get", "pods", "-n"),
        ("get", "pods", "-n", "a", "-n", "b"),
        ("get", "pods,", "-n", "a"),
        ("get", "pods/", "-n", "a"),
    ],
)
def test_everything_else_runs_kubectl(args: tuple[str, ...]) -> None:
    assert parse_get(args) is None


def _resource(
    name: str, kind: str, *, short: tuple[str, ...] = (), scope: str = "Namespaced"
) -> Any:
    return {
        "resource": name,
        "singularResource": kind.lower(),
        "shortNames": list(short),
        "responseKind": {"kind": kind},
        "scope": scope,
        "verbs": ["get", "list"],
    }


CORE = {
    "items": [
        {
            "metadata": {"name": ""},
            "versions": [
                {
                    "version": "v1",
                    "resources": [
                        _resource("pods", "Pod", short=("po",)),
                        _resource("events", "Event", short=("ev",)),
                        _resource("nodes", "Node", short=("no",), scope="Cluster"),
                    ],
                }
            ],
        }
    ]
}
GROUPS = {
    "items": [
        {
            "metadata": {"name": "events.k8s.io"},
            "versions": [
                {"version": "v1", "resources": [_resource("events", "Event", short=("ev",))]}
            ],
        },
        {
            "metadata": {"name": "kopf.dev"},
            "versions": [
                {"version": "v1", "resources": [_resource("kopfpeerings", "KopfPeering")]}
            ],
        },
        {
            "metadata": {"name": "sparkllm.io"},
            "versions": [
                {
                    "version": "v1alpha1",
                    "resources": [
                        _resource("inferenceclusters", "InferenceCluster", short=("icl",)),
                        {
                            **_resource("inferenceclusters/status", "InferenceCluster"),
                            "verbs": ["get"],
                        },
                    ],
                }
            ],
        },
    ]
}
KINDS = discovered_kinds([CORE, GROUPS])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("po", Kind("v1", "Pod", "pods")),
        ("Pod", Kind("v1", "Pod", "pods")),
        ("node", Kind("v1", "Node", "nodes", namespaced=False)),
        ("events", Kind("v1", "Event", "events")),  # core first, as kubectl
        ("events.events.k8s.io", Kind("events.k8s.io/v1", "Event", "events")),
        ("icl", Kind("sparkllm.io/v1alpha1", "InferenceCluster", "inferenceclusters")),
        ("kopfpeerings.kopf.dev", Kind("kopf.dev/v1", "KopfPeering", "kopfpeerings")),
    ],
)
def test_names_resolve_by_discovery(name: str, expected: Kind) -> None:
    assert resolve(KINDS, name) == expected


def test_unknown_names_and_subresources_do_not_resolve() -> None:
    assert resolve(KINDS, "podmonitors") is None
    assert resolve(KINDS, "status") is None
