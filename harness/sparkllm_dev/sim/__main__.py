"""``python -m sparkllm_dev.sim [--sim-… options] -- <the rank's SGLang command>``."""

from sparkllm_dev.sim.server import main

raise SystemExit(main())
