"""What every case declares, whatever runs it: its key, description, the hardware it needs,
what its figure measures and how its bytes are counted. Targets add how they run it
(`bwprof.gpu.cases.GpuCase`); the catalogue of every case is `bwprof.cases`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bwprof.schema.metrics import get_metric

Target = Literal["host", "gpu", "mpi"]
ByteConvention = Literal["copy", "traffic"]


@dataclass(frozen=True)
class CaseSpec:
    key: str
    description: str
    target: Target
    memory: str
    direction: str
    byte_convention: ByteConvention
    bytes_factor: int
    """Bytes counted per operation = bytes_factor × bytes of one buffer (STREAM: arrays touched)."""
    min_gpus: int = 0
    whole_node: bool = False
    """Needs every GPU of the node at once (all-GPU and GPU-to-GPU cases): a fleet rank that
    holds one GPU of its node (several ranks a node) cannot run it."""
    metric: str = "bandwidth"
    """What its rows' figure measures (`bwprof.schema.metrics`): bandwidth, latency, ..."""
    headline: bool = False
    """Its rows give a memory path's headline figure (the summary's and the verdicts'): in
    the quick preset only these repeat their work for a counter window."""
    copied_factor: int | None = None
    """Where the operation is a copy: bytes copied per operation = copied_factor × bytes of
    one buffer, each byte counted once (nvbandwidth's, bandwidthTest's and OSU's convention).
    A `copy`-convention transfer copies what it counts (copied_factor = bytes_factor); a
    `traffic`-convention copy (`d2d_copy`, STREAM Copy) counts the buffer read and the
    buffer written, so it copies half. None where the operation is not a copy (a STREAM
    Scale, Add, Triad or Dot, a latency chase, an overlap case whose rows mix copies and a
    kernel): its rows have no copy-convention figure."""

    def __post_init__(self) -> None:
        """A case's figure is derived from timed operations: its metric must be one that a
        time gives (a rate or a time per unit of work), not a ratio a case computes."""
        metric = get_metric(self.metric)
        if metric.kind not in ("rate", "time"):
            raise ValueError(f"case {self.key}: metric {self.metric!r} is not derived from "
                             "timed operations; declare bandwidth, latency or throughput")

    def bytes_per_op(self, buffer_bytes: int) -> int:
        return self.bytes_factor * buffer_bytes

    @property
    def copy_share(self) -> float | None:
        """Bytes copied over bytes counted (1 for a copy-convention copy, 1/2 for a
        traffic-convention one); None where the operation is not a copy. A row's
        copy-convention GB/s is its GB/s times this, whatever its bytes per operation (a
        both-ways row counts both directions, and copies both)."""
        if self.copied_factor is None or not self.bytes_factor:
            return None
        return self.copied_factor / self.bytes_factor


Statistic = Literal["median"]
"""The statistic a path's figure is: the median of a row's samples everywhere (nvbandwidth
reports the median; BabelStream the best, shown beside it, labelled). For a verdict the
median is the honest one: a best-of-N hides the drops a sick box shows."""


@dataclass(frozen=True)
class FigureRule:
    """Which rows give a path's figure: `ok` rows with a figure, none a cache's (a
    `in_cache` / `l2_resident` row has buffers under 4x the cache), per device at its
    largest size, the best of what is left (a DDR row per thread count); the figure is the
    chosen row's `statistic`."""

    statistic: Statistic = "median"
    beyond_cache: bool = True
    at_largest_size: bool = True


MEDIAN_BEYOND_CACHE = FigureRule()


AGGREGATE_SUFFIX = "_all"
"""How a path's every-GPU-at-once case ends ('h2d_all'): its rows are one figure of all the
node's GPUs together (device `all`), beside the headline's per GPU."""


@dataclass(frozen=True)
class PathSpec:
    """A memory path, declared once: its key, the labels the summary and the verdicts show,
    the cases whose rows give its figures (the headline first), the direction those rows
    carry, and the rule that picks its figure. Summary, verdicts, compare, fleet, trend and
    roofline read paths from `PATHS` alone."""

    key: str
    label: str
    """The summary's name ('host→device')."""
    short: str
    """The verdict tables' name ('H2D'), fit for a narrow column."""
    cases: tuple[str, ...] = ()
    """Headline case first; empty where the path holds every case of `metric`."""
    direction: str | None = None
    metric: str | None = None
    """The metric whose every case the path holds (latency, compute), else None."""
    section: str = ""
    """The summary path its figures are shown under ('' where the summary shows none)."""
    judged: bool = True
    """Whether `bwprof accept` holds it against a band."""
    bandwidth: bool = False
    """A GB/s path with a band a spec may override (`[model.<path>]`)."""
    optional: bool = False
    """Shown in the summary only where the run has rows of it (not as 'not in this run')."""
    rule: FigureRule = MEDIAN_BEYOND_CACHE

    @property
    def headline(self) -> str:
        return self.cases[0] if self.cases else ""

    @property
    def aggregate(self) -> str:
        """Its case of every GPU at once ('h2d_all': device `all`, `node7:all` in a fleet):
        the first after the headline whose key ends AGGREGATE_SUFFIX; '' where it has none."""
        return next((c for c in self.cases[1:] if c.endswith(AGGREGATE_SUFFIX)), "")


PATHS: tuple[PathSpec, ...] = (
    PathSpec("ddr", "DDR", "DDR", ("ddr_triad",), section="ddr"),
    PathSpec("hbm", "HBM", "HBM", ("hbm_triad",), section="hbm", bandwidth=True),
    PathSpec("d2d", "D2D", "D2D", ("d2d_copy",), section="hbm", bandwidth=True),
    PathSpec("h2d", "host→device", "H2D", ("h2d_pinned", "h2d_all"), "h2d", section="h2d",
             bandwidth=True),
    PathSpec("d2h", "device→host", "D2H", ("d2h_pinned", "d2h_all"), "d2h", section="d2h",
             bandwidth=True),
    PathSpec("bidir", "both ways", "bidir", ("bidir_pinned",), "both", bandwidth=True),
    PathSpec("p2p", "GPU↔GPU", "P2P", ("p2p_copy",), "p2p", section="p2p", bandwidth=True),
    PathSpec("net", "network", "net", ("net_p2p",), "net", section="net", judged=False,
             optional=True),
    PathSpec("overlap", "overlap", "overlap", ("overlap_h2d_compute", "overlap_d2h_compute",
                                               "overlap_bidir_compute", "overlap_pageable"),
             section="overlap"),
    PathSpec("latency", "latency", "latency", metric="latency", section="latency",
             optional=True),
    PathSpec("compute", "compute", "compute", metric="throughput", section="compute",
             judged=False, optional=True),
)
"""Every path, declared once, in the order tables show them."""

PATHS_BY_KEY: dict[str, PathSpec] = {p.key: p for p in PATHS}


def path_of(key: str) -> PathSpec:
    return PATHS_BY_KEY[key]


def summary_paths() -> tuple[str, ...]:
    """The summary's paths (sections), in order."""
    return tuple(dict.fromkeys(p.section for p in PATHS if p.section))


def summary_cases(section: str) -> tuple[str, ...]:
    """The cases a summary path reads, in the order their rows appear."""
    return tuple(c for p in PATHS if p.section == section for c in p.cases)


def judged_paths() -> tuple[str, ...]:
    return tuple(p.key for p in PATHS if p.judged)
