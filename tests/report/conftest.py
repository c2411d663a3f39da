"""Run folders under tests/data/ (see its README): copies for tests that write or break them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bwprof import cli
from tests.conftest import built_once

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def run_copy(tmp_path):
    """copy("sim-a") -> a writable copy of tests/data/sim-a under tmp_path."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(DATA / name, target)
        return target

    return copy


@pytest.fixture(scope="session")
def h200_page(tmp_path_factory) -> Path:
    """`report --html` of tests/data/h200-quick, written once a session (about 5 s of plots)
    into a folder the page tests and the browser tests only read."""

    def build(out: Path) -> None:
        assert cli.main(["report", str(DATA / "h200-quick"), "--html", "--out", str(out)]) == 0

    return built_once(tmp_path_factory, "h200-page", build)
