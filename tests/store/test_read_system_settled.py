"""read_system leaves the typed system.json in the cyclic collector's oldest generation
(issue 36): its young passes walked a fleet's 300,000 records twice for nothing."""

from __future__ import annotations

import gc
from pathlib import Path

from bwprof.store.runfolder import read_system

SYSTEM = Path(__file__).resolve().parents[1] / "data" / "h200-quick" / "system.json"


def _generation(target: object) -> int | None:
    return next((generation for generation in range(3)
                 if any(item is target for item in gc.get_objects(generation=generation))),
                None)


def test_the_records_read_are_in_the_oldest_generation():
    meta = read_system(SYSTEM)
    assert _generation(meta) == 2
    assert meta.gpus.devices and _generation(meta.gpus.devices[0]) == 2


def test_objects_the_program_froze_stay_frozen():
    from bwprof.schema.reading import settle_young_objects

    gc.freeze()  # the program's own objects (a server freezes those it forked with)
    try:
        frozen = gc.get_freeze_count()
        meta = read_system(SYSTEM)
        settle_young_objects()
        assert gc.get_freeze_count() == frozen
        assert meta.run_id
    finally:
        gc.unfreeze()
