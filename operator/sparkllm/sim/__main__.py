"""``python -m sparkllm.sim [--sim-… options] -- <the rank's SGLang command>``."""

from sparkllm.sim.server import main

raise SystemExit(main())
