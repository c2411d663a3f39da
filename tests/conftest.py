"""Shared fixtures: tests run without a GPU; small arrays keep them fast on two cores.

Numba's CUDA simulator is switched on for the whole test process (it must be set before numba
is first imported) unless the run selects the real-GPU tests with `-m gpu`. Tests that compile
for a real device (PTX) run in a subprocess without it.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bwprof import interrupts
from bwprof.plan import Plan, make_plan
from bwprof.units import MiB


@pytest.fixture(autouse=True)
def _no_debug_from_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """BWPROF_DEBUG=1 in the caller's environment (the GPU check exports it) would add log
    lines and tracebacks to the output tests read: a test that wants it sets it."""
    monkeypatch.delenv("BWPROF_DEBUG", raising=False)


@pytest.fixture(autouse=True)
def _host_busy_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Host jobs measured in a test read no /proc/stat: their `busy_host` flag, note and
    shares would follow the load of the machine the suite runs on (other tests, other
    work), which no expectation may depend on. tests/host/test_busy.py reads it on purpose."""
    from bwprof.host import busy

    monkeypatch.setattr(busy, "PROC_STAT", Path("/nonexistent/bwprof-tests/proc/stat"))


@pytest.fixture
def stop_signals() -> Iterator[None]:
    """bwprof's handlers for the stop signals, as the CLI installs them; pytest's after."""
    saved = {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS}
    for signum in interrupts.STOP_SIGNALS:  # as for a user at a terminal, though pytest
        signal.signal(signum, signal.SIG_DFL)  # runs as a background job (SIGINT ignored)
    interrupts.install()
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    interrupts.reset()


@pytest.fixture
def small_plan() -> Plan:
    """Host DDR cases on 1 MiB arrays, 3 repetitions, one thread."""
    return make_plan(
        cases="ddr_", repeats=3, threads="1", size="1MiB",
        usable_cpus=2, llc_bytes=32 * MiB, memory_available_bytes=8 << 30,
    )


class FakeClock:
    """A monotonic clock that advances by the given steps, one step per call pair."""

    def __init__(self, durations: list[float]) -> None:
        self.durations = list(durations)
        self.now = 100.0
        self.calls = 0

    def __call__(self) -> float:
        # Even calls start a timed region, odd calls end it after the next duration.
        if self.calls % 2:
            self.now += self.durations.pop(0)
        self.calls += 1
        return self.now


@pytest.fixture
def fake_clock_factory():
    return FakeClock


def wants_real_gpu(markexpr: str) -> bool:
    return "gpu" in markexpr and "not gpu" not in markexpr


def _compile_bwprof() -> None:
    """bwprof's modules as bytecode beside them, where this Python writes none itself
    (PYTHONDONTWRITEBYTECODE, as on the CI machine): each `python -m bwprof` process the
    fault tests start (dozens) would otherwise compile its 80 modules from source again,
    about 0.15 s each. The files go where Python's own would (__pycache__, ignored by git);
    a later session finds them up to date."""
    if sys.dont_write_bytecode:
        import compileall

        compileall.compile_dir(Path(__file__).resolve().parents[1] / "bwprof", quiet=2)


def pytest_configure(config: pytest.Config) -> None:
    _compile_bwprof()
    if wants_real_gpu(config.getoption("markexpr") or ""):
        return
    numba = sys.modules.get("numba")
    if numba is not None and not getattr(getattr(numba, "config", None), "ENABLE_CUDASIM", 0):
        # Too late to switch the simulator on: the kernel-logic tests would skip silently.
        raise pytest.UsageError(
            "numba was imported before tests/conftest.py could switch on its CUDA simulator; "
            "set NUMBA_ENABLE_CUDASIM=1 or keep numba out of conftest-time imports")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    # Numba's parallel kernels (host STREAM, and the simulated backend's kernels) run on GNU
    # OpenMP, whose idle threads spin. The tests launch thousands of tiny parallel regions:
    # with anything else busy on two cores, each waits for a descheduled thread (one
    # simulated pipeline took 16 s beside two busy loops, 2.7 s with passive waits and
    # 1.4 s on an idle machine). Read once, when Numba first loads OpenMP (after this); the
    # bwprof subprocesses the tests start inherit it. No test measures speed.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def env_without_cudasim() -> dict[str, str]:
    """Environment for a subprocess that must see the real numba.cuda (PTX, real runs)."""
    return {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}


def small_simulated_gpus(patch: pytest.MonkeyPatch, memory_bytes: int) -> None:
    """`bwprof.run(simulate=True)` on simulated GPUs of `memory_bytes`: the sizes that do not
    fit are skipped and the overlap cases halve theirs to fit, so a test that reads the rows'
    shape, not their sizes, copies a few MiB instead of the default 64 MiB GPU's 16 MiB."""
    from functools import partial

    from bwprof.gpu import sim

    patch.setattr(sim, "SimBackend", partial(sim.SimBackend, memory_bytes=memory_bytes))


DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def run_copy(tmp_path):
    """copy("sim-a") -> a writable copy of tests/data/sim-a (see its README) under tmp_path."""

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
