"""SM-driven copies, beside the copy engine's: host<->device through pinned host memory mapped
into the device (h2d_sm, d2h_sm), within one GPU (d2d_sm), and GPU<->GPU (p2p_read_sm,
p2p_write_sm, p2p_bidir_sm); and the copy engine's peer copy driven by the destination
(p2p_read).

NCCL and most applications move data with SM kernels, not copy engines, and the two can
differ by a lot on the same link, so each path is measured both ways (nvbandwidth's _sm
cases). The kernel is `kernels.sm_copy`: four 8-byte loads in flight per thread before its
stores, on a grid of every thread the GPU holds (`kernel_params.sm_copy_blocks`), or, where
several copies run at once on one GPU (one_to_all, all_to_one), on each copy's share of it, so
all their blocks are resident together and they do run at once. Its arrays
are the very pointers the host holds, viewed for the kernel's GPU (`backend.chase_view`:
a device array, a peer's with peer access on, or pinned host memory under unified
addressing), so no CuPy call is needed here. Every copy is validated against its source's
pattern after timing, as the copy engine's are (`bwprof.gpu.transfers`).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from bwprof.gpu import transfers
from bwprof.gpu.backend import GpuBackend, Work
from bwprof.gpu.buffers import device_mismatches, upload_pattern
from bwprof.gpu.devices import GpuDevice
from bwprof.gpu.job import CaseRun
from bwprof.gpu.kernel_params import SM_COPY_ELEMENT_BYTES, sm_copy_blocks, sm_copy_resident
from bwprof.gpu.sampling import take_samples
from bwprof.gpu.transfers import (
    CONTENDED_NOTE,
    UNGATED_AGGREGATE,
    HostEnd,
    PeerCopy,
    _peer_path,
    _problem,
    _row,
    contended,
    p2p_peak,
)
from bwprof.measurement import Measurement, NotRun, join_notes


def _elements(size: int) -> int:
    if size % SM_COPY_ELEMENT_BYTES:
        raise NotRun("skipped", f"an SM copy moves {SM_COPY_ELEMENT_BYTES}-byte elements; "
                                f"{size} bytes is not a multiple of {SM_COPY_ELEMENT_BYTES}")
    return size // SM_COPY_ELEMENT_BYTES


class SmCopy:
    """One SM copy dst = src by a kernel on `device` (src and dst anywhere that GPU reaches:
    its memory, a peer's, pinned host memory), launched on `stream` over a full grid, or
    over its share of one where `grids` SM copies run at once on that GPU."""

    def __init__(self, backend: GpuBackend, device: GpuDevice, dst: Any, src: Any, size: int,
                 stream: Any, grids: int = 1) -> None:
        elements = _elements(size)
        self.backend, self.stream = backend, stream
        self.src = backend.chase_view(src[:size], device.index)
        self.dst = backend.chase_view(dst[:size], device.index)
        self.resident = sm_copy_resident(device.properties.multiprocessors)
        self.blocks = sm_copy_blocks(elements, device.properties.multiprocessors, grids)

    def work(self, ops: int) -> Work:
        launch = partial(self.backend.launch, "sm_copy", self.stream, self.src, self.dst,
                         blocks=self.blocks)
        return Work(self.stream, launch, ops)


def host_sm(run: CaseRun) -> list[Measurement]:
    """h2d_sm / d2h_sm: a kernel on the GPU reads (writes) pinned host memory through its
    host pointer; the row sits beside h2d_pinned's (d2h_pinned's) and counts the bytes
    copied once."""
    pool, case, device, size = run.pool, run.case, run.device, run.size
    path = HostEnd(pool, device, size, True, to_device=case.direction == "h2d")
    copy = SmCopy(pool.backend, device, path.dst, path.src, size, path.stream)
    sampled = take_samples(pool.backend, lambda ops: [copy.work(ops)], run.samples,
                           counter_window_s=run.counter_window_s)
    problem = path.problem()
    return [_row(case, device, device.label, device.name, size, sampled.per_stream_s[0], size,
                 sampled, peak=device.peak_pcie_gbps, valid=not problem,
                 note=join_notes(problem, f"SM copy kernel, {copy.blocks} blocks"))]


def within_device_sm(run: CaseRun) -> list[Measurement]:
    """d2d_sm: a kernel copies one device buffer into another on the same GPU; counted as
    d2d_copy is (traffic: read + write), with the copy figure beside it."""
    pool, case, device, size = run.pool, run.case, run.device, run.size
    backend = pool.backend
    src = pool.device(device.index, size, slot=0)
    dst = pool.device(device.index, size, slot=1)
    upload_pattern(backend, src, size)
    backend.zero(dst, size)
    copy = SmCopy(backend, device, dst, src, size, pool.stream(device.index))
    sampled = take_samples(backend, lambda ops: [copy.work(ops)], run.samples,
                           counter_window_s=run.counter_window_s)
    problem = _problem(device_mismatches(pool, dst, size), size, f"{device.label} memory")
    best = min(sampled.per_stream_s[0])
    copy_note = f"copy figure (bytes copied once): {size / best / 1e9:.2f} GB/s best"
    return [_row(case, device, device.label, device.name, size, sampled.per_stream_s[0],
                 case.bytes_per_op(size), sampled, peak=device.peak_hbm_gbps,
                 valid=not problem,
                 note=join_notes(problem, copy_note, f"SM copy kernel, {copy.blocks} blocks"),
                 host_memory=False)]


def _peer_rows(run: CaseRun, *, engine: str, driver: str) -> list[Measurement]:
    """The pair cases: from the job's first GPU to its second (and back, for a case declared
    `both_ways`), each path by the copy engine (`engine="ce"`) or an SM kernel ("sm"), issued
    on the source's stream (`driver="source"`: a write) or the destination's ("destination":
    a read)."""
    pool, case, size = run.pool, run.case, run.size
    backend = pool.backend
    a, b = run.device, run.peer
    ends = [(a, b, 0)] + ([(b, a, 2)] if case.both_ways else [])
    paths = []
    for src, dst, slot in ends:
        source, target, _ = _peer_path(pool, src, dst, size, slot=slot)
        side = src if driver == "source" else dst
        stream = pool.stream(side.index, slot)
        if engine == "sm":
            copy = SmCopy(backend, side, target, source, size, stream)
            make = copy.work
        else:
            def make(ops: int, target: Any = target, source: Any = source,
                     stream: Any = stream) -> Work:
                return Work(stream, partial(backend.copy, target, source, size, stream), ops)
        paths.append((src, dst, target, make))

    sampled = take_samples(backend, lambda ops: [make(ops) for *_, make in paths], run.samples,
                           counter_window_s=run.counter_window_s)
    # Both ways: each direction's row from its own pass, the other doing twice the work.
    alone = contended(backend, [make for *_, make in paths], sampled, run.samples)
    doubled = CONTENDED_NOTE if len(paths) > 1 else ""
    problems = [_problem(device_mismatches(pool, target, size, seed=slot), size,
                         f"{dst.label} memory")
                for (_, dst, target, _), (_, _, slot) in zip(paths, ends, strict=True)]
    how = (f"{'SM kernel' if engine == 'sm' else 'copy engine'} on the "
           f"{'source' if driver == 'source' else 'destination'} GPU")
    rows = [
        _row(case, None, f"{src.label}->{dst.label}", f"{src.name} -> {dst.name}", size,
             alone[i].per_stream_s[i], size, alone[i], direction="p2p", streams=len(paths),
             numa_node=None, peak=p2p_peak(src, dst), valid=not problems[i],
             note=join_notes(problems[i], how, doubled))
        for i, (src, dst, _, _) in enumerate(paths)
    ]
    if len(paths) == 2:
        slowest = sampled.covered_span_s  # one clock: start skew cannot inflate it
        if not slowest:
            return [replace(row, note=join_notes(row.note, UNGATED_AGGREGATE)) for row in rows]
        peak = p2p_peak(a, b)
        rows.append(_row(
            case, None, f"{a.label}<->{b.label}", f"{a.name} -> {b.name}", size, slowest,
            2 * size, sampled, direction="both", streams=2,
            peak=2 * peak if peak else None, valid=not any(problems),
            note=join_notes(*problems, how, "sum of both directions"),
        ))
    return rows


def peer_read(run: CaseRun) -> list[Measurement]:
    """p2p_read: the copy engine pulls from the peer (the copy issued on the destination)."""
    return _peer_rows(run, engine="ce", driver="destination")


def peer_read_sm(run: CaseRun) -> list[Measurement]:
    """p2p_read_sm: a kernel on the destination reads the peer's memory."""
    return _peer_rows(run, engine="sm", driver="destination")


def peer_write_sm(run: CaseRun) -> list[Measurement]:
    """p2p_write_sm (and p2p_bidir_sm, both ways at once): a kernel on the source writes the
    peer's memory."""
    return _peer_rows(run, engine="sm", driver="source")


class SmPeerCopy:
    """A pattern's peer copy (`transfers.PeerCopy`: its buffers, stream and check) done by an
    SM kernel on the pattern's GPU: the writer's kernel stores into the peer (one_to_all),
    the reader's loads from it (all_to_one). `grids`: the pattern's copies, all on that GPU
    at once, each kernel on its share of the resident blocks."""

    def __init__(self, backend: GpuBackend, device: GpuDevice, copy: PeerCopy,
                 grids: int) -> None:
        self.copy = copy
        self.sm = SmCopy(backend, device, copy.target, copy.source, copy.size, copy.stream,
                         grids=grids)

    def work(self, ops: int) -> Work:
        return self.sm.work(ops)

    def problem(self) -> str:
        return self.copy.problem()


def one_to_all(run: CaseRun) -> list[Measurement]:
    """one_to_all / all_to_one, both variants per GPU: the copy engine's row (phase
    `copy_engine`, `transfers.one_to_all`), then the same copies on the same buffers and
    streams by SM kernels on the job's GPU (phase `sm`), the targets zeroed between them so
    each variant's check proves its own copies. Each row is its pass's aggregate on one
    clock. The SM kernels share the GPU's resident blocks (`kernel_params.sm_copy_blocks`
    with one grid a peer): a full grid each would hold every slot and run the peers one
    after another. Where the SM variant cannot run, the copy engine's row says why."""
    copies, label, what = transfers.pattern_copies(run)
    names, peak = transfers._names(run.devices), transfers._link_peak(run.device)
    engine = [replace(row, phase="copy_engine") for row in transfers._aggregate(
        run, copies, label, names, "p2p", peak, f"copy engine; {what}")]
    for copy in copies:
        copy.clear()
    try:
        kernels = [SmPeerCopy(run.pool.backend, run.device, copy, grids=len(copies))
                   for copy in copies]
        first = kernels[0].sm
        sm = transfers._aggregate(
            run, kernels, label, names, "p2p", peak,
            f"SM kernels on {run.device.label}, {first.blocks} blocks each of "
            f"{first.resident} resident; {what}")
    except NotRun as exc:
        return [replace(row, note=join_notes(row.note, f"SM variant not run: {exc.reason}"))
                for row in engine]
    return engine + [replace(row, phase="sm") for row in sm]
