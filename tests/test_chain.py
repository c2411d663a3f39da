"""The chains every latency case walks: the computed cycle of the host chase (a bijection of
positions onto lines, its links and endings computed in O(1)) and the Sattolo permutation of
the GPU chases, each one cycle through every line, with the ending line a walk of N steps
must reach computed apart from any timed buffer."""

import subprocess
import sys

import numpy as np
import pytest

from bwprof.chain import Cycle, ending_line, is_one_cycle, sattolo_order


@pytest.mark.parametrize("lines", [2, 3, 5, 64, 100, 1000, 4096, 99_991, 1 << 16, 3 << 15])
def test_the_cycle_visits_every_line_once_a_lap(lines):
    cycle = Cycle.of(lines)
    order = cycle.lines_at(np.arange(lines))
    assert np.array_equal(np.sort(order), np.arange(lines, dtype=np.uint64))
    # Each line links to the next position's line, the last back to the first: one cycle.
    assert np.array_equal(cycle.next_lines(order), np.roll(order, -1))


def test_the_ending_of_a_walk_is_computed_not_walked():
    cycle = Cycle.of(500)
    line = cycle.line_at(0)
    for steps in range(1, 1201):
        line = int(cycle.next_lines(np.array([line]))[0])
        if steps in (1, 7, 499, 500, 501, 1200):
            assert cycle.ending_line(steps) == line
    assert cycle.ending_line(500) == cycle.line_at(0)  # a whole lap comes back
    assert cycle.ending_line(12, start_position=490) == cycle.line_at(2)


@pytest.mark.parametrize("lines", [(1 << 31) + 5, 1 << 32, (1 << 33) + 1, 1 << 40])
def test_cycles_of_billions_of_lines_invert_exactly(lines):
    """Chains of 128 GiB to 64 TiB (2^31 to 2^40 lines, where int32 and 2^32 arithmetic would
    wrap): positions map to lines and back, and walks end where they should."""
    cycle = Cycle.of(lines)
    positions = np.array([0, 1, 2, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, lines - 1],
                         dtype=np.uint64) % np.uint64(lines)
    found = cycle.lines_at(positions)
    assert np.all(found < np.uint64(lines))
    assert len(set(found.tolist())) == len(set(positions.tolist()))
    last = cycle.line_at(lines - 1)
    assert cycle.next_lines(np.array([last]))[0] == cycle.line_at(0)
    assert cycle.ending_line(lines + 3) == cycle.line_at(3)


def test_consecutive_loads_land_anywhere_in_the_buffer():
    """No stride and no neighbourhood a prefetcher could follow: consecutive lines are as
    far apart as random ones (mean distance about a third of the buffer), and no step
    repeats more than chance would have it (a few times in 65,535)."""
    lines = 1 << 20
    order = Cycle.of(lines).lines_at(np.arange(1 << 16)).astype(np.int64)
    steps = np.diff(order)
    assert 0.28 < np.mean(np.abs(steps)) / lines < 0.39
    assert np.mean(np.abs(steps) < 64) < 0.001  # within 4 KiB of the last: as rare as chance
    assert np.unique(steps, return_counts=True)[1].max() <= 8


def test_sizes_get_different_cycles_and_one_size_the_same():
    assert not np.array_equal(Cycle.of(256).lines_at(np.arange(128)),
                              Cycle.of(128).lines_at(np.arange(128)))
    assert np.array_equal(Cycle.of(256).lines_at(np.arange(256)),
                          Cycle.of(256).lines_at(np.arange(256)))


@pytest.mark.parametrize("lines", [2, 3, 64, 1000, 1 << 16])
def test_the_order_is_one_cycle_through_every_line(lines):
    order = sattolo_order(lines)
    assert sorted(order.tolist()) == list(range(lines))
    assert is_one_cycle(order)
    assert not np.any(order == np.arange(lines))  # no line links to itself


def test_ending_line_is_a_walk_of_the_order():
    order = sattolo_order(500)
    line, steps = 0, 0
    for steps in (1, 7, 499, 500, 501, 12345):
        line = 0
        for _ in range(steps):
            line = int(order[line])
        assert ending_line(order, 0, steps) == line
    assert ending_line(order, 0, 500) == 0  # a whole lap comes back


def test_a_permutation_of_two_cycles_is_refused():
    order = np.array([1, 0, 3, 2], dtype=np.uint64)
    assert not is_one_cycle(order)


def test_sizes_get_different_chains_and_one_size_the_same():
    assert not np.array_equal(sattolo_order(256)[:128], sattolo_order(128))
    assert np.array_equal(sattolo_order(256), sattolo_order(256))


def test_a_seed_of_2_to_the_63_or_more_after_a_small_one():
    """A user's 1 GiB and 2 GiB chases raised 'int too big to convert': the shuffle had been
    compiled for an int64 seed by the smaller sizes before, and Numba refused a seed of 2^63
    or more instead of compiling for uint64. In a fresh process, as the sweep runs."""
    # Seeds either side of 2^63, in the order the sweep met them (small sets mix to a seed
    # of 2^63 or more, 512 MiB's to one below, 1 GiB's above again), on small chains.
    script = ("from bwprof.chain import sattolo_order, is_one_cycle\n"
              "for seed in (2**63 + 5, 5, 2**64 - 3, 7):\n"
              "    assert is_one_cycle(sattolo_order(1000, seed)), seed\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


@pytest.mark.parametrize("make", [Cycle.of, sattolo_order])
def test_a_chain_needs_two_lines(make):
    with pytest.raises(ValueError, match="at least 2 lines"):
        make(1)
