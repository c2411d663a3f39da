"""Reading back the NUMA node of pages, on this machine's own memory."""

import mmap
import os
import platform
from pathlib import Path

import numpy as np
import pytest

from bwprof.cpulist import parse_cpu_list, process_affinity
from bwprof.host import placement


def _fresh(nbytes: int) -> np.ndarray:
    return np.frombuffer(mmap.mmap(-1, nbytes), dtype=np.uint8)


def _node_of_this_cpu() -> tuple[int, frozenset[int]]:
    """A NUMA node this process may run on, and its CPUs it may use (node 0 and every allowed
    CPU where sysfs has no nodes)."""
    allowed = frozenset(os.sched_getaffinity(0))
    for folder in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        cpus = allowed & (parse_cpu_list((folder / "cpulist").read_text().strip()) or set())
        if cpus:
            return int(folder.name.removeprefix("node")), frozenset(cpus)
    return 0, allowed


@pytest.fixture
def share_or_skip():
    probe = _fresh(1 << 20)
    probe.fill(1)
    if placement.node_share([probe], 0) is None:
        pytest.skip("this kernel cannot report page placement (move_pages)")
    return placement.node_share


def test_touched_pages_are_found_on_their_node_and_untouched_ones_nowhere(share_or_skip):
    node, cpus = _node_of_this_cpu()
    array = _fresh(8 << 20)
    assert share_or_skip([array], node) == 0.0  # nothing touched yet: no page anywhere
    with process_affinity(cpus):  # this thread first-touches on `node`
        array[: 2 << 20] = 1  # a quarter (a huge page may bring in up to 2 MiB more)
        assert 0.0 < share_or_skip([array], node) < 1.0
        array.fill(1)
    assert share_or_skip([array], node) == 1.0
    assert share_or_skip([array], node + 1) == 0.0  # no page on a node it is not on


def test_only_contiguous_arrays_are_read():
    with pytest.raises(ValueError, match="contiguous"):
        placement.node_share([_fresh(1 << 20)[::2]], 0)


def test_no_answer_where_the_platform_has_no_known_system_call(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "riscv128")
    array = _fresh(1 << 20)
    array.fill(1)
    assert placement.node_share([array], 0) is None


def test_pages_the_kernel_will_not_report_count_neither_way(monkeypatch):
    """A driver's mapping answers EFAULT for every page: no verdict, not 'elsewhere'."""
    import errno

    array = _fresh(1 << 20)
    monkeypatch.setattr(placement, "_move_pages", lambda addresses: [-errno.EFAULT] * 4)
    assert placement.node_share([array], 0) is None
    monkeypatch.setattr(placement, "_move_pages",
                        lambda addresses: [0, -errno.EFAULT, -errno.ENOENT, 1])
    assert placement.node_share([array], 0) == pytest.approx(1 / 3)
