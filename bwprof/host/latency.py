"""Host load latency (`lat_host`, `lat_host_numa`, `lat_host_loaded`): how long one load waits.

One thread walks a random cycle through the cache lines of a buffer (`bwprof.chain.Cycle`),
each load's address the previous load's value, with a monotonic clock around each sample's
walk. The method is `benchmarks/ref/lat_ref.c`'s: a buffer from anonymous memory (so its page
size is the system's default, as the yardstick's is, and is read back onto the row: a 4
KiB-page chase pays TLB misses), one link per 64-byte line, a warm-up, then timed samples
continuing where the last ended.

The work is bounded whatever the working set, so a DRAM point costs seconds on a host with
hundreds of MiB of cache or a chain of many GiB: the buffer is faulted in by the kernel at
once (MAP_POPULATE) and linked without a table (the cycle is computed, not stored or
shuffled): first the lines of the walk's first positions (as many as the thread's cache
holds), in walk order, then every other line in address order, so the lines written last,
the ones left in the cache, are not reached before the walk has pushed them out itself and
no lap of warm-up is needed to evict them; a sample lasts
about TARGET_SAMPLE_S (MATRIX_SAMPLE_S in the NUMA and loaded cases), its loads set from a
probe within [MIN_LOADS, MAX_LOADS], after a short warm-up (WARM_LOADS: the page walks and
the code); and where the walk ended is computed, not walked again (`Cycle.ending_line`): a
wrong ending is `invalid`.

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

from bwprof import costs
from bwprof.costs import Cost
from bwprof.cpulist import cpu_affinity, format_cpu_list
from bwprof.host import placement
from bwprof.host.facts import HostFacts
from bwprof.measurement import Job, Measurement, NotRun
from bwprof.rules import CACHE_MULTIPLE, HOST_MEMORY_SHARE, default_memory_budget, working_sets
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
TARGET_SAMPLE_S = 0.05
"""How long one timed sample of the sweep lasts: far above the clock's resolution and its
call, short enough that ten samples of a DRAM point take half a second."""
MATRIX_SAMPLE_S = 0.02
"""A sample of the NUMA matrix and of the loaded chase: 64 node pairs on an 8-node host."""
MIN_LOADS = 1 << 14
MAX_LOADS = 1 << 22
"""Loads per sample: what lasts the target by the probe, within these bounds."""
PROBE_LOADS = 1 << 12
PROBE_S = 0.002
"""The probe that sets the loads per sample: PROBE_LOADS doubled until it lasts PROBE_S."""
WARM_LOADS = 1 << 16
"""Loads walked before the samples: the page walks and the compiled loop warm (a chain
walked before, at another load level or from another node's CPUs, goes on where it ended)."""
MAX_FIRST_LINES = 1 << 23
"""The lines linked first in walk order (`chase.link`), capped for caches of many hundreds
of MiB (8 Mi random writes: about a quarter of a second)."""
RANDOM_WRITE_NS = 30.0
"""A link written out of address order (independent stores overlap: a tenth of a load's
latency)."""
LOAD_LEVELS: tuple[int, ...] = (0, 25, 50, 75, 100)
"""Nominal load intensities, percent of full (0: the load threads idle)."""
QUICK_LOAD_LEVELS: tuple[int, ...] = (0, 50, 100)
"""The quick preset's: idle, half and full."""
LOAD_CHUNK_WORDS = 8192
"""The load reads 64 KiB between pauses."""
MIN_LOAD_BYTES = 16 * MiB
READY_TIMEOUT_S = 30.0
"""How long the chase waits for the load's threads to be in place (they start in ms)."""


# -- what runs --------------------------------------------------------------------------------


def sweep_sizes(host: HostFacts, plan: Plan) -> tuple[list[int], str]:
    """Working sets from 4 KiB by 2x (4x in the quick preset) to the first at least 4x the
    last-level cache the chasing thread fills (`thread_cache_bytes`: one socket's or one
    CCX's L3, not every instance's: a thread's loads go through its own), within the memory
    sizes bwprof chooses may take; and why it stopped short."""
    if plan.size_given:  # --size: the working sets asked for, as for the DDR arrays
        return sorted(plan.host_array_bytes), ""
    cache = thread_cache_bytes(host)
    end = CACHE_MULTIPLE * cache if cache else UNKNOWN_LLC_END_BYTES
    sizes = working_sets(end, plan.sweep_factor(4 if plan.preset == "quick" else 2))
    note = ""
    budget, what = default_memory_budget(host.memory_available_bytes, host.memory_total_bytes)
    if budget is not None:
        fitting = [s for s in sizes if s <= budget] or sizes[:1]
        if len(fitting) < len(sizes):
            note = (f"sweep stops at {format_bytes(fitting[-1])}: "
                    f"{format_bytes(sizes[-1])} would take more than {what}")
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
            for level in (QUICK_LOAD_LEVELS if plan.preset == "quick" else LOAD_LEVELS)]


# -- what it costs -----------------------------------------------------------------------------


def _chain_s(host: HostFacts, size: int) -> float:
    """Making a chain: the kernel faulting its pages in, the first lines in walk order, then
    one link a line."""
    lines = size // LINE_BYTES
    return (size / (costs.POPULATE_GBPS * 1e9) + lines * costs.LINK_NS * 1e-9
            + first_lines(thread_cache_bytes(host), lines) * RANDOM_WRITE_NS * 1e-9)


def _chase_s(host: HostFacts, size: int, target_s: float, repeats: int) -> float:
    """Walking a chain: the warm-up, the probe, the samples."""
    warm = min(size // LINE_BYTES, WARM_LOADS)
    ns = costs.chase_ns(host.cache_level(size))
    return warm * ns * 1e-9 + 2 * PROBE_S + repeats * target_s


def sweep_cost(job: Job, plan: Plan, host: HostFacts, previous: Job | None) -> Cost:
    """One working set: a new chain, walked fresh."""
    size = job.size_bytes or 0
    return Cost(costs.HOST_JOB_S + _chain_s(host, size)
                + _chase_s(host, size, TARGET_SAMPLE_S, plan.repeats), host_bytes=size)


def numa_cost(job: Job, plan: Plan, host: HostFacts, previous: Job | None) -> Cost:
    """One CPU node against one memory node: a new chain for each memory node, walked on
    from where the last node's CPUs left it."""
    size = job.size_bytes or 0
    new = (previous is None or previous.case != job.case
           or previous.memory_node != job.memory_node)
    return Cost(costs.HOST_JOB_S + (_chain_s(host, size) if new else 0.0)
                + _chase_s(host, size, MATRIX_SAMPLE_S, plan.repeats), host_bytes=size)


def loaded_cost(job: Job, plan: Plan, host: HostFacts, previous: Job | None) -> Cost:
    """One load level: the first makes the chain and the load's arrays, each walks on."""
    size = job.size_bytes or 0
    cache = host.llc_bytes or UNKNOWN_LLC_END_BYTES
    load_bytes = CACHE_MULTIPLE * cache
    new = previous is None or previous.case != job.case
    loaders = max(1, (job.threads or 2) - 1)  # each load thread touches its own array
    setup = (_chain_s(host, size) + 2 * load_bytes / (loaders * costs.FILL_GBPS * 1e9)
             if new else 0.0)
    return Cost(costs.HOST_JOB_S + setup
                + _chase_s(host, size, MATRIX_SAMPLE_S, plan.repeats),
                host_bytes=size + load_bytes)


# -- the chain --------------------------------------------------------------------------------


def first_lines(cache_bytes: int | None, lines: int) -> int:
    """Lines linked first, in walk order: as many as a cache of `cache_bytes` holds (unknown:
    as the sweep's end) and the warm-up's, within MAX_FIRST_LINES."""
    cache_lines = (cache_bytes or UNKNOWN_LLC_END_BYTES) // LINE_BYTES
    return min(lines, cache_lines + WARM_LOADS, MAX_FIRST_LINES)


MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
"""Linux: the kernel faults the whole mapping in at mmap, several times faster than a first
touch page by page (seconds per GiB in a VM), on the calling thread's NUMA node."""


class Chain:
    """A buffer of anonymous memory linked into one random cycle of its cache lines, and
    where a walk of it stands. Its pages are placed when it is made: make it on a thread
    running on the node whose memory it should use."""

    def __init__(self, size_bytes: int) -> None:
        from bwprof import chain
        from bwprof.host import chase

        self._chase = chase
        self.lines = size_bytes // LINE_BYTES
        if self.lines < 2:
            raise NotRun("skipped", f"a working set of {size_bytes} B holds fewer than two "
                                    f"{LINE_BYTES}-byte lines: nothing to chase")
        self.size_bytes = self.lines * LINE_BYTES
        # Private anonymous memory, as lat_ref.c's mmap: no NumPy huge-page advice.
        self._map = mmap.mmap(-1, self.size_bytes,
                              flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_POPULATE)
        self.words: np.ndarray | None = np.frombuffer(self._map, dtype=np.uint64)
        self.base = int(self.words.ctypes.data)
        self.cycle = chain.Cycle.of(self.lines)
        self.address = self.base + LINE_BYTES * self.cycle.line_at(0)
        self.steps = 0

    def link(self, cache_bytes: int | None) -> None:
        """Write the links (`chase.link`): the lines of the walk's first positions first, as
        many as a cache of `cache_bytes` holds (unknown: as the sweep's end), then the rest
        in address order (on the calling thread's node where the map was not populated at
        once)."""
        first = first_lines(cache_bytes, self.lines)
        self._chase.link(self.words, self.cycle.params, np.uint64(self.base), np.uint64(first))

    def walk(self, loads: int) -> float:
        """Seconds for `loads` dependent loads from where the last walk ended."""
        if self.words is None:  # the chase follows raw addresses: never into unmapped memory
            raise RuntimeError("the chain was closed; its buffer is gone")
        start = time.perf_counter()
        self.address = int(self._chase.chase(self.address, loads))
        seconds = time.perf_counter() - start
        self.steps += loads
        return seconds

    def warm_up(self) -> int:
        """Walk WARM_LOADS (a lap of a smaller chain) before the samples; the loads walked."""
        loads = min(self.lines, WARM_LOADS)
        self.walk(loads)
        return loads

    def loads_for(self, target_s: float) -> int:
        """Loads a sample of about `target_s` takes, from a probe (PROBE_LOADS doubled until
        it lasts PROBE_S), within [MIN_LOADS, MAX_LOADS]."""
        loads = PROBE_LOADS
        while True:
            seconds = self.walk(loads)
            if seconds >= PROBE_S or loads >= MAX_LOADS:
                break
            loads *= 2
        wanted = target_s * loads / seconds if seconds > 0 else MAX_LOADS
        return int(max(MIN_LOADS, min(MAX_LOADS, wanted)))

    def ended_right(self) -> bool:
        """Whether the walk ended on the line the cycle says `steps` loads reach."""
        offset = self.address - self.base
        if not 0 <= offset < self.size_bytes or offset % LINE_BYTES:
            return False
        return offset // LINE_BYTES == self.cycle.ending_line(self.steps)

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


def thread_cache_bytes(host: HostFacts) -> int | None:
    """The last-level cache one thread fills: one instance of the highest level (a socket's
    or a CCX's L3), the whole where only the total is known."""
    top = max((c for c in host.caches if c.type in ("Data", "Unified")),
              key=lambda c: c.level, default=None)
    return top.size_bytes if top is not None else host.llc_bytes


def in_cache(host: HostFacts, size: int) -> bool:
    """Whether a working set is under 4x the last-level cache one thread fills (DESIGN's rule
    for a memory's own figure): the cache still serves part of it, so its row is `in_cache`
    and its `cache_level` is never the memory's (`chase_level`)."""
    cache = thread_cache_bytes(host)
    return cache is not None and cache > 0 and size < CACHE_MULTIPLE * cache


def chase_level(host: HostFacts, size: int) -> str:
    """A chase row's `cache_level`: the smallest level that holds the set (`L1`, `L2`,
    `L3`), `L3+DDR` beyond the last level but under 4x it (the row is `in_cache`: the cache
    serves part of it, as the GPU's `L2+HBM`), `DDR` from 4x it; '' where no level is
    known. A row is never both DDR and `in_cache`."""
    level = host.cache_level(size)
    if level == "DDR" and in_cache(host, size):
        top = max(c.level for c in host.caches if c.type in ("Data", "Unified"))
        return f"L{top}+DDR"
    return level


def _first_cpu(cpus: frozenset[int] | list[int]) -> frozenset[int]:
    return frozenset({min(cpus)}) if cpus else frozenset()


@dataclass(frozen=True)
class _Chased:
    samples: tuple[float, ...]
    loads: int
    valid: bool
    warm_loads: int = 0


def _chase(chain: Chain, target_s: float, repeats: int) -> _Chased:
    """Warm up, set the loads per sample, take `repeats` samples, check the ending."""
    warm = chain.warm_up()
    loads = chain.loads_for(target_s)
    samples = tuple(chain.walk(loads) for _ in range(repeats))
    return _Chased(samples, loads, chain.ended_right(), warm)


def _refuse_unpinned(pinned: bool, cpus: frozenset[int], what: str) -> None:
    if not pinned:
        raise NotRun("skipped", f"CPU affinity refused: cannot keep the {what} on CPUs "
                                f"{format_cpu_list(cpus)}")


def _row(run: HostCaseRun, chain: Chain, chased: _Chased, notes: list[str],
         row_flags: set[str], *, numa_node: int | None = None, phase: str = "",
         load_gbps: float | None = None) -> Measurement:
    """The row of one chase: its level, page size, flags and notes."""
    page_bytes, page_note = chain.pages()
    if in_cache(run.host, chain.size_bytes):
        row_flags.add(flags.IN_CACHE)
    elif caveat := run.host.cache_caveat():
        row_flags.add(flags.CACHE_UNKNOWN)
        notes.append(caveat)
    if not chased.valid:
        notes.insert(0, "validation failed: the chase did not end on the line the cycle "
                        "predicts")
    notes.append(page_note)
    notes.append(f"{chased.loads} dependent loads a sample (median "
                 f"{sorted(chased.samples)[len(chased.samples) // 2] * 1e3:.0f} ms) after "
                 f"{chased.warm_loads} warm-up loads, monotonic clock")
    if run.job.note:
        notes.append(run.job.note)
    return Measurement(
        seconds_per_op=chased.samples, bytes_per_op=8 * chased.loads,
        size_bytes=chain.size_bytes, device=run.job.device_label or "cpu",
        device_name=run.host.cpu_model, direction=run.case.direction,
        memory=run.case.memory, valid=chased.valid, note="; ".join(notes),
        threads=run.job.threads, numa_node=numa_node, work_per_op=float(chased.loads),
        flags=frozenset(row_flags), page_bytes=page_bytes,
        cache_level=chase_level(run.host, chain.size_bytes), phase=phase, load_gbps=load_gbps)


# -- lat_host ---------------------------------------------------------------------------------


def chase_sweep(run: HostCaseRun) -> list[Measurement]:
    """One working set of the L1 → DDR curve, on the first CPU this process may use."""
    size = run.job.size_bytes
    assert size is not None
    cpu = _first_cpu(run.host.cpus)
    with cpu_affinity(cpu) as pinned:
        chain = Chain(size)
        try:
            chain.link(thread_cache_bytes(run.host))
            chased = _chase(chain, TARGET_SAMPLE_S, run.plan.repeats)
            where = f"one thread on CPU {format_cpu_list(cpu)}" if pinned else "one thread"
            level = chase_level(run.host, size)
            top, _, memory = level.partition("+")
            held = (f"; {top} holds part of the working set, {memory} the rest" if memory
                    else f"; {level} holds the working set" if level.startswith("L") else "")
            notes = [where + held]
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
        if memory.memory_total_bytes and (job.size_bytes
                                          > HOST_MEMORY_SHARE * memory.memory_total_bytes):
            raise NotRun("skipped", f"a chain of {format_bytes(job.size_bytes)} does not fit "
                                    f"in NUMA node {memory.node}'s memory")
        with cpu_affinity(memory.cpus) as placed:  # its pages are placed as it is made
            chain = Chain(job.size_bytes)
            chain.link(thread_cache_bytes(run.host))
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
        chased = _chase(chain, MATRIX_SAMPLE_S, run.plan.repeats)
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
    needed = (run.job.size_bytes or 0) + 8 * words * len(cores)
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
            new.link(thread_cache_bytes(run.host))
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
                chased = _chase(chain, MATRIX_SAMPLE_S, run.plan.repeats)
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
