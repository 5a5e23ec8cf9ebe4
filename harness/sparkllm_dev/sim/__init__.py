"""An SGLang 0.5.23 engine SIMULATOR for tests and the demo: no GPU, no weights, same interface.

Why: the operator, the SGLang model-gateway router and the admission layer must be
exercised for real on machines without GPUs. A simulated rank runs the very command line
the operator renders for it (``python -m sparkllm_dev.sim [--sim-…] -- python3 -m
sglang.launch_server …``), refuses what SGLang 0.5.23 would refuse, and serves SGLang's
HTTP API and metric names on the simulated node's address. Rank 0 serves the API
(``app``); ranks > 0 serve only the dummy health server (``worker``). Everything it
serves says SIMULATOR: the start-up log line, ``"simulator": true`` in
``/get_server_info`` and the ``x-sparkllm-simulator`` response header.
See docs/simulator.md for what is and is not simulated.

Importing the package imports nothing else (PEP 562): ``main``/``prepare`` load the server
(uvicorn, the app, ``sparkllm.api``: ~1 s of CPU) on first use, so the launch-check runner
(``sparkllm_dev.sim.launch_check``, one process per rank start) and the tests of single
modules pay only for what they use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkllm_dev.sim.server import main, prepare

__all__ = ["main", "prepare"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from sparkllm_dev.sim import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
