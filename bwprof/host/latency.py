"""Host load latency (`lat_host`, `lat_host_numa`, `lat_host_loaded`): how long one load waits.

One thread walks a random cycle through the cache lines of a buffer (`bwprof.chain`), each
load's address the previous load's value, with a monotonic clock around each sample's walk
(a compiled loop of millions of loads: the clock and the call cost under 0.01%). The method
is `../shared/ref/lat_ref.c`'s: a buffer from anonymous memory (so its page size is the
system's default, as the yardstick's is, and is read back onto the row: a 4 KiB-page chase
pays TLB misses), one link per 64-byte line, a warm-up lap, then samples of at least 4 laps
or 2^22 loads (at most 2^23), continuing where the last ended. Where the walk ended is checked
against the permutation walked apart from the timed buffer: a wrong ending is `invalid`.

`lat_host_numa` runs the DRAM-sized chase with the chain first-touched on each node's CPUs
and walked from each node's CPUs (a matrix); `lat_host_loaded` runs it while the other
selected cores stream memory at nominal intensities from idle to full, started and stopped
with the chase, and records the bandwidth the load achieved beside each latency.

Compiled kernels are in `bwprof.host.chase`, imported when a job runs.
"""

from __future__ import annotations

import contextlib
import mmap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bwprof.cpulist import cpu_affinity, format_cpu_list
from bwprof.host import placement
from bwprof.host.facts import HostFacts
from bwprof.measurement import Job, Measurement, NotRun
from bwprof.rules import CACHE_MULTIPLE, HOST_MEMORY_SHARE, working_sets
from bwprof.schema import flags
from bwprof.system import core_siblings
from bwprof.units import MiB, format_bytes

if TYPE_CHECKING:
    from bwprof.host.cases import HostCase, HostCaseRun
    from bwprof.plan import Plan

UNKNOWN_LLC_END_BYTES = 512 * MiB
"""Where the sweep ends when the last-level cache size is unknown (lat_ref.c's default)."""
LINE_BYTES = 64
"""One link per cache line: the host's line size (x86 and the Arm servers bwprof meets)."""
MIN_LOADS = 1 << 22
MAX_LOADS = 1 << 23
LAPS = 4
"""Loads per sample: LAPS laps, at least MIN_LOADS and at most MAX_LOADS (lat_ref.c's rule up
to 128 MiB, capped so a multi-GiB working set does not take many seconds a sample)."""
MATRIX_LOADS = 1 << 20
"""Loads per sample of the NUMA and loaded chases (DRAM only: ~0.1-0.2 s a sample)."""
MAX_WARM_LOADS = 1 << 23
"""The warm-up lap, capped for working sets of many GiB."""
CHAIN_OVERHEAD = 1.125
"""A chain of N bytes also holds its permutation (8 bytes a line): N/8 more."""
LOAD_LEVELS: tuple[int, ...] = (0, 25, 50, 75, 100)
"""Nominal load intensities, percent of full (0: the load threads idle)."""
LOAD_CHUNK_WORDS = 8192
"""The load reads 64 KiB between pauses."""
MIN_LOAD_BYTES = 16 * MiB
READY_TIMEOUT_S = 30.0
"""How long the chase waits for the load's threads to be in place (they start in ms)."""


# -- what runs --------------------------------------------------------------------------------


def sweep_sizes(host: HostFacts, plan: Plan) -> tuple[list[int], str]:
    """Working sets from 4 KiB by 2x (4x in the quick preset) to the first at least 4x the
    last-level cache, within the memory the host cases may take; and why it stopped short."""
    end = CACHE_MULTIPLE * host.llc_bytes if host.llc_bytes else UNKNOWN_LLC_END_BYTES
    sizes = working_sets(end, 4 if plan.preset == "quick" else 2)
    note = ""
    if host.memory_available_bytes:
        budget = HOST_MEMORY_SHARE * host.memory_available_bytes
        fitting = [s for s in sizes if CHAIN_OVERHEAD * s <= budget] or sizes[:1]
        if len(fitting) < len(sizes):
            note = (f"sweep stops at {format_bytes(fitting[-1])}: "
                    f"{format_bytes(sizes[-1])} would take more than "
                    f"{HOST_MEMORY_SHARE:.0%} of the available memory")
        sizes = fitting
    return sizes, note


def sweep_jobs(case: HostCase, host: HostFacts, plan: Plan) -> list[Job]:
    sizes, note = sweep_sizes(host, plan)
    return [Job(case.key, size_bytes=size, threads=1, note=note if size == sizes[-1] else "")
            for size in sizes]


def _dram_bytes(host: HostFacts, plan: Plan) -> tuple[int, str]:
    """The DRAM-sized working set of the NUMA and loaded chases: the sweep's largest."""
    sizes, note = sweep_sizes(host, plan)
    return sizes[-1], note


def numa_unavailable(case: HostCase, host: HostFacts) -> NotRun | None:
    if len(host.nodes) < 2:
        return NotRun("waived", "one NUMA node (with memory and CPUs this process may use): "
                                "no matrix to measure; lat_host is its latency")
    return None


def numa_jobs(case: HostCase, host: HostFacts, plan: Plan) -> list[Job]:
    """Every CPU node against every memory node, memory node outermost: one chain a node."""
    size, note = _dram_bytes(host, plan)
    return [Job(case.key, size_bytes=size, threads=1, numa_node=cpus.node,
                memory_node=memory.node, note=note)
            for memory in host.nodes for cpus in host.nodes]


def _loaded_cores(host: HostFacts, threads: int) -> tuple[int, list[int]]:
    """The chase's CPU (the first this process may use) and the load's: other CPUs of the
    chase's NUMA node (their load falls on its memory controller, as Intel MLC's does), not
    its core's SMT siblings (they would share its L1, L2 and load ports: core contention,
    not memory), `threads` - 1 of them at most."""
    if not host.cpus:
        return -1, []
    chase = min(host.cpus)
    node = next((n for n in host.nodes if chase in n.cpus), None)
    pool = (node.cpus if node is not None else host.cpus) & host.cpus
    return chase, sorted(pool - core_siblings(chase))[:max(0, threads - 1)]


def loaded_unavailable(case: HostCase, host: HostFacts) -> NotRun | None:
    _, load = _loaded_cores(host, len(host.cpus))
    if not load:
        return NotRun("waived", f"needs a second core beside the chase's, on its NUMA node "
                                f"and not its SMT sibling; this process may use CPUs "
                                f"{format_cpu_list(host.cpus) or 'none'}")
    return None


def loaded_jobs(case: HostCase, host: HostFacts, plan: Plan) -> list[Job]:
    size, note = _dram_bytes(host, plan)
    threads = 1 + len(_loaded_cores(host, max(plan.threads))[1])
    return [Job(case.key, size_bytes=size, threads=threads, load_pct=level, note=note)
            for level in LOAD_LEVELS]


# -- the chain --------------------------------------------------------------------------------


def loads_per_sample(lines: int) -> int:
    return max(MIN_LOADS, min(LAPS * lines, MAX_LOADS))


class Chain:
    """A buffer of anonymous memory linked into one random cycle of its cache lines, and
    where a walk of it stands."""

    def __init__(self, size_bytes: int) -> None:
        from bwprof import chain
        from bwprof.host import chase

        self._chase = chase
        self.size_bytes = size_bytes
        self.lines = size_bytes // LINE_BYTES
        # Private anonymous memory, as lat_ref.c's mmap: no NumPy huge-page advice.
        self._map = mmap.mmap(-1, size_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.words: np.ndarray | None = np.frombuffer(self._map, dtype=np.uint64)
        self.base = int(self.words.ctypes.data)
        self.order = chain.sattolo_order(self.lines)
        if not chain.is_one_cycle(self.order):
            raise RuntimeError(f"the chain of {self.lines} lines is not one cycle")
        self._ending_line = chain.ending_line
        self.address = self.base
        self.steps = 0

    def link(self) -> None:
        """Write the links: the first touch of every page (on the calling thread's node)."""
        self._chase.link(self.words, self.order, self.base)

    def walk(self, loads: int) -> float:
        """Seconds for `loads` dependent loads from where the last walk ended."""
        if self.words is None:  # the chase follows raw addresses: never into unmapped memory
            raise RuntimeError("the chain was closed; its buffer is gone")
        start = time.perf_counter()
        self.address = int(self._chase.chase(self.address, loads))
        seconds = time.perf_counter() - start
        self.steps += loads
        return seconds

    def ended_right(self) -> bool:
        """Whether the walk ended on the line the permutation says `steps` loads reach."""
        offset = self.address - self.base
        if not 0 <= offset < self.size_bytes or offset % LINE_BYTES:
            return False
        return offset // LINE_BYTES == self._ending_line(self.order, 0, self.steps)

    def pages(self) -> tuple[int | None, str]:
        """The page size backing the chain (`placement.backing_pages`), and what the note
        says of it: a chase on base pages pays TLB misses, and the note says so."""
        if self.words is None:
            return None, "page size not read back (the chain was closed)"
        pages = placement.backing_pages([self.words])
        base_pages = pages.page_bytes is not None and pages.page_bytes < placement.thp_bytes()
        return pages.page_bytes, (f"{pages.description}: TLB misses are part of the figure"
                                  if base_pages else pages.description)

    def node_share(self, node: int) -> float | None:
        return placement.node_share([self.words], node) if self.words is not None else None

    def close(self) -> None:
        self.words = None
        with contextlib.suppress(BufferError):  # a view still exported: the map goes with it
            self._map.close()


def _warm_up(chain: Chain) -> None:
    chain.walk(min(chain.lines, MAX_WARM_LOADS))


def _first_cpu(cpus: frozenset[int] | list[int]) -> frozenset[int]:
    return frozenset({min(cpus)}) if cpus else frozenset()


@dataclass(frozen=True)
class _Chased:
    samples: tuple[float, ...]
    loads: int
    valid: bool


def _chase(chain: Chain, loads: int, repeats: int) -> _Chased:
    samples = tuple(chain.walk(loads) for _ in range(repeats))
    return _Chased(samples, loads, chain.ended_right())


def _refuse_unpinned(pinned: bool, cpus: frozenset[int], what: str) -> None:
    if not pinned:
        raise NotRun("skipped", f"CPU affinity refused: cannot keep the {what} on CPUs "
                                f"{format_cpu_list(cpus)}")


def _row(run: HostCaseRun, chain: Chain, chased: _Chased, notes: list[str],
         row_flags: set[str], *, numa_node: int | None = None, phase: str = "",
         load_gbps: float | None = None) -> Measurement:
    """The row of one chase: its level, page size, flags and notes."""
    page_bytes, page_note = chain.pages()
    llc = run.host.llc_bytes
    if llc and chain.size_bytes < CACHE_MULTIPLE * llc:
        row_flags.add(flags.IN_CACHE)
    elif caveat := run.host.cache_caveat():
        row_flags.add(flags.CACHE_UNKNOWN)
        notes.append(caveat)
    if not chased.valid:
        notes.insert(0, "validation failed: the chase did not end on the line the permutation "
                        "predicts")
    notes.append(page_note)
    notes.append(f"{chased.loads} dependent loads a sample after a warm-up lap, monotonic "
                 "clock")
    if run.job.note:
        notes.append(run.job.note)
    return Measurement(
        seconds_per_op=chased.samples, bytes_per_op=8 * chased.loads,
        size_bytes=chain.size_bytes, device=run.job.device_label or "cpu",
        device_name=run.host.cpu_model, direction=run.case.direction,
        memory=run.case.memory, valid=chased.valid, note="; ".join(notes),
        threads=run.job.threads, numa_node=numa_node, work_per_op=float(chased.loads),
        flags=frozenset(row_flags), page_bytes=page_bytes,
        cache_level=run.host.cache_level(chain.size_bytes), phase=phase, load_gbps=load_gbps)


# -- lat_host ---------------------------------------------------------------------------------


def chase_sweep(run: HostCaseRun) -> list[Measurement]:
    """One working set of the L1 → DDR curve, on the first CPU this process may use."""
    size = run.job.size_bytes
    assert size is not None
    cpu = _first_cpu(run.host.cpus)
    with cpu_affinity(cpu) as pinned:
        chain = Chain(size)
        try:
            chain.link()
            _warm_up(chain)
            chased = _chase(chain, loads_per_sample(chain.lines), run.plan.repeats)
            where = f"one thread on CPU {format_cpu_list(cpu)}" if pinned else "one thread"
            level = run.host.cache_level(size)
            notes = [where + (f"; {level} holds the working set" if level.startswith("L")
                              else "")]
            return [_row(run, chain, chased, notes, set())]
        finally:
            chain.close()


# -- lat_host_numa ----------------------------------------------------------------------------


def chase_numa(run: HostCaseRun) -> list[Measurement]:
    """The DRAM chase from node `numa_node`'s CPUs through memory first-touched on
    `memory_node`'s; the chain is built once a memory node and walked from every node."""
    job = run.job
    assert job.size_bytes is not None and job.numa_node is not None
    assert job.memory_node is not None
    nodes = {node.node: node for node in run.host.nodes}
    cpus, memory = nodes[job.numa_node], nodes[job.memory_node]
    key = ("chain", memory.node)
    if key not in run.scratch:
        for old in [k for k in run.scratch if isinstance(k, tuple) and k[0] == "chain"]:
            old_chain = run.scratch.pop(old)
            assert isinstance(old_chain, tuple)
            old_chain[0].close()
        if memory.memory_total_bytes and (CHAIN_OVERHEAD * job.size_bytes
                                          > HOST_MEMORY_SHARE * memory.memory_total_bytes):
            raise NotRun("skipped", f"a chain of {format_bytes(job.size_bytes)} does not fit "
                                    f"in NUMA node {memory.node}'s memory")
        chain = Chain(job.size_bytes)
        with cpu_affinity(memory.cpus) as placed:
            chain.link()
        share = chain.node_share(memory.node) if placed else None
        if share is not None and share < placement.PLACED_SHARE:
            chain.close()
            raise NotRun("skipped", f"only {share:.0%} of the chain's pages landed on NUMA "
                                    f"node {memory.node}: it lacks free memory, or a memory "
                                    "policy sends them elsewhere")
        run.scratch[key] = (chain, share)
    chain, share = run.scratch[key]  # type: ignore[misc]  # stored just above
    cpu = _first_cpu(cpus.cpus)
    with cpu_affinity(cpu) as pinned:
        _refuse_unpinned(pinned, cpu, "chase")
        _warm_up(chain)
        chased = _chase(chain, MATRIX_LOADS, run.plan.repeats)
    row_flags = set() if share is not None else {flags.NUMA_UNVERIFIED}
    notes = [f"CPU {format_cpu_list(cpu)} (node {cpus.node}) reading memory first-touched on "
             f"node {memory.node}: "
             + ("placement not verified (move_pages unavailable)" if share is None
                else f"{share:.0%} of sampled pages found there")]
    return [_row(run, chain, chased, notes, row_flags, numa_node=memory.node)]


# -- lat_host_loaded --------------------------------------------------------------------------


@dataclass
class _Load:
    """The load's arrays, one a core, first-touched by the thread that reads it, and its
    calibration: seconds a chunk read alone, seconds a pause step."""

    cores: list[int]
    arrays: list[np.ndarray]
    chunk_s: float
    step_s: float

    def pause_steps(self, level: int) -> int:
        """Pause steps after each chunk for a nominal duty of `level` percent."""
        if level >= 100:
            return 0
        return max(1, round(self.chunk_s * (100 - level) / level / self.step_s))


def _in_threads(cores: list[int], work: Callable[[int], object],
                on_error: Callable[[], None] | None = None) -> list[object]:
    """Run work(i) on a thread pinned to cores[i] each, at once; their results in order.
    `on_error` runs as soon as one fails (so the others stop waiting for it)."""
    results: list[object] = [None] * len(cores)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            cpu = frozenset({cores[i]})
            with cpu_affinity(cpu) as pinned:
                # Unpinned, a load thread would run where the scheduler puts it, perhaps on
                # the chase's CPU: contention for the core, not for memory.
                _refuse_unpinned(pinned, cpu, "load")
                results[i] = work(i)
        except BaseException as exc:  # handed to the caller
            errors.append(exc)
            if on_error is not None:
                on_error()

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(cores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def _load_setup(run: HostCaseRun, cores: list[int]) -> _Load:
    from bwprof.host import chase

    llc = run.host.llc_bytes
    total = CACHE_MULTIPLE * llc if llc else UNKNOWN_LLC_END_BYTES
    per_core = max(MIN_LOAD_BYTES, -(-total // len(cores)))
    words = -(-per_core // 8 // LOAD_CHUNK_WORDS) * LOAD_CHUNK_WORDS
    needed = int(CHAIN_OVERHEAD * (run.job.size_bytes or 0)) + 8 * words * len(cores)
    available = run.host.memory_available_bytes
    if available and needed > HOST_MEMORY_SHARE * available:
        raise NotRun("skipped", f"the chain and the load's arrays need {format_bytes(needed)}, "
                                f"more than {HOST_MEMORY_SHARE:.0%} of the available memory")
    arrays = _in_threads(cores, lambda i: np.ones(words, dtype=np.int64))

    def calibrate(i: int) -> tuple[float, float]:
        data = arrays[0]
        assert isinstance(data, np.ndarray)
        # Everything the load runs is compiled before it is timed or started: a load thread
        # compiling after GO would leave the first samples unloaded.
        chase.read_pass(data[:LOAD_CHUNK_WORDS], LOAD_CHUNK_WORDS)
        chase.spin(1, 0.5)
        stopped = np.ones(2, dtype=np.int64)  # STOP already set: returns at once
        chase.stream_load(data[:LOAD_CHUNK_WORDS], stopped, LOAD_CHUNK_WORDS, 1)
        start = time.perf_counter()
        chase.read_pass(data, LOAD_CHUNK_WORDS)
        chunk_s = (time.perf_counter() - start) / (words // LOAD_CHUNK_WORDS)
        steps = 1 << 22
        start = time.perf_counter()
        chase.spin(steps, 0.5)
        return chunk_s, (time.perf_counter() - start) / steps

    calibrated = _in_threads(cores[:1], calibrate)[0]
    assert isinstance(calibrated, tuple)
    return _Load(cores, [a for a in arrays if isinstance(a, np.ndarray)], *calibrated)


def chase_loaded(run: HostCaseRun) -> list[Measurement]:
    """The DRAM chase on the first core while the load streams on the others at the job's
    level; both start on one flag and stop on another, set by the chase."""
    from bwprof.host import chase

    job = run.job
    assert job.size_bytes is not None and job.load_pct is not None
    chase_core, load_cores = _loaded_cores(run.host, max(run.plan.threads))
    if not load_cores:
        raise NotRun("waived", f"--threads {max(run.plan.threads)} leaves no core for the "
                               "load; ask for 2 or more")
    chase_cpu = frozenset({chase_core})
    if "load" not in run.scratch:
        with cpu_affinity(chase_cpu) as pinned:
            _refuse_unpinned(pinned, chase_cpu, "chase")
            new = Chain(job.size_bytes)
            new.link()
        run.scratch["chain"] = new
        run.scratch["load"] = _load_setup(run, load_cores)
    chain, load = run.scratch["chain"], run.scratch["load"]
    assert isinstance(chain, Chain) and isinstance(load, _Load)

    control = np.zeros(2, dtype=np.int64)
    ready = threading.Barrier(len(load_cores) + 1, timeout=READY_TIMEOUT_S)
    pause = load.pause_steps(job.load_pct) if job.load_pct else 0
    chunks: list[object] = []
    failures: list[BaseException] = []

    def stream(i: int) -> object:
        ready.wait()
        return chase.stream_load(load.arrays[i], control, LOAD_CHUNK_WORDS, pause)

    def load_all() -> None:
        try:
            chunks.extend(_in_threads(load_cores, stream, on_error=ready.abort))
        except BaseException as exc:  # handed to the chase's thread below
            failures.append(exc)

    # Started before the chase's thread pins itself: a thread inherits its creator's CPUs.
    loader = threading.Thread(target=load_all, daemon=True)
    if job.load_pct:
        loader.start()
    try:
        with cpu_affinity(chase_cpu) as pinned:
            try:
                _refuse_unpinned(pinned, chase_cpu, "chase")
                if job.load_pct:
                    ready.wait()
                start = time.perf_counter()
                control[chase.GO] = 1
                _warm_up(chain)
                chased = _chase(chain, MATRIX_LOADS, run.plan.repeats)
                window = time.perf_counter() - start
            finally:
                control[chase.STOP] = 1  # the load stops with the chase, whatever ended it
                if job.load_pct:
                    ready.abort()  # a loader not yet at the barrier never waits there
                    loader.join()
    except threading.BrokenBarrierError:
        if failures:  # a load thread failed (its CPU refused): its reason, not the barrier's
            raise failures[0] from None
        raise
    if failures:
        raise failures[0]
    moved = sum(int(c) for c in chunks if isinstance(c, (int, np.integer))) \
        * LOAD_CHUNK_WORDS * 8
    load_gbps = moved / window * 1e-9 if window > 0 else None
    notes = [f"chase on CPU {chase_core}; "
             + (f"load: {len(load_cores)} thread(s) on CPUs {format_cpu_list(load_cores)} "
                "(the chase's NUMA node, not its core's SMT siblings) "
                f"reading {format_bytes(8 * load.arrays[0].size)} each in "
                f"{format_bytes(8 * LOAD_CHUNK_WORDS)} chunks at a nominal {job.load_pct}% "
                f"duty, {load_gbps or 0:.1f} GB/s achieved over the chase"
                if job.load_pct else "load idle")]
    return [_row(run, chain, chased, notes, set(), phase=f"load_{job.load_pct}",
                 load_gbps=load_gbps if job.load_pct else 0.0)]
