"""Proof of service in status: capacity plan, config really applied, model check pending.

The Ready cluster here also runs with a user's engine key (``spec.engine.apiKeySecretRef``)
that starts with "-": rank 0's command line carries no key (issue 25), its launcher adds
``--api-key=<key>`` (one word) from the env inside the process, and the simulator, which
runs that same step, must enforce exactly that key, which ConfigApplied proves too, since
the operator reads ``/get_server_info`` with the key from the Secret. Before that, the
same object naming another app's Secret (not labelled for the use) is InvalidSpec.
"""

from __future__ import annotations

import secrets
from typing import Any

import httpx
import pytest

from sparkllm.keys import SECRET_USE_LABEL
from sparkllm_dev.devcluster import DevCluster, wait_until
from sparkllm_dev.testing import OperatorProcess
from tests.integration.test_reconcile import apply, condition, icl, ready, sample, user_keys

pytestmark = pytest.mark.cluster
GROUP_A = ["spark-a0", "spark-a1", "spark-a2"]
ENGINE_KEY_SECRET = "user-engine-key"
OTHER_APP_SECRET = "billing-db"


def _invalid_spec(cluster: DevCluster, namespace: str) -> dict[str, Any] | None:
    ready_condition = condition(icl(cluster, namespace), "Ready")
    if ready_condition is None or ready_condition.get("reason") != "InvalidSpec":
        return None
    return ready_condition


def settled(cluster: DevCluster, namespace: str, kind: str) -> dict[str, Any] | None:
    obj = icl(cluster, namespace)
    cond = condition(obj, kind)
    return obj if cond is not None and cond["status"] != "Unknown" else None


def test_ready_cluster_proves_capacity_and_config(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess
) -> None:
    user_keys(devcluster, namespace)
    engine_key = "-" + secrets.token_urlsafe(24)  # argparse would take it for an option
    for name, value in ((ENGINE_KEY_SECRET, engine_key), (OTHER_APP_SECRET, "db-password")):
        devcluster.kubectl(
            "create", "secret", "generic", name, "-n", namespace, f"--from-literal=token={value}"
        )  # fmt: skip
    devcluster.kubectl(
        "label", "secret", ENGINE_KEY_SECRET, "-n", namespace, f"{SECRET_USE_LABEL}=engine-api-key"
    )
    doc = sample(GROUP_A)
    # Another app's Secret, not marked for this use: refused before its value is read.
    doc["spec"]["engine"]["apiKeySecretRef"] = {"name": OTHER_APP_SECRET, "key": "token"}
    apply(devcluster, namespace, doc)
    refused = wait_until(
        lambda: _invalid_spec(devcluster, namespace), timeout=60, what="Ready=False InvalidSpec"
    )
    print(f"[proofs] another app's Secret: {refused['message']}")
    assert refused["message"].startswith(
        f"spec.engine.apiKeySecretRef: Secret {OTHER_APP_SECRET} is not marked"
    )
    assert icl(devcluster, namespace)["status"]["phase"] == "Failed"
    doc["spec"]["engine"]["apiKeySecretRef"] = {"name": ENGINE_KEY_SECRET, "key": "token"}
    apply(devcluster, namespace, doc)
    ready_obj = wait_until(lambda: ready(devcluster, namespace), timeout=90, what="Ready")
    events = devcluster.kubectl_json(
        "get", "events", "-n", namespace, "--field-selector", "reason=InvalidSpec,type=Warning"
    )["items"]
    assert sum(e.get("count", 1) for e in events) == 1  # one Warning for the refusal
    selector = "sparkllm.io/rank=0,app.kubernetes.io/component=engine"
    rank0 = devcluster.kubectl_json("get", "pods", "-n", namespace, "-l", selector)["items"]
    assert len(rank0) == 1
    container = rank0[0]["spec"]["containers"][0]
    assert not [arg for arg in container["args"] if "api-key" in arg]  # on no command line
    key_env = next(e for e in container["env"] if e["name"] == "SPARKLLM_ENGINE_API_KEY")
    assert key_env["valueFrom"]["secretKeyRef"] == {"name": ENGINE_KEY_SECRET, "key": "token"}
    endpoint = ready_obj["status"]["replicaStatuses"][0]["endpoint"]
    for key, status in ((engine_key, 200), (engine_key[1:], 401)):
        reply = httpx.get(
            f"{endpoint}/get_server_info",
            headers={"Authorization": f"Bearer {key}"},
            timeout=10,
            trust_env=False,
        )
        assert reply.status_code == status, (key == engine_key, reply.text[:200])
    obj = wait_until(
        lambda: settled(devcluster, namespace, "ConfigApplied"),
        timeout=60,
        what="ConfigApplied decided",
    )
    capacity = condition(obj, "CapacityPlanned")
    assert capacity is not None
    assert (capacity["status"], capacity["reason"]) == ("True", "CapacityFits")
    config = condition(obj, "ConfigApplied")
    assert config is not None
    assert (config["status"], config["reason"]) == ("True", "ConfigMatches"), config["message"]
    model = condition(obj, "ModelVerified")
    assert model is not None
    # kwok completes init containers without running them: no summary, so no verdict.
    assert (model["status"], model["reason"]) == ("Unknown", "VerificationPending")


@pytest.mark.sim_args("--sim-ignore-flag=--mem-fraction-static")
def test_ignored_flag_is_a_config_mismatch(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess
) -> None:
    user_keys(devcluster, namespace)
    apply(devcluster, namespace, sample(GROUP_A))
    obj = wait_until(
        lambda: settled(devcluster, namespace, "ConfigApplied"),
        timeout=90,
        what="ConfigApplied decided",
    )
    config = condition(obj, "ConfigApplied")
    assert config is not None
    assert (config["status"], config["reason"]) == ("False", "ConfigMismatch")
    assert "mem_fraction_static" in config["message"]
    assert "0.57" in config["message"]
    # The Event is written by the pass after the one that set the condition: wait for it.
    events = wait_until(
        lambda: devcluster.kubectl_json(
            "get", "events", "-n", namespace, "--field-selector", "reason=ConfigMismatch"
        )["items"],
        timeout=30,
        what="the ConfigMismatch Event",
    )
    assert "mem_fraction_static" in events[0]["message"]


def test_plan_that_cannot_fit_blocks_start(
    devcluster: DevCluster, namespace: str, shared_operator: OperatorProcess
) -> None:
    user_keys(devcluster, namespace)
    doc = sample(GROUP_A)
    doc["spec"]["model"]["weightsGB"] = 400.0
    apply(devcluster, namespace, doc)
    obj = wait_until(
        lambda: settled(devcluster, namespace, "CapacityPlanned"),
        timeout=60,
        what="CapacityPlanned decided",
    )
    capacity = condition(obj, "CapacityPlanned")
    assert capacity is not None
    assert (capacity["status"], capacity["reason"]) == ("False", "CapacityExceeded")
    assert "rank" in capacity["message"]
    ready_cond = condition(obj, "Ready")
    assert ready_cond is not None
    assert ready_cond["reason"] == "CapacityExceeded"
    assert devcluster.kubectl_json("get", "sts", "-n", namespace)["items"] == []
