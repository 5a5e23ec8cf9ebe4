"""The rank pods' ``launch-check`` init container, run for real on the dev cluster.

Why: on the nodes it is ``python3 -c LAUNCH_CHECK_CODE <the engine's args>`` in the
engine image, whose SGLang judges the command line (``sparkllm.sglang_contract.
launch_check``). The dev cluster has no images; the harness runs the same program with
the pinned SGLang 0.5.23 wheel of the dev venv (``sparkllm_dev.sim.launch_check``), the
JSON in the termination file the kubelet would read. A run with the same inputs as a
recorded one is replayed from ``<state dir>/launch-check-cache`` of the active profile
(``sim/launch_cache.py``; shared by the tests, whose simulated nodes are private).

What the simulated node's image is: ``sim.launch_check.image_facts`` of the node's root
(the fault injector's ``skew_image``). Its ``version`` is what the check reports; its
``digest`` is the image ID the node's containers show (``kubelet.image_id``) — for a
reference by tag only: a reference pinned by digest pulls that digest on every node,
which is how the operator's pinning repairs a split.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sparkllm.sglang_contract.launch_check import LAUNCH_CHECK_CODE, TERMINATION_LOG_ENV
from sparkllm_dev.devcluster import hostpaths, kubelet, paths
from sparkllm_dev.sim.launch_cache import CACHE_DIR_ENV
from sparkllm_dev.sim.launch_check import SIM_VERSION_ENV, SIM_WITHOUT_ENV, image_facts


def is_launch_check(words: Sequence[str]) -> bool:
    """Whether the container runs the operator's launch-check program."""
    return (
        len(words) >= 3
        and words[0].rsplit("/", 1)[-1].startswith("python")
        and words[1] == "-c"
        and words[2] == LAUNCH_CHECK_CODE
    )


def node_image(pod: Mapping[str, Any], *, hosts_root: Path) -> dict[str, str]:
    """The simulated image facts of the pod's node (empty: the wheel's, the tag's digest)."""
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    return image_facts(hosts_root / node) if node else {}


def plan_step(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    env: Mapping[str, str],
    scratch: Path,
    python: str,
    log_path: Path,
    hosts_root: Path,
) -> hostpaths.InitStep | None:
    """The local command of a launch-check container; None when it is not one."""
    words = kubelet.command_line(container, env)
    if not is_launch_check(words):
        return None
    name = str(container["name"])
    termination_file = scratch / "termination" / name
    # No PYTEST_* (the in-process harness's; a node has none): they change per test, and
    # the check's cache keys on the whole environment (sim/launch_cache.py).
    local_env = {k: v for k, v in env.items() if not k.startswith("PYTEST_")}
    local_env |= {TERMINATION_LOG_ENV: str(termination_file), "PYTHONWARNINGS": "ignore"}
    local_env[CACHE_DIR_ENV] = str(paths.default_paths().state_dir / "launch-check-cache")
    facts = node_image(pod, hosts_root=hosts_root)
    pinned = str(container.get("image") or "").partition("@")[2]
    if pinned and pinned != facts.get("digest"):
        facts = {}  # pulled by digest: that build, not the one the node's tag resolves to
    if facts.get("version"):
        local_env[SIM_VERSION_ENV] = facts["version"]
    if facts.get("without"):
        local_env[SIM_WITHOUT_ENV] = facts["without"]
    written = [*(container.get("command") or [])[:2], "LAUNCH_CHECK_CODE", *words[3:]]
    return hostpaths.InitStep(
        name=name,
        argv=(python, "-m", "sparkllm_dev.sim.launch_check", *words[3:]),
        env=local_env,
        termination_file=termination_file,
        log_path=log_path,
        policy=str(container.get("terminationMessagePolicy") or "File"),
        as_written=shlex.join(written),
    )
