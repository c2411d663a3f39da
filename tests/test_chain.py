"""The Sattolo chain every latency case walks: one cycle through every line, and the ending
line a walk of N steps must reach, computed apart from any timed buffer."""

import numpy as np
import pytest

from bwprof.chain import ending_line, is_one_cycle, sattolo_order


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


def test_a_chain_needs_two_lines():
    with pytest.raises(ValueError, match="at least 2 lines"):
        sattolo_order(1)
