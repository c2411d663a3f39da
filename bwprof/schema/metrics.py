"""What a figure measures: its metric, its unit and which way is better.

A case times operations; the runner turns the time of one operation and the work it did (bytes
for bandwidth, FLOP for throughput, loads for latency) into the row's value through its
metric. The fastest sample always gives the best value: the highest rate, or the lowest time
per load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["rate", "time", "ratio"]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool
    kind: Kind
    """`rate`: work per second (times `scale`); `time`: seconds per unit of work (times
    `scale`); `ratio`: a number the case computes itself (no timing behind it)."""
    scale: float = 1.0
    work: str = ""
    """What `work_per_op` counts for this metric (for people and the docs)."""

    def value(self, work_per_op: float, seconds_per_op: float) -> float:
        """The figure of one operation that did `work_per_op` in `seconds_per_op`."""
        if seconds_per_op <= 0 or work_per_op <= 0:
            raise ValueError(f"{self.name} needs positive work and seconds, got "
                             f"{work_per_op!r} in {seconds_per_op!r} s")
        if self.kind == "rate":
            return work_per_op / seconds_per_op * self.scale
        if self.kind == "time":
            return seconds_per_op / work_per_op * self.scale
        raise ValueError(f"{self.name} is a ratio: it is not derived from a time")

    def better(self, a: float, b: float) -> bool:
        """Whether figure `a` is better than `b`."""
        return a > b if self.higher_is_better else a < b


BANDWIDTH = Metric("bandwidth", "GB/s", True, "rate", 1e-9, "bytes")
LATENCY = Metric("latency", "ns", False, "time", 1e9, "dependent loads")
THROUGHPUT = Metric("throughput", "TFLOP/s", True, "rate", 1e-12, "floating-point operations")
EFFICIENCY = Metric("efficiency", "ratio", True, "ratio")

METRICS: dict[str, Metric] = {m.name: m for m in (BANDWIDTH, LATENCY, THROUGHPUT, EFFICIENCY)}
"""Every metric a row may carry (the `metric` column); its `unit` column is the metric's."""


def get_metric(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(METRICS)}") from None
