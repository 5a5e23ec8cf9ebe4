"""Root of both test trees (tests/ and harness/tests/): the shared cluster fixtures.

The fixtures (devcluster, namespace, faults, operator) live in the harness package as a
pytest plugin, so the product's tests and the harness's own tests see the same ones; the
plugin ``sparkllm_dev.file_order`` offers ``--shuffle-files`` (the files in a random order,
with a seed), which `make test` and `make unit` turn on.
"""

pytest_plugins = ["sparkllm_dev.testing", "sparkllm_dev.redis_fixture", "sparkllm_dev.file_order"]
