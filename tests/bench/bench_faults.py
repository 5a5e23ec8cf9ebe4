"""Benchmark (issue 5): how fast a replica restarts as a whole after a rank fails.

Not a pytest test (benchmarks report numbers, they never pass or fail; the issue's
goals are printed next to the figures, never asserted). Needs the dev cluster (started
if it is not running; shared: everything happens in a namespace of our own, deleted at
the end). Run from the repository root:

    .venv/bin/python -m tests.bench.bench_faults [--injections 20] [--detail]

The real operator runs as a child process and an engine harness runs the simulators,
both for our namespace only. One InferenceCluster (the sample, on a free node group)
takes ``--injections`` container exits (``FaultInjector.fail_container``: kwok writes
what a kubelet shows for an OOMKilled container) and then as many pod deletions
(``FaultInjector.delete_pod``), on rank 0, 1, 2 in turn. For each it times, from a
watch (``common.Timeline``: arrival time of the event, not polling):

* t_fault: the injection command returned; t_seen: the pod first showed the failure
  (the status the operator's ``observe.describe_pod_failure`` reads, or for a deletion
  the deletionTimestamp / the pod gone);
* (a) the first pod of the replica deleted by the restart (deletionTimestamp set or gone;
  for a pod deletion, not the pod we deleted) — goal p99 < 1 s;
* (b) all three ranks Running and Ready again in the new restart generation — goal
  p99 < 3 s; and the InferenceCluster Ready at that generation.

Restart budget: ``maxRestartsPerHour: 60`` and ``backoffSeconds: [1]`` on the one
InferenceCluster. By default every injection is the first restart of a fresh budget
window (before each, ``restartPolicy.maxRestartsPerHour`` flips between 60 and 59: a
spec change resets the window and restarts nothing), so (b) measures the restart
mechanism without the policy's backoff. With ``--shared-window`` all injections share one
window and every restart but the first waits the 1 s backoff after its stop (restart
times are kept to the millisecond); the breakdown table shows where.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sparkllm.reconcile.decide.replica_state import describe_pod_failure
from sparkllm_dev.devcluster import DevCluster, FaultInjector
from sparkllm_dev.errors import DevClusterError
from tests.bench.bench_reconcile import (
    GROUPS,
    NAME,
    pick_group,
    reconcile_pass_seconds,
    sample,
    user_keys,
)
from tests.bench.common import (
    JSON,
    RanksServing,
    State,
    Timeline,
    engine_pods,
    generation_of,
    machine_facts,
    operator_stack,
    percentile,
    print_table,
    spread_cells,
)

KINDS = ("container exit", "pod deletion")
STEP_TIMEOUT = 90.0
GOAL_DELETE, GOAL_RUNNING = 1.0, 3.0


def _pods(state: State) -> list[JSON]:
    return engine_pods(state, cluster=NAME)


def cluster_ready(generation: int) -> Callable[[State], bool]:
    """The InferenceCluster Ready with its replica at ``generation``."""

    def check(state: State) -> bool:
        obj = state.get(("inferenceclusters", NAME)) or {}
        status = obj.get("status") or {}
        replicas = status.get("replicaStatuses") or []
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        return ready and len(replicas) == 1 and replicas[0].get("generation") == generation

    return check


def failure_seen(pod_name: str, uid: str, *, deletion: bool) -> Callable[[State], bool]:
    def check(state: State) -> bool:
        pod = state.get(("pods", pod_name))
        if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
            return True
        return not deletion and describe_pod_failure(pod, 0) is not None

    return check


class FirstDeletion:
    """Predicate: the restart deleted its first pod of the old generation.

    A deletion counts when the pod's StatefulSet is already scaled to 0 (the operator's
    stop), so churn of the StatefulSet controller after a pod deletion (a re-created pod
    that is deleted again at once) does not; nor does the pod we deleted (``spared``).
    Called in event order, so it can tell a pod that vanished between two events.
    """

    def __init__(self, generation: int, *, spared: str | None) -> None:
        self.generation = str(generation)
        self.spared = spared
        self.seen: dict[str, str] = {}  # uid -> its StatefulSet's name

    def __call__(self, state: State) -> bool:
        stopped = {
            name
            for (kind, name), sts in state.items()
            if kind == "statefulsets" and sts["spec"].get("replicas") == 0
        }
        old = {
            p["metadata"]["uid"]: p
            for p in _pods(state)
            if generation_of(p) == self.generation and p["metadata"]["uid"] != self.spared
        }
        for uid in set(self.seen) - set(old):
            if self.seen.pop(uid) in stopped:
                return True
        for uid, pod in old.items():
            owner = pod["metadata"]["name"].rsplit("-", 1)[0]
            self.seen[uid] = owner
            if pod["metadata"].get("deletionTimestamp") and owner in stopped:
                return True
        return False


def statefulsets_at(replicas: int, generation: int) -> Callable[[State], bool]:
    """All three rank StatefulSets at ``replicas`` with pod template ``generation``."""

    def check(state: State) -> bool:
        found = [state.get(("statefulsets", f"{NAME}-r0-rank{k}")) for k in range(3)]
        return all(
            s is not None
            and s["spec"].get("replicas") == replicas
            and generation_of(s["spec"]["template"]) == str(generation)
            for s in found
        )

    return check


def old_pods_gone(generation: int) -> Callable[[State], bool]:
    return lambda state: not any(generation_of(p) == str(generation) for p in _pods(state))


@dataclass
class Injection:
    """One fault and what followed, in seconds from t_fault (``seen``: t_seen - t_fault)."""

    kind: str
    rank: int
    first_injection: bool
    command: float  # the injection command's own run time
    seen: float
    first_deleted: float
    stopped: float  # all rank StatefulSets at replicas 0, next generation
    old_gone: float  # no pod of the old generation left
    started: float  # all rank StatefulSets back at replicas 1
    serving: float  # (b): all ranks Running + Ready, new generation
    cluster_ready: float
    cause: str = ""


def inject_once(
    cluster: DevCluster,
    timeline: Timeline,
    faults: FaultInjector,
    *,
    namespace: str,
    kind: str,
    rank: int,
    generation: int,
    first: bool,
) -> Injection:
    pod_name = f"{NAME}-r0-rank{rank}-0"
    uid = timeline.state()[("pods", pod_name)]["metadata"]["uid"]
    deletion = kind == "pod deletion"
    first_deletion = FirstDeletion(generation, spared=uid if deletion else None)
    launched = timeline.now()
    if deletion:
        faults.delete_pod(namespace=namespace, pod=pod_name)
    else:
        faults.fail_container(namespace=namespace, pod=pod_name, exit_code=137, reason="OOMKilled")
    fault = timeline.now()

    def at(predicate: Callable[[State], bool], what: str) -> float:
        moment, _ = timeline.wait_for(predicate, since=launched, timeout=STEP_TIMEOUT, what=what)
        return moment - fault

    new = generation + 1
    result = Injection(
        kind=kind,
        rank=rank,
        first_injection=first,
        command=fault - launched,
        seen=at(failure_seen(pod_name, uid, deletion=deletion), "the failure in pod status"),
        first_deleted=at(first_deletion, "the first pod of the replica deleted"),
        stopped=at(statefulsets_at(0, new), "rank StatefulSets stopped"),
        old_gone=at(old_pods_gone(generation), "old generation's pods gone"),
        started=at(statefulsets_at(1, new), "rank StatefulSets started"),
        serving=at(RanksServing(NAME, generation=new), f"ranks Running+Ready at generation {new}"),
        cluster_ready=at(cluster_ready(new), f"InferenceCluster Ready at generation {new}"),
    )
    obj = timeline.state()[("inferenceclusters", NAME)]
    replica = ((obj.get("status") or {}).get("replicaStatuses") or [{}])[0]
    result.cause = str((replica.get("lastRestart") or {}).get("reason", "?"))
    return result


@dataclass
class FaultResult:
    injections: list[Injection]
    group: str
    stopped_early: str = ""
    causes: dict[str, int] = field(default_factory=dict)
    passes: list[float] = field(default_factory=list)  # reconcile passes (operator log)
    logs: Path = Path()
    fresh_window: bool = True


def _new_budget_window(
    cluster: DevCluster, timeline: Timeline, namespace: str, *, flip: bool
) -> None:
    """Start a new restart-budget window without restarting anything.

    A spec change resets the replica's restart window (the policy: the first restart in
    a window is immediate); restartPolicy changes no pod template, so nothing restarts.
    """
    limit = 59 if flip else 60
    since = timeline.now()
    patch = json.dumps({"spec": {"restartPolicy": {"maxRestartsPerHour": limit}}})
    cluster.kubectl("patch", "icl", NAME, "-n", namespace, "--type=merge", "-p", patch)

    def observed(state: State) -> bool:
        obj = state.get(("inferenceclusters", NAME)) or {}
        status = obj.get("status") or {}
        spec_limit = ((obj.get("spec") or {}).get("restartPolicy") or {}).get("maxRestartsPerHour")
        return spec_limit == limit and status.get("observedGeneration") == obj.get(
            "metadata", {}
        ).get("generation")

    timeline.wait_for(observed, since=since, timeout=STEP_TIMEOUT, what="new spec observed")


def run(cluster: DevCluster, *, injections: int, fresh_window: bool = True) -> FaultResult:
    """Measure; print the tables; return the numbers (for the summary)."""
    done: list[Injection] = []
    stopped_early = ""
    with (
        operator_stack(cluster, name="faults") as stack,
        Timeline(cluster, namespace=stack.namespace) as timeline,
    ):
        namespace = stack.namespace
        user_keys(cluster, namespace)
        group, _ = pick_group(cluster, namespace, prefer="b")
        doc = sample(GROUPS[group])
        doc["spec"]["restartPolicy"] = {"maxRestartsPerHour": 60, "backoffSeconds": [1]}
        since = timeline.now()
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(doc))
        timeline.wait_for(cluster_ready(1), since=since, timeout=STEP_TIMEOUT, what="Ready")
        timeline.wait_for(
            RanksServing(NAME, generation=1), since=since, timeout=STEP_TIMEOUT, what="ranks"
        )
        faults = FaultInjector(cluster)
        generation = 1
        try:
            for kind in KINDS:
                for index in range(injections):
                    if fresh_window and (generation > 1):
                        _new_budget_window(cluster, timeline, namespace, flip=generation % 2 == 0)
                    done.append(
                        inject_once(
                            cluster, timeline, faults, namespace=namespace, kind=kind,
                            rank=index % 3, generation=generation, first=generation == 1,
                        )
                    )  # fmt: skip
                    generation += 1
        except DevClusterError as exc:  # report what was measured, and why it stopped
            stopped_early = f"{exc} (see the logs)"
    passes = reconcile_pass_seconds(stack.logs / "operator.log")
    causes: dict[str, int] = {}
    for item in done:
        cause = re.sub(r"rank \d", "rank k", item.cause)
        causes[cause] = causes.get(cause, 0) + 1
    result = FaultResult(
        injections=done,
        group=group,
        stopped_early=stopped_early,
        causes=causes,
        passes=passes,
        logs=stack.logs,
        fresh_window=fresh_window,
    )
    report(result)
    return result


def _goal(samples: list[float], goal: float) -> str:
    if not samples:
        return f"< {goal:.0f} s"
    verdict = "met" if percentile(samples, 0.99) < goal else "NOT met"
    return f"< {goal:.0f} s ({verdict})"


def report(result: FaultResult) -> None:
    rows = []
    for kind in KINDS:
        items = [i for i in result.injections if i.kind == kind]
        measures: list[tuple[str, list[float], float | None]] = [
            ("failure visible in pod status", [i.seen for i in items], None),
            ("(a) first pod deleted", [i.first_deleted for i in items], GOAL_DELETE),
            ("(a) same, from t_seen", [i.first_deleted - i.seen for i in items], GOAL_DELETE),
            ("(b) all ranks Running+Ready, new gen", [i.serving for i in items], GOAL_RUNNING),
            ("(b) same, from t_seen", [i.serving - i.seen for i in items], GOAL_RUNNING),
            ("InferenceCluster Ready, new gen", [i.cluster_ready for i in items], None),
        ]
        for label, samples, goal in measures:
            verdict = "" if goal is None else "p99 " + _goal(samples, goal)
            rows.append([kind, label, *spread_cells(samples), verdict])
    firsts = [i for i in result.injections if i.first_injection]
    done = result.injections
    early = sum(1 for i in done if i.cluster_ready < i.serving)
    notes = [
        "basis: arrival times of watch events; from t_fault = the injection command returned",
        "(kubectl annotate + label for a container exit, kubectl delete for a pod), unless",
        "'from t_seen' (the first event showing the failure). Goals are the issue's, printed,",
        "not asserted. p99 is nearest-rank: below 100 samples it is the slowest one. A negative",
        "'failure visible' means the watch saw it before the kubectl process had exited.",
        "Restart budget: maxRestartsPerHour 60, backoffSeconds [1]; "
        + (
            "each injection starts a fresh budget window (no backoff in (b))."
            if result.fresh_window
            else "one window for all injections: every restart but the first waits 1 s."
        ),
    ]
    if firsts:
        notes.append(
            f"the first injection (no backoff): (b) = {firsts[0].serving * 1000:.0f} ms "
            f"({firsts[0].kind}, rank {firsts[0].rank})."
        )
    notes += [
        f"InferenceCluster Ready before rank 0's probe passed: {early} of {len(done)} (kwok",
        "marks a new pod Ready; the harness then sets rank 0 unready until /health answers;",
        "the operator may say Ready in between: a dev-cluster artefact, kubelets start unready).",
    ]
    notes.append(f"logs of this run: {result.logs}")
    notes.append(f"node group {result.group}; restart causes in status (lastRestart.reason):")
    notes += [f"  {count} x {cause}" for cause, count in sorted(result.causes.items())]
    if result.stopped_early:
        notes.append(f"STOPPED EARLY: {result.stopped_early}")
    print_table(
        "faults: gang restart after a rank fails",
        ["fault", "from t_fault to ...", "n", "p50 ms", "p99 ms", "max ms", "goal"],
        rows,
        notes,
    )
    breakdown = []
    for kind in KINDS:
        items = [i for i in result.injections if i.kind == kind]
        steps = [
            ("fault -> seen", [i.seen for i in items]),
            ("seen -> StatefulSets at 0", [i.stopped - i.seen for i in items]),
            ("-> old pods gone", [i.old_gone - i.stopped for i in items]),
            ("-> StatefulSets at 1 (backoff)", [i.started - i.old_gone for i in items]),
            ("-> ranks Running+Ready", [i.serving - i.started for i in items]),
            ("-> ICL Ready", [i.cluster_ready - i.serving for i in items]),
        ]
        breakdown += [[kind, label, *spread_cells(samples)] for label, samples in steps]
    breakdown.append(["(both)", "one reconcile pass (operator log)", *spread_cells(result.passes)])
    print_table(
        "faults: where the restart time goes (consecutive steps)",
        ["fault", "step", "n", "p50 ms", "p99 ms", "max ms"],
        breakdown,
        ["'-> ranks Running+Ready' includes the simulators' start and rank 0's probe (0.5 s)."],
    )


def print_detail(result: FaultResult) -> None:
    """One row per injection (ms from t_fault): where a slow restart spent its time."""
    steps = ("seen", "first_deleted", "stopped", "old_gone", "started", "serving")
    rows = [
        [i.kind, str(i.rank), *(f"{getattr(i, step) * 1000:.0f}" for step in steps)]
        for i in result.injections
    ]
    print_table("faults: every injection, ms from t_fault", ["fault", "rank", *steps], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--injections", type=int, default=20, help="per fault kind")
    parser.add_argument("--detail", action="store_true", help="also one row per injection")
    parser.add_argument(
        "--shared-window",
        action="store_true",
        help="keep one restart-budget window for all injections (each waits the 1 s backoff)",
    )
    args = parser.parse_args()
    cluster = DevCluster()
    cluster.up(log=True)
    for key, value in machine_facts(cluster).items():
        print(f"{key}: {value}")
    result = run(cluster, injections=args.injections, fresh_window=not args.shared_window)
    if args.detail:
        print_detail(result)


if __name__ == "__main__":
    main()
