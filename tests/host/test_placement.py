"""Reading back the NUMA node of pages, on this machine's own memory."""

import mmap
import os
import platform
from pathlib import Path

import numpy as np
import pytest

from bwprof.cpulist import parse_cpu_list
from bwprof.host import placement


def _fresh(nbytes: int) -> np.ndarray:
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype=np.uint8)


def _node_of_this_cpu() -> int:
    """The NUMA node of a CPU this process may run on (0 where sysfs has no nodes)."""
    allowed = os.sched_getaffinity(0)
    for folder in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        if allowed & set(parse_cpu_list((folder / "cpulist").read_text().strip()) or ()):
            return int(folder.name.removeprefix("node"))
    return 0


@pytest.fixture
def share_or_skip():
    probe = _fresh(1 << 20)
    probe.fill(1)
    if placement.node_share([probe], 0) is None:
        pytest.skip("this kernel cannot report page placement (move_pages)")
    return placement.node_share


def test_touched_pages_are_found_on_their_node_and_untouched_ones_nowhere(share_or_skip):
    node = _node_of_this_cpu()
    array = _fresh(8 << 20)
    assert share_or_skip([array], node) == 0.0  # nothing touched yet: no page anywhere
    array[: 4 << 20] = 1
    assert share_or_skip([array], node) == pytest.approx(0.5, abs=0.01)
    array.fill(1)
    assert share_or_skip([array], node) == 1.0
    assert share_or_skip([array], node + 1) == 0.0  # no page on a node it is not on


def test_no_answer_where_the_platform_has_no_known_system_call(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "riscv128")
    array = _fresh(1 << 20)
    array.fill(1)
    assert placement.node_share([array], 0) is None
