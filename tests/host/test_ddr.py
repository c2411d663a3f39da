import numba
import numpy as np
import pytest

from bwprof.cases import get_case
from bwprof.host import stream
from bwprof.host.ddr import HostExecutor, HostStream
from bwprof.measurement import Job
from bwprof.plan import MiB


def _broken_triad(a, b, c, scalar):
    """Triad that gets one element wrong: validation must catch it."""
    a[:] = b + scalar * c
    a[a.size // 2] += 1.0


def test_time_kernel_drops_the_first_repetition(fake_clock_factory):
    clock = fake_clock_factory([9.0, 1.0, 2.0, 3.0])
    bench = HostStream(2048, clock=clock)
    seconds, _ = bench.time_kernel("copy", repeats=4)
    assert seconds == [1.0, 2.0, 3.0]
    assert bench.validate("copy", 4, None) == ""


def test_validation_catches_a_wrong_element():
    kernels = {**stream.KERNELS, "triad": stream.StreamKernel("triad", _broken_triad,
                                                              stream.KERNELS["triad"].replay)}
    bench = HostStream(2048, kernels=kernels)
    _, value = bench.time_kernel("triad", repeats=2)
    assert "1 of 2048 elements of a" in bench.validate("triad", 2, value)


def test_validation_catches_a_wrong_dot():
    bench = HostStream(2048)
    bench.time_kernel("dot", repeats=2)
    assert "dot = 1.0" in bench.validate("dot", 2, 1.0)


def test_executor_measures_every_size_and_thread_count(small_plan):
    executor = HostExecutor("test cpu")
    case = get_case("ddr_triad")
    jobs = executor.jobs(case, small_plan)
    assert jobs == [Job("ddr_triad", size_bytes=MiB, threads=1)]
    before = numba.get_num_threads()
    (m,) = executor.measure(case, jobs[0], small_plan)
    assert numba.get_num_threads() == before
    assert m.valid and m.note == ""
    assert len(m.seconds_per_op) == small_plan.repeats - 1
    assert all(s > 0 for s in m.seconds_per_op)
    assert m.bytes_per_op == 3 * MiB
    assert (m.device, m.device_name, m.memory, m.threads) == ("cpu", "test cpu", "ddr", 1)


def test_executor_marks_a_failed_validation(small_plan):
    kernels = {**stream.KERNELS, "triad": stream.StreamKernel("triad", _broken_triad,
                                                              stream.KERNELS["triad"].replay)}
    executor = HostExecutor("cpu", kernels=kernels)
    case = get_case("ddr_triad")
    (m,) = executor.measure(case, executor.jobs(case, small_plan)[0], small_plan)
    assert not m.valid
    assert m.note.startswith("validation failed")


@pytest.mark.parametrize("key", ["ddr_copy", "ddr_scale", "ddr_add", "ddr_dot"])
def test_every_ddr_case_validates(small_plan, key):
    executor = HostExecutor("cpu")
    case = get_case(key)
    (m,) = executor.measure(case, executor.jobs(case, small_plan)[0], small_plan)
    assert m.valid, m.note
    assert np.isfinite(m.seconds_per_op).all()


def test_each_thread_count_gets_arrays_first_touched_by_its_own_threads(monkeypatch):
    from bwprof.host import ddr
    from bwprof.plan import make_plan

    made = []

    class Recorded(ddr.HostStream):
        def __init__(self, *args, **kwargs):
            made.append(numba.get_num_threads())  # the threads that will first touch them
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(ddr, "HostStream", Recorded)
    plan = make_plan(cases="ddr_copy,ddr_triad", repeats=2, threads="1,2", size="1MiB",
                     usable_cpus=2, llc_bytes=None, memory_available_bytes=None)
    executor = HostExecutor("cpu")
    for case in plan.host_cases:
        for job in executor.jobs(case, plan):
            executor.measure(case, job, plan)
    # copy@1, copy@2, triad@1, triad@2: fresh arrays whenever the thread count changes.
    assert made == [1, 2, 1, 2]
