"""The upgrade journey (issue 32) on the dev cluster: an operator upgrade restarts no engine
by itself, and the CRD follows the chart.

One module, one operator process started once per version (the suite's time budget):

1. the current operator makes two Ready objects: ``one`` (one replica, three ranks on group
   a) and ``two`` (two one-rank replicas on spark-b0, spark-b1);
2. it is replaced by a build that differs in its image (``SPARKLLM_IMAGE``: another tag,
   i.e. another operator version) and so in its rendering (the init containers run that
   image), started against a CRD that lacks a field it knows: no engine restarts (restart
   counts and pod uids per replica before/after), ``UpdatePending`` names the change, the
   rank StatefulSets carry the new rendering, and the CRD's age is said (log, Event);
3. ``sparkllm.io/restart=true`` on ``one`` restarts nothing, is removed, and a Warning
   Event RestartAnnotationRefused says only ``now`` restarts; ``sparkllm.io/restart=now``
   then applies the update, drained, with the cause
   "operator update 0.1.0 -> 0.2.0 (requested)";
4. a user's spec change on ``two`` still rolls it replica by replica;
5. ``helm upgrade`` from the previous commit's chart (CRD in crds/) to this one with a new
   CRD field keeps that field in an object; ``helm rollback`` and ``helm uninstall`` keep
   the CRD and the field.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm.keys import ANNOTATION_OPERATOR_VERSION, ANNOTATION_RESTART
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.testing import ROOT, OperatorProcess
from tests.unit.test_chart_render import CHART, require_binary, run_helm

pytestmark = pytest.mark.cluster
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
CRD_FILE = ROOT / "crds" / "sparkllm.io_inferenceclusters.yaml"
CRD_NAME = "inferenceclusters.sparkllm.io"
NEW_IMAGE = "ghcr.io/sparkllm/sparkllm:0.2.0"  # "the next operator version"
RESYNC = ("--resync-seconds", "2")
Obj = dict[str, Any]
Counts = dict[str, dict[int, tuple[int, frozenset[str]]]]  # name -> replica -> restarts, uids


def say(text: str) -> None:
    print(f"[upgrade] {text}")


def _doc(name: str, *, replicas: int, groups: list[list[str]]) -> Obj:
    doc: Obj = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"] = {"name": name}
    doc["spec"]["replicas"] = replicas
    doc["spec"]["placement"] = {"nodeGroups": groups}
    if len(groups[0]) == 1:  # one rank per replica: no layer partition, fits no memory plan
        doc["spec"]["engine"]["pipelineParallel"] = 1
        del doc["spec"]["engine"]["layerPartition"]
        del doc["spec"]["model"]["weightsGB"]
    return doc


def _get(cluster: DevCluster, ns: str, name: str) -> Obj:
    obj: Obj = cluster.kubectl_json("get", "icl", name, "-n", ns)
    return obj


def _condition(obj: Obj, kind: str) -> Obj | None:
    return next(
        (c for c in obj.get("status", {}).get("conditions") or [] if c["type"] == kind), None
    )


def _ready(cluster: DevCluster, ns: str, name: str) -> Obj | None:
    obj = _get(cluster, ns, name)
    cond = _condition(obj, "Ready")
    current = obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"]
    return obj if cond and cond["status"] == "True" and current else None


def _pods(cluster: DevCluster, ns: str, name: str) -> list[Obj]:
    selector = f"sparkllm.io/cluster={name},app.kubernetes.io/component=engine"
    items: list[Obj] = cluster.kubectl_json("get", "pods", "-n", ns, "-l", selector)["items"]
    return items


def _replicas(cluster: DevCluster, ns: str, name: str) -> dict[int, tuple[int, frozenset[str]]]:
    """Replica -> (restarts in status, uids of its rank pods)."""
    statuses = _get(cluster, ns, name)["status"]["replicaStatuses"]
    uids: dict[int, set[str]] = {}
    for pod in _pods(cluster, ns, name):
        replica = int(pod["metadata"]["labels"]["sparkllm.io/replica"])
        uids.setdefault(replica, set()).add(pod["metadata"]["uid"])
    return {
        int(s["index"]): (int(s["restarts"]), frozenset(uids.get(int(s["index"]), ())))
        for s in statuses
    }


def _templates(cluster: DevCluster, ns: str, name: str) -> list[Obj]:
    selector = f"sparkllm.io/cluster={name}"
    items = cluster.kubectl_json("get", "sts", "-n", ns, "-l", selector)["items"]
    return [s["spec"]["template"] for s in items]


def _events(cluster: DevCluster, ns: str, reason: str) -> list[Obj]:
    items: list[Obj] = cluster.kubectl_json(
        "get", "events", "-n", ns, "--field-selector", f"reason={reason}"
    )["items"]
    return items


def _replace_crd(cluster: DevCluster, edit: Callable[[Obj], Obj]) -> None:
    """Replace the installed CRD by ``edit`` of crds/'s (keeping its resourceVersion)."""
    live = cluster.kubectl_json("get", "crd", CRD_NAME)
    crd = edit(yaml.safe_load(CRD_FILE.read_text()))
    crd["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    cluster.kubectl("replace", "-f", "-", input=yaml.safe_dump(crd))
    cluster.wait_established(CRD_NAME)


def _without_exposure(crd: Obj) -> Obj:
    """The CRD of an older release: its spec lacks ``exposure``."""
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    del spec["properties"]["exposure"]
    crd["metadata"]["annotations"]["sparkllm.io/crd-version"] = "0.0.9"
    return crd


def _passes(operator: OperatorProcess, ns: str, name: str) -> int:
    return operator.log().count(f"reconciled {ns}/{name} ")


def _no_restart_while_passes_run(
    operator: OperatorProcess, ns: str, names: tuple[str, ...], count: int = 3
) -> None:
    """Wait for ``count`` more reconcile passes of each object (the resync's), no sleep."""
    want = {n: _passes(operator, ns, n) + count for n in names}
    wait_until(
        lambda: all(_passes(operator, ns, n) >= want[n] for n in names),
        timeout=60,
        what=f"{count} more passes of {', '.join(names)}",
    )


def test_upgrade_journey(
    devcluster: DevCluster,
    namespace: str,
    operator: OperatorProcess,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    ns = namespace
    devcluster.kubectl(
        "create", "secret", "generic", "llm-user-keys", "-n", ns, "--from-literal=alice=k1"
    )
    one = _doc("one", replicas=1, groups=[["spark-a0", "spark-a1", "spark-a2"]])
    two = _doc("two", replicas=2, groups=[["spark-b0"], ["spark-b1"]])
    for doc in (one, two):
        devcluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(doc))
    for name in ("one", "two"):
        wait_until(lambda n=name: _ready(devcluster, ns, n), timeout=120, what=f"{name} Ready")

    before = _operator_upgrade(devcluster, ns, operator, monkeypatch)
    _restart_now(devcluster, ns, before)
    _spec_change_rolls(devcluster, ns, before)
    _helm_journey(devcluster, ns, tmp_path)


def _operator_upgrade(
    devcluster: DevCluster, ns: str, operator: OperatorProcess, monkeypatch: pytest.MonkeyPatch
) -> Counts:
    """Step 2; the restart counts and pod uids per replica before it."""
    before = {name: _replicas(devcluster, ns, name) for name in ("one", "two")}
    for name in ("one", "two"):
        for pod in _pods(devcluster, ns, name):
            assert pod["metadata"]["annotations"][ANNOTATION_OPERATOR_VERSION] == "0.1.0"
    # --- 2. a new operator version, started against an older CRD -------------------------
    operator.stop()
    _replace_crd(devcluster, _without_exposure)
    monkeypatch.setenv("SPARKLLM_IMAGE", NEW_IMAGE)
    operator.start(*RESYNC)

    def pending(name: str) -> Obj | None:
        cond = _condition(_get(devcluster, ns, name), "UpdatePending")
        templates = _templates(devcluster, ns, name)
        rendered = all(
            t["metadata"]["annotations"][ANNOTATION_OPERATOR_VERSION] == "0.2.0"
            and {c["image"] for c in t["spec"]["initContainers"]} >= {NEW_IMAGE}
            for t in templates
        )
        return cond if cond and cond["status"] == "True" and rendered else None

    conds = {
        name: wait_until(lambda n=name: pending(n), timeout=90, what=f"{name} UpdatePending")
        for name in ("one", "two")
    }
    _no_restart_while_passes_run(operator, ns, ("one", "two"))
    after = {name: _replicas(devcluster, ns, name) for name in ("one", "two")}
    for name in ("one", "two"):
        for index, (restarts, uids) in before[name].items():
            now_restarts, now_uids = after[name][index]
            say(
                f"{name} replica {index}: restarts {restarts} -> {now_restarts}, "
                f"rank pods {'unchanged' if now_uids == uids else 'REPLACED'} ({len(uids)})"
            )
            assert (now_restarts, now_uids) == (restarts, uids), f"{name}/{index} restarted"
        assert _ready(devcluster, ns, name) is not None
        say(f"{name} UpdatePending: {conds[name]['message']}")
    assert conds["one"]["message"].startswith(
        "operator update 0.1.0 -> 0.2.0 changes the init containers of replica(s) 0: "
        "no new engine process"
    )
    assert "of replica(s) 0, 1:" in conds["two"]["message"]
    log = operator.log()
    assert "(sparkllm.io/crd-version 0.0.9) is older than this operator" in log
    assert "it lacks spec.exposure;" in log
    told = wait_until(
        lambda: (
            {e["involvedObject"]["name"] for e in _events(devcluster, ns, "CRDOutdated")}
            >= {"one", "two"}
        ),
        timeout=30,
        what="CRDOutdated Events on both objects",
    )
    assert told
    say(f"CRDOutdated: {_events(devcluster, ns, 'CRDOutdated')[0]['message']}")
    devcluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    return before


def _restart_now(devcluster: DevCluster, ns: str, before: Counts) -> None:
    """Step 3."""
    # --- 3a. a value other than "now" restarts nothing and says so -------------------------
    devcluster.kubectl("annotate", "icl", "one", "-n", ns, f"{ANNOTATION_RESTART}=true")

    def refused() -> list[str]:
        annotations = _get(devcluster, ns, "one")["metadata"].get("annotations") or {}
        if ANNOTATION_RESTART in annotations:
            return []
        events = _events(devcluster, ns, "RestartAnnotationRefused")
        return [e["message"] for e in events if e["involvedObject"]["name"] == "one"]

    messages = wait_until(refused, timeout=30, what="restart=true refused and removed")
    say(f"one with restart=true: {messages[0]}")
    assert _replicas(devcluster, ns, "one") == before["one"]  # nothing restarted
    # --- 3. restart=now applies the pending update, drained ------------------------------
    devcluster.kubectl("annotate", "icl", "one", "-n", ns, f"{ANNOTATION_RESTART}=now")

    def restarted() -> Obj | None:
        obj = _ready(devcluster, ns, "one")
        if obj is None or obj["status"]["replicaStatuses"][0]["generation"] != 2:
            return None
        pods = _pods(devcluster, ns, "one")
        labels = [p["metadata"]["labels"]["sparkllm.io/restart-generation"] for p in pods]
        return obj if labels == ["2", "2", "2"] else None

    obj = wait_until(restarted, timeout=120, what="one restarted as generation 2")
    replica = obj["status"]["replicaStatuses"][0]
    say(f"one after restart=now: lastRestart {replica['lastRestart']['reason']!r}")
    assert replica["lastRestart"]["reason"] == "operator update 0.1.0 -> 0.2.0 (requested)"
    assert replica["restarts"] == before["one"][0][0] + 1
    for pod in _pods(devcluster, ns, "one"):
        assert pod["metadata"]["annotations"][ANNOTATION_OPERATOR_VERSION] == "0.2.0"
        assert {c["image"] for c in pod["spec"]["initContainers"]} >= {NEW_IMAGE}
    drained = [e["message"] for e in _events(devcluster, ns, "GangRestart")]
    assert (
        "replica 0: out of routing; restarts once its requests finish "
        "(operator update 0.1.0 -> 0.2.0 (requested))"
    ) in drained
    done = _condition(obj, "UpdatePending")
    assert done is not None
    assert (done["status"], done["reason"]) == ("False", "RankPodsCurrent")


def _spec_change_rolls(devcluster: DevCluster, ns: str, before: Counts) -> None:
    """Step 4."""
    # --- 4. a user's spec change still rolls, one replica at a time ----------------------
    devcluster.kubectl(
        "patch", "icl", "two", "-n", ns, "--type=merge",
        "-p", '{"spec":{"engine":{"memFractionStatic":0.5}}}',
    )  # fmt: skip
    serving: list[int] = []

    def rolled() -> Obj | None:
        obj = _get(devcluster, ns, "two")
        statuses = obj.get("status", {}).get("replicaStatuses") or []
        serving.append(sum(1 for s in statuses if s.get("phase") == "Ready"))
        if _ready(devcluster, ns, "two") is None:
            return None
        return obj if all(s["generation"] == 2 for s in statuses) else None

    obj = wait_until(rolled, timeout=180, interval=0.2, what="two rolled to generation 2")
    for status in obj["status"]["replicaStatuses"]:
        say(f"two replica {status['index']}: lastRestart {status['lastRestart']['reason']!r}")
        assert status["lastRestart"]["reason"] == "spec changed (rolling update)"
        assert status["restarts"] == before["two"][status["index"]][0] + 1
    say(f"two: replicas serving during the roll, least seen {min(serving)} of 2")
    assert min(serving) == 1, "the roll took both replicas down at once"


def _previous_chart(tmp: Path) -> Path:
    """The chart of the last commit that still shipped the CRD in crds/ (Helm never
    upgraded it)."""
    path = "charts/sparkllm/crds/sparkllm.io_inferenceclusters.yaml"
    git = ["git", "-C", str(ROOT)]
    try:
        moved = subprocess.run(
            [*git, "rev-list", "-1", "HEAD", "--", path], capture_output=True, text=True,
            check=True,
        ).stdout.strip()  # fmt: skip
        archive = subprocess.run(
            [*git, "archive", f"{moved}^", "charts/sparkllm"], capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"the previous chart needs the repository's history (git): {exc}")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(tmp / "previous", filter="data")
    return tmp / "previous" / "charts" / "sparkllm"


def _with_new_field(tmp: Path) -> Path:
    """This chart, its CRD with one more spec field (the next release's)."""
    chart = tmp / "next" / "sparkllm"
    shutil.copytree(CHART, chart)
    crd_path = chart / "files" / "crds" / CRD_FILE.name
    crd = yaml.safe_load(crd_path.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["upgradeProbe"] = {"type": "string", "description": "a new field"}
    crd_path.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def _helm_journey(cluster: DevCluster, ns: str, tmp: Path) -> None:
    require_binary("helm")
    release = f"upg-{ns[-5:]}"
    probe_ns = f"{ns}-probe"  # no operator watches it: the object is only stored
    flags = ["--kubeconfig", str(cluster.paths.kubeconfig), "-n", ns]
    values = tmp / "values.yaml"
    values.write_text(yaml.safe_dump({"watchNamespaces": [ns]}))
    cluster.kubectl("create", "namespace", probe_ns)
    probe = _doc("probe", replicas=1, groups=[["spark-a0", "spark-a1", "spark-a2"]])
    probe["spec"]["upgradeProbe"] = "kept"

    def probe_field() -> str | None:
        obj = cluster.kubectl_json("get", "icl", "probe", "-n", probe_ns)
        value = obj["spec"].get("upgradeProbe")
        return None if value is None else str(value)

    def apply_probe() -> None:
        cluster.kubectl(
            "apply", "-n", probe_ns, "--validate=false", "-f", "-", input=yaml.safe_dump(probe)
        )

    try:
        run_helm("install", release, str(_previous_chart(tmp)), "-f", str(values), *flags)
        apply_probe()
        assert probe_field() is None  # the CRD does not know it: pruned, silently
        say("previous chart: spec.upgradeProbe pruned by the API server (CRD without it)")
        upgraded = run_helm(
            "upgrade", release, str(_with_new_field(tmp)), "-f", str(values), *flags,
            "--take-ownership",
        )  # fmt: skip
        assert "has been upgraded" in upgraded.stdout
        cluster.wait_established(CRD_NAME)
        crd = cluster.kubectl_json("get", "crd", CRD_NAME)
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        apply_probe()
        assert probe_field() == "kept"
        say("helm upgrade (this chart, CRD with a new field): spec.upgradeProbe = 'kept'")
        run_helm("rollback", release, "1", *flags)
        assert probe_field() == "kept"
        say("helm rollback to the previous chart: CRD kept, spec.upgradeProbe = 'kept'")
        run_helm("uninstall", release, *flags)
        assert probe_field() == "kept"
        say("helm uninstall: CRD and the object kept, spec.upgradeProbe = 'kept'")
    finally:
        run_helm("uninstall", release, *flags, check=False)
        cluster.kubectl("delete", "namespace", probe_ns, "--wait=false", check=False)
        _replace_crd(cluster, copy.deepcopy)  # the suite's CRD again: crds/, no Helm owner
