"""The engine cache on a simulated node: the rank's ``SGLANG_CACHE_DIR`` as a local path.

Why: the operator points SGLang's caches at a hostPath on the node
(``render/engine_cache.py``); the simulator, a local process, must find the directory
that stands in for it under ``<hosts root>/<node>/`` to know whether its start is cold
or warm (``sim/start.py``). Like ``hostpaths.model_dir_env``, the variable itself stays
as rendered (the simulator reports its environment as the pod has it); the local copy
goes in ``SPARKLLM_SIM_CACHE_DIR``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkllm.render.engine_cache import CACHE_ENV
from sparkllm_dev.devcluster.hostpaths import _translate_value, _volumes, plan_mounts
from sparkllm_dev.errors import DevClusterError
from sparkllm_dev.sim.start import SIM_CACHE_DIR_ENV

SGLANG_CACHE_DIR = CACHE_ENV[0][0]


def sim_cache_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    hosts_root: Path,
) -> dict[str, str]:
    """``{SPARKLLM_SIM_CACHE_DIR: <local dir>}`` when the rank's cache dir is a hostPath
    mount of the container, else ``{}`` (the simulator then starts cold every time)."""
    value = env.get(SGLANG_CACHE_DIR)
    volumes = _volumes(pod)
    hostpath_mounts = [
        m for m in container.get("volumeMounts") or [] if "hostPath" in volumes.get(m["name"], {})
    ]
    if not value or not hostpath_mounts:
        return {}
    try:
        mounts = plan_mounts(
            pod, {"volumeMounts": hostpath_mounts}, hosts_root=hosts_root, scratch=hosts_root,
            config_maps={},
        )  # fmt: skip
    except DevClusterError:
        return {}
    local = _translate_value(value, mounts)
    if local == value:
        return {}
    Path(local).mkdir(parents=True, exist_ok=True)  # DirectoryOrCreate, as the kubelet does
    return {SIM_CACHE_DIR_ENV: local}
