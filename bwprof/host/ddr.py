"""Host DDR bandwidth cases (`ddr_*`): STREAM over float64 arrays with all selected threads.

Owns the loop for one figure: fill the arrays in parallel, launch the kernel `repeats` times
with a monotonic clock around each launch, drop the first (and poison what it wrote), then
validate every element against gold values. Statistics and bandwidth are the runner's job.

On a host with several NUMA nodes each case also runs once per node, on that node's cores
with arrays first-touched into its memory (device `numaN`): a node with a missing or slow
DIMM shows there, while the whole-host figure averages it away.

Every host job that passes `HostExecutor.measure` (these and the declared host cases:
latency, gemm) is watched for other work on its cores (`bwprof.host.busy`): its rows carry
the shares other processes and the hypervisor took, and a busy job's rows `busy_host`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace

import numba
import numpy as np

from bwprof import costs
from bwprof.casespec import CaseSpec
from bwprof.costs import Cost
from bwprof.cpulist import format_cpu_list, process_affinity
from bwprof.executor import Executor
from bwprof.host import busy, placement, stream
from bwprof.host.cases import HostCase, HostCaseRun
from bwprof.host.facts import HostFacts, HostNode, allowed_cpus
from bwprof.measurement import Job, Measurement, NotRun, join_notes
from bwprof.plan import HOST_ARRAYS, HOST_ELEMENT_BYTES, Plan, default_host_array_bytes
from bwprof.rules import CACHE_MULTIPLE, HOST_MEMORY_SHARE
from bwprof.schema import flags
from bwprof.schema.meta import CacheLevel
from bwprof.units import format_bytes


class HostStream:
    """Three float64 arrays and the STREAM kernels that run over them."""

    def __init__(
        self,
        elements: int,
        kernels: Mapping[str, stream.StreamKernel] = stream.KERNELS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.elements = elements
        self.kernels = kernels
        self.clock = clock
        self.a = np.empty(elements)
        self.b = np.empty(elements)
        self.c = np.empty(elements)

    def reset(self) -> None:
        stream.fill(self.a, self.b, self.c, stream.INIT_A, stream.INIT_B, stream.INIT_C)

    def time_kernel(self, name: str, repeats: int) -> tuple[list[float], object]:
        """Seconds of each launch after the first (dropped), and the last launch's return value.
        After the dropped launch the array the kernel writes is filled with NaN, untimed: no
        kernel reads what it writes, so the values validated afterwards were written by the
        timed launches, not left over from the dropped one."""
        kernel = self.kernels[name]
        self.reset()
        seconds, value = [], None
        for launch in range(repeats):
            if launch == 1 and kernel.writes is not None:
                stream.poison(getattr(self, kernel.writes))
            start = self.clock()
            value = kernel.run(self.a, self.b, self.c, stream.SCALAR)
            seconds.append(self.clock() - start)
        return seconds[1:], value

    def validate(self, name: str, repeats: int, value: object) -> str:
        """Empty when every element matches the gold values, else what went wrong."""
        return stream.check(self.kernels[name], repeats, self.a, self.b, self.c, value)


@contextmanager
def numba_threads(count: int) -> Iterator[None]:
    previous = numba.get_num_threads()
    numba.set_num_threads(count)
    try:
        yield
    finally:
        numba.set_num_threads(previous)


def with_busy(measurement: Measurement, reading: busy.HostBusy | None) -> Measurement:
    """A host row with what other processes and the hypervisor took of its cores over its
    job (None: unknown, left empty); a busy job's rows flagged `busy_host`, with a note."""
    if reading is None:
        return measurement
    changed = replace(measurement, host_others_pct=reading.others_pct,
                      host_steal_pct=reading.steal_pct)
    if not reading.busy:
        return changed
    return replace(changed, flags=measurement.flags | {flags.BUSY_HOST},
                   note=join_notes(measurement.note, reading.note()))


class HostExecutor(Executor):
    """Runs the host jobs (`ddr_*`, and the declared cases through their own function);
    keeps the STREAM arrays of the current size between cases."""

    backend = "host"

    def __init__(
        self,
        cpu_model: str,
        kernels: Mapping[str, stream.StreamKernel] = stream.KERNELS,
        clock: Callable[[], float] = time.perf_counter,
        nodes: Sequence[HostNode] = (),
        peak_gbps: float | None = None,
        llc_bytes: int | None = None,
        huge_pages_expected: bool = False,
        cache_source: str | None = "sysfs",
        caches: Sequence[CacheLevel] = (),
        cpus: frozenset[int] | None = None,
        memory_available_bytes: int | None = None,
        memory_total_bytes: int | None = None,
        busy_window: Callable[[frozenset[int]], busy.BusyWindow] = busy.BusyWindow,
    ) -> None:
        """`peak_gbps`: the whole host's DDR peak (SMBIOS), given to whole-host rows whose
        arrays are at least STREAM's 4x `llc_bytes` (all last-level cache): a smaller array
        is partly served by the cache, which may beat the DDR peak without any error.
        `huge_pages_expected`: the kernel gives NumPy's arrays 2 MiB pages (THP 'always', or
        'madvise' with NumPy asking), so rows whose arrays mostly did not get them say so.
        `cache_source`: where `llc_bytes` came from (`system.host_caches`); any source but
        sysfs leaves the 4x rule unsure, and every row says so. `caches`, `cpus`,
        `memory_available_bytes` and `memory_total_bytes` are for the cases declared with
        their own function (`bwprof.host.cases`: latency), which get them as `HostFacts`.
        `busy_window` opens the window in which a job's cores are watched for other work
        (`bwprof.host.busy`; tests give a fake)."""
        self.facts = HostFacts(cpu_model, tuple(caches), cache_source, llc_bytes, tuple(nodes),
                               allowed_cpus() if cpus is None else cpus,
                               memory_available_bytes, memory_total_bytes)
        self.scratch: dict[object, object] = {}
        self._scratch_case: str | None = None
        self.cpu_model = cpu_model
        self.cache_source = cache_source
        self.peak_gbps = peak_gbps
        self.llc_bytes = llc_bytes
        self.kernels = kernels
        self.clock = clock
        self.nodes = {node.node: node for node in nodes}
        self._bench: HostStream | None = None
        self._placement: tuple[int | None, int] | None = None  # (NUMA node, threads)
        self._share_on_node: float | None = None  # of the current arrays' sampled pages
        self.huge_pages_expected = huge_pages_expected
        self._huge_share: float | None = None  # of the current arrays' bytes, once touched
        self._huge_share_read = False
        self._warm = False
        self.busy_window = busy_window

    def _cache_caveat(self) -> str | None:
        return self.facts.cache_caveat()

    def unavailable_reason(self, case: CaseSpec) -> NotRun | None:
        if isinstance(case, HostCase) and case.unavailable is not None:
            return case.unavailable(case, self.facts)
        return None

    def jobs(self, case: CaseSpec, plan: Plan) -> list[Job]:
        if isinstance(case, HostCase):
            return case.expand(case, self.facts, plan)
        whole = [
            Job(case.key, size_bytes=size, threads=threads)
            for size in plan.host_array_bytes
            for threads in plan.threads
        ]
        per_node = [
            Job(case.key, size_bytes=size, threads=len(node.cpus), numa_node=node.node)
            for node in self.nodes.values()
            for size in (plan.host_array_bytes if plan.size_given
                         else (default_host_array_bytes(self._cache_of(node)),))
        ]
        return whole + per_node

    def measure(self, case: CaseSpec, job: Job, plan: Plan) -> list[Measurement]:
        """Every host job (DDR and the declared cases: latency, gemm), with what other
        processes and the hypervisor took of its cores over its window (`bwprof.host.busy`):
        each row carries the shares, and a busy job's rows the `busy_host` flag."""
        window = self.busy_window(self._measuring_cpus(job))
        measurements = (self._measure_declared(case, job, plan) if isinstance(case, HostCase)
                        else self._measure_stream(case, job, plan))
        reading = window.stop()
        return [with_busy(m, reading) for m in measurements]

    def _measuring_cpus(self, job: Job) -> frozenset[int]:
        """The cores a job may run on: its NUMA node's (the node whose CPUs run it), else
        every CPU this process may use (empty: every CPU /proc/stat lists)."""
        node = self.nodes.get(job.numa_node) if job.numa_node is not None else None
        return node.cpus if node is not None else self.facts.cpus

    def _measure_stream(self, case: CaseSpec, job: Job, plan: Plan) -> list[Measurement]:
        assert job.size_bytes is not None and job.threads is not None
        if not self._warm:
            stream.warm_up()
            self._warm = True
        elements = job.size_bytes // HOST_ELEMENT_BYTES
        array_bytes = elements * HOST_ELEMENT_BYTES
        name = case.key.removeprefix("ddr_")
        node = self._node(job, array_bytes)
        with ExitStack() as stack:
            if node is not None and not stack.enter_context(process_affinity(node.cpus)):
                raise NotRun("skipped", f"CPU affinity refused: cannot keep threads on NUMA "
                                        f"node {node.node} (CPUs {format_cpu_list(node.cpus)})")
            stack.enter_context(numba_threads(job.threads))
            # New arrays for a new size, thread count or node: pages are placed by their
            # first touch, and N threads must not work on pages one thread placed elsewhere.
            where = (job.numa_node, job.threads)
            if self._bench is None or (self._bench.elements, self._placement) != (elements,
                                                                                  where):
                self._bench = None  # free the old arrays before taking new ones
                self._bench = HostStream(elements, self.kernels, self.clock)
                self._placement = where
                self._huge_share_read = False
                if node is not None:
                    self._share_on_node = self._check_placement(node, array_bytes)
            seconds, value = self._bench.time_kernel(name, plan.repeats)
            if not self._huge_share_read:  # the arrays are touched now: their pages exist
                bench = self._bench
                self._huge_share = (placement.huge_page_share((bench.a, bench.b, bench.c))
                                    if self.huge_pages_expected
                                    and array_bytes >= placement.HUGE_CHECK_MIN_BYTES
                                    else None)
                self._huge_share_read = True
        problem = self._bench.validate(name, plan.repeats, value)
        notes = [f"validation failed: {problem}"] if problem else []
        row_flags: set[str] = set()
        if node is not None:
            share = self._share_on_node
            if share is None:
                row_flags.add(flags.NUMA_UNVERIFIED)
            notes.append(f"NUMA node {node.node} alone: CPUs {format_cpu_list(node.cpus)}, "
                         "arrays first-touched there, "
                         + ("placement not verified (move_pages unavailable)" if share is None
                            else f"{share:.0%} of sampled pages found there"))
        if self._huge_share is not None and self._huge_share < placement.HUGE_SHARE:
            notes.append(f"only {self._huge_share:.0%} of the arrays in 2 MiB pages (the "
                         "kernel had too few free; 4 KiB pages read several percent slower)")
        cache = self._cache_of(node)
        in_cache = cache is not None and array_bytes < CACHE_MULTIPLE * cache
        if in_cache:
            row_flags.add(flags.IN_CACHE)
            whose = "the node's share of the last-level cache" if node else "the last-level cache"
            notes.append(f"arrays under {CACHE_MULTIPLE}x {whose} ({format_bytes(cache or 0)}): "
                         "partly cache bandwidth, not DDR alone (no DDR peak beside it)")
        elif caveat := self._cache_caveat():
            row_flags.add(flags.CACHE_UNKNOWN)
            notes.append(caveat)
        return [
            Measurement(
                seconds_per_op=tuple(seconds),
                bytes_per_op=case.bytes_per_op(array_bytes),
                size_bytes=array_bytes,
                device=job.device_label or "cpu",
                device_name=self.cpu_model,
                direction=case.direction,
                memory=case.memory,
                valid=not problem,
                note="; ".join(notes),
                threads=job.threads,
                numa_node=job.numa_node,
                peak=None if node is not None or in_cache else self.peak_gbps,
                flags=frozenset(row_flags),
            )
        ]

    def _cache_of(self, node: HostNode | None) -> int | None:
        """The last-level cache a job's threads fill: all of it for the whole host; for one
        NUMA node's cores, its share by CPUs (an NPS4 node's two CCXs of 32 MiB, not both
        sockets' 512 MiB), so its arrays are 4x what those cores can cache, not 4x all."""
        if node is None or self.llc_bytes is None:
            return self.llc_bytes
        cpus = sum(len(n.cpus) for n in self.nodes.values()) or len(node.cpus)
        return -(-self.llc_bytes * len(node.cpus) // cpus)

    def _check_placement(self, node: HostNode, array_bytes: int) -> float | None:
        """First-touch the new arrays on the node's CPUs and read back where their pages lie;
        a node short of free memory gives pages from another, and the row would mix nodes."""
        assert self._bench is not None
        self._bench.reset()
        bench = self._bench
        share = placement.node_share((bench.a, bench.b, bench.c), node.node)
        if share is not None and share < placement.PLACED_SHARE:
            self._bench = None  # the next job starts over with fresh arrays
            raise NotRun("skipped", f"only {share:.0%} of the arrays' pages landed on NUMA node "
                                    f"{node.node}: it lacks free memory for 3 arrays of "
                                    f"{format_bytes(array_bytes)}, or a memory policy "
                                    "(numactl --membind, cpuset.mems) sends them elsewhere; "
                                    "free memory there, lift the policy or choose a smaller "
                                    "--size")
        return share

    def _node(self, job: Job, array_bytes: int) -> HostNode | None:
        """The NUMA node a job is confined to, after checking its arrays fit in that node."""
        if job.numa_node is None:
            return None
        node = self.nodes[job.numa_node]
        needed = HOST_ARRAYS * array_bytes
        if node.memory_total_bytes and needed > HOST_MEMORY_SHARE * node.memory_total_bytes:
            raise NotRun("skipped", f"3 arrays of {format_bytes(array_bytes)} do not fit in "
                                    f"NUMA node {node.node}'s "
                                    f"{format_bytes(node.memory_total_bytes)}; "
                                    "choose a smaller --size")
        return node

    def _measure_declared(self, case: HostCase, job: Job, plan: Plan) -> list[Measurement]:
        """A case declared with its own function; what it keeps between its jobs (a chain
        reused at each load level) lives in `scratch`, emptied when the next case starts."""
        self._bench = None  # the STREAM arrays are not needed by another case
        if self._scratch_case != case.key:
            self.scratch.clear()
            self._scratch_case = case.key
        return case.run(HostCaseRun(case, job, plan, self.facts, self.scratch))

    def cost(self, case: CaseSpec, job: Job, plan: Plan, previous: Job | None) -> Cost:
        """A declared case's own cost; a STREAM job: new arrays faulted in where the size,
        threads or node changed since `previous`, the fill, the timed launches (the first
        dropped) and the check, at the assumed DDR bandwidth of its threads and nodes."""
        if isinstance(case, HostCase):
            return case.cost(job, plan, self.facts, previous)
        array = job.size_bytes or 0
        threads = job.threads or 1
        nodes = 1 if job.numa_node is not None else max(1, len(self.nodes))
        rate = costs.ddr_bandwidth_gbps(threads, nodes) * 1e9
        streams = {c.key for c in plan.host_cases if not isinstance(c, HostCase)}
        same_arrays = (previous is not None and previous.case in streams
                       and (previous.size_bytes, previous.threads, previous.numa_node)
                       == (job.size_bytes, job.threads, job.numa_node))
        touch = 0.0 if same_arrays else (
            HOST_ARRAYS * array / (min(threads * costs.FILL_GBPS, rate / 1e9) * 1e9))
        moved = array * (2 * HOST_ARRAYS + plan.repeats * case.bytes_factor)
        return Cost(costs.HOST_JOB_S + touch + moved / rate, host_bytes=HOST_ARRAYS * array)

    def opening_cost(self, plan: Plan) -> Cost:
        """Numba compiling (or loading from its cache) each family of host kernels the plan
        runs: STREAM, the chase and its load."""
        families = {"chase" if case.metric == "latency" else "none"
                    if isinstance(case, HostCase) else "stream" for case in plan.host_cases}
        return Cost(costs.COMPILE_S * len(families - {"none"}))

    def close(self) -> None:
        self._bench = None
        self.scratch.clear()
