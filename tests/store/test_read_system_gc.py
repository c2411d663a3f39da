"""read_system holds the cyclic collector off across parsing and checking system.json (issue
36), and leaves it as it found it, whether the file reads or is refused."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from bwprof.errors import BwprofError
from bwprof.store.runfolder import read_system
from tests.schema.test_meta_outcomes import full


def test_read_system_leaves_the_collector_as_it_found_it(tmp_path: Path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(full()))
    data = full()
    data["nodes"]["n1"]["host"]["caches"] = "none"
    bad.write_text(json.dumps(data))
    seen: list[bool] = []
    import bwprof.store.runfolder as runfolder

    real = runfolder.system_meta

    def spy(system: object, path: Path) -> object:
        seen.append(gc.isenabled())
        return real(system, path)

    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            runfolder.system_meta = spy  # type: ignore[assignment]
            try:
                assert read_system(good).nodes is not None
                with pytest.raises(BwprofError, match=r"nodes\.n1\.host\.caches"):
                    read_system(bad)
            finally:
                runfolder.system_meta = real
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False] * 4  # checking ran with the collector off, as parsing did
