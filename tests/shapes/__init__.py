"""Machine shapes: the machines bwprof is for, each described in one JSON file here (the run
folder's own vocabulary: a `host` and its `gpus`, as system.json writes them; see
`bwprof.described`), with the budgets a run of each preset must be estimated within.

Adding a shape is adding a file: every test parametrized over `SHAPES` picks it up (the
planner's budgets, the memory it takes, sysfs read back, simulated runs on its GPUs)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from bwprof.described import DescribedMachine, load_machine

FOLDER = Path(__file__).parent
SHAPES: tuple[Path, ...] = tuple(sorted(FOLDER.glob("*.json")))


def shape(name: str) -> DescribedMachine:
    return load_machine(FOLDER / f"{name}.json")


def budgets() -> list[tuple[str, str, float]]:
    """(shape, preset, seconds) for every budget every shape declares."""
    return [(path.stem, preset, seconds) for path in SHAPES
            for preset, seconds in load_machine(path).budgets_s.items()]


def gpu_shapes() -> list[Path]:
    """The shapes with GPUs: those a simulated run can take the topology of."""
    return [path for path in SHAPES if load_machine(path).gpus]


def simulate_gpus(patch: pytest.MonkeyPatch, machine: DescribedMachine,
                  memory_bytes: int) -> None:
    """`bwprof.run(simulate=True)` (and `api.plan_run(simulate=True)`) on the simulated
    backend with `machine`'s GPUs (`sim.SimBackend(gpus=...)`): their count, names, SMs,
    peer access, MIG, NVLink-C2C and NUMA nodes, each with `memory_bytes` of memory so the
    copies stay small."""
    from bwprof.gpu import sim

    patch.setattr(sim, "SimBackend",
                  partial(sim.SimBackend, gpus=machine.gpus, memory_bytes=memory_bytes))
