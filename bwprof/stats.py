"""Statistics over raw timed samples. Raw samples are kept; everything here derives from them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TimingSummary:
    n: int
    median_s: float
    min_s: float
    max_s: float
    mean_s: float
    cv: float | None
    """Coefficient of variation (sample standard deviation / mean); None for a single
    sample, which says nothing about noise."""


def summarize(seconds: Sequence[float]) -> TimingSummary:
    """Median, best and spread of per-operation times; rejects empty or non-positive samples."""
    if not seconds:
        raise ValueError("no timed samples to summarize")
    if any(not math.isfinite(s) or s <= 0 for s in seconds):
        raise ValueError(f"timed samples must be positive and finite, got {list(seconds)!r}")
    mean = statistics.fmean(seconds)
    cv = statistics.stdev(seconds) / mean if len(seconds) > 1 else None
    return TimingSummary(
        n=len(seconds),
        median_s=statistics.median(seconds),
        min_s=min(seconds),
        max_s=max(seconds),
        mean_s=mean,
        cv=cv,
    )


def gbps(nbytes: float, seconds: float) -> float:
    """GB/s with GB = 10^9 bytes."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    return nbytes / seconds / 1e9


def pct_of_peak(measured_gbps: float | None, peak_gbps: float | None) -> float | None:
    if measured_gbps is None or not peak_gbps:
        return None
    return 100.0 * measured_gbps / peak_gbps


def overlap_efficiency(alone_s: Sequence[float], concurrent_s: float) -> float:
    """How much of the shorter parts hid behind the longest one, in [0, 1].

    (sum of parts alone - concurrent) / (sum of parts alone - longest part alone): 1 when
    everything ran in the shadow of the longest part, 0 when the parts ran one after another.
    """
    if len(alone_s) < 2:
        raise ValueError("overlap needs at least two parts")
    total, longest = sum(alone_s), max(alone_s)
    hideable = total - longest
    if hideable <= 0:
        return 0.0
    return min(1.0, max(0.0, (total - concurrent_s) / hideable))
