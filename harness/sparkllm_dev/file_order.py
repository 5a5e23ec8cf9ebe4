"""A pytest plugin that runs the test FILES in a random order, with a printed seed.

Why: a test must not depend on another one having run first (issue #16: a wheel that one
test file downloaded was needed by another that ran earlier on a new machine only). Running
the files in a different order on every `make test` shows such a dependency; the seed in
the header and in the summary repeats an order exactly. Only whole files move: the tests
inside a file keep their written order (module-scoped fixtures and the reading order stay
as the author meant), and no random generator is reseeded, unlike pytest-randomly.

    pytest --shuffle-files                        a new seed, printed
    pytest --shuffle-files --shuffle-seed 1234    the order of an earlier run

The root conftest.py loads this plugin; the option is off unless given (`make test` and
`make unit` give it).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

_SEED = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("shuffle-files", "test files in a random order")
    group.addoption(
        "--shuffle-files",
        action="store_true",
        default=False,
        help="run the test files in a random order (the tests within a file keep theirs)",
    )
    group.addoption(
        "--shuffle-seed",
        type=int,
        default=None,
        help="the seed of --shuffle-files' order (default: a new one, printed)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("shuffle_files"):
        return
    seed = config.getoption("shuffle_seed")
    config.stash[_SEED] = seed if seed is not None else random.SystemRandom().randrange(10**6)


def _repeat(seed: int) -> str:
    return f"test files shuffled with seed {seed} (repeat: --shuffle-files --shuffle-seed {seed})"


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.stash.get(_SEED, None)
    return None if seed is None else _repeat(seed)


def shuffled_by_file(items: list[pytest.Item], seed: int) -> list[pytest.Item]:
    """``items`` with their files in the seed's order, each file's items in written order."""
    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    order = list(files)
    random.Random(seed).shuffle(order)
    return [item for path in order for item in files[path]]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seed = config.stash.get(_SEED, None)
    if seed is not None:
        items[:] = shuffled_by_file(items, seed)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    seed = terminalreporter.config.stash.get(_SEED, None)
    if seed is not None:
        terminalreporter.write_line(_repeat(seed))
