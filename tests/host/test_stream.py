import numpy as np
import pytest

from bwprof.host import stream


@pytest.fixture
def arrays():
    a, b, c = (np.empty(4096) for _ in range(3))
    stream.fill(a, b, c, stream.INIT_A, stream.INIT_B, stream.INIT_C)
    return a, b, c


@pytest.mark.parametrize("name", ["copy", "scale", "add", "triad"])
@pytest.mark.parametrize("runs", [1, 3])
def test_kernels_match_their_scalar_replay(arrays, name, runs):
    kernel = stream.KERNELS[name]
    for _ in range(runs):
        kernel.run(*arrays, stream.SCALAR)
    gold_a, gold_b, gold_c, _ = stream.gold(kernel, runs)
    np.testing.assert_array_equal(arrays[0], gold_a)
    np.testing.assert_array_equal(arrays[1], gold_b)
    np.testing.assert_array_equal(arrays[2], gold_c)


def test_every_kernel_changes_what_it_writes():
    # Gold values differ from the start values, so a kernel that does nothing fails validation.
    start = (stream.INIT_A, stream.INIT_B, stream.INIT_C)
    for name in ("copy", "scale", "add", "triad"):
        assert stream.gold(stream.KERNELS[name], 1)[:3] != start


def test_dot(arrays):
    total = stream.KERNELS["dot"].run(*arrays, stream.SCALAR)
    *_, term = stream.gold(stream.KERNELS["dot"], 1)
    assert total == pytest.approx(term * 4096, rel=1e-12)


def test_count_mismatches_checks_every_element():
    x = np.full(10_000, 2.0)
    assert stream.count_mismatches(x, 2.0, 1e-12) == 0
    x[9_999] = 2.1
    x[0] = np.nan
    assert stream.count_mismatches(x, 2.0, 1e-12) == 2


def test_compiled_kernels_are_cached_on_disk_for_the_next_process():
    import subprocess
    import sys

    probe = (
        "from bwprof.host import stream; stream.warm_up(); "
        "kernels = [k.run for k in stream.KERNELS.values()] + [stream.fill]; "
        "print(sum(sum(k.stats.cache_hits.values()) for k in kernels), "
        "sum(sum(k.stats.cache_misses.values()) for k in kernels))"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True)
    second = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                            text=True)
    hits, misses = map(int, second.stdout.split())
    assert (hits, misses) == (6, 0), "a second process should load every kernel from the cache"


def test_no_kernel_becomes_a_call_to_the_c_library(tmp_path):
    """A loop LLVM turns into memcpy/memset measures the C library (non-temporal stores, no
    write-allocate), not the STREAM loop the reference runs; it happened to `copy` once."""
    import os
    import re
    import subprocess
    import sys

    probe = ("import numpy as np; from bwprof.host import stream; "
             "a, b, c = (np.ones(64) for _ in range(3)); "
             "stream.fill(a, b, c, 1.0, 2.0, 0.5); "
             "[k.run(a, b, c, 3.0) for k in stream.KERNELS.values()]")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_DUMP_ASSEMBLY": "1"}
    dump = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                          text=True, env=env).stdout
    # The dump is a run of "----ASSEMBLY name----" sections; the loops are the parfor gufuncs.
    loops = [section for section in re.split(r"^-+ASSEMBLY ", dump, flags=re.MULTILINE)
             if section.startswith("__numba_parfor_gufunc")]
    assert len(loops) == len(stream.KERNELS) + 1, "the dump should hold every parallel loop"
    for loop in loops:
        assert not re.search(r"\b(memcpy|memmove|memset)\b", loop), loop.splitlines()[0]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_check_reports_a_wrong_element_in_every_array(arrays, index):
    kernel = stream.KERNELS["copy"]
    kernel.run(*arrays, stream.SCALAR)
    assert stream.check(kernel, 1, *arrays) == ""
    arrays[index][7] = -1.0
    assert f"1 of 4096 elements of {'abc'[index]}" in stream.check(kernel, 1, *arrays)
