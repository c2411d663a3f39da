"""Timed samples of GPU work: warm-up, ops per sample, the gate, and per-op times.

Each sample issues K operations back to back per stream, with K chosen from a warm-up so a
sample lasts about TARGET_SAMPLE_S (times the backend's `sample_scale`: 1 on a GPU) — far
beyond launch and event overhead, even for 4 KiB copies — but never more than MAX_OPS, so
the queue cannot fill while the gate holds it, and never so many across a sample's streams
that issuing them could outlast the gate (`stream_ops_ceiling`: p2p_all_pairs on eight GPUs
has 56 streams). A sample whose enqueue outlasted the gate is taken again with a longer hold.

Every sample queues untimed warm-up operations on each stream behind the gate, before its
start event (`Work.warmup`): up to WARMUP_OPS, as nvbandwidth's WARMUP_COUNT, fewer where one
operation alone lasts WARMUP_S. The first operation after the gate pays the copy engine's
start-up and the first TLB misses of its buffers; without the warm-up that cost sat inside
every timed sample, spread over its K operations (all of it, at K = 1).

Timed samples last milliseconds, but the hardware counters are sampled every 50 ms and GPM
every 100 ms at best, so a row's own window rarely holds the samples a counter check needs
(`bwprof.telemetry.join`). Where telemetry runs, large rows therefore keep repeating the same
work, untimed, for a counter window (the executor's COUNTER_WINDOW_S) after their samples: the
counters are joined on that window and compared with the bytes moved in it, while the figure
still comes from the timed samples alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from bwprof.gpu.backend import GpuBackend, Sample, Work

TARGET_SAMPLE_S = 0.002
COUNTER_BATCH_S = 0.02
"""Work per batch of the counter window: long enough that the sync between batches is a
small gap, short enough to end the window close to its length."""
MAX_OPS = 256
WARMUP_OPS = 4
"""Most untimed warm-up operations per stream in a sample (nvbandwidth's WARMUP_COUNT)."""
WARMUP_S = 0.001
"""Warm-up operations stop at this much work: one 256 MiB copy (5 ms) is warm-up enough."""
HOLD_US = 2_000
MAX_HOLD_US = 128_000
ENQUEUE_CALL_S = 10e-6
"""What one call that enqueues GPU work (a copy, a kernel launch, an event made, recorded or
waited on) costs the host, from Python through CuPy or Numba, taken high: p2p_all_pairs on
eight GPUs issued 56 streams x 260 copies and 3,080 event waits (17,640 calls) in 40-110 ms,
2.3-6.2 us a call."""
STREAM_CALLS = 10
"""Calls a sample makes per stream besides its operations (`CudaBackend.time_sample`): the
wait on the gate, the warm-up's ready event (made, recorded), the barrier stream's wait on
that event, the stream's wait on the barrier, the start and end events (made, recorded),
and the first stream's wait on this stream's end before the final event; a constant, with
the runtime's barrier, not one wait per other stream."""
SAMPLE_CALLS = 7
"""Calls a sample makes once, whatever its streams: the hold kernel and its release event
(made, recorded), the barrier event (made, recorded), the final event (made, recorded)."""
MAX_SAMPLE_CALLS = int(MAX_HOLD_US / 2 / 1e6 / ENQUEUE_CALL_S)
"""Calls one sample may make behind the gate (6,400): at ENQUEUE_CALL_S each, issuing them
takes at most half the gate's longest hold, so every sample can be covered with room left."""


@dataclass(frozen=True)
class Sampled:
    """Per-op seconds of every kept sample, per stream; K; and every op issued per stream."""

    per_stream_s: tuple[tuple[float, ...], ...]
    span_s: tuple[float, ...]
    ops_per_sample: int
    total_ops: int
    uncovered: int
    last: Sample
    covered: tuple[bool, ...] = ()
    """Per kept sample: the gate held until everything was enqueued."""
    window_s: tuple[float, float] | None = None
    """time.monotonic() interval for joining the hardware counters: the counter window
    where one ran, else from the warm-up to the last sample."""
    window_ops: int = 0
    """Operations per stream issued in `window_s` (`total_ops` also counts the rest)."""
    ops_ceiling: int | None = None
    """`stream_ops_ceiling` where it cut the operations per sample below what the sample's
    length asked for (None: it did not): the samples are shorter than TARGET_SAMPLE_S."""

    @property
    def covered_span_s(self) -> tuple[float, ...]:
        """Per sample whose gate held, the time of all its streams on one clock
        (`Sample.total_s`: from the first stream's start to a final event behind every
        stream's end), per operation: a stream that started late lengthens it, so start skew
        cannot inflate a sum. In the other samples some streams may have run before the rest
        were enqueued, not at once. Empty where no gate held."""
        return tuple(span for span, held in zip(self.span_s, self.covered, strict=True)
                     if held)

    @property
    def gated_span_s(self) -> tuple[float, ...]:
        """`covered_span_s`, or every sample's span where none was covered (the row's note
        says how many were not, `note`), so an overlap row is never left without a figure."""
        return self.covered_span_s or self.span_s

    def note(self) -> str:
        notes = []
        if self.ops_ceiling is not None:
            streams = len(self.per_stream_s)
            notes.append(f"{self.ops_ceiling} operations per stream per sample at most, so "
                         f"{streams} streams' enqueue stays inside the gate")
        if self.uncovered:
            notes.append(f"{self.uncovered} sample(s) started before all work was enqueued "
                         f"(gate too short even at {MAX_HOLD_US} us)")
        return "; ".join(notes)


def ops_for(seconds_per_op: float, target_s: float = TARGET_SAMPLE_S) -> int:
    """Operations per sample so one sample lasts about `target_s`, within [1, MAX_OPS]."""
    if seconds_per_op <= 0:
        return MAX_OPS
    return max(1, min(MAX_OPS, math.ceil(target_s / seconds_per_op)))


def stream_ops_ceiling(streams: int) -> int:
    """Most timed operations per stream in a sample of `streams` streams: with its WARMUP_OPS
    warm-up operations and STREAM_CALLS other calls a stream (and SAMPLE_CALLS once), the
    sample's calls stay within
    MAX_SAMPLE_CALLS (MAX_OPS at most, 1 at least). Each operation keeps its size, so the
    bytes counted are the bytes copied; only the sample gets shorter."""
    per_stream = ((MAX_SAMPLE_CALLS - SAMPLE_CALLS) // max(1, streams) - WARMUP_OPS
                  - STREAM_CALLS)
    return max(1, min(MAX_OPS, per_stream))


def warmup_ops(seconds_per_op: float) -> int:
    """Untimed warm-up operations per stream: WARMUP_OPS, fewer where WARMUP_S is reached
    sooner, at least 1."""
    return min(WARMUP_OPS, ops_for(seconds_per_op, WARMUP_S))


def _warmed(works: list[Work], warmup: int) -> list[Work]:
    return [replace(work, warmup=warmup) for work in works]


def counter_window(backend: GpuBackend, make_works: Callable[[int], list[Work]],
                   seconds_per_op: float, length_s: float) -> tuple[tuple[float, float], int]:
    """Repeat the work, untimed and ungated, in batches until `length_s` has passed; the
    interval and the operations per stream issued in it."""
    batch = ops_for(seconds_per_op, COUNTER_BATCH_S)
    start, ops = time.monotonic(), 0
    while True:
        backend.time_sample(make_works(batch), False, 0)  # returns once the batch finished
        ops += batch
        end = time.monotonic()
        if end - start >= length_s:
            return (start, end), ops


def take_samples(
    backend: GpuBackend,
    make_works: Callable[[int], list[Work]],
    samples: int,
    gate: bool = True,
    ops: int | None = None,
    counter_window_s: float = 0.0,
) -> Sampled:
    """Warm up with one op per stream (itself behind one untimed op), choose K (unless `ops`
    fixes it, so parts measured alone and together do the same work; else no more than
    `stream_ops_ceiling` of the sample's streams allows) and the warm-up ops,
    take `samples` timed samples, each behind its untimed warm-up, then run the counter
    window if `counter_window_s` asks for one. `total_ops` counts the warm-up ops too:
    they move bytes inside the window the counters are joined on."""
    hold_us = HOLD_US
    began = time.monotonic()
    warm = backend.time_sample(_warmed(make_works(1), 1), gate, hold_us)
    total_ops = 2
    ceiling = None
    if not ops:
        wanted = ops_for(max(warm.seconds), TARGET_SAMPLE_S * backend.sample_scale)
        ops = min(wanted, stream_ops_ceiling(len(warm.seconds)))
        ceiling = ops if ops < wanted else None
    warmup = warmup_ops(max(warm.seconds))
    per_stream: list[list[float]] = [[] for _ in warm.seconds]
    spans: list[float] = []
    uncovered = 0
    covered: list[bool] = []
    last = warm
    for _ in range(samples):
        while True:
            last = backend.time_sample(_warmed(make_works(ops), warmup), gate, hold_us)
            total_ops += warmup + ops
            if last.covered or hold_us >= MAX_HOLD_US:
                break
            hold_us *= 2  # enqueue outlasted the gate: hold longer and take it again
        uncovered += not last.covered
        covered.append(last.covered)
        for index, seconds in enumerate(last.seconds):
            per_stream[index].append(seconds / ops)
        spans.append(last.span_s / ops)
    window, window_ops = (began, time.monotonic()), total_ops
    if counter_window_s > 0 and per_stream[0]:
        slowest = max(sorted(times)[len(times) // 2] for times in per_stream)
        window, window_ops = counter_window(backend, make_works, slowest, counter_window_s)
        total_ops += window_ops
    return Sampled(
        per_stream_s=tuple(tuple(s) for s in per_stream),
        span_s=tuple(spans),
        ops_per_sample=ops,
        total_ops=total_ops,
        uncovered=uncovered,
        last=last,
        covered=tuple(covered),
        window_s=window,
        window_ops=window_ops,
        ops_ceiling=ceiling,
    )
