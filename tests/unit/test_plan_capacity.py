"""The capacity plan: the documents' numbers, real safetensors directories, plans that fail."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkllm import plan
from sparkllm.api import InferenceClusterSpec, Reason, validate_inference_cluster
from sparkllm.errors import SpecError
from sparkllm.plan import ModelFiles
from sparkllm.plan.kv import basis_from_config, documented_basis
from sparkllm.plan.weights import Placement, classify_tensor
from sparkllm.plan_command import plan_capacity, plan_main
from tests.unit.test_integrity_fixtures import make_model_dir, model_tensors, tensor_bytes

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"


def sample_document() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return document


def spec_with(
    *, engine: dict[str, Any] | None = None, model: dict[str, Any] | None = None
) -> InferenceClusterSpec:
    document = copy.deepcopy(sample_document())
    document["spec"]["engine"].update(engine or {})
    document["spec"]["model"].update(model or {})
    stages = document["spec"]["engine"]["pipelineParallel"]
    document["spec"]["placement"] = {"nodeGroups": [[f"spark-{i}" for i in range(stages)]]}
    for key, value in list(document["spec"]["engine"].items()):
        if value is None:
            del document["spec"]["engine"][key]
    return validate_inference_cluster(document).spec


def test_the_documents_deployment_fits_with_their_numbers() -> None:
    plan = plan_capacity(spec_with())
    assert plan.fits, plan.problems
    assert plan.reason is Reason.CAPACITY_FITS
    assert (plan.average.weights_gb, plan.average.book_headroom_gb) == (56.09, 71.91)
    assert plan.partition == (14, 14, 15)
    assert plan.recommended_partition == (14, 14, 15)
    assert [round(rank.weights_gb, 2) for rank in plan.ranks] == [54.79, 54.79, 58.70]
    assert {round(rank.static_budget_gb, 2) for rank in plan.ranks} == {72.96}
    assert {round(rank.headroom_gb, 2) for rank in plan.ranks} == {55.04}
    assert round(plan.total_weight_gb, 2) == 168.27
    assert plan.kv_pool_tokens == 1_579_520
    table = plan.render_table()
    for figure in ("56.09 GB per node", "book headroom 71.91 GB", "1,579,520 tokens", "FITS"):
        assert figure in table


def test_the_calibration_is_a_compressed_kv_cache() -> None:
    basis = documented_basis()
    assert 500 < basis.bytes_per_token_layer < 700  # ~602 B: MLA-like latent, ~1 byte each
    assert "calibrated" in basis.description


def test_the_calibration_predicts_a_smaller_pool_at_the_historical_fraction() -> None:
    plan = plan_capacity(spec_with(engine={"memFractionStatic": 0.50}))
    tokens = plan.kv_pool_tokens
    assert tokens is not None
    assert 500_000 < tokens < 700_000  # 64 - 58.70 GB on the 15-layer rank
    assert plan.fits


def test_two_nodes_at_057_do_not_fit() -> None:
    plan = plan_capacity(spec_with(engine={"pipelineParallel": 2, "layerPartition": None}))
    assert (plan.average.weights_gb, plan.average.book_headroom_gb) == (84.14, 43.86)
    assert plan.partition == (21, 22)
    assert not plan.fits
    assert plan.reason is Reason.CAPACITY_EXCEEDED
    assert plan.problems[0] == (
        "rank 0: weights 82.18 GB do not fit the static budget 0.57 x 128 GB = 72.96 GB "
        "(spec.engine.memFractionStatic): no room for the KV cache"
    )
    assert plan.problems[1].startswith("rank 1: weights 86.09 GB")
    assert "verdict: DOES NOT FIT" in plan.render_table()


def test_a_fraction_that_starves_the_node_is_flagged_for_every_rank() -> None:
    plan = plan_capacity(spec_with(engine={"memFractionStatic": 0.95}))
    assert not plan.fits
    (problem,) = plan.problems
    assert problem.startswith("ranks 0, 1, 2: only 6.40 GB of the node's memory")
    assert "below the 16 GB minimum" in problem


def test_a_pool_smaller_than_one_window_is_flagged() -> None:
    plan = plan_capacity(spec_with(), kv_bytes_per_token_layer=100_000_000)
    assert not plan.fits
    assert "less than one 12,288-token window" in plan.problems[0]


def test_total_weight_input_replaces_the_documents_figure() -> None:
    plan = plan_capacity(spec_with(), total_weight_gb=129.0)
    assert [round(rank.weights_gb, 2) for rank in plan.ranks] == [42.0, 42.0, 45.0]
    assert plan.kv_basis is None
    assert plan.kv_pool_tokens is None
    assert "not estimated" in plan.render_table()


def small_spec(*, layers: int = 6, stages: int = 3) -> InferenceClusterSpec:
    return spec_with(
        engine={"pipelineParallel": stages, "layerPartition": None},
        model={"numLayers": layers},
    )


def test_weights_from_real_safetensors_headers(tmp_path: Path) -> None:
    model = make_model_dir(tmp_path / "m", layers=6, shards=3, hidden=16, vocab=512)
    config = json.loads((model / "config.json").read_text())
    config |= {"num_attention_heads": 2, "num_key_value_heads": 1}
    (model / "config.json").write_text(json.dumps(config))
    tensors = model_tensors(layers=6, hidden=16, vocab=512)
    layer = sum(tensor_bytes(*spec) for name, spec in tensors.items() if ".layers.0." in name)
    embed = tensor_bytes(*tensors["model.embed_tokens.weight"])
    head = tensor_bytes(*tensors["lm_head.weight"]) + tensor_bytes(*tensors["model.norm.weight"])
    node_gb = 200_000 / 1e9  # a 200 kB "node", so the tiny model's numbers matter
    plan = plan_capacity(small_spec(), model_dir=model, node_memory_gb=node_gb, min_headroom_gb=0)
    expected = [embed + 2 * layer, 2 * layer, 2 * layer + head]
    assert [round(rank.weights_gb * 1e9) for rank in plan.ranks] == expected
    assert plan.weights_exact
    assert plan.partition == (2, 2, 2)
    assert plan.recommended_partition == (1, 4, 1)
    assert plan.kv_basis is not None
    assert plan.kv_basis.bytes_per_token_layer == 2 * 1 * 8 * 2
    budget = 0.57 * 200_000
    assert plan.ranks[1].kv_tokens == int((budget - 2 * layer) / (2 * 32))
    assert "safetensors headers of 3 shard(s)" in plan.render_table()


def test_real_model_that_does_not_fit_names_the_rank(tmp_path: Path) -> None:
    model = make_model_dir(tmp_path / "m", layers=6, shards=2, hidden=16, vocab=512)
    plan = plan_capacity(
        small_spec(), model_dir=model, node_memory_gb=36_000 / 1e9, min_headroom_gb=0
    )
    assert not plan.fits
    assert [problem.split(":")[0] for problem in plan.problems] == ["rank 0", "rank 2"]
    assert "static budget 0.57 x 3.6e-05 GB" in plan.problems[0]


def test_extra_layers_and_unknown_tensors_are_reported(tmp_path: Path) -> None:
    tensors = model_tensors(layers=2)
    tensors["model.layers.2.eh_proj.weight"] = ("BF16", (16, 32))  # an MTP layer
    tensors["model.vision_tower.weight"] = ("BF16", (8,))
    model = make_model_dir(tmp_path / "m", layers=2, shards=1, tensors=tensors)
    plan = plan_capacity(small_spec(layers=2, stages=2), model_dir=model)
    notes = " ".join(plan.notes)
    assert "0.00 GB of tensors belong to layers beyond 2" in notes
    assert "counted on rank 0" in notes
    assert plan.ranks[0].weights_gb * 1e9 == pytest.approx(
        tensor_bytes("BF16", (64, 16)) + 2 * 16 * 16 + 2 * 16 * 64 + 2 * 16 + 16
    )


def test_an_unreadable_model_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"neither model\.safetensors\.index\.json"):
        plan_capacity(small_spec(), model_dir=tmp_path)


def test_the_plan_is_computed_from_values_it_is_given() -> None:
    # Pure: the model directory's figures arrive already read (sparkllm plan reads them).
    shards = {
        "a.safetensors": {"model.embed_tokens.weight": 1000, "model.layers.0.mlp.w": 100},
        "b.safetensors": {"model.layers.1.mlp.w": 100, "lm_head.weight": 500},
    }
    model = ModelFiles(
        config={"kv_lora_rank": 512, "qk_rope_head_dim": 64}, shards=shards, source="given"
    )
    capacity = plan.plan_capacity(small_spec(layers=2, stages=2), model=model)
    assert [round(rank.weights_gb * 1e9) for rank in capacity.ranks] == [1100, 600]
    assert capacity.weights_exact
    assert capacity.kv_basis is not None
    assert capacity.kv_basis.bytes_per_token_layer == 1152.0
    assert "given" in capacity.render_table()


@pytest.mark.parametrize(
    ("name", "placement", "index"),
    [
        ("model.embed_tokens.weight", Placement.FIRST, None),
        ("embed.weight", Placement.FIRST, None),
        ("lm_head.weight", Placement.LAST, None),
        ("head.weight", Placement.LAST, None),
        ("model.norm.weight", Placement.LAST, None),
        ("norm.weight", Placement.LAST, None),
        ("model.layers.3.mlp.experts.7.w1.weight", Placement.LAYER, 3),
        ("layers.42.attn.wq.weight", Placement.LAYER, 42),
        ("model.layers.0.input_layernorm.weight", Placement.LAYER, 0),
        ("model.layers.43.eh_proj.weight", Placement.NOT_LOADED, 43),
        ("model.rotary.inv_freq", Placement.UNCLASSIFIED, None),
    ],
)
def test_tensor_names_map_to_ranks(name: str, placement: Placement, index: int | None) -> None:
    assert classify_tensor(name, num_layers=43) == (placement, index)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"kv_lora_rank": 512, "qk_rope_head_dim": 64}, 1152.0),
        ({"num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}, 4096.0),
        ({"num_attention_heads": 4, "head_dim": 64}, 1024.0),
        ({"hidden_size": 4096}, None),
    ],
)
def test_kv_basis_from_config(config: dict[str, int], expected: float | None) -> None:
    basis = basis_from_config(config)
    assert (None if basis is None else basis.bytes_per_token_layer) == expected


def test_plan_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_main(["-f", str(SAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "56.09 GB per node" in out
    assert "verdict: FITS" in out
    assert plan_main(["-f", str(SAMPLE), "--total-weight-gb", "400"]) == 1
    assert "verdict: DOES NOT FIT" in capsys.readouterr().out
    assert plan_main(["-f", str(SAMPLE), "--model-dir", str(tmp_path)]) == 2
    assert "sparkllm plan: error:" in capsys.readouterr().err
