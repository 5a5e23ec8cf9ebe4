"""Template rendering and the hashes that let reconcile skip no-op writes, pure.

``desired_hash`` decides whether a live object is re-applied, so it must be stable
(key order, its own annotation) and sensitive (any value). ``template_hash`` decides
whether a rank pod is outdated, so it must ignore exactly the restart-generation label.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import jinja2
import pytest

from sparkllm.keys import ANNOTATION_HASH, LABEL_GENERATION
from sparkllm.render.objects import (
    desired_hash,
    is_current,
    render_template,
    stamp_hash,
    template_hash,
)

JSON = dict[str, Any]

OBJECT: JSON = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {
        "name": "svc",
        "namespace": "llm",
        "labels": {"a": "1", "b": "2"},
        "annotations": {"note": "x"},
    },
    "spec": {"ports": [{"port": 1, "name": "a"}, {"port": 2, "name": "b"}], "type": "ClusterIP"},
}


def reordered(value: Any) -> Any:
    """The same JSON value with every mapping's keys in reverse insertion order."""
    if isinstance(value, dict):
        return {k: reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(v) for v in value]
    return value


# --- desired_hash -----------------------------------------------------------------------


def test_desired_hash_is_16_hex_digits_and_ignores_key_order() -> None:
    digest = desired_hash(OBJECT)
    assert re.fullmatch(r"[0-9a-f]{16}", digest)
    flipped = reordered(OBJECT)
    assert list(flipped) != list(OBJECT)
    assert list(flipped["metadata"]["labels"]) == ["b", "a"]
    assert desired_hash(flipped) == digest


def test_desired_hash_ignores_its_own_annotation_only() -> None:
    with_hash = copy.deepcopy(OBJECT)
    with_hash["metadata"]["annotations"][ANNOTATION_HASH] = "0123456789abcdef"
    assert desired_hash(with_hash) == desired_hash(OBJECT)
    other = copy.deepcopy(OBJECT)
    other["metadata"]["annotations"]["note"] = "y"
    assert desired_hash(other) != desired_hash(OBJECT)


def _set(path: str, value: Any) -> JSON:
    obj = copy.deepcopy(OBJECT)
    *parents, leaf = path.split(".")
    node: Any = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(leaf)] = value
    else:
        node[leaf] = value
    return obj


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("metadata.name", "svc2"),
        ("metadata.labels.a", "3"),
        ("metadata.labels.c", "1"),
        ("spec.type", "NodePort"),
        ("spec.ports.0.port", 3),
        ("spec.ports.0.port", "1"),  # a string is not the integer
        ("spec.ports", [{"port": 2, "name": "b"}, {"port": 1, "name": "a"}]),  # list order counts
        ("spec.extra", None),
    ],
)
def test_desired_hash_changes_with_any_value(path: str, value: Any) -> None:
    assert desired_hash(_set(path, value)) != desired_hash(OBJECT)


def test_desired_hash_tolerates_objects_without_metadata_and_does_not_mutate() -> None:
    before = copy.deepcopy(OBJECT)
    with_hash = copy.deepcopy(OBJECT)
    with_hash["metadata"]["annotations"][ANNOTATION_HASH] = "x"
    desired_hash(with_hash)
    assert with_hash["metadata"]["annotations"][ANNOTATION_HASH] == "x"
    assert before == OBJECT
    assert re.fullmatch(r"[0-9a-f]{16}", desired_hash({"kind": "Thing"}))
    assert desired_hash({"kind": "Thing"}) != desired_hash({"kind": "Other"})


# --- stamp_hash and is_current ------------------------------------------------------------


def test_stamp_hash_sets_the_annotation_on_a_copy() -> None:
    before = copy.deepcopy(OBJECT)
    stamped = stamp_hash(OBJECT)
    assert before == OBJECT
    assert stamped["metadata"]["annotations"] == {
        "note": "x",
        ANNOTATION_HASH: desired_hash(OBJECT),
    }
    stamped["spec"]["ports"][0]["port"] = 99
    assert OBJECT["spec"]["ports"][0]["port"] == 1  # a deep copy


def test_stamp_hash_is_idempotent_and_adds_annotations_when_absent() -> None:
    stamped = stamp_hash(OBJECT)
    assert stamp_hash(stamped) == stamped
    bare = {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    stamped_bare = stamp_hash(bare)
    assert stamped_bare["metadata"]["annotations"] == {ANNOTATION_HASH: desired_hash(bare)}
    assert "annotations" not in bare["metadata"]


DESIRED = stamp_hash(OBJECT)
DESIRED_HASH = DESIRED["metadata"]["annotations"][ANNOTATION_HASH]


@pytest.mark.parametrize(
    ("live", "desired", "current"),
    [
        pytest.param(None, DESIRED, False, id="absent"),
        pytest.param(DESIRED, DESIRED, True, id="same"),
        pytest.param(reordered(DESIRED), DESIRED, True, id="same-other-order"),
        pytest.param({"metadata": {"annotations": {ANNOTATION_HASH: DESIRED_HASH, "k": "v"}}},
                     DESIRED, True, id="only-the-annotation-is-compared"),
        pytest.param({"metadata": {"annotations": {ANNOTATION_HASH: "ffffffffffffffff"}}},
                     DESIRED, False, id="other-hash"),
        pytest.param({"metadata": {"annotations": {"note": "x"}}}, DESIRED, False,
                     id="live-unstamped"),
        pytest.param({"metadata": {"annotations": None}}, DESIRED, False,
                     id="live-null-annotations"),
        pytest.param({"metadata": {}}, DESIRED, False, id="live-no-annotations"),
        pytest.param({}, DESIRED, False, id="live-no-metadata"),
        pytest.param({"metadata": {}}, {"metadata": {}}, False, id="neither-stamped"),
        pytest.param(stamp_hash(_set("spec.type", "NodePort")), DESIRED, False, id="changed-spec"),
    ],
)  # fmt: skip
def test_is_current(live: JSON | None, desired: JSON, current: bool) -> None:
    assert is_current(live, desired) is current


# --- template_hash ----------------------------------------------------------------------

TEMPLATE: JSON = {
    "metadata": {"labels": {"app": "x", LABEL_GENERATION: "1"}},
    "spec": {"containers": [{"name": "engine", "image": "img:1"}]},
}


def test_template_hash_ignores_only_the_given_label() -> None:
    base = template_hash(TEMPLATE, ignore_label=LABEL_GENERATION)
    assert re.fullmatch(r"[0-9a-f]{16}", base)
    generation_2 = copy.deepcopy(TEMPLATE)
    generation_2["metadata"]["labels"][LABEL_GENERATION] = "2"
    assert template_hash(generation_2, ignore_label=LABEL_GENERATION) == base
    unlabelled = copy.deepcopy(TEMPLATE)
    del unlabelled["metadata"]["labels"][LABEL_GENERATION]
    assert template_hash(unlabelled, ignore_label=LABEL_GENERATION) == base
    assert template_hash(reordered(TEMPLATE), ignore_label=LABEL_GENERATION) == base
    # Another label, or the generation when another label is ignored, does count.
    other_label = copy.deepcopy(TEMPLATE)
    other_label["metadata"]["labels"]["app"] = "y"
    assert template_hash(other_label, ignore_label=LABEL_GENERATION) != base
    assert template_hash(generation_2, ignore_label="app") != template_hash(
        TEMPLATE, ignore_label="app"
    )
    image = copy.deepcopy(TEMPLATE)
    image["spec"]["containers"][0]["image"] = "img:2"
    assert template_hash(image, ignore_label=LABEL_GENERATION) != base
    assert TEMPLATE["metadata"]["labels"][LABEL_GENERATION] == "1"  # not mutated


def test_template_hash_without_metadata_or_labels() -> None:
    bare: JSON = {"spec": {"containers": []}}
    assert re.fullmatch(r"[0-9a-f]{16}", template_hash(bare, ignore_label=LABEL_GENERATION))
    assert template_hash({"metadata": {}, **bare}, ignore_label=LABEL_GENERATION) != template_hash(
        bare, ignore_label=LABEL_GENERATION
    )
    only_generation = [{"metadata": {"labels": {LABEL_GENERATION: g}}, **bare} for g in ("5", "6")]
    assert len({template_hash(t, ignore_label=LABEL_GENERATION) for t in only_generation}) == 1


# --- render_template --------------------------------------------------------------------

SERVICE_VALUES: JSON = {
    "name": "svc",
    "namespace": "llm",
    "labels": {"a": "1"},
    "owner": {"kind": "InferenceCluster", "name": "x"},
    "selector": {"a": "1"},
    "port": 30000,
}


@pytest.mark.parametrize(
    "name", ["plain", "quote\"and'apostrophe", "colon: value", "#hash", "- dash", "{brace}", "yes"]
)
def test_values_cannot_break_the_yaml(name: str) -> None:
    obj = render_template("replica_service.yaml.j2", **{**SERVICE_VALUES, "name": name})
    assert obj["metadata"]["name"] == name
    assert obj["spec"]["ports"][0]["port"] == 30000  # numbers stay numbers


def test_a_missing_value_is_an_error_not_an_empty_field() -> None:
    values = dict(SERVICE_VALUES)
    del values["selector"]
    # tojson meets jinja2's StrictUndefined: a TypeError (no field silently left empty).
    with pytest.raises((jinja2.UndefinedError, TypeError), match="Undefined"):
        render_template("replica_service.yaml.j2", **values)
