"""The compiled host latency kernels: the chase follows the links it was given, one load a
step, and the load threads see the flags another thread sets (an acquire read per poll)."""

import threading
import time

import numpy as np
import pytest

from bwprof.chain import Cycle
from bwprof.host import chase


def _linked(lines, first=0):
    words = np.zeros(lines * chase.LINE_WORDS, dtype=np.uint64)
    cycle = Cycle.of(lines)
    base = words.ctypes.data
    chase.link(words, cycle.params, np.uint64(base), np.uint64(first))
    return words, cycle, base


@pytest.mark.parametrize("lines", [2, 3, 1000, 1024])
def test_the_chase_ends_where_the_cycle_says(lines):
    _words, cycle, base = _linked(lines)  # _words: the buffer stays alive
    start = base + cycle.line_at(0) * chase.LINE_BYTES
    for steps in (1, lines - 1, lines, 4321):
        end = int(chase.chase(start, steps))
        assert (end - base) % chase.LINE_BYTES == 0
        assert (end - base) // chase.LINE_BYTES == cycle.ending_line(steps)
    assert int(chase.chase(start, lines)) == start  # one lap comes back


@pytest.mark.parametrize("first", [0, 1, 1000, 4095, 4096])
def test_every_line_links_to_the_next_position_of_the_cycle(first):
    """Whichever lines are written first (the walk's first positions, in walk order), every
    line ends up linked to the next position's: one chain, whatever the order of writing."""
    words, cycle, base = _linked(4096, first)
    links = (words[::chase.LINE_WORDS] - np.uint64(base)) // np.uint64(chase.LINE_BYTES)
    lines = cycle.lines_at(np.arange(4096))
    assert np.array_equal(links[lines], np.roll(lines, -1))
    assert not np.any(words.reshape(-1, chase.LINE_WORDS)[:, 1:])  # one word a line


def test_a_broken_link_ends_elsewhere():
    words, cycle, base = _linked(64)
    first = cycle.line_at(0)
    start = base + first * chase.LINE_BYTES
    words[first * chase.LINE_WORDS] = start  # the first line now links to itself
    assert int(chase.chase(start, 100)) == start != base + cycle.ending_line(100) * 64


def _started(target):
    result = []
    thread = threading.Thread(target=lambda: result.append(target()), daemon=True)
    thread.start()
    return thread, result


def _ran_after(thread: threading.Thread, cpu_s: float) -> None:
    """Return once `thread` has spent `cpu_s` of CPU time from now: however loaded the
    machine, it then ran that long after whatever this thread did before the call."""
    clock = time.pthread_getcpuclockid(thread.ident)
    start, guard = time.clock_gettime(clock), time.monotonic() + 120
    while time.clock_gettime(clock) - start < cpu_s:
        assert thread.is_alive() and time.monotonic() < guard, "the load thread stopped running"
        time.sleep(0.001)


def test_the_load_runs_from_go_until_stop_set_by_another_thread():
    data = np.ones(1 << 16, dtype=np.int64)
    chase.stream_load(data, np.ones(2, dtype=np.int64), 1024, 0)  # compiled before timing
    control = np.zeros(2, dtype=np.int64)
    thread, result = _started(lambda: chase.stream_load(data, control, 1024, 0))
    _ran_after(thread, 0.02)
    assert thread.is_alive()  # waiting for GO
    control[chase.GO] = 1
    _ran_after(thread, 0.02)  # loads since GO, however late the thread was scheduled
    control[chase.STOP] = 1
    thread.join(120)
    assert not thread.is_alive() and result[0] > 0


def test_the_load_gives_up_waiting_when_the_chase_stops_first():
    control = np.zeros(2, dtype=np.int64)
    thread, result = _started(
        lambda: chase.stream_load(np.ones(4096, dtype=np.int64), control, 1024, 10))
    control[chase.STOP] = 1
    thread.join(120)  # a guard: it ends at once (a Numba cache miss compiles first)
    assert not thread.is_alive() and result == [0]


def test_the_pause_and_the_calibration_pass_compute():
    assert chase.read_pass(np.ones(4096, dtype=np.int64), 1024) == 4096
    assert chase.spin(0, 0.5) == 0.5 and chase.spin(3, 0.5) != 0.5
