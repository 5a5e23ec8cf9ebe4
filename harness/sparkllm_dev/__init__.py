"""sparkllm-dev: the development and test harness of sparkllm, never shipped.

Why a package apart from ``sparkllm``: the product image and the installed product package
must carry only the operator, the admission layer and their CLI. Everything that exists only
to develop and test them — the local control plane with simulated DGX Spark nodes
(``devcluster``), the SGLang simulator (``sim``), ``sparkllm-dev demo`` and the extraction of
SGLang's flag table from its sources (``flags``) — lives here, installed only into the dev
virtualenv. The product never imports this package (tests/unit/test_product_boundary.py).
"""
