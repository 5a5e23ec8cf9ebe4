"""LaunchChecked, ImagesConsistent and status.engines from the rank pods (decide/versions.py).

The launch-check init container's termination message (the image's own SGLang on the
rank's exact command line) and the pods' imageIDs, hand-built; the whole ``decide`` pass
runs on them: a refusal stops the replicas and stays reported, a digest split restarts
the replica pinned to one digest, and the pin is rendered until the spec's image changes.
"""

from __future__ import annotations

import json
from typing import Any

from sparkllm.reconcile.decide import decide
from sparkllm.reconcile.decide.versions import RankEngine, pin_for
from sparkllm.sglang_contract.launch_check import LAUNCH_CHECK_CONTAINER, LaunchResult
from tests.unit.reconcile_fixtures import (
    GATEWAY_IMAGE,
    cluster,
    gateway_objects,
    matching,
    observation,
    rank_pods,
    replica_objects,
    settled,
    status_of,
    with_status,
)

JSON = dict[str, Any]
IMAGE = "nvcr.io/nvidia/sglang:26.07-py3"
A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def _reported(pod: JSON, *, digest: str = A, version: str = "0.5.23", **result: Any) -> JSON:
    """``pod`` after its launch check ran in an image of ``digest``."""
    body = {"ok": True, "version": version, "checked": "server_args", **result}
    code = 0 if body["ok"] else 1
    term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
            "message": json.dumps(body)}  # fmt: skip
    image_id = f"{IMAGE.rsplit(':', 1)[0]}@{digest}"
    status = pod["status"]
    status["initContainerStatuses"] = [
        *status.get("initContainerStatuses", []),
        {"name": LAUNCH_CHECK_CONTAINER, "imageID": image_id, "state": {"terminated": term}},
    ]
    status["containerStatuses"][0]["imageID"] = image_id
    return pod


def _world(replicas: int = 1, builds: dict[tuple[int, int], JSON] | None = None) -> Any:
    obj = cluster(replicas=replicas)
    objects, pods = gateway_objects(obj), []
    for index in range(replicas):
        replica = replica_objects(obj, index)
        objects += replica
        for rank, pod in enumerate(rank_pods(replica)):
            pods.append(_reported(pod, **(builds or {}).get((index, rank), {})))
    return obj, objects, pods


def _condition(status: JSON, kind: str) -> JSON:
    return next(c for c in status["conditions"] if c["type"] == kind)


def _engine_images(plan: Any, replica: int) -> set[str]:
    images = set()
    for o in plan.apply:
        if o["kind"] != "StatefulSet" or o["metadata"]["labels"]["sparkllm.io/replica"] != str(
            replica
        ):
            continue
        pod = o["spec"]["template"]["spec"]
        images |= {c["image"] for c in pod["containers"]}
        images |= {c["image"] for c in pod["initContainers"] if c["name"] == LAUNCH_CHECK_CONTAINER}
    return images


def test_every_rank_accepted_on_one_build() -> None:
    obj, objects, pods = _world(replicas=2)
    obs = settled(observation(obj, objects=objects, pods=pods, server_info=matching(0, 1)))
    status = obs.obj["status"]
    launch = _condition(status, "LaunchChecked")
    assert (launch["status"], launch["reason"]) == ("True", "LaunchAccepted")
    assert launch["message"] == "6 ranks: SGLang 0.5.23 accepts each rank's command line"
    images = _condition(status, "ImagesConsistent")
    assert (images["status"], images["reason"]) == ("True", "ImagesMatch")
    assert images["message"] == f"2 replica(s), every rank on {A[:19]} (SGLang 0.5.23)"
    assert [e["replica"] for e in status["engines"]] == [0, 1]
    assert status["engines"][0]["ranks"][1] == {
        "rank": 1, "node": "a1", "imageID": f"nvcr.io/nvidia/sglang@{A}", "sglangVersion": "0.5.23",
    }  # fmt: skip
    assert status["phase"] == "Ready"


def test_a_refused_flag_stops_the_replicas_and_stays_reported() -> None:
    refused = {
        "ok": False, "version": "0.5.22", "flag": "--enable-foo", "value": "1",
        "error": "unrecognized arguments: --enable-foo 1",
    }  # fmt: skip
    old = {"version": "0.5.22"}
    obj, objects, pods = _world(builds={(0, 0): old, (0, 1): refused, (0, 2): old})
    obs = observation(obj, objects=objects, pods=pods)
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    status = status_of(obs, plan)
    launch = _condition(status, "LaunchChecked")
    assert (launch["status"], launch["reason"]) == ("False", "LaunchRefused")
    assert launch["message"].startswith(
        f"replica 0 rank 1 on a1: SGLang 0.5.22 in {IMAGE} refuses --enable-foo 1: "
        "unrecognized arguments: --enable-foo 1; the replicas are stopped"
    )
    assert _condition(status, "Ready")["status"] == "False"
    stopped = [o["spec"]["replicas"] for o in plan.apply if o["kind"] == "StatefulSet"]
    assert stopped == [0, 0, 0]
    assert any(e.reason == "LaunchRefused" for e in plan.events)
    # The pods go with the stopped StatefulSets: the verdict stays until the spec changes.
    gone = with_status(observation(obj, objects=objects, pods=[]), status)
    again = status_of(gone, decide(gone, gateway_image=GATEWAY_IMAGE))
    assert _condition(again, "LaunchChecked")["message"] == launch["message"]


def test_a_digest_split_restarts_the_replica_pinned_to_the_majority() -> None:
    obj, objects, pods = _world(builds={(0, 0): {"digest": B, "version": "0.5.24"}})
    obs = observation(obj, objects=objects, pods=pods, server_info=matching(0))
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    status = status_of(obs, plan)
    images = _condition(status, "ImagesConsistent")
    assert (images["status"], images["reason"]) == ("False", "DigestSplit")
    assert images["message"] == (
        f"replica 0: rank 0 on a0 {B[:19]} (SGLang 0.5.24), rank 1 on a1 {A[:19]} (SGLang "
        f"0.5.23), rank 2 on a2 {A[:19]} (SGLang 0.5.23); restarting every rank on {IMAGE}@{A} "
        "(the majority's digest, ties: rank 0's)"
    )
    assert status["engines"][0]["pinnedImage"] == f"{IMAGE}@{A}"
    assert _engine_images(plan, 0) == {f"{IMAGE}@{A}"}  # engine and launch check, every rank
    # The rendered template changed: the replica restarts as a whole (a rolling update:
    # out of routing first, restarted once its requests finish).
    assert status["replicaStatuses"][0]["message"].startswith(
        "draining before gang restart (rank template changed"
    )
    assert [p.name for p in plan.pod_patches] == ["llm-r0-rank0-0"]
    # After the restart every rank pulled the pinned digest: consistent, the pin kept.
    pinned = cluster(replicas=1, status=status)
    restarted = [
        _reported(p) for p in rank_pods([o for o in plan.apply if o["kind"] == "StatefulSet"])
    ]
    for pod in restarted:  # as the kubelet shows a reference pinned by digest
        for entry in pod["status"]["initContainerStatuses"] + pod["status"]["containerStatuses"]:
            entry["imageID"] = f"{IMAGE}@{A}"
    later = observation(pinned, objects=objects, pods=restarted)
    after = status_of(later, decide(later, gateway_image=GATEWAY_IMAGE))
    consistent = _condition(after, "ImagesConsistent")
    assert (consistent["status"], consistent["reason"]) == ("True", "ImagesMatch")
    assert consistent["message"].endswith(f"; replica 0 pinned to {IMAGE}@{A}")
    # A new spec.engine.image drops the pin.
    moved = cluster(replicas=1, status=after, engine={"image": "lmsysorg/sglang:v0.5.24"})
    plan = decide(observation(moved, objects=objects, pods=restarted), gateway_image=GATEWAY_IMAGE)
    assert _engine_images(plan, 0) == {"lmsysorg/sglang:v0.5.24"}


def test_replicas_on_different_builds_are_reported_not_restarted() -> None:
    obj, objects, pods = _world(
        replicas=2, builds={(1, r): {"digest": B, "version": "0.5.24"} for r in range(3)}
    )
    obs = settled(observation(obj, objects=objects, pods=pods, server_info=matching(0, 1)))
    plan = decide(obs, gateway_image=GATEWAY_IMAGE)
    images = _condition(status_of(obs, plan), "ImagesConsistent")
    assert (images["status"], images["reason"]) == ("False", "ReplicasDiffer")
    assert images["message"] == (
        f"replicas run different builds: replica 0 on {A[:19]} (SGLang 0.5.23); replica 1 on "
        f"{B[:19]} (SGLang 0.5.24); pin spec.engine.image to one digest (image@sha256:...) "
        "to choose"
    )
    assert not plan.gang_restarts


def _rank(rank: int, digest: str | None) -> RankEngine:
    image_id = None if digest is None else f"r@{digest}"
    return RankEngine(replica=0, rank=rank, node=f"n{rank}", image_id=image_id,
                      launch=LaunchResult(ok=True))  # fmt: skip


def test_the_pin_is_the_majority_then_rank_0() -> None:
    assert pin_for("r:1", [_rank(0, A), _rank(1, A), _rank(2, A)]) is None
    assert pin_for("r:1", [_rank(0, B), _rank(1, A), _rank(2, A)]) == f"r:1@{A}"
    assert pin_for("r:1", [_rank(0, B), _rank(1, A)]) == f"r:1@{B}"  # a tie: rank 0's
    assert pin_for("r:1", [_rank(0, None), _rank(1, A), _rank(2, B)]) == f"r:1@{A}"
    assert pin_for(f"r@{A}", [_rank(0, B), _rank(1, A)]) is None  # pinned by the user


def test_a_refusal_is_not_reworded_while_the_stopped_ranks_terminate() -> None:
    """Every rank refused; a later pass sees only ranks 1 and 2 (rank 0's pod already
    gone): the verdict keeps its first words, not 'rank 1 ... (and 1 more ranks)'."""
    refused = {
        "ok": False, "version": "0.5.22", "flag": "--enable-foo", "value": "1",
        "error": "unrecognized arguments: --enable-foo 1",
    }  # fmt: skip
    builds = {(0, rank): refused for rank in range(3)}
    obj, objects, pods = _world(builds=builds)
    obs = observation(obj, objects=objects, pods=pods)
    status = status_of(obs, decide(obs, gateway_image=GATEWAY_IMAGE))
    first = _condition(status, "LaunchChecked")
    assert first["message"].startswith("replica 0 rank 0 on a0: ")
    assert "(and 2 more ranks)" in first["message"]
    fewer = with_status(observation(obj, objects=objects, pods=pods[1:]), status)
    again = status_of(fewer, decide(fewer, gateway_image=GATEWAY_IMAGE))
    assert _condition(again, "LaunchChecked") == first
    # A new generation (the spec changed) is judged anew.
    changed = with_status(observation(obj, objects=objects, pods=pods[1:]), status)
    changed.obj["metadata"]["generation"] = 2
    fresh = status_of(changed, decide(changed, gateway_image=GATEWAY_IMAGE))
    assert _condition(fresh, "LaunchChecked")["message"].startswith("replica 0 rank 1 on a1: ")
