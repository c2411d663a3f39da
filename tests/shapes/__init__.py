"""Machine shapes: the machines bwprof is for, each described in one JSON file here (the run
folder's own vocabulary: a `host` and its `gpus`, as system.json writes them; see
`bwprof.described`), with the budgets a run of each preset must be estimated within.

Adding a shape is adding a file: every test parametrized over `SHAPES` picks it up (the
planner's budgets, the memory it takes, sysfs read back, simulated runs on its GPUs)."""

from __future__ import annotations

from pathlib import Path

from bwprof.described import DescribedMachine, load_machine

FOLDER = Path(__file__).parent
SHAPES: tuple[Path, ...] = tuple(sorted(FOLDER.glob("*.json")))


def shape(name: str) -> DescribedMachine:
    return load_machine(FOLDER / f"{name}.json")


def budgets() -> list[tuple[str, str, float]]:
    """(shape, preset, seconds) for every budget every shape declares."""
    return [(path.stem, preset, seconds) for path in SHAPES
            for preset, seconds in load_machine(path).budgets_s.items()]
