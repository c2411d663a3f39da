"""The compiled host latency kernels: the chase follows the links it was given, one load a
step, and the load threads see the flags another thread sets (an acquire read per poll)."""

import threading
import time

import numpy as np

from bwprof.chain import ending_line, sattolo_order
from bwprof.host import chase


def _linked(lines):
    words = np.zeros(lines * chase.LINE_WORDS, dtype=np.uint64)
    order = sattolo_order(lines)
    base = words.ctypes.data
    chase.link(words, order, base)
    return words, order, base


def test_the_chase_ends_where_the_permutation_says():
    words, order, base = _linked(1000)
    for steps in (1, 999, 1000, 4321):
        end = int(chase.chase(base, steps))
        assert (end - base) % chase.LINE_BYTES == 0
        assert (end - base) // chase.LINE_BYTES == ending_line(order, 0, steps)
    assert words[0] == base + int(order[0]) * chase.LINE_BYTES


def test_a_broken_link_ends_elsewhere():
    words, order, base = _linked(64)
    words[0] = base  # line 0 now links to itself: the walk never leaves it
    assert int(chase.chase(base, 100)) == base != base + ending_line(order, 0, 100) * 64


def _started(target):
    result = []
    thread = threading.Thread(target=lambda: result.append(target()), daemon=True)
    thread.start()
    return thread, result


def test_the_load_runs_from_go_until_stop_set_by_another_thread():
    data = np.ones(1 << 16, dtype=np.int64)
    chase.stream_load(data, np.ones(2, dtype=np.int64), 1024, 0)  # compiled before timing
    control = np.zeros(2, dtype=np.int64)
    thread, result = _started(lambda: chase.stream_load(data, control, 1024, 0))
    time.sleep(0.05)
    assert thread.is_alive()  # waiting for GO
    control[chase.GO] = 1
    time.sleep(0.05)
    control[chase.STOP] = 1
    thread.join(10)
    assert not thread.is_alive() and result[0] > 0


def test_the_load_gives_up_waiting_when_the_chase_stops_first():
    control = np.zeros(2, dtype=np.int64)
    thread, result = _started(
        lambda: chase.stream_load(np.ones(4096, dtype=np.int64), control, 1024, 10))
    control[chase.STOP] = 1
    thread.join(10)
    assert not thread.is_alive() and result == [0]


def test_the_pause_and_the_calibration_pass_compute():
    assert chase.read_pass(np.ones(4096, dtype=np.int64), 1024) == 4096
    assert chase.spin(0, 0.5) == 0.5 and chase.spin(3, 0.5) != 0.5
