"""Any TP x PP layout (issue 27): the API's node-group size, each rank's SGLang arguments
against the pinned wheel's own rank mapping, the preflight's world, and the plan's figures.

The node rank -> (pipeline stage, tensor rank) mapping is SGLang's, not ours: the test
runs ``_calculate_rank_ranges`` from the wheel's ``srt/entrypoints/engine.py`` (its source,
executed with only ``get_parallel`` provided) and compares it with
:func:`sparkllm.sglang_contract.fields.rank_position`, which the renderer's node order, the
planner's rows and the simulator's layers follow.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from sparkllm import plan
from sparkllm.api import InferenceCluster, validate_inference_cluster
from sparkllm.errors import SpecError
from sparkllm.render import ReplicaPlan, render_replica
from sparkllm.render.ranks import EngineKeyRef
from sparkllm.sglang_contract.argv import option_value
from sparkllm.sglang_contract.fields import LAYER_PARTITION_ENV, rank_position
from sparkllm.sglang_contract.flags import parse_sglang_argv

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "manifests" / "samples"
KEY = EngineKeyRef(secret="k", key="token")


def wheel_rank_ranges() -> Any:
    """The pinned wheel's ``_calculate_rank_ranges``, its own source, run standalone."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None
    assert spec.submodule_search_locations
    source = Path(spec.submodule_search_locations[0], "srt", "entrypoints", "engine.py")
    tree = ast.parse(source.read_text(encoding="utf-8"))
    (function,) = (
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "_calculate_rank_ranges"
    )
    namespace: dict[str, Any] = {"Tuple": tuple, "parallel": None}
    namespace["get_parallel"] = lambda: namespace["parallel"]
    exec(compile(ast.Module(body=[function], type_ignores=[]), str(source), "exec"), namespace)

    def ranges(
        node_rank: int, *, tp: int, pp: int, nnodes: int | None = None
    ) -> tuple[range, range]:
        nodes = tp * pp if nnodes is None else nnodes
        namespace["parallel"] = SimpleNamespace(nnodes=nodes, tp_size=tp, pp_size=pp)
        pp_range, tp_range, _, _ = namespace["_calculate_rank_ranges"](node_rank)
        return pp_range, tp_range

    return ranges


LAYOUTS = [(1, 3), (2, 1), (2, 2), (4, 2), (1, 8), (8, 1)]


@pytest.mark.parametrize(("tp", "pp"), LAYOUTS)
def test_node_rank_to_stage_and_tensor_rank_is_the_wheels(tp: int, pp: int) -> None:
    wheel = wheel_rank_ranges()
    for node_rank in range(tp * pp):
        pp_range, tp_range = wheel(node_rank, tp=tp, pp=pp)
        assert len(pp_range) == len(tp_range) == 1  # one GPU per Spark: one rank per node
        assert rank_position(node_rank, tp_size=tp, pp_size=pp) == (pp_range[0], tp_range[0])
    with pytest.raises(ValueError, match="outside"):
        rank_position(tp * pp, tp_size=tp, pp_size=pp)


def _cluster(tp: int, pp: int, *, partition: list[int] | None = None) -> InferenceCluster:
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / "deepseek-v4-flash.yaml").read_text())
    doc = copy.deepcopy(doc)
    engine = doc["spec"]["engine"]
    engine.update({"tensorParallel": tp, "pipelineParallel": pp, "memFractionStatic": 0.5})
    engine.pop("layerPartition")
    if partition is not None:
        engine["layerPartition"] = partition
    doc["spec"]["placement"] = {"nodeGroups": [[f"spark-{n}" for n in range(tp * pp)]]}
    doc["metadata"].update(namespace="llm", uid="u")
    return validate_inference_cluster(doc)


def _rendered(ic: InferenceCluster) -> list[dict[str, Any]]:
    size = ic.spec.engine.nodes_per_replica
    replica = ReplicaPlan(
        index=0,
        group_key="group-0",
        nodes=tuple(f"spark-{n}" for n in range(size)),
        rank0_ip="10.0.0.1",
        generation=1,
        node_ips=tuple(f"10.0.0.{n + 1}" for n in range(size)),
    )
    return [o for o in render_replica(ic, plan=replica, engine_key=KEY) if o["kind"] != "Service"]


def _engine(sts: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = sts["spec"]["template"]["spec"]["containers"][0]
    return container


def test_tp2_pp2_renders_four_ranks_with_sglangs_multi_node_arguments() -> None:
    ranks = _rendered(_cluster(2, 2, partition=[21, 22]))
    assert [s["metadata"]["name"] for s in ranks] == [
        f"deepseek-v4-flash-r0-rank{n}" for n in range(4)
    ]
    for node_rank, sts in enumerate(ranks):
        args = _engine(sts)["args"]
        parsed = parse_sglang_argv(args)  # the pinned parser's reading of the argv
        assert (parsed["nnodes"], parsed["tp_size"], parsed["pp_size"]) == ("4", "2", "2")
        assert parsed["node_rank"] == str(node_rank)
        assert option_value(args, "--dist-init-addr") == "10.0.0.1:5000"  # rank 0's, for all
        env = {e["name"]: e.get("value") for e in _engine(sts)["env"]}
        assert env[LAYER_PARTITION_ENV] == "21,22"  # per pipeline stage, on every rank
        node = sts["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        assert f"spark-{node_rank}" in str(node)
        serves = _engine(sts).get("readinessProbe") is not None
        assert serves == (node_rank == 0)  # node rank 0 serves HTTP, the rest a dummy health


def test_the_bandwidth_preflight_spans_every_node_of_the_replica() -> None:
    ic = _cluster(2, 2, partition=[21, 22])
    network = ic.spec.network.model_copy(
        update={"preflight": ic.spec.network.preflight.model_copy(update={"mode": "gate"})}
    )
    ic = ic.model_copy(update={"spec": ic.spec.model_copy(update={"network": network})})
    for node_rank, sts in enumerate(_rendered(ic)):
        inits = sts["spec"]["template"]["spec"]["initContainers"]
        rendezvous = {
            e["name"]: e["value"]
            for c in inits
            for e in c.get("env", [])
            if e["name"] in ("RANK", "WORLD_SIZE", "MASTER_ADDR") and "value" in e
        }
        assert rendezvous == {"RANK": str(node_rank), "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1"}


def test_the_api_refuses_a_node_group_of_the_wrong_size_and_a_too_large_replica() -> None:
    doc = copy.deepcopy(_cluster(2, 1).model_dump(mode="json", by_alias=True, exclude_none=True))
    doc["spec"]["placement"] = {"nodeGroups": [["spark-0", "spark-1", "spark-2"]]}
    with pytest.raises(SpecError, match=r"tensorParallel x engine\.pipelineParallel nodes"):
        validate_inference_cluster(doc)
    doc["spec"]["engine"].update(tensorParallel=4, pipelineParallel=3)
    with pytest.raises(SpecError, match=r"tensorParallel x pipelineParallel must be at most 8"):
        validate_inference_cluster(doc)


# --- the capacity plan ------------------------------------------------------------------


def _plan(name: str, **engine: Any) -> plan.CapacityPlan:
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / name).read_text())
    doc["spec"]["engine"].update(engine)
    size = doc["spec"]["engine"].get("tensorParallel", 1) * doc["spec"]["engine"].get(
        "pipelineParallel", 3
    )
    doc["spec"]["placement"] = {"nodeGroups": [[f"s{n}" for n in range(size)]]}
    doc["spec"]["replicas"] = 1
    return plan.plan_capacity(validate_inference_cluster(doc).spec)


def test_tp2_cookbook_sample_splits_the_weights_over_two_nodes() -> None:
    capacity = _plan("deepseek-v4-flash-tp2.yaml")
    assert capacity.fits, capacity.problems
    # The seeds' two-node figures: 168.27 / 2 = 84.14 GB per node, 43.86 GB book headroom.
    assert (capacity.average.weights_gb, capacity.average.book_headroom_gb) == (84.14, 43.86)
    assert [(r.rank, r.stage, r.tp_rank) for r in capacity.ranks] == [(0, 0, 0), (1, 0, 1)]
    assert [round(r.weights_gb, 2) for r in capacity.ranks] == [84.14, 84.14]
    assert {round(r.static_budget_gb, 2) for r in capacity.ranks} == {102.40}
    assert {r.layers for r in capacity.ranks} == {(0, 43)}  # both hold every layer's half
    # The calibrated latent KV is whole on each TP rank: 18.26 GB / (43 x ~602 B).
    assert capacity.kv_pool_tokens == 705_687
    assert "tensorParallel 2: every weight is divided by 2" in capacity.notes[0]


def test_tp2_pp2_plan_follows_sglangs_rank_order() -> None:
    capacity = _plan("deepseek-v4-flash.yaml", tensorParallel=2, pipelineParallel=2,
                     layerPartition=[21, 22])  # fmt: skip
    assert [(r.rank, r.stage, r.tp_rank) for r in capacity.ranks] == [
        (n, *rank_position(n, tp_size=2, pp_size=2)) for n in range(4)
    ]
    weights = [round(r.weights_gb, 2) for r in capacity.ranks]
    # PP=2's 21/22 stages (82.18 / 86.09 GB, the seeds' split) halved by TP=2.
    assert weights == [41.09, 41.09, 43.05, 43.05]
    assert (capacity.average.nodes, capacity.average.weights_gb) == (4, 42.07)
    assert capacity.fits


def test_replicated_tensors_are_whole_on_every_tp_rank() -> None:
    shards = {
        "a.safetensors": {
            "model.embed_tokens.weight": 1000,  # vocab-parallel: split
            "model.layers.0.attn.wq_a.weight": 100,  # ReplicatedLinear: whole
            "model.layers.0.attn.wq_b.weight": 400,  # ColumnParallelLinear: split
            "model.layers.0.mlp.gate.weight": 10,  # the router: whole
            "model.layers.0.mlp.experts.0.w1.weight": 4000,  # split
            "model.layers.0.input_layernorm.weight": 2,  # whole
            "model.norm.weight": 2,  # whole
            "lm_head.weight": 1000,  # ParallelLMHead: split
        }
    }
    doc: dict[str, Any] = yaml.safe_load((SAMPLES / "deepseek-v4-flash-tp2.yaml").read_text())
    doc["spec"]["model"]["numLayers"] = 1
    files = plan.ModelFiles(config={}, shards=shards, source="test")
    capacity = plan.plan_capacity(validate_inference_cluster(doc).spec, model=files)
    whole = 100 + 10 + 2 + 2
    split = 1000 + 400 + 4000 + 1000
    assert [rank.weights_gb * 1e9 for rank in capacity.ranks] == pytest.approx(
        [split / 2 + whole] * 2
    )
    assert not any("every weight is divided" in note for note in capacity.notes)
