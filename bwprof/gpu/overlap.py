"""Compute/transfer overlap cases: how much copy time a GPU hides behind kernels.

Each overlap case times every part alone (the copies, then a compute kernel calibrated to
last about as long as they do), then all parts together, started by the same gate, with the
same number of operations per stream. Each part's time alone is the best it can do in that
configuration: the two directions of `overlap_bidir_compute` share the link whatever the
kernel does, so their part is the pair run at once (as `bidir_pinned` runs it), timed as a
`paired` phase beside each direction by itself (`alone`), which shows the link's contention
as data and keeps it out of the efficiency. `pipeline_chunked` runs a data-loader loop — chunks
copied in, processed and copied out on a pool of streams — and reports its end-to-end
throughput beside the plain copy and the kernel alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from bwprof.casespec import CaseSpec
from bwprof.cpulist import cpu_affinity
from bwprof.gpu.backend import GpuBackend, Work
from bwprof.gpu.buffers import BufferPool
from bwprof.gpu.devices import GpuDevice
from bwprof.gpu.job import CaseRun
from bwprof.gpu.kernel_params import (
    COMPUTE_MAX_ITERATIONS,
    COMPUTE_SCALE,
    COMPUTE_STEP,
    compute_gold,
)
from bwprof.gpu.layout import PIPELINE_STREAMS
from bwprof.gpu.sampling import Sampled, take_samples
from bwprof.gpu.transfers import HostEnd
from bwprof.measurement import Measurement, NotRun
from bwprof.stats import overlap_efficiency
from bwprof.units import MiB, format_bytes

OVERLAP_BYTES = 256 * MiB
MIN_OVERLAP_BYTES = 1 * MiB
COMPUTE_ELEMENTS = 1 << 22
START_ITERATIONS = 64
CALIBRATION_ROUNDS = 4
PIPELINE_TOTAL_BYTES = 256 * MiB
PIPELINE_MAX_CHUNKS = 64
COMPUTE_STREAM_SLOT = 5
PIPELINE_OUT_STREAM_SLOT = 6
"""The pipeline's paired reference: the copy out runs on this stream beside the copy in."""
COMPUTE_SLOTS = (8, 9)



def compute_bytes(size: int) -> int:
    """Bytes the overlap compute kernel processes per launch for a copy of `size`."""
    return 8 * min(COMPUTE_ELEMENTS, size // 8)


def device_bytes_needed(copies: int, size: int) -> int:
    """Device memory of an overlap case with `copies` copies of `size` and its kernel's two
    arrays."""
    return copies * size + 2 * compute_bytes(size)


def pipeline_device_bytes(chunk: int, streams: int) -> int:
    """Device memory of a pipeline: a chunk in and a chunk out on each stream."""
    return 2 * streams * chunk


def overlap_size(copies: int, free_bytes: int, share: float) -> tuple[int, str]:
    """The copy size for an overlap case: 256 MiB, halved until the buffers fit."""
    size = OVERLAP_BYTES
    while device_bytes_needed(copies, size) > share * free_bytes and size > MIN_OVERLAP_BYTES:
        size //= 2
    note = "" if size == OVERLAP_BYTES else f"{format_bytes(OVERLAP_BYTES)} did not fit"
    return size, note


def pipeline_total_bytes(chunk: int) -> int:
    """Data moved by one pipeline pass: 256 MiB, or 64 chunks where chunks are small."""
    return max(chunk, min(PIPELINE_TOTAL_BYTES, PIPELINE_MAX_CHUNKS * chunk))


def pipeline_inputs(elements: int) -> np.ndarray:
    """Distinct, exact inputs: 1 + e x 2^-k for element e, with k the smallest that keeps
    every offset under 2^-20. With at most 2^20 - 1 steps of 2^-20 each result stays in
    [1, 2), exact and distinct, so a chunk copied from or to the wrong place shows."""
    shift = 20 + max(1, (elements - 1).bit_length())
    if shift > 52:  # beyond float64's 52 fraction bits the offsets would round
        raise ValueError(f"{elements} pipeline elements cannot all be told apart")
    return 1.0 + np.arange(elements, dtype=np.float64) * 2.0**-shift


def pipeline_schedule(chunks: int, streams: int) -> list[list[int]]:
    """Chunk indices per stream, dealt round-robin as a data loader would."""
    return [list(range(first, chunks, streams)) for first in range(streams)]


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


class ComputePart:
    """The compute kernel of an overlap case, on arrays of its own: y = x after `iterations`
    multiply-adds per element; x holds 1.0, so every y must equal compute_gold(1.0, n)."""

    def __init__(self, backend: GpuBackend, x: Any, y: Any, stream: Any, nbytes: int) -> None:
        self.backend, self.stream, self.nbytes = backend, stream, nbytes
        self.x, self.y = x, y
        backend.upload(x, np.ones(nbytes // 8))
        backend.zero(y, nbytes)
        self.x_view = backend.kernel_view(x[:nbytes])
        self.y_view = backend.kernel_view(y[:nbytes])
        self.iterations = START_ITERATIONS

    def enqueue(self) -> None:
        self.backend.launch("compute", self.stream, self.x_view, self.y_view, self.iterations,
                            COMPUTE_SCALE, COMPUTE_STEP)

    def work(self, ops: int) -> Work:
        return Work(self.stream, self.enqueue, ops)

    def calibrate(self, target_s: float, gate: bool) -> None:
        """Scale `iterations` until one launch takes about `target_s` (kernel time grows
        linearly with iterations once it is compute bound)."""
        for _ in range(CALIBRATION_ROUNDS):
            took = _median(take_samples(self.backend, lambda ops: [self.work(ops)], 3, gate,
                                        ops=1).per_stream_s[0])
            wanted = round(self.iterations * target_s / max(took, 1e-9))
            wanted = max(1, min(COMPUTE_MAX_ITERATIONS, wanted))
            settled = abs(wanted - self.iterations) <= 0.1 * self.iterations
            self.iterations = wanted
            if settled:
                break

    def clear(self) -> None:
        """Zero the output, so a later check proves the launches made since wrote it."""
        self.backend.zero(self.y, self.nbytes)

    def problem(self) -> str:
        y = self.backend.download(self.y, self.nbytes).view(np.float64)
        x = self.backend.download(self.x, self.nbytes).view(np.float64)
        expected = compute_gold(1.0, self.iterations)
        bad = int(np.count_nonzero(y != expected)) + int(np.count_nonzero(x != 1.0))
        return (f"validation failed: {bad} of {y.size} compute elements wrong "
                f"(expected {expected!r})" if bad else "")


def _row(case: CaseSpec, device: GpuDevice, size: int, seconds: Sequence[float], nbytes: int,
         sampled: Sampled, *, direction: str, memory: str, phase: str, streams: int,
         peak: float | None, problem: str, note: str = "",
         efficiency: float | None = None) -> Measurement:
    notes = "; ".join(n for n in (problem, note, sampled.note()) if n)
    touches_host = direction != "compute"  # the kernel's rows: device memory only
    return Measurement(
        seconds_per_op=tuple(seconds), bytes_per_op=nbytes, size_bytes=size,
        device=device.label, device_name=device.name, direction=direction, memory=memory,
        valid=not problem, note=notes, streams=streams,
        numa_node=device.numa_node if touches_host else None,
        ops_per_sample=sampled.ops_per_sample, peak=peak, phase=phase,
        overlap_efficiency=efficiency, window_s=sampled.window_s,
        window_ops=sampled.window_ops,
    )


def copies_part_s(alone_s: Sequence[float], paired_s: float | None) -> float:
    """The copies' time as one part of the overlap formula: the pair's (both directions at
    once, behind one gate) where there are two directions, else the one copy's alone. The
    directions contend for the link with or without a kernel; holding the concurrent time
    against each direction alone would count that contention as overlap that failed."""
    if len(alone_s) > 1:
        if paired_s is None:
            raise ValueError("two copy directions need their paired time")
        return paired_s
    return alone_s[0]


def _contention(directions: Sequence[str], size: int, alone: Sequence[Sampled],
                paired: Sampled) -> str:
    """Each direction's GB/s alone and in the pair (medians), for the paired rows' note."""
    parts = [f"{d} {size / _median(a.per_stream_s[0]) / 1e9:.1f} -> "
             f"{size / _median(paired.per_stream_s[i]) / 1e9:.1f} GB/s"
             for i, (d, a) in enumerate(zip(directions, alone, strict=True))]
    return "link contention, each direction alone -> in the pair: " + ", ".join(parts)


def _lanes(sampled: Sampled, labels: Sequence[tuple[str, str]]) -> list[dict[str, object]]:
    last = sampled.last
    return [
        {"label": label, "kind": kind, "start_s": start, "end_s": end,
         "ops": sampled.ops_per_sample}
        for (label, kind), start, end in zip(labels, last.starts_s, last.ends_s, strict=True)
    ]


def overlap(run: CaseRun) -> list[Measurement]:
    """overlap_*_compute and overlap_pageable: parts alone, then together."""
    pool, case, device, size, samples = run.pool, run.case, run.device, run.size, run.samples
    size_note = run.job.note
    backend = pool.backend
    pinned = case.memory == "pinned"
    directions = case.directions
    copies = [HostEnd(pool, device, size, pinned, to_device=d == "h2d", slot=i)
              for i, d in enumerate(directions)]
    nbytes = compute_bytes(size)
    compute = ComputePart(
        backend, pool.device(device.index, nbytes, COMPUTE_SLOTS[0]),
        pool.device(device.index, nbytes, COMPUTE_SLOTS[1]),
        pool.stream(device.index, COMPUTE_STREAM_SLOT), nbytes,
    )
    gate = pinned  # a pageable copy blocks the host, so nothing can be enqueued behind a gate

    # The host stages pageable copies, so it does so on the GPU's NUMA node, as h2d_pageable.
    with cpu_affinity(None if pinned else device.cpus):
        first = take_samples(backend, lambda ops: [copies[0].work(ops)], samples, gate)
        ops = first.ops_per_sample
        copy_alone = [first] + [
            take_samples(backend, copy.work_list, samples, gate, ops=ops) for copy in copies[1:]
        ]
        # Both directions at once, without the kernel: the copies' part of the formula.
        paired = (take_samples(backend, lambda k: [c.work(k) for c in copies], samples, gate,
                               ops=ops) if len(copies) > 1 else None)
        copies_s = copies_part_s([_median(a.per_stream_s[0]) for a in copy_alone],
                                 _median(paired.gated_span_s) if paired else None)
        compute.calibrate(copies_s, gate)
        kernel_alone = take_samples(backend, lambda k: [compute.work(k)], samples, gate,
                                    ops=ops)
        # Outputs zeroed (untimed): the check after the concurrent phase proves that phase
        # wrote them, not the parts alone before it.
        for copy in copies:
            copy.clear()
        compute.clear()
        # The kernel is queued first: behind a gate the order does not matter, and with
        # pageable copies (host-blocking) it lets the kernels run while the host stages them.
        together = take_samples(
            backend, lambda k: [compute.work(k), *(c.work(k) for c in copies)], samples, gate,
            ops=ops,
        )

    kernel_s = _median(kernel_alone.per_stream_s[0])
    efficiency = overlap_efficiency([copies_s, kernel_s], _median(together.gated_span_s))
    problems = [c.problem() for c in copies]
    kernel_problem = compute.problem()
    streams = 1 + len(copies)
    peak = device.peak_pcie_gbps
    against = "the copy pair's (both directions at once)" if paired else "the copy's"
    kernel_note = (f"compute kernel: {compute.iterations} multiply-adds per element on "
                   f"{format_bytes(nbytes)}, calibrated to the copies (its time alone "
                   f"{kernel_s / copies_s:.2f}x {against}); GB/s = bytes processed")
    rows: list[Measurement] = []
    for i, direction in enumerate(directions):
        rows.append(_row(case, device, size, copy_alone[i].per_stream_s[0], size, copy_alone[i],
                         direction=direction, memory=case.memory, phase="alone", streams=1,
                         peak=peak, problem=problems[i]))
    if paired is not None:
        contention = _contention(directions, size, copy_alone, paired)
        for i, direction in enumerate(directions):
            rows.append(_row(case, device, size, paired.per_stream_s[i], size, paired,
                             direction=direction, memory=case.memory, phase="paired",
                             streams=len(copies), peak=peak, problem=problems[i]))
        rows.append(_row(case, device, size, paired.gated_span_s, size * len(copies), paired,
                         direction="both", memory=case.memory, phase="paired",
                         streams=len(copies), peak=peak * len(copies) if peak else None,
                         problem="; ".join(p for p in problems if p),
                         note=f"the copies' part of the efficiency; {contention}"))
    rows.append(_row(case, device, size, kernel_alone.per_stream_s[0], nbytes, kernel_alone,
                     direction="compute", memory="hbm", phase="alone", streams=1, peak=None,
                     problem=kernel_problem, note=kernel_note))
    for i, direction in enumerate(directions):
        rows.append(_row(case, device, size, together.per_stream_s[1 + i], size, together,
                         direction=direction, memory=case.memory, phase="overlapped",
                         streams=streams, peak=peak, problem=problems[i]))
    rows.append(_row(case, device, size, together.per_stream_s[0], nbytes, together,
                     direction="compute", memory="hbm", phase="overlapped", streams=streams,
                     peak=None, problem=kernel_problem, note=kernel_note))
    parts = "the copy pair (paired, both) and the kernel" if paired else "the copy and the kernel"
    summary = (f"efficiency {efficiency:.2f} = (sum alone - concurrent) / (sum alone - longest "
               f"alone) over {parts}, from medians; GB/s = copy bytes over the concurrent time")
    concurrent = _row(
        case, device, size, together.gated_span_s, size * len(directions), together,
        direction=case.direction, memory=case.memory, phase="concurrent", streams=streams,
        peak=peak * len(directions) if peak else None,
        problem="; ".join(p for p in (*problems, kernel_problem) if p),
        note="; ".join(n for n in (summary, size_note) if n), efficiency=efficiency,
    )
    labels = [("compute", "kernel"), *((f"{d} copy", "copy") for d in directions)]
    concurrent.extra["timeline"] = {
        "case": case.key, "device": device.label, "size_bytes": size,
        "overlap_efficiency": efficiency, "lanes": _lanes(together, labels),
    }
    rows.append(concurrent)
    return rows


class PipelineStream:
    """One stream of the pipeline: its own chunk buffers and the chunks dealt to it."""

    def __init__(self, pool: BufferPool, device: GpuDevice, index: int, chunk: int,
                 chunks: list[int], host_in: Any, host_out: Any) -> None:
        backend = pool.backend
        self.backend, self.chunk, self.chunks = backend, chunk, chunks
        self.host_in, self.host_out = host_in, host_out
        self.dev_in = pool.device(device.index, chunk, slot=10 + 2 * index)
        self.dev_out = pool.device(device.index, chunk, slot=11 + 2 * index)
        self.in_view = backend.kernel_view(self.dev_in[:chunk])
        self.out_view = backend.kernel_view(self.dev_out[:chunk])
        self.stream = pool.stream(device.index, slot=10 + index)
        self.iterations = START_ITERATIONS
        self.cursor = 0

    def process_next(self) -> None:
        """Copy the next chunk in, process it, copy the result out: in order on one stream."""
        offset = self.chunks[self.cursor % len(self.chunks)] * self.chunk
        self.cursor += 1
        backend, stream, size = self.backend, self.stream, self.chunk
        backend.copy(self.dev_in, self.host_in[offset : offset + size], size, stream)
        backend.launch("compute", stream, self.in_view, self.out_view, self.iterations,
                       COMPUTE_SCALE, COMPUTE_STEP)
        backend.copy(self.host_out[offset : offset + size], self.dev_out, size, stream)

    def work(self, ops: int) -> Work:
        return Work(self.stream, self.process_next, ops)


def _validation_pass(backend: GpuBackend, lanes: Sequence[PipelineStream], host_out: Any,
                     total: int, per_stream: int) -> None:
    """One more pass, untimed, into zeroed outputs, doing what each timed pass does: every
    timed pass writes the same values, so after the first one a result copied out before its
    kernel ran, or a chunk that was never copied out, would still read right."""
    host_out[:total] = 0
    for lane in lanes:
        backend.zero(lane.dev_out, lane.chunk)
        lane.cursor = 0
    backend.time_sample([lane.work(per_stream) for lane in lanes], gate=False,
                        hold_us=0)  # returns once every stream has finished


def _output_problem(host_out: Any, inputs: np.ndarray, iterations: int, chunk: int,
                    when: str) -> str:
    """'' when every output element is its input after `iterations` steps, else one line
    naming how many are wrong and where the first one is."""
    out = host_out[: inputs.nbytes].view(np.float64)
    bad = np.flatnonzero(out != compute_gold(inputs, iterations))
    if not bad.size:
        return ""
    first, per_chunk = int(bad[0]), chunk // 8
    return (f"validation failed {when}: {bad.size} of {out.size} output elements wrong "
            f"(first: chunk {first // per_chunk}, element {first % per_chunk} of it)")


def pipeline(run: CaseRun) -> list[Measurement]:
    """pipeline_chunked at one chunk size and stream count; the references (the H2D copy
    alone, the copy in and the copy out at once, and the kernel alone) once per chunk size,
    with the first stream count of the sweep. A pipeline moves chunks in and out: what the
    link can do for it is the pair's rate, both directions at once, not one direction's."""
    pool, case, device, chunk, samples = run.pool, run.case, run.device, run.size, run.samples
    streams, first_streams = run.job.streams or 1, PIPELINE_STREAMS[0]
    backend = pool.backend
    total = pipeline_total_bytes(chunk)
    count = total // chunk
    if count < streams:
        raise NotRun("waived", f"{count} chunk(s) of {format_bytes(chunk)} cannot keep "
                               f"{streams} streams busy")
    host_in = pool.host(device, total, pinned=True, slot=0)
    host_out = pool.host(device, total, pinned=True, slot=1)
    inputs = pipeline_inputs(total // 8)
    host_in[:total].view(np.float64)[:] = inputs
    host_out[:total] = 0
    lanes = [PipelineStream(pool, device, s, chunk, chunks, host_in, host_out)
             for s, chunks in enumerate(pipeline_schedule(count, streams))]
    lead = lanes[0]

    def copy_in(ops: int) -> list[Work]:
        return [Work(lead.stream, lambda: backend.copy(lead.dev_in, host_in[:chunk], chunk,
                                                       lead.stream), ops)]

    copy_alone = take_samples(backend, copy_in, samples)
    out_stream = pool.stream(device.index, PIPELINE_OUT_STREAM_SLOT)

    def in_and_out(ops: int) -> list[Work]:
        return [*copy_in(ops),
                Work(out_stream, lambda: backend.copy(host_out[:chunk], lead.dev_out, chunk,
                                                      out_stream), ops)]

    paired = take_samples(backend, in_and_out, samples, ops=copy_alone.ops_per_sample)
    host_out[:chunk] = 0  # the pair's copies out wrote there: the passes start from zero
    # After the copies into its buffer: the kernel alone runs on inputs of 1.0.
    compute = ComputePart(backend, lead.dev_in, lead.dev_out, lead.stream, chunk)
    compute.calibrate(_median(copy_alone.per_stream_s[0]), gate=True)
    kernel_alone = take_samples(backend, lambda k: [compute.work(k)], samples,
                                ops=copy_alone.ops_per_sample)
    kernel_problem = compute.problem()
    for lane in lanes:
        lane.iterations = compute.iterations
    per_stream = count // streams
    passes = take_samples(backend, lambda k: [lane.work(k) for lane in lanes], samples,
                          ops=per_stream)
    seconds = [span * per_stream for span in passes.gated_span_s]  # one whole pass a sample

    problem = _output_problem(host_out, inputs, compute.iterations, chunk,
                              "after the timed passes")
    if not problem:
        _validation_pass(backend, lanes, host_out, total, per_stream)
        problem = _output_problem(host_out, inputs, compute.iterations, chunk,
                                  "in a pass into zeroed outputs")
    end_to_end = 2 * total / _median(seconds)
    pair_rate = 2 * chunk / _median(paired.gated_span_s)
    kernel_rate = chunk / _median(kernel_alone.per_stream_s[0])
    note = (f"{count} chunks on {streams} stream(s), {compute.iterations} multiply-adds per "
            f"element; end-to-end (in + out) / the copies in and out at once = "
            f"{end_to_end / pair_rate:.2f} (1: as fast as the link moves both ways), "
            f"/ kernel alone = {end_to_end / kernel_rate:.2f}x")
    row = Measurement(
        seconds_per_op=tuple(seconds), bytes_per_op=2 * total, size_bytes=chunk,
        device=device.label, device_name=device.name, direction=case.direction,
        memory=case.memory, valid=not (problem or kernel_problem),
        note="; ".join(n for n in (problem, kernel_problem, note, passes.note()) if n),
        streams=streams, numa_node=device.numa_node, ops_per_sample=1, phase="pipeline",
        # In and out at once: the link's peak in each direction, as the bidirectional sum.
        peak=2 * device.peak_pcie_gbps if device.peak_pcie_gbps else None,
        # Counters join on the passes; a window op is one chunk per stream, a row op a pass.
        window_s=passes.window_s, window_ops=round(passes.window_ops / per_stream),
    )
    row.extra["timeline"] = {
        "case": case.key, "device": device.label, "size_bytes": chunk, "streams": streams,
        "lanes": [dict(lane, label=f"stream {i}: {per_stream} chunk(s) in, compute, out")
                  for i, lane in enumerate(_lanes(passes, [("", "pipeline")] * streams))],
    }
    rows = [row]
    if streams == first_streams:  # the references, once per chunk size
        rows[:0] = [
            _row(case, device, chunk, copy_alone.per_stream_s[0], chunk, copy_alone,
                 direction="h2d", memory="pinned", phase="alone", streams=1,
                 peak=device.peak_pcie_gbps, problem=""),
            _row(case, device, chunk, paired.gated_span_s, 2 * chunk, paired, direction="both",
                 memory="pinned", phase="paired", streams=2,
                 peak=2 * device.peak_pcie_gbps if device.peak_pcie_gbps else None,
                 problem="", note="the copy in and the copy out at once, one gate (in + out "
                                  "bytes over their span): the link's both-ways rate, the "
                                  "pipeline's reference"),
            _row(case, device, chunk, kernel_alone.per_stream_s[0], chunk, kernel_alone,
                 direction="compute", memory="hbm", phase="alone", streams=1, peak=None,
                 problem=kernel_problem, note="compute kernel alone; GB/s = bytes processed"),
        ]
    return rows
