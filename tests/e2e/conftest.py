"""Fixtures of the e2e tests (the setup they share is ``tests/e2e/serving.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.gateway_fixtures import train_tokenizer, write_model_dir


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A tiny byte-level BPE and chat template: read by the simulators and the gateway."""
    return write_model_dir(tmp_path / "model", train_tokenizer())
