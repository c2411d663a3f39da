"""Run folders under tests/data/ (see its README): copies for tests that write or break them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def run_copy(tmp_path):
    """copy("sim-a") -> a writable copy of tests/data/sim-a under tmp_path."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(DATA / name, target)
        return target

    return copy

