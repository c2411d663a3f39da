"""Runs GPU cases: expands them into jobs per size and device, dispatches each job to the
transfer or HBM code, and turns an allocation that does not fit into a `skipped` row.

The same executor drives real GPUs (`CudaBackend`) and the simulated backend (`SimBackend`);
the rows of the latter are labelled `simulated` and carry a note saying they are not
measurements.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations, permutations

from bwprof.cases import CaseSpec
from bwprof.gpu import hbm, overlap, transfers
from bwprof.gpu.backend import GpuBackend, OutOfMemory
from bwprof.gpu.buffers import BufferPool
from bwprof.gpu.devices import GpuDevice
from bwprof.measurement import Job, Measurement, NotRun
from bwprof.peaks import C2C_NOTE, INVALID_ABOVE_PEAK
from bwprof.plan import Plan, format_bytes
from bwprof.runner import Unavailable
from bwprof.system import numa_nodes

SIMULATED_NOTE = "simulated on the CPU: not a measurement"
COUNTER_WINDOW_S = 0.9
"""Where telemetry samples: how long a large copy or HBM row repeats its work after timing,
so that several counter samples fall inside its window. GPM values come 100 ms apart at
least, and on 50 ms ticks often 150 ms apart; the ratio needs three whose whole interval
lies in the window and begins 100 ms after it (GPM values trail their reads): 0.9 s holds
four or five."""
HOST_MEMORIES = ("pinned", "pageable")
COUNTER_WINDOW_MIN_BYTES = 64 << 20
"""Rows below this size get no counter window: their counters say little."""
P2P_MATRIX_BYTES = 256 << 20
HOST_BUFFER_SHARE = 0.5  # pinned/pageable buffers of a job: at most this share of host memory
DEVICE_MEMORY_SHARE = 0.9

ONE_WAY = {"h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable"}
# Buffers each job needs, per device and on the host, in units of the transfer size.
DEVICE_BUFFERS = {"bidir_pinned": 2, "d2d_copy": 2, "p2p_copy": 1, "p2p_bidir": 2}
HOST_BUFFERS = {"bidir_pinned": 2, "d2d_copy": 0, "p2p_copy": 0, "p2p_bidir": 0,
                "overlap_bidir_compute": 2}


class GpuExecutor:
    def __init__(self, backend: GpuBackend, devices: list[GpuDevice],
                 host_memory_bytes: int | None = None, node_share: str | None = None) -> None:
        self.gpu = backend
        self.node_share = node_share
        """Why this executor holds only part of its node's GPUs (a fleet rank among several on
        a node), or None: cases that need the whole node are then waived with it."""
        self.backend = backend.name  # the runner's label for rows: "cuda" or "simulated"
        self.devices = devices
        self.host_memory_bytes = host_memory_bytes
        self.pool = BufferPool(backend)
        self.numa_node_count = len(numa_nodes())
        """With one node host memory cannot land on the wrong one; with none listed (a sandbox
        such as gVisor, whose CPU affinity is a stub) a GPU's node cannot be checked."""
        self._case: str | None = None
        self._hbm_sizes: dict[int, tuple[list[int], str]] = {}
        self.counter_window_s = 0.0
        """Set to COUNTER_WINDOW_S while hardware counters are sampled (`api.run`)."""

    def _device(self, index: int | None) -> GpuDevice:
        """The device of a CUDA index (a fleet rank may hold only gpu3 of its node)."""
        return next(d for d in self.devices if d.index == (index or 0))

    def unavailable_reason(self, case: CaseSpec) -> Unavailable | None:
        if case.whole_node and self.node_share:
            return Unavailable("waived", f"{self.node_share}; every GPU of the node at once "
                                         f"needs one rank per node (mpirun --map-by ppr:1:node)")
        if case.min_gpus > len(self.devices):
            return Unavailable("waived", f"needs {case.min_gpus} GPUs; this machine has "
                                         f"{len(self.devices)}")
        return None

    def _overlap_size(self, key: str, device: GpuDevice) -> tuple[int, str]:
        free = self.gpu.free_memory(device.index) + self.pool.device_bytes(device.index)
        return overlap.overlap_size(key, free, DEVICE_MEMORY_SHARE)

    def _hbm(self, device: GpuDevice, plan: Plan) -> tuple[list[int], str]:
        if device.index not in self._hbm_sizes:
            # The previous case's buffers are released before this one runs: count them free.
            free = self.gpu.free_memory(device.index) + self.pool.device_bytes(device.index)
            self._hbm_sizes[device.index] = hbm.array_sizes(device, free, plan.preset == "full")
        return self._hbm_sizes[device.index]

    def jobs(self, case: CaseSpec, plan: Plan) -> list[Job]:
        key = case.key
        if key.startswith("hbm_"):
            return [Job(key, size_bytes=size, device=d.index)
                    for d in self.devices
                    for size in (self._hbm(d, plan)[0] if key == "hbm_copy"
                                 else self._hbm(d, plan)[0][-1:])]
        if key in ("h2d_all", "d2h_all"):
            return [Job(key, size_bytes=size) for size in plan.transfer_sizes]
        if key in overlap.COPIES:
            return [Job(key, size_bytes=self._overlap_size(key, d)[0], device=d.index)
                    for d in self.devices]
        if key == "pipeline_chunked":
            return [Job(key, size_bytes=chunk, device=d.index, streams=streams)
                    for d in self.devices for chunk in plan.pipeline_chunks
                    for streams in overlap.PIPELINE_STREAMS]
        if key == "p2p_copy":
            pairs = list(permutations([d.index for d in self.devices], 2))
        elif key == "p2p_bidir":
            pairs = list(combinations([d.index for d in self.devices], 2))
        else:
            return [Job(key, size_bytes=size, device=d.index)
                    for d in self.devices for size in plan.transfer_sizes]
        # Like nvbandwidth: the whole matrix at one size, the size sweep on the first pair only
        # (8 GPUs would otherwise mean 56 pairs x every size).
        matrix = self._p2p_matrix_bytes(plan)
        return [Job(key, size_bytes=size, device=i, peer=j)
                for n, (i, j) in enumerate(pairs)
                for size in (plan.transfer_sizes if n == 0 else (matrix,))]

    @staticmethod
    def _p2p_matrix_bytes(plan: Plan) -> int:
        return max((s for s in plan.transfer_sizes if s <= P2P_MATRIX_BYTES),
                   default=plan.transfer_sizes[0])

    def _check_fits(self, case: CaseSpec, job: Job) -> None:
        size = job.size_bytes or 0
        devices = ([d for d in (job.device, job.peer) if d is not None]
                   if job.device is not None else [d.index for d in self.devices])
        if case.key in overlap.COPIES or case.key == "pipeline_chunked":
            per_device = overlap.device_bytes_needed(case.key, size, job.streams or 1)
        else:
            per_device = DEVICE_BUFFERS.get(case.key, 1) * size
        for index in devices:
            free = self.gpu.free_memory(index) + self.pool.device_bytes(index)
            if per_device > DEVICE_MEMORY_SHARE * free:
                raise NotRun("skipped", f"{format_bytes(size)} does not fit: needs "
                                        f"{format_bytes(per_device)} on gpu{index}, more than "
                                        f"{DEVICE_MEMORY_SHARE:.0%} of the "
                                        f"{format_bytes(free)} free")
        if case.key == "pipeline_chunked":  # pinned in and out, the inputs, their gold
            host = 4 * overlap.pipeline_total_bytes(size)
        else:
            host = HOST_BUFFERS.get(case.key, 1) * size * len(devices)
        if self.host_memory_bytes and host > HOST_BUFFER_SHARE * self.host_memory_bytes:
            raise NotRun("skipped", f"{format_bytes(size)} does not fit: needs "
                                    f"{format_bytes(host)} of host memory")

    def measure(self, case: CaseSpec, job: Job, plan: Plan) -> list[Measurement]:
        if self._case != case.key:
            self.pool.release()  # buffers of the previous case are not needed any more
            self._case = case.key
        if job.device is not None and job.peer is None:
            self.pool.drop_host_except(job.device)
        elif job.device is not None:  # a P2P pair
            first, second = transfers.P2P_SLOTS[case.key]
            self.pool.keep_device_slots(job.device, first)
            self.pool.keep_device_slots(job.peer, second)
        if not case.key.startswith("hbm_"):
            self._check_fits(case, job)
        try:
            rows = self._dispatch(case, job, plan)
        except OutOfMemory as exc:
            # Released after the except block: the exception's traceback keeps the failed
            # job's frames, and with them its buffers, alive until the block ends.
            out_of_memory = str(exc)
        else:
            out_of_memory = None
        if out_of_memory is not None:
            self.pool.release()
            raise NotRun("skipped",
                          f"{format_bytes(job.size_bytes or 0)} does not fit: {out_of_memory}")
        rows = [self._checked(row) for row in rows]
        if self.backend == "simulated":
            rows = [_with_note(row, SIMULATED_NOTE) for row in rows]
        return rows

    def _checked(self, row: Measurement) -> Measurement:
        """Flag what the figure cannot be: above its theoretical peak (a measurement error,
        unless the data fits in L2), or on a NUMA node that placement could not enforce."""
        if row.peak_gbps and row.seconds_per_op:
            best = row.bytes_per_op / min(row.seconds_per_op) / 1e9
            device = next((d for d in self.devices if d.label == row.device), None)
            cached = (device is not None and row.memory == "hbm" and row.direction == "within"
                      and row.size_bytes < 4 * device.properties.l2_bytes)
            if cached:
                row = _with_note(row, "fits in L2: the figure may exceed the HBM peak")
            elif best > INVALID_ABOVE_PEAK * row.peak_gbps:
                row = replace(_with_note(row, f"figure above the theoretical peak ({best:.1f} > "
                                              f"{row.peak_gbps:.1f} GB/s): a measurement error"),
                              valid=False)
        if row.numa_node is not None and getattr(self.gpu, "placement_failed", False):
            row = replace(_with_note(row, "host memory placement not enforced (CPU affinity "
                                          "refused)"), numa_node=None)
        device = next((d for d in self.devices if d.label == row.device), None)
        over_c2c = (device.host_link_c2c if device is not None  # 'all': any GPU's link
                    else any(d.host_link_c2c for d in self.devices))
        if over_c2c and row.memory in HOST_MEMORIES and row.direction in ("h2d", "d2h", "both"):
            row = _with_note(row, C2C_NOTE)
        share = None if device is None else self.pool.off_node_share(device.index)
        if row.numa_node is not None and share is not None:
            row = replace(_with_note(row, f"host memory not on NUMA node {row.numa_node}: "
                                          f"{share:.0%} of its sampled pages there (the node "
                                          "is short of free memory)"), numa_node=None)
        elif (row.numa_node is not None and device is not None and self.numa_node_count != 1
              and self.pool.placement_unread(device.index)):
            row = _with_note(row, f"host memory asked of NUMA node {row.numa_node}; where its "
                                  "pages landed could not be read back")
        return row

    def _dispatch(self, case: CaseSpec, job: Job, plan: Plan) -> list[Measurement]:
        size, samples, key = job.size_bytes or 0, plan.repeats, case.key
        window = self.counter_window_s if self._earns_window(case, job, plan) else 0.0
        if key in ONE_WAY:
            return transfers.one_way(self.pool, case, self._device(job.device), size,
                                     samples, counter_window_s=window)
        if key == "bidir_pinned":
            return transfers.bidirectional(self.pool, case, self._device(job.device), size,
                                           samples, counter_window_s=window)
        if key == "d2d_copy":
            return transfers.within_device(self.pool, case, self._device(job.device),
                                           size, samples, counter_window_s=window)
        if key in ("h2d_all", "d2h_all"):
            return transfers.all_devices(self.pool, case, self.devices, size, samples,
                                         counter_window_s=window)
        if key in ("p2p_copy", "p2p_bidir"):
            assert job.device is not None and job.peer is not None
            return transfers.peer(self.pool, case,
                                  (self._device(job.device), self._device(job.peer)), size,
                                  samples, counter_window_s=window)
        if key in overlap.COPIES:
            device = self._device(job.device)
            return overlap.overlap(self.pool, case, device, size, samples,
                                   self._overlap_size(key, device)[1])
        if key == "pipeline_chunked":
            return overlap.pipeline(self.pool, case, self._device(job.device), size,
                                    job.streams or 1, samples, overlap.PIPELINE_STREAMS[0])
        if key.startswith("hbm_"):
            device = self._device(job.device)
            note = self._hbm(device, plan)[1] if size == self._hbm(device, plan)[0][-1] else ""
            return hbm.stream_kernel(self.pool, case, device, size, samples, note,
                                     counter_window_s=window)
        raise NotRun("skipped", f"no GPU implementation for case {key}")

    def _earns_window(self, case: CaseSpec, job: Job, plan: Plan) -> bool:
        """Whether this row repeats its work for a counter window (while telemetry samples),
        from COUNTER_WINDOW_MIN_BYTES up: the largest size of its sweep that fits, and every
        pair's p2p_copy row at the matrix size (the GPU-to-GPU summary and heatmap). A window
        on every size and pair would add 0.9 s each: minutes on an 8-GPU box."""
        size = job.size_bytes or 0
        if not self.counter_window_s or size < COUNTER_WINDOW_MIN_BYTES:
            return False
        if case.key.startswith("hbm_"):  # its sizes were chosen to fit the device
            return size == self._hbm(self._device(job.device), plan)[0][-1]
        if job.peer is not None:
            if case.key == "p2p_copy" and size == self._p2p_matrix_bytes(plan):
                return True
            if (job.device, job.peer) != (self.devices[0].index, self.devices[1].index):
                return False  # only the first pair sweeps sizes
        sweep = {j.size_bytes or 0 for j in self.jobs(case, plan)
                 if (j.device, j.peer, j.streams) == (job.device, job.peer, job.streams)}
        for larger in sorted(s for s in sweep if s > size):
            try:
                self._check_fits(case, replace(job, size_bytes=larger))
            except NotRun:
                continue
            return False  # a larger size of this sweep will run and take the window
        return True

    def close(self) -> None:
        self.pool.release()


def _with_note(row: Measurement, note: str) -> Measurement:
    return replace(row, note="; ".join(n for n in (note, row.note) if n))
