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
"""

from sparkllm_dev.sim.server import main, prepare

__all__ = ["main", "prepare"]
