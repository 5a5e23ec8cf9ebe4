"""The engine cache: SGLang 0.5.23's cache variables, the rank pod's parts, the pruning.

The variables are read from the pinned wheel (``srt/environ.py``: ``SGLANG_CACHE_DIR``, the
keys of ``third_party_cache_defaults()`` and ``SGLANG_JIT_CACHE_DIR``), so a new pin that
adds a cache the rank's env does not point at fails here. Then the render (a cache root
set by the administrator: a hostPath per namespace and image digest, the engine's env and
mount, the pruning init container first; unset: nothing changes) and the pruning itself
on a temporary directory.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import time
from pathlib import Path

import pytest

from sparkllm.api import validate_inference_cluster
from sparkllm.errors import SparkllmError
from sparkllm.preflight.engine_cache import GIB, prune
from sparkllm.render.engine_cache import (
    CACHE_ENV,
    CACHE_MOUNT,
    EngineCache,
    cache_key,
    engine_cache_from,
)
from sparkllm.render.product_image import ProductImage, product_image_from
from sparkllm.render.ranks import ReplicaPlan, render_rank_statefulset
from tests.unit.reconcile_fixtures import cluster

DIGEST = "a" * 64


def _environ_py() -> ast.Module:
    spec = importlib.util.find_spec("sglang")  # the package, not imported
    assert spec is not None
    assert spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations)))
    return ast.parse((root / "srt/environ.py").read_text("utf-8"))


def test_the_rank_env_covers_every_cache_sglang_names() -> None:
    tree = _environ_py()
    defaults = next(
        n for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name == "third_party_cache_defaults"
    )  # fmt: skip
    returned = next(n for n in ast.walk(defaults) if isinstance(n, ast.Return))
    assert isinstance(returned.value, ast.Dict)
    third_party = {k.value for k in returned.value.keys if isinstance(k, ast.Constant)}
    assert third_party == {
        "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH",
        "TILELANG_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE",
    }  # fmt: skip
    declared = {
        t.id for n in ast.walk(tree) if isinstance(n, ast.Assign)
        for t in n.targets if isinstance(t, ast.Name)
    }  # fmt: skip
    # SGLang's own: the cache root (DeepGEMM's and CuTe's default under it) and its JIT
    sglang_own = {"SGLANG_CACHE_DIR", "SGLANG_JIT_CACHE_DIR", "SGLANG_DG_CACHE_DIR"}
    assert sglang_own <= declared
    rendered = dict(CACHE_ENV)
    assert set(rendered) == third_party | {"SGLANG_CACHE_DIR", "SGLANG_JIT_CACHE_DIR"}


def test_the_administrator_sets_the_root_and_the_cap() -> None:
    assert engine_cache_from({}) == EngineCache()  # unset: no cache
    assert not EngineCache().enabled
    setting = engine_cache_from(
        {"SPARKLLM_ENGINE_CACHE_ROOT": "/var/lib/c", "SPARKLLM_ENGINE_CACHE_MAX_GIB": "20"}
    )
    assert setting == EngineCache(root="/var/lib/c", max_gib=20)
    for bad in ("relative/dir", "/", "/a/../etc", "/a//b"):
        with pytest.raises(SparkllmError, match="SPARKLLM_ENGINE_CACHE_ROOT"):
            engine_cache_from({"SPARKLLM_ENGINE_CACHE_ROOT": bad})
    with pytest.raises(SparkllmError, match="SPARKLLM_ENGINE_CACHE_MAX_GIB"):
        engine_cache_from({"SPARKLLM_ENGINE_CACHE_MAX_GIB": "0"})
    image = product_image_from({"SPARKLLM_ENGINE_CACHE_ROOT": "/var/lib/c"})
    assert image.engine_cache.root == "/var/lib/c"


def test_one_directory_per_image_digest() -> None:
    assert cache_key(f"nvcr.io/nvidia/sglang@sha256:{DIGEST}") == f"sha256-{DIGEST}"
    tagged = cache_key("nvcr.io/nvidia/sglang:26.07-py3")
    assert tagged.startswith("ref-")
    assert len(tagged) == 20
    assert tagged != cache_key("nvcr.io/nvidia/sglang:26.08-py3")


def _rank_pod(tools: ProductImage, **engine: object) -> dict[str, object]:
    obj = cluster(engine=engine) if engine else cluster()
    ic = validate_inference_cluster(obj)
    plan = ReplicaPlan(index=0, group_key="g", nodes=("a0", "a1", "a2"), rank0_ip="10.0.0.1",
                       generation=1)  # fmt: skip
    from sparkllm.reconcile.decide.secrets import engine_key_ref

    sts = render_rank_statefulset(ic, plan=plan, rank=1, engine_key=engine_key_ref(ic),
                                  tools_image=tools)  # fmt: skip
    pod: dict[str, object] = sts["spec"]["template"]["spec"]
    return pod


def test_the_rank_pod_mounts_its_images_cache_and_prunes_first() -> None:
    plain = _rank_pod(ProductImage())
    tools = ProductImage(engine_cache=EngineCache(root="/var/lib/c", max_gib=20))
    pod = _rank_pod(tools)
    volumes = {v["name"]: v for v in pod["volumes"]}  # type: ignore[attr-defined]
    assert set(volumes) - {v["name"] for v in plain["volumes"]} == {  # type: ignore[attr-defined]
        "engine-cache", "engine-cache-root",
    }  # fmt: skip
    key = cache_key(validate_inference_cluster(cluster()).spec.engine.image)
    assert volumes["engine-cache"]["hostPath"] == {
        "path": f"/var/lib/c/llm/{key}", "type": "DirectoryOrCreate",
    }  # fmt: skip
    assert volumes["engine-cache-root"]["hostPath"]["path"] == "/var/lib/c/llm"  # its namespace
    first = pod["initContainers"][0]  # type: ignore[index]
    assert first["name"] == "engine-cache"
    assert first["command"] == ["sparkllm"]
    assert first["args"] == ["engine-cache", "--root", "/var/cache/sparkllm-engine-root",
                             "--keep", key, "--max-gib", "20"]  # fmt: skip
    assert first["securityContext"]["capabilities"] == {
        "drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"],
    }  # fmt: skip
    engine = next(c for c in pod["containers"] if c["name"] == "engine")  # type: ignore[attr-defined]
    env = {e["name"]: e.get("value") for e in engine["env"]}
    assert env["SGLANG_CACHE_DIR"] == CACHE_MOUNT
    assert env["TRITON_CACHE_DIR"] == f"{CACHE_MOUNT}/triton"
    assert {"name": "engine-cache", "mountPath": CACHE_MOUNT} in engine["volumeMounts"]
    # only the engine: the init containers' env and mounts are as without the cache
    for before, after in zip(plain["initContainers"], pod["initContainers"][1:], strict=True):  # type: ignore[call-overload,index]
        assert before == after
    owned = _rank_pod(tools, runAsUser=1000)
    assert owned["initContainers"][0]["args"][-2:] == ["--owner", "1000:1000"]  # type: ignore[index]


def _fill(path: Path, mib: int, *, age: float = 0) -> None:
    path.mkdir(parents=True)
    (path / "kernels.bin").write_bytes(b"\0" * (mib * 1024 * 1024))
    stamp = time.time() - age
    os.utime(path, (stamp, stamp))


def test_pruning_keeps_the_current_image_and_removes_the_oldest_others(tmp_path: Path) -> None:
    keep = f"sha256-{DIGEST}"
    old, newer = f"sha256-{'b' * 64}", f"sha256-{'c' * 64}"
    _fill(tmp_path / keep, 2)
    _fill(tmp_path / old, 3, age=3600)
    _fill(tmp_path / newer, 3, age=60)
    lines = prune(tmp_path, keep=keep, max_bytes=6 * 1024 * 1024, owner=None)
    assert not (tmp_path / old).exists()  # least recently used goes first
    assert (tmp_path / newer).exists()  # 2 + 3 MiB fit the cap: kept
    assert (tmp_path / keep / "kernels.bin").exists()
    assert lines[0].startswith(f"removed {old}")
    # the current one alone over the cap: emptied, the directory stays
    lines = prune(tmp_path, keep=keep, max_bytes=1 * 1024 * 1024, owner=None)
    assert not (tmp_path / newer).exists()
    assert (tmp_path / keep).is_dir()
    assert list((tmp_path / keep).iterdir()) == []
    assert any(line.startswith(f"emptied {keep}") for line in lines)
    # a first start: the directory is made
    fresh = f"ref-{'1' * 16}"
    prune(tmp_path, keep=fresh, max_bytes=GIB, owner=None)
    assert (tmp_path / fresh).is_dir()
    with pytest.raises(ValueError, match="cache key"):
        prune(tmp_path, keep="../etc", max_bytes=GIB, owner=None)
