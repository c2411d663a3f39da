"""NVML scenarios as fixtures (see fakes.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bwprof.telemetry import nvml as nvml_module
from bwprof.telemetry.nvml import Nvml
from tests.telemetry.fakes import fake_pynvml, h200_functions


@pytest.fixture(autouse=True)
def fresh_unsupported_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees 'logged once per process' from a clean process."""
    monkeypatch.setattr(nvml_module, "_reported", set())


@pytest.fixture
def h200() -> tuple[Nvml, SimpleNamespace]:
    fake = fake_pynvml(**h200_functions())
    return Nvml(fake), fake
