"""Device-memory STREAM cases (`hbm_*`): Numba CUDA kernels over three float64 arrays.

Arrays default to 2^25 elements (BabelStream's size) or 4x the GPU's L2, whichever is larger,
so the cache is not what is measured. After timing, every element is checked against values
replayed on scalars, with the same gold values as the host STREAM cases. Each case repeats
one kernel whose inputs it does not write, so the check proves every element was computed
right, not that every launch ran: the events that time the launches bracket them, skipped
ones would only raise the figure, and a figure above the theoretical peak marks the row invalid.
"""

from __future__ import annotations

from bwprof import stream_gold as gold
from bwprof.gpu.backend import Work
from bwprof.gpu.devices import GpuDevice
from bwprof.gpu.job import CaseRun
from bwprof.gpu.kernel_params import DOT_BLOCKS
from bwprof.gpu.layout import ELEMENT_BYTES
from bwprof.gpu.sampling import take_samples
from bwprof.measurement import Measurement
from bwprof.rules import CACHE_MULTIPLE, next_power_of_two
from bwprof.units import format_bytes

DEFAULT_ARRAY_BYTES = (1 << 25) * ELEMENT_BYTES
MIN_SWEEP_BYTES = 256 << 10
MEMORY_SHARE = 0.8


def default_array_bytes(l2_bytes: int) -> int:
    return max(DEFAULT_ARRAY_BYTES, next_power_of_two(CACHE_MULTIPLE * l2_bytes))


def array_sizes(device: GpuDevice, free_bytes: int, sweep: bool) -> tuple[list[int], str]:
    """Bytes per array to measure on `device`, and a note when the default had to shrink.

    With `sweep`, also every power of two from 256 KiB up, so the L2 knee shows.
    """
    size, note = default_array_bytes(device.properties.l2_bytes), ""
    while 3 * size > MEMORY_SHARE * free_bytes and size > MIN_SWEEP_BYTES:
        size //= 2
    if size < 4 * device.properties.l2_bytes:
        note = (f"arrays of {format_bytes(size)} are below 4x the "
                f"{format_bytes(device.properties.l2_bytes)} L2: the cache is in the figure")
    sizes = [size]
    if sweep:
        sizes = [s for s in (MIN_SWEEP_BYTES << k for k in range(40)) if s < size] + sizes
    return sizes, note


def stream_kernel(run: CaseRun) -> list[Measurement]:
    """hbm_*: one STREAM kernel over three arrays of the job's size, validated after timing."""
    pool, case, device, array_bytes = run.pool, run.case, run.device, run.size
    samples, counter_window_s, note = run.samples, run.counter_window_s, run.job.note
    backend = pool.backend
    name = case.kernel
    arrays = [pool.device(device.index, array_bytes, slot) for slot in range(3)]
    partial = pool.device(device.index, DOT_BLOCKS * ELEMENT_BYTES, slot=3)
    a, b, c = (backend.kernel_view(x[:array_bytes]) for x in arrays)
    sums = backend.kernel_view(partial[: DOT_BLOCKS * ELEMENT_BYTES])
    stream = pool.stream(device.index)
    backend.launch("init", stream, a, b, c, gold.INIT_A, gold.INIT_B, gold.INIT_C)

    def launch() -> None:
        if name == "dot":
            backend.launch("dot", stream, a, b, sums)
        else:
            backend.launch(name, stream, a, b, c, gold.SCALAR)

    sampled = take_samples(backend, lambda ops: [Work(stream, launch, ops)], samples,
                           counter_window_s=counter_window_s)
    host_a, host_b, host_c = (backend.download(x, array_bytes).view("float64") for x in arrays)
    dot = float(backend.download(partial, DOT_BLOCKS * ELEMENT_BYTES).view("float64").sum()) \
        if name == "dot" else None
    problem = gold.check(gold.REPLAYS[name], sampled.total_ops, host_a, host_b, host_c, dot)
    return [Measurement(
        seconds_per_op=sampled.per_stream_s[0], bytes_per_op=case.bytes_per_op(array_bytes),
        size_bytes=array_bytes, device=device.label, device_name=device.name,
        direction=case.direction, memory=case.memory, valid=not problem,
        note="; ".join(n for n in (f"validation failed: {problem}" if problem else "", note,
                                   sampled.note()) if n),
        streams=1, ops_per_sample=sampled.ops_per_sample, peak=device.peak_hbm_gbps,
        window_s=sampled.window_s, window_ops=sampled.window_ops,
    )]
