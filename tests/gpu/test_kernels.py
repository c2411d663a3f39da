"""Kernel logic of bwprof.gpu.kernels under Numba's CUDA simulator (no GPU needed).

The simulator checks what the kernels compute, never how fast: arrays stay small (1000 elements,
an odd size) and grids smaller than the arrays so the grid-stride loops are exercised. Every
element is compared with the scalar replay of `bwprof.host.stream.gold`; the STREAM values are
exactly representable, so the comparison is exact. The `hold` kernel calls cuda.nanosleep,
which the simulator lacks; it is covered by the PTX test instead.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bwprof.gpu.kernels import (
    DOT_BLOCKS,
    KERNELS,
    MAX_BLOCKS,
    STREAM_UNROLL,
    THREADS_PER_BLOCK,
    UNROLLED_MIN_BLOCKS,
    launch_config,
)
from bwprof.host import stream
from bwprof.host.stream import INIT_A, INIT_B, INIT_C, SCALAR, gold

N = 1000  # odd, and not a multiple of any grid below
SMALL_GRID = (2, 32)  # 64 threads for 1000 elements: each thread loops ~16 times
ELEMENT_GRIDS = [(1, 1), (1, 3), (3, 7), (2, 32), (4, 64)]
"""Grids for the element-placement tests: one thread, odd blocks, several blocks, and 256
threads, which loop (four loads a thread) over the longer lengths and pass
the end of the shorter ones. The simulator runs a Python thread for each CUDA thread, so
(4, 256) took about 0.5 s a launch and, at 1024 threads, never entered those loops."""


def _host_arrays(n: int = N) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.full(n, INIT_A), np.full(n, INIT_B), np.full(n, INIT_C)


def _mismatches(x: np.ndarray, expected: float) -> int:
    return int(np.count_nonzero(x != expected))


@pytest.mark.parametrize("grid", [SMALL_GRID, None], ids=["looping", "the-runs-own-grid"])
@pytest.mark.parametrize("runs", [1, 2])
@pytest.mark.parametrize("name", ["copy", "scale", "add", "triad"])
def test_stream_kernel_matches_gold_on_every_element(cudasim, name, runs, grid):
    """On a grid smaller than the array (each thread loops) and on the run's own grid (one
    element a thread; for copy and scale one to four, with threads past the end and threads
    whose later elements are past the end)."""
    grid = grid or launch_config(KERNELS[name].kind, N)
    kernel = cudasim.jit(KERNELS[name].function)
    a, b, c = (cudasim.to_device(x) for x in _host_arrays())
    for _ in range(runs):
        kernel[grid](a, b, c, SCALAR)
    expected = gold(stream.KERNELS[name], runs)[:3]
    for label, device, want in zip("abc", (a, b, c), expected, strict=True):
        got = device.copy_to_host()
        assert got.size == N
        assert _mismatches(got, want) == 0, (
            f"{name} x{runs}: {label} has {_mismatches(got, want)} element(s) != {want}; "
            f"first bad index {int(np.flatnonzero(got != want)[0])}"
        )


@pytest.mark.parametrize("grid", ELEMENT_GRIDS)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 11, 12, 13, 63, 64, 65, 255, 256, 257, 1000,
                               1025])
@pytest.mark.parametrize("name", ["copy", "scale"])
def test_unrolled_kernels_put_every_element_in_its_own_place(cudasim, name, n, grid):
    """Distinct values, so an element written to its neighbour's place shows (the constant
    STREAM arrays would hide it): every length against grids where threads take four
    elements a trip, one to three in the tail (n not a multiple of the unroll: 11, 12, 13 on
    the 3-thread grid; 257 on 64 threads), n smaller than the grid, and threads past the
    end."""
    kernel = cudasim.jit(KERNELS[name].function)
    source = np.arange(n, dtype=np.float64) + 1.0
    a, b, c = (cudasim.to_device(x) for x in (source, np.zeros(n), np.zeros(n)))
    if name == "scale":
        c = cudasim.to_device(source)
    kernel[grid](a, b, c, SCALAR)
    if name == "copy":
        assert np.array_equal(c.copy_to_host(), source)
        assert not b.copy_to_host().any()
    else:
        assert np.array_equal(b.copy_to_host(), SCALAR * source)
        assert np.array_equal(c.copy_to_host(), source)
    assert np.array_equal(a.copy_to_host(), source)


def test_stream_kernels_change_what_they_write():
    """Gold values differ from the initial ones, so a kernel that did nothing would fail."""
    start = (INIT_A, INIT_B, INIT_C)
    for name, written in (("copy", 2), ("scale", 1), ("add", 2), ("triad", 0)):
        assert gold(stream.KERNELS[name], 1)[written] != start[written], name


def test_init_fills_all_three_arrays(cudasim):
    kernel = cudasim.jit(KERNELS["init"].function)
    a, b, c = (cudasim.to_device(np.zeros(N)) for _ in range(3))
    kernel[SMALL_GRID](a, b, c, INIT_A, INIT_B, INIT_C)
    for device, want in ((a, INIT_A), (b, INIT_B), (c, INIT_C)):
        assert _mismatches(device.copy_to_host(), want) == 0


def test_init_with_a_grid_larger_than_the_array(cudasim):
    """launch_config's grid for 1000 elements has 1024 threads: the extra ones write nothing."""
    kernel = cudasim.jit(KERNELS["init"].function)
    host = np.zeros(N + 24)
    view = cudasim.to_device(host)
    inner = view[:N]
    blocks, threads = launch_config("init", N)
    assert blocks * threads > N
    kernel[blocks, threads](inner, inner, inner, 7.0, 7.0, 7.0)
    got = view.copy_to_host()
    assert _mismatches(got[:N], 7.0) == 0
    assert _mismatches(got[N:], 0.0) == 0


def test_dot_partials_sum_to_the_dot_product(cudasim):
    # The block reduction assumes exactly THREADS_PER_BLOCK threads per block.
    blocks = 2
    kernel = cudasim.jit(KERNELS["dot"].function)
    a, b, _ = _host_arrays()
    partial = cudasim.to_device(np.zeros(blocks))
    kernel[blocks, THREADS_PER_BLOCK](cudasim.to_device(a), cudasim.to_device(b), partial)
    sums = partial.copy_to_host()
    term = gold(stream.KERNELS["dot"], 1)[3]
    assert term == INIT_A * INIT_B
    assert np.all(sums != 0.0), sums
    assert sums.sum() == N * term
    # Grid-stride split: block 0 owns 0..255 and 512..767, block 1 the rest.
    assert sums.tolist() == [512 * term, (N - 512) * term]


@pytest.mark.parametrize(
    ("kind", "elements", "expected"),
    [
        ("stream", 1, (1, THREADS_PER_BLOCK)),
        ("stream", 0, (1, THREADS_PER_BLOCK)),
        ("stream", THREADS_PER_BLOCK, (1, THREADS_PER_BLOCK)),
        ("stream", THREADS_PER_BLOCK + 1, (2, THREADS_PER_BLOCK)),
        ("stream", 1000, (4, THREADS_PER_BLOCK)),
        ("unrolled", 1000, (4, THREADS_PER_BLOCK)),  # small: the one-element grid
        ("unrolled", 32768, (128, THREADS_PER_BLOCK)),  # the L2 sweep's first size, 256 KiB
        ("unrolled", UNROLLED_MIN_BLOCKS * THREADS_PER_BLOCK,
         (UNROLLED_MIN_BLOCKS, THREADS_PER_BLOCK)),
        ("unrolled", 2 * UNROLLED_MIN_BLOCKS * THREADS_PER_BLOCK,
         (UNROLLED_MIN_BLOCKS, THREADS_PER_BLOCK)),  # two elements a thread, still 512 blocks
        ("unrolled", 8 * UNROLLED_MIN_BLOCKS * THREADS_PER_BLOCK,
         (2 * UNROLLED_MIN_BLOCKS, THREADS_PER_BLOCK)),
        ("unrolled", 1 << 25, ((1 << 23) // THREADS_PER_BLOCK, THREADS_PER_BLOCK)),
        ("unrolled", (1 << 25) + 1, ((1 << 23) // THREADS_PER_BLOCK + 1, THREADS_PER_BLOCK)),
        ("init", 1 << 20, ((1 << 20) // THREADS_PER_BLOCK, THREADS_PER_BLOCK)),
        ("stream", THREADS_PER_BLOCK * MAX_BLOCKS * 4, (MAX_BLOCKS, THREADS_PER_BLOCK)),
        ("dot", 10, (DOT_BLOCKS, THREADS_PER_BLOCK)),
        ("dot", 1 << 30, (DOT_BLOCKS, THREADS_PER_BLOCK)),
        ("hold", 0, (1, 32)),
    ],
)
def test_launch_config(kind, elements, expected):
    assert launch_config(kind, elements) == expected


def test_every_kernel_kind_has_a_launch_config():
    for spec in KERNELS.values():
        blocks, threads = launch_config(spec.kind, 4096)
        assert 1 <= blocks <= MAX_BLOCKS
        assert 1 <= threads <= 1024


def test_compute_does_exactly_the_iterations_asked(cudasim):
    from bwprof.gpu.kernels import COMPUTE_SCALE, COMPUTE_STEP, compute_gold

    x = np.ones(1000)
    x[::2] = 1.5
    y = np.zeros(1000)
    cudasim.jit(KERNELS["compute"].function)[2, 32](x, y, 7, COMPUTE_SCALE, COMPUTE_STEP)
    assert (y[1::2] == compute_gold(1.0, 7)).all()
    assert (y[::2] == compute_gold(1.5, 7)).all()
    assert compute_gold(1.0, 7) != compute_gold(1.0, 6)


@pytest.mark.parametrize("name,kind", [("fma_fp32", np.float32), ("fma_fp64", np.float64)])
def test_fma_kernels_store_the_exact_sum_of_their_chains(cudasim, name, kind):
    """`iterations` counts unrolled trips: 3 trips are 3 x FMA_UNROLL steps of each chain,
    and the stored sum tells 3 trips from 2 (and from 3 x 32 - 1 steps: one step is 2^-20)."""
    from bwprof.gpu.kernel_params import COMPUTE_SCALE, COMPUTE_STEP, fma_gold

    out = np.zeros(40)  # threads past the end store nothing
    cudasim.jit(KERNELS[name].function)[1, 48](out, 3, kind(COMPUTE_SCALE), kind(COMPUTE_STEP))
    assert (out == fma_gold(3)).all()
    assert fma_gold(3) != fma_gold(2)
    assert fma_gold(0) == sum(1 + j / 16 for j in range(8))


class CountingFma:
    """Stands in for `numba.cuda` in a kernel run as plain Python: counts the FMAs."""

    def __init__(self):
        self.fmas = 0

    def grid(self, dimensions):
        return 0

    def fma(self, value, scale, step):
        self.fmas += 1
        return value * scale + step


@pytest.mark.parametrize("name", ["fma_fp32", "fma_fp64"])
@pytest.mark.parametrize("iterations", [0, 1, 5])
def test_the_flop_a_fma_row_claims_are_the_fmas_its_kernel_executes(monkeypatch, name,
                                                                     iterations):
    """The kernel's source run once as Python: it calls cuda.fma exactly fma_flop / 2 times
    a thread, and its stored sum is fma_gold's (FLOP counted are FLOP done)."""
    from bwprof.gpu import kernels
    from bwprof.gpu.kernel_params import COMPUTE_SCALE, COMPUTE_STEP, fma_flop, fma_gold

    counting = CountingFma()
    monkeypatch.setattr(kernels, "cuda", counting)
    out = np.zeros(1)
    KERNELS[name].function(out, iterations, COMPUTE_SCALE, COMPUTE_STEP)
    assert counting.fmas == fma_flop(1, iterations) / 2
    assert out[0] == fma_gold(iterations)


def test_the_fma_chains_stay_exact_for_the_run_s_launch():
    """Every chain stays below 2 after FMA_ITERATIONS trips, where each 2^-20 step is exact
    in float32 (24-bit significand) and float64: the gold compare is exact."""
    from bwprof.gpu.kernel_params import (
        COMPUTE_STEP,
        FMA_CHAINS,
        FMA_ITERATIONS,
        FMA_START_STEP,
        fma_steps,
    )

    last = 1.0 + (FMA_CHAINS - 1) * FMA_START_STEP + fma_steps(FMA_ITERATIONS) * COMPUTE_STEP
    assert last < 2.0
    assert np.float32(last) == last


class Recording:
    """An array that counts the writes to each element."""

    def __init__(self, n):
        self.size, self.data, self.writes = n, np.ones(n), np.zeros(n, int)

    def __getitem__(self, i):
        return self.data[i]

    def __setitem__(self, i, v):
        self.data[i] = v
        self.writes[i] += 1


@pytest.mark.parametrize("name", ["copy", "scale", "add", "triad"])
@pytest.mark.parametrize("threads", [10, 4])
@pytest.mark.parametrize("n", [10, 2 * STREAM_UNROLL * 4 + 3])  # 4 threads: trips, tails of 0-1
def test_each_element_is_written_exactly_once(monkeypatch, name, threads, n):
    from bwprof.gpu import kernels
    arrays = [Recording(n) for _ in range(3)]
    for t in range(threads):
        grid = SimpleNamespace(grid=lambda d, t=t: t, gridsize=lambda d: threads)
        monkeypatch.setattr(kernels, "cuda", grid)  # thread t of `threads`, run in turn
        kernels.KERNELS[name].function(*arrays, 0.4)
    written = sum(a.writes for a in arrays)
    assert (written == 1).all(), written


@pytest.mark.parametrize("n", [10, 17, 3])
@pytest.mark.parametrize("threads", [10, 4, 1])
def test_the_sm_copy_writes_each_element_exactly_once(monkeypatch, n, threads):
    from bwprof.gpu import kernels
    src, dst = Recording(n), Recording(n)
    src.data = np.arange(n) + 1.0
    for t in range(threads):
        grid = SimpleNamespace(grid=lambda d, t=t: t, gridsize=lambda d: threads)
        monkeypatch.setattr(kernels, "cuda", grid)
        kernels.KERNELS["sm_copy"].function(src, dst)
    assert (dst.writes == 1).all() and not src.writes.any(), dst.writes
    assert np.array_equal(dst.data, src.data)


# -- latency: the chase and the load beside it ---------------------------------------------


def _chain(lines: int, base: int) -> tuple[np.ndarray, np.ndarray]:
    """A Sattolo cycle (made apart from the case's `Cycle`) and its chain words: line i's
    first word the address of line order[i], the chain's line 0 at `base`."""
    from bwprof.chain import sattolo_order
    from bwprof.gpu.latency import chain_addresses

    order = sattolo_order(lines)
    return order, chain_addresses(order, base)


@pytest.mark.parametrize("lines", [2, 3, 64, 1000])
def test_the_chase_follows_device_addresses_and_continues_from_there(cudasim, lines):
    """The kernel under the CUDA simulator, whose device arrays are host memory: the chain
    holds the real addresses of its own lines (one node per 128-byte line) and the kernel
    steps by loading from the address the last load returned. It must end on the line the
    chain says after every launch's loads, each launch from where the last ended."""
    from bwprof.chain import ending_line
    from bwprof.gpu.address import readable
    from bwprof.gpu.kernel_params import STATE_GENERATION, STATE_POSITION, STATE_SLOTS
    from bwprof.gpu.latency import NODE_BYTES, address_of

    chain = cudasim.device_array(lines * NODE_BYTES // 8, dtype=np.uint64)
    base = address_of(chain)
    order, words = _chain(lines, base)
    chain.copy_to_device(words)
    start = np.zeros(STATE_SLOTS, dtype=np.uint64)
    start[STATE_POSITION] = base
    state = cudasim.to_device(start)
    kernel = cudasim.jit(KERNELS["chase"].function)
    blocks, threads = launch_config("chase", words.size)
    done = 0
    for steps in (5, 0, 17, 3 * lines + 1):  # one thread walks; the others do nothing
        with readable(chain):
            kernel[blocks, threads](chain, state, steps)
        done += steps
        got = state.copy_to_host()
        assert int(got[STATE_POSITION]) == base + ending_line(order, 0, done) * NODE_BYTES
    assert int(state.copy_to_host()[STATE_GENERATION]) == 4


def test_a_simulated_chase_through_a_wild_link_raises_instead_of_reading_anywhere(cudasim):
    """Under the CUDA simulator a link outside the chain's buffer is an IndexError (the load
    reads registered arrays only), where reading the address itself segfaulted pytest."""
    from bwprof.gpu.address import readable
    from bwprof.gpu.kernel_params import STATE_POSITION, STATE_SLOTS
    from bwprof.gpu.latency import NODE_BYTES, address_of

    chain = cudasim.device_array(4 * NODE_BYTES // 8, dtype=np.uint64)
    base = address_of(chain)
    _, words = _chain(4, base)
    words[0] = 8  # line 0 links to the null page
    chain.copy_to_device(words)
    start = np.zeros(STATE_SLOTS, dtype=np.uint64)
    start[STATE_POSITION] = base
    state = cudasim.to_device(start)
    kernel = cudasim.jit(KERNELS["chase"].function)
    with readable(chain), pytest.raises(IndexError, match="0x8"):
        kernel[1, 1](chain, state, 3)


def test_the_simulated_chase_twin_walks_the_same_chain():
    from bwprof.chain import ending_line
    from bwprof.gpu.kernel_params import STATE_POSITION, STATE_SLOTS
    from bwprof.gpu.latency import NODE_BYTES, NODE_WORDS
    from bwprof.gpu.sim import SimBackend

    words = np.zeros(1000 * NODE_WORDS, dtype=np.uint64)
    base = words.ctypes.data
    order, links = _chain(1000, base)
    words[:] = links
    state = np.zeros(STATE_SLOTS, dtype=np.uint64)
    state[STATE_POSITION] = base
    backend = SimBackend(devices=1)
    backend.launch("chase", None, words, state, 12345)
    assert int(state[STATE_POSITION]) == base + ending_line(order, 0, 12345) * NODE_BYTES


def test_the_simulated_chase_twin_stops_at_an_address_outside_its_chain():
    """A chain of element indices (the old layout), or of addresses with the wrong base,
    does not walk on: the twin stops where it left the chain, so the check fails."""
    from bwprof.gpu.kernel_params import STATE_POSITION, STATE_SLOTS
    from bwprof.gpu.latency import NODE_WORDS
    from bwprof.gpu.sim import SimBackend

    words = np.zeros(4 * NODE_WORDS, dtype=np.uint64)
    words[::NODE_WORDS] = [NODE_WORDS, 2 * NODE_WORDS, 3 * NODE_WORDS, 0]  # indices
    state = np.zeros(STATE_SLOTS, dtype=np.uint64)
    state[STATE_POSITION] = words.ctypes.data
    SimBackend(devices=1).launch("chase", None, words, state, 3)
    assert int(state[STATE_POSITION]) == NODE_WORDS  # one step: index 16 is no address


@pytest.mark.parametrize("grid", [(1, 32), (2, 32), (3, 7)])
def test_the_load_copies_until_the_chase_finished_and_counts_its_bytes(cudasim, grid):
    from bwprof.gpu.kernel_params import (
        LOAD_BYTES_PER_ELEMENT,
        STATE_GENERATION,
        STATE_LOAD_BYTES,
        STATE_SLOTS,
    )

    n = 301  # neither a multiple of the grid nor of the unrolled step
    kernel = cudasim.jit(KERNELS["load"].function)
    src = cudasim.to_device(np.arange(n, dtype=np.float64) + 1.0)
    dst = cudasim.to_device(np.zeros(n))
    state = np.zeros(STATE_SLOTS, dtype=np.uint64)
    state[STATE_GENERATION] = 3
    device_state = cudasim.to_device(state)
    # The chase of generation 3 has not finished: the load runs to its bound of 2 passes.
    kernel[grid](src, dst, device_state, np.uint64(3), 2)
    got = device_state.copy_to_host()
    assert int(got[STATE_LOAD_BYTES]) == 2 * n * LOAD_BYTES_PER_ELEMENT
    assert np.array_equal(dst.copy_to_host(), np.arange(n) + 1.0)
    # The chase has finished (generation 3, launched with 2): every block stops at once.
    fresh = cudasim.to_device(np.zeros(n))
    kernel[grid](src, fresh, device_state, np.uint64(2), 1000)
    assert int(device_state.copy_to_host()[STATE_LOAD_BYTES]) == 2 * n * LOAD_BYTES_PER_ELEMENT
    assert not fresh.copy_to_host().any()


def test_the_simulated_load_twin_never_waits_for_the_chase():
    from bwprof.gpu.kernel_params import STATE_GENERATION, STATE_LOAD_BYTES, STATE_SLOTS
    from bwprof.gpu.sim import SimBackend

    state = np.zeros(STATE_SLOTS, dtype=np.uint64)
    state[STATE_GENERATION] = 1  # the chase ran first, as the simulator runs streams
    src, dst = np.ones(8), np.zeros(8)
    SimBackend(devices=1).launch("load", None, src, dst, state, np.uint64(0), 10**9, blocks=4)
    assert int(state[STATE_LOAD_BYTES]) == 0 and not dst.any()


@pytest.mark.parametrize(("kind", "expected"), [("chase", (1, 32))])
def test_the_chase_is_one_warp(kind, expected):
    assert launch_config(kind, 1 << 20) == expected


@pytest.mark.parametrize("grid", ELEMENT_GRIDS)
@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 63, 64, 65, 255, 256, 257, 1000, 1025])
def test_the_sm_copy_puts_every_element_in_its_own_place(cudasim, n, grid):
    """Distinct uint64 values (all 64 bits used), so an element copied to another's place or
    left out shows: lengths with and without four elements a thread, and threads past the
    end; the source is untouched."""
    kernel = cudasim.jit(KERNELS["sm_copy"].function)
    source = (np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)
    src, dst = cudasim.to_device(source), cudasim.to_device(np.zeros(n, dtype=np.uint64))
    kernel[grid](src, dst)
    assert np.array_equal(dst.copy_to_host(), source)
    assert np.array_equal(src.copy_to_host(), source)


def test_the_sm_copy_grid_fills_every_sm_and_no_more_than_the_copy_needs():
    from bwprof.gpu.kernel_params import (
        SM_COPY_BLOCKS_PER_SM,
        SM_COPY_THREADS,
        SM_COPY_UNROLL,
        sm_copy_blocks,
    )

    assert SM_COPY_BLOCKS_PER_SM * SM_COPY_THREADS == 2048  # every thread a Hopper SM holds
    assert sm_copy_blocks(256 << 20 >> 3, 132) == 132 * SM_COPY_BLOCKS_PER_SM
    assert sm_copy_blocks(SM_COPY_THREADS * SM_COPY_UNROLL * 5, 132) == 5
    assert sm_copy_blocks(SM_COPY_THREADS * SM_COPY_UNROLL * 5 + 1, 132) == 6
    assert sm_copy_blocks(1, 132) == 1
    assert sm_copy_blocks(0, 0) == 1
