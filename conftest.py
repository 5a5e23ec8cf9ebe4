"""Root of both test trees (tests/ and harness/tests/): the shared fixtures, the Hypothesis
profiles and the order's seed.

The fixtures (devcluster, namespace, faults, operator, shared_operator; redis_server) live
in the harness package as pytest plugins, so the product's tests and the harness's own tests
see the same ones.

The order: pytest-randomly (a dev dependency) runs the modules, and the tests within each,
in an order drawn from a seed, so that no test relies on another having run first (issue
#16: a wheel one test file downloaded was needed by another that ran earlier on a new
machine only). It prints ``Using --randomly-seed=N`` in the header; the summary repeats it
here, since a long run's header has scrolled away. ``--randomly-seed=N``
repeats an order, ``-p no:randomly`` runs the written order.

Hypothesis profiles, chosen with ``HYPOTHESIS_PROFILE`` (``make test`` and CI: ``ci``):

- ``dev`` (the default: ``make unit`` and a plain ``pytest``): 20 examples per property, a
  quick answer while changing code;
- ``ci``: 100 examples per property (Hypothesis's own default).

Both drop the per-example deadline (a 2-core machine running the cluster tests beside
makes any wall-clock deadline flaky). A property whose input space needs more keeps its own
``max_examples`` in both profiles and says why next to it.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

pytest_plugins = ["sparkllm_dev.testing", "sparkllm_dev.redis_fixture"]

settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True)
settings.register_profile("dev", max_examples=20, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The seed of this run's order again, above pytest's result line."""
    config = terminalreporter.config
    if config.pluginmanager.has_plugin("randomly"):
        seed = config.getoption("randomly_seed", None)
        terminalreporter.write_line(
            f"test order: --randomly-seed={seed} (repeat it with that option)"
        )
