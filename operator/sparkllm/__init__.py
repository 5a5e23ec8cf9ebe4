"""sparkllm: serve one large LLM across DGX Spark nodes with SGLang pipeline parallelism.

The package is split so that the pure core (``api``, ``render``, ``plan``) never touches
the network and is tested with plain asserts, while the thin shell (``reconcile``,
``gateway``, ``devcluster``) owns every side effect. ``sim`` is an SGLang engine
SIMULATOR for tests and the demo: no GPU exists on the machines this is developed on.
"""

__version__ = "0.1.0"
