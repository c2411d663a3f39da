"""Runs GPU cases from their declarations (`bwprof.gpu.cases`): expands each into jobs, checks
a job fits before it runs, gives it a counter window where it earns one, calls the case's
function, and states what its rows cannot be (above peak, cache-resident, on an unconfirmed
NUMA node) as flags. An allocation that does not fit becomes a `skipped` row.

The same executor drives real GPUs (`CudaBackend`) and the simulated backend (`SimBackend`);
the rows of the latter are flagged `simulated` and carry a note saying they are not
measurements.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from bwprof import costs
from bwprof.casespec import CaseSpec
from bwprof.costs import Cost
from bwprof.executor import Executor
from bwprof.gpu import sampling
from bwprof.gpu.backend import GpuBackend, OutOfMemory
from bwprof.gpu.buffers import BufferPool
from bwprof.gpu.cases import GpuCase, p2p_matrix_bytes
from bwprof.gpu.devices import GpuDevice
from bwprof.gpu.hbm import array_sizes
from bwprof.gpu.job import CaseRun, link_slowdown, wait_deadline_s
from bwprof.gpu.layout import DEVICE_MEMORY_SHARE
from bwprof.measurement import Job, Measurement, NotRun, join_notes
from bwprof.peaks import INVALID_ABOVE_PEAK
from bwprof.plan import Plan
from bwprof.rules import CACHE_MULTIPLE, next_power_of_two
from bwprof.schema import flags
from bwprof.schema.metrics import get_metric
from bwprof.system import numa_nodes
from bwprof.units import format_bytes

SIMULATED_NOTE = "simulated on the CPU: not a measurement"
COUNTER_WINDOW_S = 0.9
"""Where telemetry samples: how long a large copy or HBM row repeats its work after timing,
so that several counter samples fall inside its window. GPM values come 100 ms apart at
least, and on 50 ms ticks often 150 ms apart; the ratio needs three whose whole interval
lies in the window and begins 100 ms after it (GPM values trail their reads): 0.9 s holds
four or five."""
HOST_MEMORIES = ("pinned", "pageable")
HOST_LINK_DIRECTIONS = ("h2d", "d2h", "both")
COUNTER_WINDOW_MIN_BYTES = 64 << 20
"""Rows below this size get no counter window: their counters say little."""
HOST_BUFFER_SHARE = 0.5  # pinned/pageable buffers of a job: at most this share of host memory
QUICK_PAGEABLE_NOTE = ("pageable buffers kept at the transfer sizes (the quick preset, or "
                       "--budget): under 4x the host's last-level cache, partly its figure; "
                       "the standard preset sweeps on past it")


@dataclass(frozen=True)
class HostCache:
    """What the GPU cases know of the host's cache and pages (`HostInfo`): the last-level
    cache across all of its instances, where its size came from (`sysfs`, `cpuid`, None), and
    the transparent-huge-page mode (`always`, `madvise`, `never`, None where unread)."""

    llc_bytes: int | None = None
    source: str | None = None
    transparent_hugepages: str | None = None

    def caveat(self) -> str | None:
        """Why a pageable buffer beyond 4x the LLC may still be partly in the cache."""
        if self.llc_bytes and self.source == "sysfs":
            return None
        if self.llc_bytes:
            return (f"host last-level cache {format_bytes(self.llc_bytes)} from "
                    f"{self.source or 'an unknown source'}, not /sys's full account: the "
                    "pageable buffer may be partly cache-resident")
        return ("host last-level cache size unknown: the pageable buffer may be partly "
                "cache-resident")


class GpuExecutor(Executor):
    def __init__(self, backend: GpuBackend, devices: list[GpuDevice],
                 host_memory_bytes: int | None = None, node_share: str | None = None,
                 host_cache: HostCache | None = None) -> None:
        self.gpu = backend
        self.host_cache = host_cache or HostCache()
        """The host's LLC and THP mode: pageable copies sweep to 4x that cache and rows under
        it are `in_cache`."""
        self.node_share = node_share
        """Why this executor holds only part of its node's GPUs (a fleet rank among several on
        a node), or None: cases that need the whole node are then waived with it."""
        self.backend = backend.name  # the runner's label for rows: "cuda" or "simulated"
        self._devices = devices
        self.host_memory_bytes = host_memory_bytes
        self.pool = BufferPool(backend)
        self.numa_node_count = len(numa_nodes())
        """With one node host memory cannot land on the wrong one; with none listed (a sandbox
        such as gVisor, whose CPU affinity is a stub) a GPU's node cannot be checked."""
        self._case: str | None = None
        self._scratch: dict[object, object] = {}
        """The current case's scratch (`CaseRun.scratch`), cleared when the case changes."""
        self._hbm_sizes: dict[int, tuple[list[int], str]] = {}
        self.counter_window_s = 0.0
        """Set to COUNTER_WINDOW_S while hardware counters are sampled (`api.run`)."""

    @property
    def devices(self) -> list[GpuDevice]:
        return self._devices

    def sharing(self, devices: list[GpuDevice], why: str) -> GpuExecutor:
        """An executor on the same backend holding only `devices` of the node (a fleet rank
        among several on a node): the cases that need every GPU are waived with `why`."""
        return GpuExecutor(self.gpu, devices, self.host_memory_bytes, node_share=why,
                           host_cache=self.host_cache)

    # -- planning ---------------------------------------------------------------------------------

    def unavailable_reason(self, case: CaseSpec) -> NotRun | None:
        if case.whole_node and self.node_share:
            return NotRun("waived", f"{self.node_share}; every GPU of the node at once needs "
                                    f"one rank per node (mpirun --map-by ppr:1:node)")
        if case.min_gpus > len(self.devices):
            return NotRun("waived", f"needs {case.min_gpus} GPUs; this machine has "
                                    f"{len(self.devices)}")
        return None

    def free_bytes(self, index: int) -> int:
        """Device memory free for this case (the previous case's buffers counted free); 0
        for a GPU that stopped answering, which is not called (its pool's free would never
        return): planning a case still expands every GPU's jobs."""
        if index in self.gpu.wedged:
            return 0
        return self.gpu.free_memory(index) + self.pool.device_bytes(index)

    def hbm_sizes(self, device: GpuDevice, plan: Plan) -> tuple[list[int], str]:
        if device.index not in self._hbm_sizes:
            self._hbm_sizes[device.index] = array_sizes(device, self.free_bytes(device.index),
                                                        plan.preset == "full")
        return self._hbm_sizes[device.index]

    def jobs(self, case: CaseSpec, plan: Plan) -> list[Job]:
        declared = _declared(case)
        return declared.expand(declared, self, plan)

    def fit_problem(self, case: GpuCase, job: Job) -> str | None:
        """Why `job` would not fit in device or host memory now, or None where it fits."""
        size = job.size_bytes or 0
        stopped = self._wedged(case, job)
        if stopped:
            return stopped
        devices = case.gpus(job, [d.index for d in self.devices])
        needs = case.needs(case, job)
        for index in devices:
            free = self.free_bytes(index)
            if needs.device_bytes > DEVICE_MEMORY_SHARE * free:
                return (f"{format_bytes(size)} does not fit: needs "
                        f"{format_bytes(needs.device_bytes)} on gpu{index}, more than "
                        f"{DEVICE_MEMORY_SHARE:.0%} of the {format_bytes(free)} free")
        host = needs.host_bytes * len(devices)
        if self.host_memory_bytes and host > HOST_BUFFER_SHARE * self.host_memory_bytes:
            return f"{format_bytes(size)} does not fit: needs {format_bytes(host)} of host memory"
        return None

    def _check_fits(self, case: GpuCase, job: Job) -> None:
        problem = self.fit_problem(case, job)
        if problem:
            raise NotRun("skipped", problem)

    def beyond_host_cache(self, case: GpuCase, job: Job, plan: Plan) -> Job:
        """A one-size pageable job (overlap_pageable) raised to the first power of two at
        least CACHE_MULTIPLE x the host's last-level cache, where that fits and the plan
        goes past the cache; else kept, its note saying why (its rows are then
        `in_cache`)."""
        llc, size = self.host_cache.llc_bytes, job.size_bytes or 0
        if not llc or size >= CACHE_MULTIPLE * llc:
            return job
        if not plan.past_host_cache:
            return replace(job, note=join_notes(job.note, QUICK_PAGEABLE_NOTE))
        target = CACHE_MULTIPLE * llc
        larger = replace(job, size_bytes=next_power_of_two(target))
        problem = self.fit_problem(case, larger)
        if problem is None:
            return replace(larger, note=join_notes(job.note, f"raised from {format_bytes(size)} to "
                                                        f"{CACHE_MULTIPLE}x the host's "
                                                        f"last-level cache "
                                                        f"({format_bytes(llc)}) or more"))
        return replace(job, note=join_notes(job.note, f"under {CACHE_MULTIPLE}x the host's "
                                                 f"last-level cache ({format_bytes(target)}): "
                                                 f"{problem}"))

    def pageable_sizes(self, case: GpuCase, device: GpuDevice,
                       plan: Plan) -> list[tuple[int, str]]:
        """A pageable copy's sizes on `device`, each with its note: the transfer sizes, then
        on by the preset's step (the ratio of its two largest) until the host buffer is at
        least CACHE_MULTIPLE x the host's whole last-level cache, the last step cut to the
        first power of two there; sizes added past the preset's that would not fit in
        free device or host memory are not run, and the largest that runs says why the
        sweep ends under 4x the cache. Without a known LLC: the transfer sizes alone."""
        sizes = list(plan.transfer_sizes)
        llc = self.host_cache.llc_bytes
        if not llc or not sizes:
            return [(size, "") for size in sizes]
        if not plan.past_host_cache:
            return [(size, QUICK_PAGEABLE_NOTE if size == sizes[-1]
                     and size < CACHE_MULTIPLE * llc else "") for size in sizes]
        target = CACHE_MULTIPLE * llc
        step = max(2, sizes[-1] // sizes[-2]) if len(sizes) > 1 else 2
        cut = next_power_of_two(target)

        def problem(size: int) -> str | None:
            return self.fit_problem(case, Job(case.key, size_bytes=size, device=device.index))

        stopped: str | None = None
        added: list[int] = []
        while (added or sizes)[-1] < target:
            larger = min((added or sizes)[-1] * step, cut)
            stopped = problem(larger)
            if stopped:
                break
            added.append(larger)
        sizes += added
        running = [size for size in sizes if problem(size) is None]
        if not running:
            return [(size, "") for size in sizes]  # each skipped with its own reason
        largest = running[-1]
        if largest < target:
            why = stopped if largest == sizes[-1] else problem(
                next(size for size in sizes if size > largest))
            note = (f"sweep ends under {CACHE_MULTIPLE}x the host's last-level cache "
                    f"({format_bytes(target)}): {why}")
        elif added:
            note = (f"sweep run on past the preset's sizes to {format_bytes(largest)}: at least "
                    f"{CACHE_MULTIPLE}x the host's last-level cache ({format_bytes(llc)})")
        else:
            note = ""
        return [(size, note if size == largest else "") for size in sizes]

    def _earns_window(self, case: GpuCase, job: Job, plan: Plan) -> bool:
        """Whether this row repeats its work for a counter window (while telemetry samples),
        from COUNTER_WINDOW_MIN_BYTES up: the largest size of its sweep that fits, on the
        first GPU (or the first pair) of each case; with the `full` preset on every GPU,
        and with the `matrix` rule every pair's row at the matrix size (the GPU-to-GPU
        heatmap of counters); with the `quick` preset only for the paths' headline cases.
        A window is 0.9 s: on every GPU and pair of an 8-GPU box they took about 340 s of
        a quick run."""
        size = job.size_bytes or 0
        if (case.window == "none" or not self.counter_window_s or not plan.counter_windows
                or size < COUNTER_WINDOW_MIN_BYTES
                or (plan.preset == "quick" and not case.headline)):
            return False
        every = plan.preset == "full"
        if job.peer is not None:
            if every and case.window == "matrix" and size == p2p_matrix_bytes(plan):
                return True
            if (job.device, job.peer) != (self.devices[0].index, self.devices[1].index):
                return False  # only the first pair sweeps sizes
        elif job.device is not None and job.device != self.devices[0].index and not every:
            return False
        sweep = {j.size_bytes or 0 for j in self.jobs(case, plan)
                 if (j.device, j.peer, j.streams, j.dtype)
                 == (job.device, job.peer, job.streams, job.dtype)}
        # True unless a larger size of this sweep will run and take the window.
        return all(self.fit_problem(case, replace(job, size_bytes=larger))
                   for larger in sorted(s for s in sweep if s > size))

    def cost(self, case: CaseSpec, job: Job, plan: Plan, previous: Job | None) -> Cost:
        """The case's own cost (`bwprof.gpu.cost`), and its counter window where it earns
        one."""
        declared = _declared(case)
        base = declared.cost(declared, job, self, plan)
        if self._earns_window(declared, job, plan):
            base = base + Cost(self.counter_window_s + sampling.COUNTER_BATCH_S)
        return base

    def opening_cost(self, plan: Plan) -> Cost:
        """CUDA contexts, CuPy's and Numba's first kernels on every GPU this run uses."""
        return Cost(costs.GPU_OPEN_S + costs.GPU_OPEN_PER_DEVICE_S * len(self.devices))

    # -- running ----------------------------------------------------------------------------------

    def measure(self, case: CaseSpec, job: Job, plan: Plan) -> list[Measurement]:
        declared = _declared(case)
        if self._case != case.key:
            self.pool.release()  # buffers of the previous case are not needed any more
            self._case = case.key
            self._scratch = {}
        if declared.sweep_done is not None and declared.sweep_done(job, self._scratch):
            return []  # its sweep's figure has plateaued: a larger size would add nothing
        if job.device is not None and job.peer is None:
            self.pool.drop_host_except(job.device)
        elif job.device is not None and job.peer is not None and declared.pair_slots:
            first, second = declared.pair_slots
            self.pool.keep_device_slots(job.device, first)
            self.pool.keep_device_slots(job.peer, second)
        stopped = self._wedged(declared, job)
        if stopped:
            raise NotRun("skipped", stopped)
        self._check_fits(declared, job)
        window = self.counter_window_s if self._earns_window(declared, job, plan) else 0.0
        # No wait on a GPU may hang the run: each is bounded by a deadline sized from the
        # job's planned time (`wait_deadline_s`); past it the job ends in an error row that
        # names the stalled work, and its GPUs are skipped from then on (`_wedged`).
        planned = declared.cost(declared, job, self, plan).seconds + window
        used = set(declared.gpus(job, [d.index for d in self.devices]))
        self.gpu.deadline_s = wait_deadline_s(
            planned, link_slowdown([d for d in self.devices if d.index in used]))
        run = CaseRun(declared, job, self.pool, self.devices, plan.repeats, window,
                      self._scratch)
        out_of_memory: str | None = None
        try:
            rows = declared.run(run)
        except OutOfMemory as exc:
            # Released after the except block: the exception's traceback keeps the failed
            # job's frames, and with them its buffers, alive until the block ends.
            out_of_memory = str(exc)
        if out_of_memory is not None:
            self.pool.release()
            raise NotRun("skipped",
                          f"{format_bytes(job.size_bytes or 0)} does not fit: {out_of_memory}")
        rows = [self._checked(declared, row) for row in rows]
        if job.note:  # why the job's size is what it is, on rows whose function did not say
            rows = [row if job.note in row.note else _with_note(row, job.note) for row in rows]
        if self.backend == "simulated":
            rows = [_with_note(row, SIMULATED_NOTE) for row in rows]
        return rows

    def _wedged(self, case: GpuCase, job: Job) -> str | None:
        """Why `job` cannot run: a GPU it uses (`GpuCase.gpus`: one_to_all's job on gpu0
        uses every GPU) stopped answering earlier in this run (a wait on it ran past its
        deadline); None where every GPU it uses still answers."""
        used = case.gpus(job, [d.index for d in self.devices])
        stopped = [d for d in used if d in self.gpu.wedged]
        if not stopped:
            return None
        first = stopped[0]
        return (f"gpu{first} stopped answering earlier in this run ({self.gpu.wedged[first]}):"
                " not used again, nor synchronised")

    def _checked(self, case: GpuCase, row: Measurement) -> Measurement:
        """State what the figure cannot be: above its theoretical peak (a measurement error,
        unless the data fits in L2, which then has no HBM peak), over NVLink-C2C, or on a
        NUMA node that placement could not enforce or confirm."""
        metric = get_metric(case.metric)
        device = next((d for d in self.devices if d.label == row.device), None)
        # Device memory alone (a copy or kernel within one GPU, an overlap case's kernel):
        # under 4x the L2 it is served partly by the cache. A compute ceiling's peak is the
        # SMs' arithmetic, which no cache raises: it keeps its peak at every size.
        cached = (device is not None and row.memory == "hbm" and metric.name != "throughput"
                  and row.direction in ("within", "compute")
                  and row.size_bytes < CACHE_MULTIPLE * device.properties.l2_bytes)
        if cached:
            why = ("fits in L2: the figure may exceed the HBM peak, so it is not held against "
                   "it" if metric.higher_is_better else
                   "under 4x the L2: a cache's latency, not HBM's")
            row = replace(_flagged(row, flags.L2_RESIDENT, why), peak=None)
        # Every row that moves host memory over the link: copies, and the concurrent rows of
        # overlap and pipeline cases ('h2d+compute', 'h2d+compute+d2h').
        over_link = (row.memory in HOST_MEMORIES
                     and bool(set(row.direction.split("+")) & set(HOST_LINK_DIRECTIONS)))
        link_peak = row.peak
        if over_link and device is not None:
            row = self._with_pages(row, device)
        # An L2-resident figure may beat the HBM peak; a pageable buffer in the host's cache
        # has no pageable peak beside it, yet every byte still crosses the link, which
        # bounds it: a figure above the link's peak is a measurement error there too.
        bound = None if flags.L2_RESIDENT in row.flags else link_peak if over_link else row.peak
        if bound and row.seconds_per_op and metric.higher_is_better:
            best = metric.value(row.work, min(row.seconds_per_op))
            if best > INVALID_ABOVE_PEAK * bound:
                row = replace(_with_note(row, f"figure above the theoretical peak ({best:.1f} > "
                                              f"{bound:.1f} {metric.unit}): a measurement "
                                              "error"), valid=False)
        if row.numa_node is not None and self.gpu.placement_failed:
            row = replace(_flagged(row, flags.NUMA_UNVERIFIED, "host memory placement not "
                                   "enforced (CPU affinity refused)"), numa_node=None)
        over_c2c = (device.host_link_c2c if device is not None  # 'all': any GPU's link
                    else any(d.host_link_c2c for d in self.devices))
        if over_c2c and over_link:
            c2c_peak = self._c2c_peak(row, device) if metric.unit == "GB/s" else None
            if c2c_peak is None:
                row = _flagged(row, flags.C2C_LINK, "host link is NVLink-C2C: no peak known for "
                                                    "it (PCIe's does not apply)")
            else:
                row = replace(_flagged(row, flags.C2C_LINK, "host link is NVLink-C2C: peak from "
                                       "NVML's C2C links x their maximum (PCIe's does not "
                                       "apply)"), peak=c2c_peak)
                if row.seconds_per_op and metric.higher_is_better:
                    best = metric.value(row.work, min(row.seconds_per_op))
                    if best > INVALID_ABOVE_PEAK * c2c_peak:
                        row = replace(_with_note(row, f"figure above the NVLink-C2C peak "
                                                      f"({best:.1f} > {c2c_peak:.1f} GB/s): a "
                                                      "measurement error, or NVML's C2C "
                                                      "fields under-report"), valid=False)
        involved = self._row_devices(row)
        if any(d.mig_slice for d in involved):
            row = replace(_flagged(row, flags.MIG_SLICE, "measured on a MIG slice: its share "
                                   "of the GPU's memory and SMs, not the whole GPU (no "
                                   "whole-GPU HBM peak)"),
                          peak=None if row.memory == "hbm" else row.peak)
        if over_link and any(d.cc_mode for d in involved):
            row = _flagged(row, flags.CONFIDENTIAL_COMPUTING,
                           "confidential computing on: host-device copies go through "
                           "encrypted bounce buffers, so the figure is that path's, not the "
                           "link's")
        share = None if device is None else self.pool.off_node_share(device.index)
        override = None if device is None else self.pool.placement_override(device.index)
        if row.numa_node is not None and override is not None:
            row = replace(_flagged(row, flags.NUMA_UNVERIFIED, f"host memory not asked of NUMA "
                                   f"node {row.numa_node}: {override}"), numa_node=None)
        elif row.numa_node is not None and share is not None:
            row = replace(_flagged(row, flags.NUMA_UNVERIFIED,
                                   f"host memory not on NUMA node {row.numa_node}: {share:.0%} "
                                   "of its sampled pages there (the node is short of free "
                                   "memory)"), numa_node=None)
        elif (row.numa_node is not None and device is not None and self.numa_node_count != 1
              and self.pool.placement_unread(device.index)):
            row = _flagged(row, flags.NUMA_UNVERIFIED,
                           f"host memory asked of NUMA node {row.numa_node}; where its pages "
                           "landed could not be read back")
        return row

    def _row_devices(self, row: Measurement) -> list[GpuDevice]:
        """The GPUs a row measured: its own, both of a pair ('gpu0->gpu1', 'gpu0<->gpu1'),
        every one for 'all'."""
        if row.device == "all":
            return list(self.devices)
        labels = set(re.split(r"<->|->|\+|,", row.device or ""))
        return [d for d in self.devices if d.label in labels]

    def _c2c_peak(self, row: Measurement, device: GpuDevice | None) -> float | None:
        """A host-link row's NVLink-C2C peak, counted as its PCIe peak would be: per
        direction, twice for both at once ('both', 'h2d+compute+d2h'), summed over the GPUs
        of an 'all' row; None where any GPU's driver does not give it."""
        parts = row.direction.split("+")
        directions = sum(2 if part == "both" else part in ("h2d", "d2h") for part in parts)
        peaks = [d.peak_c2c_gbps for d in ([device] if device is not None else self.devices)]
        if not directions or not peaks or not all(peaks):
            return None
        return directions * sum(p for p in peaks if p)

    def _with_pages(self, row: Measurement, device: GpuDevice) -> Measurement:
        """A host copy's row with the page size of its host buffer (pinned memory: where the
        kernel tells it) and, for pageable memory, the THP mode and whether the buffer is
        under 4x the host's last-level cache: then the host side may be served from the
        cache and the row is `in_cache`, not the pageable figure (`cache_unknown` where the
        cache size is not /sys's full account)."""
        pinned = row.memory == "pinned"
        pages = self.pool.host_pages(device.index, pinned)
        if pages is not None and row.page_bytes is None:
            row = replace(row, page_bytes=pages.page_bytes)
        if pinned:
            return row
        mode = self.host_cache.transparent_hugepages
        row = _with_note(row, f"host buffer in {pages.description if pages else 'pages unread'}"
                              f" (transparent huge pages: {mode or 'mode unknown'})")
        llc = self.host_cache.llc_bytes
        if llc and row.size_bytes < CACHE_MULTIPLE * llc:
            return replace(_flagged(row, flags.IN_CACHE,
                                    f"host buffer under {CACHE_MULTIPLE}x the host's last-level "
                                    f"cache ({format_bytes(llc)}): partly the cache's figure, "
                                    "not the pageable one (no PCIe peak beside it)"), peak=None)
        if caveat := self.host_cache.caveat():
            return _flagged(row, flags.CACHE_UNKNOWN, caveat)
        return row

    def close(self) -> None:
        self.pool.release()


def _declared(case: CaseSpec) -> GpuCase:
    if not isinstance(case, GpuCase):
        raise NotRun("skipped", f"no GPU implementation for case {case.key}")
    return case


def _with_note(row: Measurement, note: str) -> Measurement:
    return replace(row, note=join_notes(note, row.note))


def _flagged(row: Measurement, flag: str, note: str) -> Measurement:
    """The row with `flag` for code, and the note saying why for people."""
    return replace(_with_note(row, note), flags=row.flags | {flag})
