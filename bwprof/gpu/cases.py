"""Every GPU case, declared once: what it is (key, description, memory, direction, bytes), how
it expands into jobs, what each job allocates (for the fits-in-memory check), whether it earns
a counter window, and the function that runs one job.

The executor (`bwprof.gpu.executor`) reads nothing else about a case and no code decides by
its key: adding one is a table entry here and one function `run(CaseRun) ->
list[Measurement]` (docs/adding-a-case.md); variants of a shared function are fields of the
entry (`directions`, `both_ways`, `kernel`). This
module imports no GPU library, so the catalogue of cases (`bwprof.cases`) stays cheap to load.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations, permutations
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from bwprof.casespec import ByteConvention, CaseSpec
from bwprof.costs import Cost
from bwprof.gpu import layout
from bwprof.gpu.kernel_params import DOT_BLOCKS
from bwprof.gpu.layout import Footprint
from bwprof.lazyref import Refs
from bwprof.measurement import Job, Measurement

if TYPE_CHECKING:
    from bwprof.gpu.devices import GpuDevice
    from bwprof.gpu.job import CaseRun
    from bwprof.plan import Plan

_T = TypeVar("_T")

# The functions the table names, each imported when first called: the table is declared, and
# the catalogue read, without loading the measuring code.
compute = Refs("bwprof.gpu.compute")
cost = Refs("bwprof.gpu.cost")
hbm = Refs("bwprof.gpu.hbm")
latency = Refs("bwprof.gpu.latency")
matrices = Refs("bwprof.gpu.matrices")
overlap = Refs("bwprof.gpu.overlap")
smcopy = Refs("bwprof.gpu.smcopy")
transfers = Refs("bwprof.gpu.transfers")

P2P_MATRIX_BYTES = 256 << 20
"""The size every pair of the P2P matrix is measured at (the largest transfer size up to it)."""

Window = Literal["none", "largest", "matrix"]
"""When a job repeats its work for a counter window while telemetry samples: never; at the
largest size of its sweep that fits; or that, and also at the P2P matrix size for every pair."""


class Planner(Protocol):
    """What expanding a case into jobs may ask of the executor."""

    @property
    def devices(self) -> Sequence[GpuDevice]: ...

    def free_bytes(self, index: int) -> int:
        """Device memory free for this case (the previous case's buffers counted free)."""

    def hbm_sizes(self, device: GpuDevice, plan: Plan) -> tuple[list[int], str]:
        """The HBM arrays' sizes on `device` (one list for every hbm_ case) and why they shrank."""

    def beyond_host_cache(self, case: GpuCase, job: Job, plan: Plan) -> Job:
        """A one-size pageable job raised to 4x the host's last-level cache where it fits."""

    def fit_problem(self, case: GpuCase, job: Job) -> str | None:
        """Why `job` would not fit in device or host memory, or None where it fits."""

    def pageable_sizes(self, case: GpuCase, device: GpuDevice,
                       plan: Plan) -> list[tuple[int, str]]:
        """A pageable copy's sizes on `device` (on to 4x the host's last-level cache where
        memory allows), each with the note its row carries."""


Expand = Callable[["GpuCase", Planner, "Plan"], list[Job]]
Needs = Callable[["GpuCase", Job], "Footprint"]
Run = Callable[["CaseRun"], list[Measurement]]
Costs = Callable[["GpuCase", Job, Planner, "Plan"], Cost]
Uses = Callable[[Job, Sequence[int]], list[int]]


def own_gpus(job: Job, indices: Sequence[int]) -> list[int]:
    """The GPUs a job names: its own and its peer, or every one of `indices` (a job of all
    GPUs at once, `device` None)."""
    if job.device is None:
        return list(indices)
    return [i for i in (job.device, job.peer) if i is not None]


def every_gpu(job: Job, indices: Sequence[int]) -> list[int]:
    """Every GPU of `indices`, the job's own first: a pattern job on one GPU that copies
    to or from all the others at once (one_to_all, all_to_one)."""
    return [i for i in (job.device,) if i is not None] + [i for i in indices
                                                          if i != job.device]


@dataclass(frozen=True, kw_only=True)
class GpuCase(CaseSpec):
    """A GPU case: the CaseSpec every case has, and how the GPU executor runs it."""

    expand: Expand
    needs: Needs
    run: Run
    window: Window = "largest"
    pair_slots: tuple[tuple[int, ...], tuple[int, ...]] | None = field(default=None)
    """Pair jobs: device buffer slots on the first GPU and on the second (so a GPU that is
    source in one pair and target in the next keeps only what this pair needs)."""
    directions: tuple[str, ...] = ()
    """Overlap cases: the copies beside the kernel (`h2d`, `d2h`)."""
    both_ways: bool = False
    """Pair cases: each pair copies both ways at once (else one way)."""
    reads: bool = False
    """Pattern cases: the job's GPU reads from its peers (the copies on its streams pull),
    else it writes to them."""
    kernel: str = ""
    """STREAM cases: the kernel of `bwprof.gpu.kernels` they time, and its gold replay."""
    sweep_done: Callable[[Job, dict[object, object]], bool] | None = None
    """Size sweeps that stop once their figure has plateaued (gemm_gpu): whether a job's
    sweep is done, from what earlier jobs left in the case's scratch; such a job runs not
    at all and leaves no row (the last row run says why the sweep stopped)."""
    cost: Costs = cost.sampled
    """What one job costs before it runs (`bwprof.gpu.cost`): timed samplings of copies or
    kernels, unless the case says otherwise (a chase, a matrix multiply)."""
    phases: int = 1
    """Timed samplings one job takes (the parts of an overlap case alone and together, the
    copy engine's and the SMs' phases of a pattern, a chase's load levels)."""
    uses: Uses = own_gpus
    """The GPUs a job touches (`gpus`), declared once: what the fits check, the skip of a
    GPU that stopped answering, and the cost model all go by."""

    def gpus(self, job: Job, indices: Sequence[int]) -> list[int]:
        """The CUDA indices, of `indices` (the executor's GPUs), that `job` allocates on,
        copies to or from, or waits on; its own GPU first."""
        return self.uses(job, indices)


# -- how cases expand into jobs -------------------------------------------------------------------


def swept(plan: Plan, n: int, sizes: Sequence[_T],
          fits: Callable[[_T], bool] = lambda _: True) -> Sequence[_T]:
    """The sizes the `n`th GPU of a case sweeps: all of them, or where the plan sweeps the
    first GPU only (`Plan.sweep_gpus`), on the others the largest that `fits` (the largest
    of all where none does: its row says why it was skipped)."""
    if n == 0 or plan.sweep_gpus == "all":
        return sizes
    return [s for s in sizes if fits(s)][-1:] or sizes[-1:]


def _fits(case: GpuCase, planner: Planner, device: GpuDevice) -> Callable[[int], bool]:
    return lambda size: planner.fit_problem(
        case, Job(case.key, size_bytes=size, device=device.index)) is None


def model_devices(plan: Plan, planner: Planner) -> Sequence[GpuDevice]:
    """The GPUs a case that measures the GPU model's behaviour rather than one GPU's health
    (overlap, the pipeline, latency under load) runs on: every one, or where the plan sweeps
    the first GPU only (`Plan.sweep_gpus`), the first alone."""
    return planner.devices if plan.sweep_gpus == "all" else planner.devices[:1]


def each_device_each_size(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    return [Job(case.key, size_bytes=size, device=d.index)
            for n, d in enumerate(planner.devices)
            for size in swept(plan, n, plan.transfer_sizes, _fits(case, planner, d))]


def pageable_sweep(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """The transfer sizes, then on past them until the host buffer is at least 4x the host's
    last-level cache (a smaller one may be served from the cache), where memory allows; the
    largest size says why the sweep ends where it does."""
    jobs = []
    for n, device in enumerate(planner.devices):
        fits = _fits(case, planner, device)
        sizes = swept(plan, n, planner.pageable_sizes(case, device, plan),
                      lambda pair, fits=fits: fits(pair[0]))  # type: ignore[misc]
        jobs += [Job(case.key, size_bytes=size, device=device.index, note=note)
                 for size, note in sizes]
    return jobs


def every_device_at_once(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    return [Job(case.key, size_bytes=size) for size in plan.transfer_sizes]


def p2p_matrix_bytes(plan: Plan) -> int:
    return max((s for s in plan.transfer_sizes if s <= P2P_MATRIX_BYTES),
               default=plan.transfer_sizes[0])


def _pair_jobs(case: GpuCase, plan: Plan, pairs: list[tuple[int, int]]) -> list[Job]:
    """Like nvbandwidth: the whole matrix at one size, the size sweep on the first pair only
    (8 GPUs would otherwise mean 56 pairs x every size)."""
    matrix = p2p_matrix_bytes(plan)
    return [Job(case.key, size_bytes=size, device=i, peer=j)
            for n, (i, j) in enumerate(pairs)
            for size in (plan.transfer_sizes if n == 0 else (matrix,))]


def ring(indices: Sequence[int]) -> list[tuple[int, int]]:
    """Each GPU to the next and back (`Plan.pairs` 'ring'): 2n ordered pairs, not n(n-1)."""
    if len(indices) < 3:
        return list(permutations(indices, 2))
    forward = [(a, indices[(n + 1) % len(indices)]) for n, a in enumerate(indices)]
    return forward + [(b, a) for a, b in forward]


def plan_pairs(plan: Plan, indices: Sequence[int]) -> list[tuple[int, int]]:
    """The ordered pairs a pair case measures: every one, or the plan's ring."""
    return ring(indices) if plan.pairs == "ring" else list(permutations(indices, 2))


def ordered_pairs(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    return _pair_jobs(case, plan, plan_pairs(plan, [d.index for d in planner.devices]))


def unordered_pairs(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    indices = [d.index for d in planner.devices]
    pairs = ([p for p in ring(indices) if p[0] < p[1]] if plan.pairs == "ring"
             else list(combinations(indices, 2)))
    return _pair_jobs(case, plan, pairs)


def each_gpu_to_all(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """A pattern per GPU (one GPU and every other at once): the size sweep on the first GPU,
    the P2P matrix size on the others, as the pair matrix does. `streams`: the copies the
    GPU issues at once (one per peer)."""
    peers = len(planner.devices) - 1
    return [Job(case.key, size_bytes=size, device=d.index, streams=peers)
            for n, d in enumerate(planner.devices)
            for size in (plan.transfer_sizes if n == 0 else (p2p_matrix_bytes(plan),))]


def every_pair_at_once(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """Every ordered pair at once, one job per transfer size; `streams`: the copies each GPU
    issues (one per peer)."""
    return [Job(case.key, size_bytes=size, streams=len(planner.devices) - 1)
            for size in plan.transfer_sizes]


def hbm_sweep(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """Every HBM array size of each device (`full` sweeps up from 256 KiB; else one size)."""
    jobs = []
    for n, device in enumerate(planner.devices):
        sizes, note = planner.hbm_sizes(device, plan)
        jobs += [Job(case.key, size_bytes=size, device=device.index,
                     note=note if size == sizes[-1] else "") for size in swept(plan, n, sizes)]
    return jobs


def hbm_largest(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """The largest HBM array size of each device only."""
    jobs = []
    for device in planner.devices:
        sizes, note = planner.hbm_sizes(device, plan)
        jobs.append(Job(case.key, size_bytes=sizes[-1], device=device.index, note=note))
    return jobs


def overlap_size(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """One job per device at the overlap size: 256 MiB, halved until its buffers fit."""
    jobs = []
    for device in model_devices(plan, planner):
        size, note = overlap.overlap_size(len(case.directions), planner.free_bytes(device.index),
                                          layout.DEVICE_MEMORY_SHARE)
        jobs.append(Job(case.key, size_bytes=size, device=device.index, note=note))
    return jobs


def pageable_overlap_size(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """overlap_size's job per device, raised to 4x the host's last-level cache where it fits
    (a pageable buffer under it may be served from the host's cache)."""
    return [planner.beyond_host_cache(case, job, plan)
            for job in overlap_size(case, planner, plan)]


def chunks_and_streams(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    return [Job(case.key, size_bytes=chunk, device=d.index, streams=streams)
            for d in model_devices(plan, planner) for chunk in plan.pipeline_chunks
            for streams in layout.PIPELINE_STREAMS]


def latency_sweep(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """Chase working sets from 4 KiB up to at least 4x each device's L2 (L1, L2, HBM): by 4x
    steps, by 2x with the `full` preset."""
    factor = plan.sweep_factor(2 if plan.preset == "full" else 4)
    return [Job(case.key, size_bytes=size, device=d.index)
            for n, d in enumerate(planner.devices)
            for size in swept(plan, n, latency.sweep_sizes(d.properties.l2_bytes, factor))]


def latency_beyond_l2(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """One chase per device at a working set beyond its cache (the power of two >= 4x L2)."""
    return [Job(case.key, size_bytes=latency.hbm_chase_bytes(d.properties.l2_bytes),
                device=d.index) for d in planner.devices]


def latency_under_load(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """`latency_beyond_l2` on the GPUs that measure the model's behaviour (`model_devices`)."""
    return [Job(case.key, size_bytes=latency.hbm_chase_bytes(d.properties.l2_bytes),
                device=d.index) for d in model_devices(plan, planner)]


def latency_pairs(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """Every ordered pair, the chain in the second GPU's memory beyond its L2."""
    devices = {d.index: d for d in planner.devices}
    return [Job(case.key, size_bytes=latency.hbm_chase_bytes(devices[j].properties.l2_bytes),
                device=i, peer=j)
            for i, j in plan_pairs(plan, list(devices))]


def each_device_small_copy(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    return [Job(case.key, size_bytes=layout.MEMCPY_BYTES, device=d.index)
            for d in planner.devices]


def gemm_sweep(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    """Each device, each dtype, the preset's matrix orders whose three matrices fit in the
    device's memory share; the largest that fits says where memory cut the sweep short, and
    the run stops each sweep earlier where its figure plateaus (`compute.sweep_done`)."""
    jobs = []
    for index, device in enumerate(planner.devices):
        budget = layout.DEVICE_MEMORY_SHARE * planner.free_bytes(device.index)
        for dtype in layout.GEMM_DTYPES:
            orders = layout.GEMM_SIZES.get(plan.preset, layout.GEMM_SIZES["standard"])
            item = matrices.itemsize(dtype)
            fitting = [n for n in orders if 3 * n * n * item <= budget] or [orders[0]]
            note = (f"sweep stops at n = {fitting[-1]}: three {orders[-1]}^2 {dtype} "
                    "matrices do not fit" if len(fitting) < len(orders) else "")
            jobs += [Job(case.key, size_bytes=n * n * item, device=device.index, dtype=dtype,
                         note=note if n == fitting[-1] else "")
                     for n in swept(plan, index, fitting)]
    return jobs


def each_device_each_fma_dtype(case: GpuCase, planner: Planner, plan: Plan) -> list[Job]:
    return [Job(case.key, size_bytes=8 * compute.fma_threads(d), device=d.index, dtype=dtype)
            for d in planner.devices for dtype in layout.FMA_DTYPES]


# -- what a job allocates -------------------------------------------------------------------------


def buffers(device: int = 1, host: int = 1) -> Needs:
    """A job holding `device` buffers of its size on each GPU it uses, and `host` buffers of
    its size in host memory for each of them."""
    def needs(case: GpuCase, job: Job) -> Footprint:
        size = job.size_bytes or 0
        return Footprint(device * size, host * size)
    return needs


def peer_buffers(per_peer: int) -> Needs:
    """A pattern job: `per_peer` device buffers of its size for each peer (`Job.streams`) on
    the GPU that holds the most (the one GPU of one_to_all, every GPU of all pairs)."""
    def needs(case: GpuCase, job: Job) -> Footprint:
        return Footprint(per_peer * (job.streams or 1) * (job.size_bytes or 0), 0)
    return needs


def overlap_buffers(case: GpuCase, job: Job) -> Footprint:
    size = job.size_bytes or 0
    return Footprint(overlap.device_bytes_needed(len(case.directions), size),
                     len(case.directions) * size)


def pipeline_buffers(case: GpuCase, job: Job) -> Footprint:
    """Chunk buffers in and out per stream; pinned in and out, the inputs and their gold."""
    size = job.size_bytes or 0
    return Footprint(overlap.pipeline_device_bytes(size, job.streams or 1),
                     4 * overlap.pipeline_total_bytes(size))


def stream_arrays(case: GpuCase, job: Job) -> Footprint:
    """Three arrays and the dot's partial sums on the GPU; the arrays again on the host, where
    they are checked."""
    size = job.size_bytes or 0
    return Footprint(3 * size + DOT_BLOCKS * layout.ELEMENT_BYTES, 3 * size)


def chase_buffers(device: int, host: int, extra_host: int = 0) -> Needs:
    """A chase: `device` buffers of its size on each GPU it uses (and its small state), and
    `host` of them in host memory (the links built there, pinned memory it chases), and
    `extra_host` bytes more there (lat_h2d's small in-order chain)."""
    def needs(case: GpuCase, job: Job) -> Footprint:
        size = job.size_bytes or 0
        return Footprint(device * size + layout.STATE_BYTES, host * size + extra_host)
    return needs


# -- the table ------------------------------------------------------------------------------------


def _gpu(key: str, description: str, memory: str, direction: str, convention: ByteConvention,
         *, run: Run, expand: Expand = each_device_each_size, needs: Needs | None = None,
         factor: int = 1, min_gpus: int = 1, whole_node: bool = False,
         window: Window = "largest", metric: str = "bandwidth",
         pair_slots: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
         directions: tuple[str, ...] = (), both_ways: bool = False,
         kernel: str = "", copied: int | None = None, reads: bool = False,
         sweep_done: Callable[[Job, dict[object, object]], bool] | None = None,
         costs: Costs = cost.sampled, phases: int = 1, headline: bool = False,
         uses: Uses = own_gpus) -> GpuCase:
    return GpuCase(key=key, description=description, target="gpu", memory=memory,
                   direction=direction, byte_convention=convention, bytes_factor=factor,
                   copied_factor=copied, min_gpus=min_gpus, whole_node=whole_node,
                   metric=metric, expand=expand,
                   needs=needs or buffers(device=1, host=1), run=run, window=window,
                   pair_slots=pair_slots, directions=directions, both_ways=both_ways,
                   kernel=kernel, reads=reads, sweep_done=sweep_done, cost=costs,
                   phases=phases, headline=headline, uses=uses)


def _hbm(name: str, what: str, arrays: int, expand: Expand = hbm_largest,
         copied: int | None = None, headline: bool = False) -> GpuCase:
    return _gpu(f"hbm_{name}", f"device HBM STREAM {what}, float64, Numba CUDA kernel", "hbm",
                "within", "traffic", factor=arrays, run=hbm.stream_kernel, expand=expand,
                needs=stream_arrays, kernel=name, copied=copied, headline=headline)


def _overlap(key: str, description: str, memory: str, directions: tuple[str, ...]) -> GpuCase:
    return _gpu(key, description, memory, "+".join((*directions, "compute")), "copy",
                run=overlap.overlap,
                expand=pageable_overlap_size if memory == "pageable" else overlap_size,
                needs=overlap_buffers, window="none", directions=directions,
                phases=len(directions) + (len(directions) > 1) + 3)


GPU_CASES: tuple[GpuCase, ...] = (
    _gpu("h2d_pinned", "host-to-device copy-engine copy from pinned host memory",
         "pinned", "h2d", "copy", run=transfers.one_way, copied=1, headline=True),
    _gpu("d2h_pinned", "device-to-host copy-engine copy into pinned host memory",
         "pinned", "d2h", "copy", run=transfers.one_way, copied=1, headline=True),
    _gpu("h2d_pageable", "host-to-device copy from ordinary (pageable) host memory",
         "pageable", "h2d", "copy", run=transfers.one_way,
         expand=pageable_sweep, copied=1),
    _gpu("d2h_pageable", "device-to-host copy into ordinary (pageable) host memory",
         "pageable", "d2h", "copy", run=transfers.one_way,
         expand=pageable_sweep, copied=1),
    _gpu("bidir_pinned", "host-to-device and device-to-host at once on two streams (pinned)",
         "pinned", "both", "copy", run=transfers.bidirectional, needs=buffers(2, 2),
         copied=1),
    _gpu("d2d_copy", "device-to-device copy within one GPU by the copy engine",
         "hbm", "within", "traffic", factor=2, run=transfers.within_device,
         needs=buffers(2, 0), copied=1, headline=True),
    _hbm("copy", "Copy c = a", 2, expand=hbm_sweep, copied=1),
    _hbm("scale", "Scale b = s*c", 2),
    _hbm("add", "Add c = a + b", 3),
    _hbm("triad", "Triad a = b + s*c", 3, headline=True),
    _hbm("dot", "Dot sum(a*b)", 2),
    _gpu("h2d_all", "host-to-device on every GPU at once, each from its own NUMA node",
         "pinned", "h2d", "copy", run=transfers.all_devices, expand=every_device_at_once,
         whole_node=True, copied=1, headline=True),
    _gpu("d2h_all", "device-to-host on every GPU at once, each to its own NUMA node",
         "pinned", "d2h", "copy", run=transfers.all_devices, expand=every_device_at_once,
         whole_node=True, copied=1, headline=True),
    # Traffic patterns: many copies at once, each case one aggregate on one clock.
    _gpu("h2d_all_bidir", "host-to-device and device-to-host on every GPU at once (2 streams "
         "a GPU), each from and to its own NUMA node", "pinned", "both", "copy",
         run=transfers.host_all_bidir, expand=every_device_at_once, needs=buffers(2, 2),
         whole_node=True, copied=1),
    _gpu("one_to_all", "one GPU writing to every other GPU at once, per source GPU: by the "
         "copy engine and by SM kernels (phase)", "hbm", "p2p", "copy", run=smcopy.one_to_all,
         expand=each_gpu_to_all, uses=every_gpu, needs=peer_buffers(2), min_gpus=2,
         whole_node=True, copied=1, phases=2),
    _gpu("all_to_one", "one GPU reading from every other GPU at once, per reading GPU: by "
         "the copy engine and by SM kernels (phase)", "hbm", "p2p", "copy",
         run=smcopy.one_to_all,
         expand=each_gpu_to_all, uses=every_gpu, needs=peer_buffers(2), min_gpus=2,
         whole_node=True, copied=1, reads=True, phases=2),
    _gpu("p2p_all_pairs", "every ordered GPU pair copying at once by the copy engine: the "
         "box's total GPU-to-GPU bandwidth", "hbm", "p2p", "copy", run=transfers.all_pairs,
         expand=every_pair_at_once, needs=peer_buffers(2), min_gpus=2, whole_node=True,
         copied=1),
    _gpu("p2p_copy", "GPU i to GPU j for every ordered pair, peer access on",
         "hbm", "p2p", "copy", run=transfers.peer, expand=ordered_pairs,
         needs=buffers(1, 0), min_gpus=2, whole_node=True, window="matrix",
         pair_slots=layout.ONE_WAY_PAIR_SLOTS, copied=1, headline=True),
    _gpu("p2p_bidir", "GPU i to GPU j and j to i at once for every pair, peer access on",
         "hbm", "both", "copy", run=transfers.peer, expand=unordered_pairs,
         needs=buffers(2, 0), min_gpus=2, whole_node=True, both_ways=True,
         pair_slots=layout.BOTH_WAYS_PAIR_SLOTS, copied=1),
    # SM-driven copies beside the copy engine's (bwprof.gpu.smcopy), and the peer read.
    _gpu("h2d_sm", "host-to-device copy by an SM kernel reading pinned host memory mapped "
         "into the device", "pinned", "h2d", "copy", run=smcopy.host_sm, copied=1),
    _gpu("d2h_sm", "device-to-host copy by an SM kernel writing pinned host memory mapped "
         "into the device", "pinned", "d2h", "copy", run=smcopy.host_sm, copied=1),
    _gpu("d2d_sm", "device-to-device copy within one GPU by an SM kernel",
         "hbm", "within", "traffic", factor=2, run=smcopy.within_device_sm,
         needs=buffers(2, 0), copied=1),
    _gpu("p2p_read", "GPU i to GPU j for every ordered pair, the copy engine pulling: the "
         "copy issued on GPU j", "hbm", "p2p", "copy", run=smcopy.peer_read,
         expand=ordered_pairs, needs=buffers(1, 0), min_gpus=2, whole_node=True,
         window="matrix", pair_slots=layout.ONE_WAY_PAIR_SLOTS, copied=1),
    _gpu("p2p_read_sm", "GPU i to GPU j for every ordered pair by an SM kernel on GPU j "
         "reading GPU i's memory", "hbm", "p2p", "copy", run=smcopy.peer_read_sm,
         expand=ordered_pairs, needs=buffers(1, 0), min_gpus=2, whole_node=True,
         window="matrix", pair_slots=layout.ONE_WAY_PAIR_SLOTS, copied=1),
    _gpu("p2p_write_sm", "GPU i to GPU j for every ordered pair by an SM kernel on GPU i "
         "writing GPU j's memory", "hbm", "p2p", "copy", run=smcopy.peer_write_sm,
         expand=ordered_pairs, needs=buffers(1, 0), min_gpus=2, whole_node=True,
         window="matrix", pair_slots=layout.ONE_WAY_PAIR_SLOTS, copied=1),
    _gpu("p2p_bidir_sm", "GPU i to GPU j and j to i at once for every pair, each by an SM "
         "kernel on its source writing the peer", "hbm", "both", "copy",
         run=smcopy.peer_write_sm, expand=unordered_pairs, needs=buffers(2, 0), min_gpus=2,
         whole_node=True, both_ways=True, pair_slots=layout.BOTH_WAYS_PAIR_SLOTS,
         copied=1),
    _overlap("overlap_h2d_compute", "pinned host-to-device copy and a compute kernel at once",
             "pinned", ("h2d",)),
    _overlap("overlap_d2h_compute", "pinned device-to-host copy and a compute kernel at once",
             "pinned", ("d2h",)),
    _overlap("overlap_bidir_compute", "H2D, D2H and a compute kernel at once on three streams",
             "pinned", ("h2d", "d2h")),
    _overlap("overlap_pageable", "pageable host-to-device copy and a compute kernel at once",
             "pageable", ("h2d",)),
    _gpu("pipeline_chunked", "data-loader loop: chunks in, compute, out on 1, 2, 4 streams",
         "pinned", "h2d+compute+d2h", "copy", run=overlap.pipeline, expand=chunks_and_streams,
         needs=pipeline_buffers, window="none", phases=4),
    _gpu("lat_gpu", "load latency of one GPU thread chasing through device memory, 4 KiB to "
         ">= 4x L2 (L1, L2, HBM)", "hbm", "within", "copy", run=latency.gpu,
         expand=latency_sweep, needs=chase_buffers(1, 2), window="none", metric="latency",
         costs=cost.chase),
    _gpu("lat_gpu_loaded", "HBM load latency while a STREAM copy on the other SMs loads HBM "
         "at several intensities", "hbm", "within", "copy", run=latency.loaded,
         expand=latency_under_load, needs=chase_buffers(3, 2), window="none",
         metric="latency", costs=cost.chase, phases=len(layout.LOAD_FRACTIONS)),
    _gpu("lat_h2d", "load latency of a GPU thread chasing through pinned host memory (PCIe or "
         "C2C round trip): 2 MiB in 128-byte steps as nvbandwidth's host_device_latency_sm, "
         "then a random set >= 4x L2 (phase random_tlb, TLB misses included)", "pinned",
         "h2d", "copy", run=latency.host, expand=latency_beyond_l2,
         needs=chase_buffers(0, 3, layout.H2D_STRIDE_BYTES), window="none",
         metric="latency", costs=cost.chase, phases=2),
    _gpu("lat_p2p", "load latency of a GPU thread chasing through a peer GPU's memory, every "
         "ordered pair", "hbm", "p2p", "copy", run=latency.peer, expand=latency_pairs,
         needs=chase_buffers(1, 2), min_gpus=2, whole_node=True, window="none",
         metric="latency", pair_slots=layout.LATENCY_PAIR_SLOTS, costs=cost.chase),
    _gpu("lat_memcpy", "latency of a 16-byte cudaMemcpyAsync (one int4, as cuda-samples' "
         "p2pBandwidthLatencyTest) host-to-device, device-to-host and device-to-device",
         "pinned", "h2d+d2h+within", "copy", run=latency.memcpy,
         expand=each_device_small_copy, needs=buffers(4, 2), window="none",
         metric="latency", phases=len(layout.MEMCPY_DIRECTIONS)),
    # compute ceilings (the roofline's flat side)
    _gpu("gemm_gpu", "square matrix multiply per GPU through cuBLAS (cublasGemmEx via CuPy): "
         "fp64, fp32, tf32, fp16, bf16, a size sweep (TFLOP/s)", "hbm", "within", "traffic",
         factor=3, run=compute.gemm, expand=gemm_sweep, needs=buffers(3, 2),
         metric="throughput", sweep_done=compute.sweep_done, costs=cost.gemm),
    _gpu("fma_gpu", "CUDA-core fp32/fp64 ceiling: a Numba CUDA kernel of independent fused "
         "multiply-adds per thread, no memory traffic (TFLOP/s)", "hbm", "within", "traffic",
         run=compute.fma, expand=each_device_each_fma_dtype, needs=buffers(1, 1),
         window="none", metric="throughput"),
)
