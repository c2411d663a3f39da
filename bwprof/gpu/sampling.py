"""Timed samples of GPU work: warm-up, ops per sample, the gate, and per-op times.

Each sample issues K operations back to back per stream, with K chosen from a warm-up so a
sample lasts about TARGET_SAMPLE_S — far beyond launch and event overhead, even for 4 KiB
copies — but never more than MAX_OPS, so the queue cannot fill while the gate holds it.
A sample whose enqueue outlasted the gate is taken again with a longer hold.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from bwprof.gpu.backend import GpuBackend, Sample, Work

TARGET_SAMPLE_S = 0.002
MAX_OPS = 256
HOLD_US = 2_000
MAX_HOLD_US = 128_000


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
    """time.monotonic() at the first and last operation issued (warm-up included), for
    joining the hardware counters of that interval."""

    def note(self) -> str:
        if not self.uncovered:
            return ""
        return (f"{self.uncovered} sample(s) started before all work was enqueued "
                f"(gate too short even at {MAX_HOLD_US} us)")


def ops_for(seconds_per_op: float) -> int:
    """Operations per sample so one sample lasts about TARGET_SAMPLE_S, within [1, MAX_OPS]."""
    if seconds_per_op <= 0:
        return MAX_OPS
    return max(1, min(MAX_OPS, math.ceil(TARGET_SAMPLE_S / seconds_per_op)))


def take_samples(
    backend: GpuBackend,
    make_works: Callable[[int], list[Work]],
    samples: int,
    gate: bool = True,
    ops: int | None = None,
) -> Sampled:
    """Warm up with one op per stream, choose K (unless `ops` fixes it, so parts measured
    alone and together do the same work), then take `samples` timed samples."""
    hold_us = HOLD_US
    began = time.monotonic()
    warm = backend.time_sample(make_works(1), gate, hold_us)
    total_ops = 1
    ops = ops or ops_for(max(warm.seconds))
    per_stream: list[list[float]] = [[] for _ in warm.seconds]
    spans: list[float] = []
    uncovered = 0
    covered: list[bool] = []
    last = warm
    for _ in range(samples):
        while True:
            last = backend.time_sample(make_works(ops), gate, hold_us)
            total_ops += ops
            if last.covered or hold_us >= MAX_HOLD_US:
                break
            hold_us *= 2  # enqueue outlasted the gate: hold longer and take it again
        uncovered += not last.covered
        covered.append(last.covered)
        for index, seconds in enumerate(last.seconds):
            per_stream[index].append(seconds / ops)
        spans.append(last.span_s / ops)
    return Sampled(
        per_stream_s=tuple(tuple(s) for s in per_stream),
        span_s=tuple(spans),
        ops_per_sample=ops,
        total_ops=total_ops,
        uncovered=uncovered,
        last=last,
        covered=tuple(covered),
        window_s=(began, time.monotonic()),
    )
