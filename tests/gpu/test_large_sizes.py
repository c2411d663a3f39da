"""Every size works: the GPU kernels, their CPU twins and the offset helpers at and across 2^31
and 2^32 elements and bytes, without allocating arrays of that size.

A kernel's index arithmetic is 64-bit in its PTX (`tests/gpu/test_ptx.py`:
`narrow_index_arithmetic`); here the loops themselves run over such sizes, one thread at a
time, on sparse stand-in arrays (as `test_kernels.py`'s `Recording`), and the compiled twins
walk indices past 2^32 in a sparse mapping: 32 GiB of address space of which a few pages are
ever touched.
"""

from __future__ import annotations

import ctypes
import mmap
from itertools import pairwise
from types import SimpleNamespace

import numpy as np
import pytest

from bwprof.gpu.kernels import KERNELS, MAX_BLOCKS, THREADS_PER_BLOCK, launch_config

ACROSS = [2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**32, 2**32 + 1, 2**33 + 2**31 + 7, 2**40]
"""Element counts at and across int32's and uint32's ends, and beyond any GPU's memory."""


# -- the kernels' loops, one thread at a time ---------------------------------------------------


class Sparse:
    """An array of `size` float64 elements that stores only what is written: element i reads
    `start + i` until written (exact below 2^53), and every write is counted, so an element
    written twice, out of range or to another's place shows."""

    def __init__(self, size: int, start: float) -> None:
        self.size, self.start = size, start
        self.written: dict[int, float] = {}
        self.writes = 0

    def _check(self, i: int) -> int:
        i = int(i)
        if not 0 <= i < self.size:
            raise IndexError(f"element {i} of {self.size}")
        return i

    def __getitem__(self, i: int) -> float:
        i = self._check(i)
        return self.written.get(i, self.start + i)

    def __setitem__(self, i: int, value: float) -> None:
        i = self._check(i)
        assert i not in self.written, f"element {i} written twice"
        self.written[i] = value
        self.writes += 1


SCALAR = 3.0
LOOPS = {
    # kernel: (the array it writes, what element i holds afterwards from the start values)
    "init": ("abc", lambda i: (1.0, 2.0, 0.5)),
    "copy": ("c", lambda i: 1.0 + i),
    "scale": ("b", lambda i: SCALAR * (3.0 + i)),
    "add": ("c", lambda i: (1.0 + i) + (2.0 + i)),
    "triad": ("a", lambda i: (2.0 + i) + SCALAR * (3.0 + i)),
    "sm_copy": ("d", lambda i: 1.0 + i),
    "compute": ("y", lambda i: 1.0 + i + 2 * 0.5),
}


def _threads(n: int, grid: int) -> list[int]:
    """The first, second and last thread, one in the middle, and those either side of where
    the last partial sweep of the grid ends (one more element than the next, or one fewer)."""
    tail = n % grid
    return sorted({0, 1, grid // 2, grid - 1, max(0, tail - 1), tail % grid})


@pytest.mark.parametrize("n", [2**31 + 3, 2**32 + 5, 2**33 + 2**31 + 7])
@pytest.mark.parametrize("name", list(LOOPS))
def test_each_thread_of_the_launch_grid_covers_its_elements_past_2_32(monkeypatch, name, n):
    """On the grid the run launches for n elements (at most MAX_BLOCKS x 256 threads: each
    thread loops 4 to 34 times), a thread writes exactly the elements t, t + G, t + 2G, ...
    below n (G the grid's size), each once, with the value computed from its own element:
    the four-deep loops (copy, scale, the SM copy) and the tails past the last
    whole sweep, across 2^31 and 2^32 elements."""
    from bwprof.gpu import kernels

    spec = KERNELS[name]
    blocks, per_block = launch_config(spec.kind, n)
    grid = blocks * per_block
    for thread in _threads(n, grid):
        fake = SimpleNamespace(grid=lambda d, t=thread: t, gridsize=lambda d: grid,
                               fma=lambda value, scale, step: value * scale + step)
        monkeypatch.setattr(kernels, "cuda", fake)
        a, b, c = Sparse(n, 1.0), Sparse(n, 2.0), Sparse(n, 3.0)
        if name == "init":
            spec.function(a, b, c, 1.0, 2.0, 0.5)
            arrays = {"a": a, "b": b, "c": c}
        elif name == "sm_copy":
            d = Sparse(n, 0.0)
            spec.function(a, d)
            arrays = {"a": a, "d": d}
        elif name == "compute":
            y = Sparse(n, 0.0)
            spec.function(a, y, 2, 1.0, 0.5)
            arrays = {"a": a, "y": y}
        else:
            spec.function(a, b, c, SCALAR)
            arrays = {"a": a, "b": b, "c": c}
        mine = list(range(thread, n, grid))
        target, value = LOOPS[name]
        for label, array in arrays.items():
            if label not in target:
                assert array.writes == 0, (name, thread, label)
                continue
            assert sorted(array.written) == mine, (name, thread, label)
            want = value
            for i in (mine[0], mine[-1]):
                got = want(i)
                expected = got["abc".index(label)] if isinstance(got, tuple) else got
                assert array.written[i] == expected, (name, thread, label, i)
        assert n - grid <= mine[-1] < n  # its last element lies in the grid's last sweep


@pytest.mark.parametrize("elements", ACROSS)
@pytest.mark.parametrize("kind", ["stream", "unrolled", "init", "smcopy", "dot", "load"])
def test_launch_grids_stay_within_cuda_limits_at_any_size(kind, elements):
    """However many elements, the grid fits CUDA's limits (x dimension < 2^31 blocks) and
    keeps each thread's count of elements far from any bound: the grid-stride loops take the
    rest, in 64-bit arithmetic."""
    blocks, threads = launch_config(kind, elements)
    assert 1 <= blocks <= MAX_BLOCKS < 2**31 - 1
    assert threads in (THREADS_PER_BLOCK, 32)
    assert blocks * threads < 2**31  # cuda.grid(1) itself fits 32 bits; its use is 64-bit


# -- compiled twins past 2^32, in a sparse mapping ---------------------------------------------


MAP_NORESERVE = 0x4000  # Linux, x86_64 and aarch64: no swap is reserved for the mapping


_SPARSE: list[np.ndarray] = []


@pytest.fixture
def sparse_u64() -> np.ndarray:
    """A uint64 array of 2^32 + 4096 elements (32 GiB of address space, untouched: zero pages
    read as 0) over an anonymous mapping reserving no memory; a test writes a few elements (a
    few pages). Made once and never unmapped, so no array can outlive its memory; a test
    zeroes what it wrote. Skips where the system refuses the mapping (a strict overcommit
    policy, an address-space limit)."""
    if not _SPARSE:
        elements = 2**32 + 4096
        nbytes = elements * 8
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        address = libc.mmap(None, nbytes, mmap.PROT_READ | mmap.PROT_WRITE,
                            mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            pytest.skip(f"no sparse mapping of {nbytes} bytes here (errno {ctypes.get_errno()})")
        buffer = (ctypes.c_char * nbytes).from_address(address)
        _SPARSE.append(np.frombuffer(buffer, dtype=np.uint64))
    assert _SPARSE[0].size == 2**32 + 4096
    return _SPARSE[0]


def test_the_simulated_chase_twin_follows_addresses_past_2_32_bytes(sparse_u64):
    """sim._chase (numba, the CPU twin of the chase kernel) walks the addresses the chain
    holds, offsets on both sides of 2^31 and 2^32 elements (16 and 32 GiB) into it: an
    offset cut to 32 bits would land elsewhere (element 4, zero) and the walk would stop."""
    from bwprof.gpu.kernel_params import STATE_GENERATION, STATE_POSITION, STATE_SLOTS
    from bwprof.gpu.sim import SimBackend

    cycle = [2**32 + 4, 2**31 + 8, 2**32 - 8, 2**31 - 16, 2**32 + 4092]
    chain = sparse_u64
    base = chain.ctypes.data
    address = [base + 8 * element for element in cycle]
    for here, there in zip(cycle, address[1:] + address[:1], strict=True):
        chain[here] = there
    state = np.zeros(STATE_SLOTS, dtype=np.uint64)
    state[STATE_POSITION] = address[0]
    backend = SimBackend(devices=1)
    for steps, where in ((1, 1), (3, 4), (len(cycle) * 1000 + 2, 1)):
        backend.launch("chase", None, chain, state, steps)
        assert int(state[STATE_POSITION]) == address[where], (steps, int(state[STATE_POSITION]))
    assert int(state[STATE_GENERATION]) == 3
    assert not chain[4] and not chain[8]
    chain[cycle] = 0


def test_chain_addresses_hold_offsets_past_2_32_exactly():
    """A chase's links are base + line x 128 in uint64: lines of any integer type (int32
    from a small chain, int64, uint64) past 2^25 lines (4 GiB) must not wrap in their own
    type first, nor the base plus the offset."""
    from bwprof.gpu.latency import NODE_BYTES, NODE_WORDS, chain_addresses

    base = 0x7F00_0000_0000
    lines = [0, 2**25 + 1, 2**29, 2**31 - 1, 2**31, 2**32 + 3, 2**48]
    for dtype in (np.int64, np.uint64):
        words = chain_addresses(np.array(lines, dtype=dtype), base)
        assert words.dtype == np.uint64 and words.size == len(lines) * NODE_WORDS
        assert [int(x) for x in words[::NODE_WORDS]] == [base + NODE_BYTES * n for n in lines]
        assert not words.reshape(-1, NODE_WORDS)[:, 1:].any()
    small = chain_addresses(np.array([2**31 - 1, 7], dtype=np.int32), base)
    assert [int(x) for x in small[::NODE_WORDS]] == [base + NODE_BYTES * (2**31 - 1),
                                                    base + 7 * NODE_BYTES]


# -- offsets of copies, checks and pipelines --------------------------------------------------


@pytest.mark.parametrize("nbytes", [2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**32, 2**32 + 1,
                                    5 * 2**32 + 12345])
def test_validation_chunks_cover_buffers_across_2_31_and_2_32_bytes(nbytes):
    """A transfer of 4 GiB and more (the `full` preset's last size) is filled and checked in
    CHUNK-sized pieces: they tile the buffer exactly, each starting on a whole period of the
    pattern (the pattern restarts in each piece), so a byte at any offset past 2^32 is
    checked against the pattern's byte for that offset."""
    from bwprof.gpu.buffers import CHUNK, PATTERN_PERIOD, chunks

    pieces = chunks(nbytes)
    assert CHUNK % PATTERN_PERIOD == 0
    assert pieces[0][0] == 0 and sum(length for _, length in pieces) == nbytes
    for (start, length), (after, _) in pairwise(pieces):
        assert start + length == after and length == CHUNK
    assert all(start % PATTERN_PERIOD == 0 and 0 < length <= CHUNK for start, length in pieces)
    last_start, last_length = pieces[-1]
    assert last_start + last_length == nbytes


def test_pipeline_inputs_tell_elements_apart_up_to_2_32_and_the_presets_stay_far_below():
    """pipeline_chunked's inputs differ by 2^-(20 + bits of the element count): distinct and
    exact up to 2^32 elements (a 32 GiB pass); beyond, they refuse before allocating. The
    planner's presets fix the chunks (at most 256 MiB) and a pass (at most 256 MiB, or one
    chunk): 2^25 elements."""
    from bwprof.gpu.overlap import pipeline_inputs, pipeline_total_bytes
    from bwprof.plan import PRESETS

    for elements in (2**32 + 1, 2**40):
        with pytest.raises(ValueError, match="cannot all be told apart"):
            pipeline_inputs(elements)
    largest = max(pipeline_total_bytes(chunk) for preset in PRESETS.values()
                  for chunk in preset.pipeline_chunks)
    assert largest // 8 <= 2**25
    values = pipeline_inputs(3)
    assert len(set(values.tolist())) == 3


def test_gpu_chains_are_built_whichever_side_of_2_63_their_seed_falls():
    """The GPU chases' chains (`chain.sattolo_order`) mix the sector count into a 64-bit seed:
    up to 2^23 sectors it is 2^63 or more, at 2^23 (an H200's 256 MiB HBM working set, the
    end of its lat_gpu sweep) it is below. Numba, once it held the int64 specialisation that
    seed made, refused the next GPU's 4 KiB chain ("OverflowError: int too big to convert")
    instead of compiling for uint64. Seeds of every size, in any order, must build."""
    from bwprof.chain import is_one_cycle, sattolo_order

    for lines in (128, 2**23, 128):  # one H200's sweep's end, then the next GPU's start
        assert sattolo_order(lines).size == lines
    for seed in (0, 2**64 - 1, 5, 2**63, 2**63 - 1, 0x9E3779B8CC4A7C15):
        order = sattolo_order(1000, seed)
        assert order.dtype == np.uint64 and is_one_cycle(order), seed
