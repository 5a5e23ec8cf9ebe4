"""Benchmark (issue 28 item 6): node failure -> replica serving on the spare group, and the
quarantine decision time.

Not a pytest test (numbers, never verdicts). Needs the dev cluster (started if it is not
running; shared: everything happens in a namespace of our own, deleted at the end). Run
from the repository root:

    .venv/bin/python -m tests.bench.bench_failover [--failovers 6]

One InferenceCluster (the sample, one replica) has two node groups, A and B, and
``restartPolicy.quarantine.maxNodeFailures: 0`` (the first failure quarantines). Each
round makes the serving group's rank-1 node NotReady (``FaultInjector.node_not_ready``:
kwok's node-not-ready stage), times from a watch (``common.Timeline``) until the replica
serves on the other group, then brings the node back and lifts its quarantine (the
annotation) so the next round can move the replica back. From t_fault (the labelling
command returned; kwok then flips the node's Ready condition):

* the rank StatefulSets on the spare group, stopped at the next generation: the
  operator saw the node, chose the spare and began the move;
* the node in ``status.quarantine``: the quarantine decision;
* the old generation's pods gone, and the StatefulSets started on the spare: the end of
  the operator's share;
* every rank Running and Ready at the new generation: the simulator's start on top (the
  row "simulator start" is that step alone), then the InferenceCluster Ready.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import yaml

from sparkllm_dev.devcluster import DevCluster, FaultInjector, wait_until
from sparkllm_dev.errors import DevClusterError
from tests.bench.bench_faults import cluster_ready, old_pods_gone
from tests.bench.bench_reconcile import GROUPS, NAME, reconcile_pass_seconds, sample, user_keys
from tests.bench.common import (
    RanksServing,
    State,
    Timeline,
    generation_of,
    machine_facts,
    operator_stack,
    print_table,
    spread_cells,
)

STEP_TIMEOUT = 180.0  # a start on two cores shared by many: 30-50 s, seen slower
KEYS = {"group-0": "a", "group-1": "b"}  # nodeGroups [A, B]


def on_group(replicas: int, generation: int, key: str) -> Callable[[State], bool]:
    """Every rank StatefulSet on group ``key`` at ``replicas``, pod template ``generation``."""

    def check(state: State) -> bool:
        found = [state.get(("statefulsets", f"{NAME}-r0-rank{k}")) for k in range(3)]
        return all(
            s is not None
            and s["metadata"]["labels"].get("sparkllm.io/node-group") == key
            and s["spec"].get("replicas") == replicas
            and generation_of(s["spec"]["template"]) == str(generation)
            for s in found
        )

    return check


def quarantined(node: str) -> Callable[[State], bool]:
    def check(state: State) -> bool:
        status = (state.get(("inferenceclusters", NAME)) or {}).get("status") or {}
        return node in [q.get("node") for q in status.get("quarantine") or []]

    return check


def no_quarantine(state: State) -> bool:
    status = (state.get(("inferenceclusters", NAME)) or {}).get("status") or {}
    return not status.get("quarantine")


@dataclass
class Round:
    """One failover, seconds from t_fault."""

    node: str
    moved: float  # StatefulSets on the spare, stopped at the next generation
    quarantined: float
    old_gone: float
    started: float  # the operator's share ends: StatefulSets at 1 on the spare
    serving: float
    ready: float


def node_ready(cluster: DevCluster, node: str) -> bool:
    conditions = cluster.kubectl_json("get", "node", node)["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def fail_once(
    cluster: DevCluster,
    timeline: Timeline,
    faults: FaultInjector,
    *,
    namespace: str,
    here: str,
    spare: str,
    generation: int,
) -> Round:
    node = GROUPS[KEYS[here]][1]
    launched = timeline.now()
    faults.node_not_ready(node)
    fault = timeline.now()

    def at(predicate: Callable[[State], bool], what: str) -> float:
        moment, _ = timeline.wait_for(predicate, since=launched, timeout=STEP_TIMEOUT, what=what)
        return moment - fault

    new = generation + 1
    result = Round(
        node=node,
        moved=at(on_group(0, new, spare), "StatefulSets on the spare, stopped"),
        quarantined=at(quarantined(node), f"{node} in status.quarantine"),
        old_gone=at(old_pods_gone(generation), "old generation's pods gone"),
        started=at(on_group(1, new, spare), "StatefulSets started on the spare"),
        serving=at(RanksServing(NAME, generation=new), f"ranks serving at generation {new}"),
        ready=at(cluster_ready(new), f"InferenceCluster Ready at generation {new}"),
    )
    faults.node_ready(node)
    wait_until(lambda: node_ready(cluster, node), timeout=60, what=f"{node} Ready")
    since = timeline.now()
    cluster.kubectl("annotate", "icl", NAME, "-n", namespace, f"sparkllm.io/lift-quarantine={node}")
    timeline.wait_for(no_quarantine, since=since, timeout=STEP_TIMEOUT, what="quarantine lifted")
    return result


def run(cluster: DevCluster, *, failovers: int) -> list[Round]:
    """Measure; print the table; return the rounds (for the summary)."""
    rounds: list[Round] = []
    stopped_early = ""
    with (
        operator_stack(cluster, name="failover") as stack,
        Timeline(cluster, namespace=stack.namespace) as timeline,
    ):
        namespace = stack.namespace
        user_keys(cluster, namespace)
        doc = sample()
        doc["spec"]["placement"] = {"nodeGroups": [GROUPS["a"], GROUPS["b"]]}
        doc["spec"]["restartPolicy"] = {"quarantine": {"maxNodeFailures": 0}}
        since = timeline.now()
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(doc))
        timeline.wait_for(cluster_ready(1), since=since, timeout=STEP_TIMEOUT, what="Ready")
        faults = FaultInjector(cluster)
        here, spare, generation = "group-0", "group-1", 1
        try:
            for _ in range(failovers):
                rounds.append(
                    fail_once(
                        cluster, timeline, faults, namespace=namespace, here=here, spare=spare,
                        generation=generation,
                    )
                )  # fmt: skip
                here, spare, generation = spare, here, generation + 1
        except DevClusterError as exc:
            stopped_early = f"{exc} (see the logs)"
        finally:
            faults.restore_nodes()
    report(rounds, passes=reconcile_pass_seconds(stack.logs / "operator.log"))
    if stopped_early:
        print(f"STOPPED EARLY: {stopped_early}; logs: {stack.logs}")
    return rounds


def report(rounds: list[Round], *, passes: list[float]) -> None:
    rows = [
        ["node NotReady -> StatefulSets on the spare (stopped)", [r.moved for r in rounds]],
        ["node NotReady -> quarantined (status.quarantine)", [r.quarantined for r in rounds]],
        ["-> old generation's pods gone", [r.old_gone for r in rounds]],
        ["-> StatefulSets started on the spare (operator's share)", [r.started for r in rounds]],
        [
            "simulator start (started -> ranks Running+Ready)",
            [r.serving - r.started for r in rounds],
        ],
        ["node NotReady -> ranks serving on the spare", [r.serving for r in rounds]],
        ["node NotReady -> InferenceCluster Ready", [r.ready for r in rounds]],
        ["one reconcile pass (operator log)", passes],
    ]
    print_table(
        "failover: node failure -> replica serving on the spare group",
        ["from t_fault to ...", "n", "p50 ms", "p99 ms", "max ms"],
        [[label, *spread_cells(samples)] for label, samples in rows],
        [
            "basis: arrival times of watch events, from the node-not-ready label's kubectl",
            "returning (kwok's stage then sets Ready=False; that latency is in every row).",
            "The operator's share ends when the StatefulSets start on the spare; the",
            "simulator's start (the dev cluster's engine harness, its default start model)",
            "comes on top. maxNodeFailures 0: the first failure quarantines the node; each",
            "round brings it back and lifts the quarantine (annotation) before the next.",
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--failovers", type=int, default=6, help="rounds (A->B, B->A, ...)")
    args = parser.parse_args()
    cluster = DevCluster()
    cluster.up(log=True)
    for key, value in machine_facts(cluster).items():
        print(f"{key}: {value}")
    run(cluster, failovers=args.failovers)


if __name__ == "__main__":
    main()
