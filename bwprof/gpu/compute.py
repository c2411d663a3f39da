"""GPU compute ceilings: `gemm_gpu` (cuBLAS square matrix multiply per dtype, a size sweep)
and `fma_gpu` (a Numba CUDA kernel of independent fused multiply-adds, no memory traffic).

gemm_gpu: a, b and c are n x n row-major matrices in device buffers, their inputs uniform in
[-1, 1) drawn on the host and uploaded; one operation is one `c = a @ b` through
cublasGemmEx (`backend.gemm`), timed with CUDA events by `take_samples` (warm-up first),
2 n^3 FLOP. After timing, two corner blocks of c (rows and columns 0-15 and n-16..n-1) are
downloaded and checked against the same blocks computed in fp64 on the host from the stored
inputs, with a tolerance set by the dtype (`bwprof.host.gemm.TOLERANCE`): a wrong or skipped
multiply is `invalid`. c is zeroed before timing, so a multiply that never ran fails too.

fma_gpu: every thread of a full grid (2048 threads an SM) runs FMA_CHAINS independent FMA
chains in registers, FMA_ITERATIONS trips of an unrolled block of FMA_UNROLL steps each
(4096 steps a chain), and stores one sum: 2 x chains x steps FLOP a thread, the FMAs it
executes. With scale 1 and step 2^-20 (kernel arguments, so nothing is folded) each step is
exact, and every stored sum is checked against `kernel_params.fma_gold`, so a skipped FMA
fails validation.

Peaks: SM count x maximum SM clock (NVML) x dense FLOP per clock per SM of the unit the dtype
runs on (`bwprof.peaks`); none where the clock or the architecture is unknown.
"""

from __future__ import annotations

import numpy as np

from bwprof.gpu import matrices
from bwprof.gpu.backend import Work
from bwprof.gpu.devices import GpuDevice
from bwprof.gpu.job import CaseRun
from bwprof.gpu.kernel_params import (
    COMPUTE_SCALE,
    COMPUTE_STEP,
    FMA_BLOCKS_PER_SM,
    FMA_ITERATIONS,
    FMA_UNROLL,
    fma_flop,
    fma_gold,
    fma_steps,
)
from bwprof.gpu.sampling import take_samples
from bwprof.host.gemm import check_product, corners, flop
from bwprof.measurement import Job, Measurement, NotRun, join_notes
from bwprof.peaks import GEMM_UNIT, compute_peak_tflops

PLATEAU_RISE = 0.03
"""A dtype's sweep on a GPU stops once its median TFLOP/s rises less than this from one
size to the next (a fall too: the figure has plateaued, and a larger multiply only costs
time): the issue's "a size sweep up to where the figure plateaus"."""
FMA_THREADS_PER_BLOCK = 256
FMA_UNIT = {"fp32": "fp32", "fp64": "fp64"}


def sm_clock_mhz(device: GpuDevice) -> float | None:
    value = device.metadata.get("sm_clock_max_mhz")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def peak_tflops(device: GpuDevice, unit: str) -> float | None:
    props = device.properties
    return compute_peak_tflops(props.compute_capability, props.multiprocessors,
                               sm_clock_mhz(device), unit)


def _peak_note(device: GpuDevice, unit: str, peak: float | None) -> str:
    if peak is not None:
        return (f"peak {peak:.1f} TFLOP/s = {device.properties.multiprocessors} SMs x "
                f"{sm_clock_mhz(device):.0f} MHz x {unit} dense FLOP/clock/SM (bwprof.peaks)")
    return ("no peak: " + ("SM clock unknown (no NVML)" if sm_clock_mhz(device) is None
                           else f"{unit} FLOP/clock/SM not tabled for compute capability "
                                f"{'.'.join(map(str, device.properties.compute_capability))}"))


def _medians(scratch: dict[object, object], device: int | None,
             dtype: str | None) -> list[tuple[int, float]]:
    """The (order, median TFLOP/s) of a sweep's valid rows so far, in the order run."""
    medians = scratch.setdefault(("gemm_medians", device, dtype), [])
    assert isinstance(medians, list)
    return medians


def plateau(medians: list[tuple[int, float]]) -> float | None:
    """The last size's rise in median over the size before it, or None with fewer than two."""
    if len(medians) < 2 or medians[-2][1] <= 0:
        return None
    return medians[-1][1] / medians[-2][1] - 1


def sweep_done(job: Job, scratch: dict[object, object]) -> bool:
    """Whether the job's sweep (its GPU and dtype) has plateaued: its last two valid sizes'
    medians differ by less than PLATEAU_RISE."""
    rise = plateau(_medians(scratch, job.device, job.dtype))
    return rise is not None and rise < PLATEAU_RISE


def _plateau_note(medians: list[tuple[int, float]]) -> str:
    rise = plateau(medians)
    if rise is None:
        return ""
    previous = medians[-2][0]
    if rise < PLATEAU_RISE:
        return (f"median {rise:+.1%} over n = {previous}, under {PLATEAU_RISE:.0%}: the "
                "figure has plateaued, so the sweep stops here")
    return f"median {rise:+.1%} over n = {previous}: not plateaued yet"


def gemm(run: CaseRun) -> list[Measurement]:
    """One dtype at one size: c = a @ b through cuBLAS, validated on two corner blocks."""
    job, device, pool = run.job, run.device, run.pool
    dtype = job.dtype
    assert dtype is not None and job.size_bytes is not None
    backend = pool.backend
    cc = device.properties.compute_capability
    if tuple(cc) < matrices.MIN_COMPUTE_CAPABILITY[dtype]:
        raise NotRun("waived", f"{dtype} GEMM needs compute capability "
                               f"{'.'.join(map(str, matrices.MIN_COMPUTE_CAPABILITY[dtype]))}"
                               f"; this GPU is {'.'.join(map(str, cc))}")
    size = job.size_bytes
    n = round((size // matrices.itemsize(dtype)) ** 0.5)
    a_host, b_host = matrices.inputs(n, dtype)
    a, b, c = (pool.device(device.index, size, slot) for slot in range(3))
    backend.upload(a, a_host)
    backend.upload(b, b_host)
    backend.zero(c, size)
    stream = pool.stream(device.index)

    def launch() -> None:
        backend.gemm(stream, dtype, n, a, b, c)

    sampled = take_samples(backend, lambda ops: [Work(stream, launch, ops)], run.samples,
                           counter_window_s=run.counter_window_s)
    row_bytes = n * matrices.itemsize(dtype)
    blocks = []
    for rows in corners(n):
        raw = backend.download(c, (rows.stop - rows.start) * row_bytes, rows.start * row_bytes)
        blocks.append((rows, matrices.decode(raw, dtype).reshape(-1, n)[:, rows]))
    problem = check_product(matrices.decode(a_host, dtype), matrices.decode(b_host, dtype),
                            blocks, dtype)
    unit = GEMM_UNIT[dtype]
    peak = peak_tflops(device, unit)
    library = backend.gemm_library(device.index)
    swept = ""
    if not problem:  # a wrong multiply's time is no figure to judge a plateau by
        medians = _medians(run.scratch, job.device, dtype)
        medians.append((n, flop(n) / float(np.median(sampled.per_stream_s[0])) / 1e12))
        swept = _plateau_note(medians)
    note = join_notes(f"validation failed: {problem}" if problem else "",
                      f"{n}x{n} {dtype} c = a @ b, {library}, CUDA events, "
                      f"{sampled.ops_per_sample} multiplies a sample",
                      _peak_note(device, unit, peak), swept, job.note, sampled.note())
    return [Measurement(
        seconds_per_op=sampled.per_stream_s[0], bytes_per_op=3 * size, size_bytes=size,
        device=device.label, device_name=device.name, direction=run.case.direction,
        memory=run.case.memory, valid=not problem, note=note, streams=1,
        ops_per_sample=sampled.ops_per_sample, peak=peak, work_per_op=flop(n), dtype=dtype,
        window_s=sampled.window_s, window_ops=sampled.window_ops,
        extra={"library": library},
    )]


def fma_threads(device: GpuDevice) -> int:
    return max(1, device.properties.multiprocessors) * FMA_BLOCKS_PER_SM * FMA_THREADS_PER_BLOCK


def fma(run: CaseRun) -> list[Measurement]:
    """FMA_CHAINS x fma_steps(FMA_ITERATIONS) FMAs a thread over a full grid, every sum
    checked."""
    job, device, pool = run.job, run.device, run.pool
    dtype = job.dtype
    assert dtype is not None
    backend = pool.backend
    threads = fma_threads(device)
    out = pool.device(device.index, 8 * threads, slot=0)
    backend.zero(out, 8 * threads)
    view = backend.kernel_view(out[: 8 * threads])
    stream = pool.stream(device.index)
    kind = np.float32 if dtype == "fp32" else np.float64
    scale, step = kind(COMPUTE_SCALE), kind(COMPUTE_STEP)
    kernel = f"fma_{dtype}"

    def launch() -> None:
        backend.launch(kernel, stream, view, FMA_ITERATIONS, scale, step)

    sampled = take_samples(backend, lambda ops: [Work(stream, launch, ops)], run.samples,
                           counter_window_s=run.counter_window_s)
    sums = backend.download(out, 8 * threads).view(np.float64)
    wrong = int(np.count_nonzero(sums != fma_gold(FMA_ITERATIONS)))
    unit = FMA_UNIT[dtype]
    peak = peak_tflops(device, unit)
    note = join_notes(
        f"validation failed: {wrong} of {threads} threads stored a wrong sum" if wrong else "",
        f"{threads} threads ({FMA_BLOCKS_PER_SM} blocks of {FMA_THREADS_PER_BLOCK} an SM), "
        f"8 independent {dtype} FMA chains x {fma_steps(FMA_ITERATIONS)} a thread "
        f"({FMA_ITERATIONS} trips of {FMA_UNROLL} unrolled), CUDA events",
        _peak_note(device, unit, peak), job.note, sampled.note())
    return [Measurement(
        seconds_per_op=sampled.per_stream_s[0], bytes_per_op=8 * threads,
        size_bytes=8 * threads, device=device.label, device_name=device.name,
        direction=run.case.direction, memory=run.case.memory, valid=not wrong, note=note,
        streams=1, ops_per_sample=sampled.ops_per_sample, peak=peak,
        work_per_op=fma_flop(threads, FMA_ITERATIONS), dtype=dtype,
        window_s=sampled.window_s, window_ops=sampled.window_ops,
    )]
