"""Persistent engine caches: what SGLang and its kernels compile on a first start, kept on
the node for the next start of the same image.

Why: a start on Sparks spends minutes compiling kernels (Triton, DeepGEMM, FlashInfer,
TileLang, torch inductor, SGLang's own JIT) into the engine container's home directory,
which goes with the container: every restart recompiled what the last one compiled.
SGLang 0.5.23 gathers them itself: ``sglang/srt/environ.py`` has ``SGLANG_CACHE_DIR``
(default ``~/.cache/sglang``; DeepGEMM's ``SGLANG_DG_CACHE_DIR`` and CuTe's
``SGLANG_CUTE_AOT_CACHE_DIR`` default under it) and ``third_party_cache_defaults()``, which
points ``TRITON_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``, ``CUDA_CACHE_PATH``,
``TILELANG_CACHE_DIR`` and ``FLASHINFER_WORKSPACE_BASE`` under it — with ``setdefault``,
and only if nothing imported FlashInfer or inductor first, so the rank's env sets every one
itself; ``SGLANG_JIT_CACHE_DIR`` (SGLang's JIT kernels, default ``~/.cache/sglang/jit``,
not under the cache dir) is set too. ``tests/unit/test_engine_cache.py`` reads those
names from the wheel.

Where: a hostPath per node under an administrator's root (the chart's
``engineCache.root``, the operator's ``SPARKLLM_ENGINE_CACHE_ROOT``; unset: no cache, as
before), ``<root>/<namespace>/<key>``: one directory per image, keyed by its digest
(``sha256-<hex>`` for ``repo@sha256:...``; a tag-only reference by a hash of the
reference, ``ref-<16 hex>``, so pinning the engine by digest gives exact per-digest caches).
Per namespace because the files are code the engine loads (SGLang's own comment: "Must be
trusted: cached objects are loaded into the process"): one namespace's engine never loads
what another's compiled (docs/security.md). The root is not a spec field: a namespace user
cannot point a hostPath anywhere.

Sized and cleaned: the rank's first init container, ``engine-cache`` (the operator's image,
``sparkllm engine-cache``), removes the other images' directories of this namespace, oldest
first, while the namespace's directories together exceed the cap
(``SPARKLLM_ENGINE_CACHE_MAX_GIB``, default 64 GiB), and empties the current one if it
alone exceeds it; it creates the current directory, owned by the engine's user when the
spec names one. Pure here; the pruning is ``preflight/engine_cache.py``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from sparkllm.errors import SparkllmError
from sparkllm.render.objects import JSON

ROOT_ENV: Final = "SPARKLLM_ENGINE_CACHE_ROOT"
MAX_GIB_ENV: Final = "SPARKLLM_ENGINE_CACHE_MAX_GIB"
DEFAULT_MAX_GIB: Final = 64
CACHE_MOUNT: Final = "/var/cache/sparkllm-engine"  # the engine's SGLANG_CACHE_DIR
PRUNE_MOUNT: Final = "/var/cache/sparkllm-engine-root"  # the namespace's directory
CONTAINER: Final = "engine-cache"
VOLUME: Final = "engine-cache"
PRUNE_VOLUME: Final = "engine-cache-root"
# SGLang 0.5.23's cache variables, each under the cache mount (srt/environ.py:
# third_party_cache_defaults and SGLANG_JIT_CACHE_DIR; module docstring).
CACHE_ENV: Final[tuple[tuple[str, str], ...]] = (
    ("SGLANG_CACHE_DIR", ""),
    ("TRITON_CACHE_DIR", "triton"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ("CUDA_CACHE_PATH", "nv"),
    ("TILELANG_CACHE_DIR", "tilelang"),
    ("FLASHINFER_WORKSPACE_BASE", ""),  # FlashInfer appends .cache/flashinfer itself
    ("SGLANG_JIT_CACHE_DIR", "jit"),
)
_DIGEST = re.compile(r"@sha256:([0-9a-f]{64})$")
# The pruning container deletes and chowns what the engine (often root in its image) and
# the kubelet (DirectoryOrCreate: root) made: root with exactly the three capabilities
# that needs, no escalation, a read-only root filesystem, the cache hostPath its only write.
PRUNE_SECURITY: Final[JSON] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": False,
    "runAsUser": 0,
    "runAsGroup": 0,
    "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"]},
}


@dataclass(frozen=True)
class EngineCache:
    """The administrator's setting: where on each node, and how much at most."""

    root: str | None = None
    max_gib: int = DEFAULT_MAX_GIB

    @property
    def enabled(self) -> bool:
        return self.root is not None


NO_ENGINE_CACHE: Final = EngineCache()


def engine_cache_from(
    environ: Mapping[str, str], *, names: tuple[str, str] = (ROOT_ENV, MAX_GIB_ENV)
) -> EngineCache:
    """The operator's setting from its env (the chart's); unset root: no cache. ``names``
    (the env's, or ``sparkllm render``'s flags given as such a mapping) name the setting in
    the one-line error."""
    root_name, max_name = names
    root = environ.get(root_name, "").strip()
    text = environ.get(max_name, "").strip() or str(DEFAULT_MAX_GIB)
    if not text.isdigit() or not 1 <= int(text) <= 10_000:
        raise SparkllmError(f"{max_name}: {text!r} is not a whole number of GiB, 1 to 10000")
    if not root:
        return EngineCache(max_gib=int(text))
    parts = root.split("/")
    if not root.startswith("/") or root == "/" or ".." in parts or "" in parts[1:]:
        raise SparkllmError(
            f"{root_name}: {root!r} is not an absolute directory below / "
            "(no '..', no empty component), e.g. /var/lib/sparkllm/engine-cache"
        )
    return EngineCache(root=root, max_gib=int(text))


def cache_key(image: str) -> str:
    """The directory of ``image``'s caches: its digest, else a hash of the reference."""
    found = _DIGEST.search(image)
    if found:
        return f"sha256-{found.group(1)}"
    return "ref-" + hashlib.sha256(image.encode()).hexdigest()[:16]


def cache_env() -> list[JSON]:
    """The engine's env pointing every cache at the mounted directory."""
    return [{"name": name, "value": f"{CACHE_MOUNT}/{sub}".rstrip("/")} for name, sub in CACHE_ENV]


@dataclass(frozen=True)
class CachePieces:
    """What a rank pod gains: volumes, the engine's mount and env, the init container."""

    volumes: list[JSON]
    mount: JSON
    env: list[JSON]
    init_container: JSON


def engine_cache_pieces(
    cache: EngineCache,
    *,
    namespace: str,
    image: str,
    tools_image: str,
    pull_policy: str,
    owner: tuple[int, int] | None,
) -> CachePieces | None:
    """The rank pod's cache parts for ``image`` (None: no root set). ``owner`` is the
    engine's (user, group) when the spec names one: the directory is made theirs."""
    if cache.root is None:
        return None
    key = cache_key(image)
    base = f"{cache.root}/{namespace}"
    args = ["engine-cache", "--root", PRUNE_MOUNT, "--keep", key, "--max-gib", str(cache.max_gib)]
    if owner is not None:
        args += ["--owner", f"{owner[0]}:{owner[1]}"]
    return CachePieces(
        volumes=[
            {"name": VOLUME, "hostPath": {"path": f"{base}/{key}", "type": "DirectoryOrCreate"}},
            {"name": PRUNE_VOLUME, "hostPath": {"path": base, "type": "DirectoryOrCreate"}},
        ],
        mount={"name": VOLUME, "mountPath": CACHE_MOUNT},
        env=cache_env(),
        init_container={
            "name": CONTAINER,
            "image": tools_image,
            "imagePullPolicy": pull_policy,
            "command": ["sparkllm"],
            "args": args,
            "securityContext": dict(PRUNE_SECURITY),
            "volumeMounts": [{"name": PRUNE_VOLUME, "mountPath": PRUNE_MOUNT}],
        },
    )
