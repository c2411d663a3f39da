"""Run folders under tests/data/ (see its README): copies for tests that write or break them;
and a count of the figures' layout solves."""

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



@pytest.fixture
def layout_solves(monkeypatch) -> list[str]:
    """A list that gets one entry for each constrained-layout solve of any figure from here
    on (the costly part of drawing one)."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    solves: list[str] = []
    real = ConstrainedLayoutEngine.execute
    monkeypatch.setattr(ConstrainedLayoutEngine, "execute",
                        lambda engine, figure: solves.append("layout") or real(engine, figure))
    return solves
