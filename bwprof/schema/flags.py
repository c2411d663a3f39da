"""Facts about a row that code acts on, as data: the `flags` column.

A closed vocabulary: every flag is declared here with what it means and, where bwprof acts
on it, what it changes (`busy_host` keeps a figure from a verdict; `noisy`,
`numa_unverified`, `cache_unknown`, `mig_slice`, `confidential_computing` and
`gpu_degraded` only inform today: they are there for the verdicts to judge by),
and a results file holding any other is malformed. In a file the flags are joined by `|`
(`in_cache|noisy`), empty for none. Notes stay for people; no code reads them.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

IN_CACHE = "in_cache"
L2_RESIDENT = "l2_resident"
C2C_LINK = "c2c_link"
SIMULATED = "simulated"
NOISY = "noisy"
BUSY_HOST = "busy_host"
NUMA_UNVERIFIED = "numa_unverified"
CACHE_UNKNOWN = "cache_unknown"
MIG_SLICE = "mig_slice"
CONFIDENTIAL_COMPUTING = "confidential_computing"
GPU_DEGRADED = "gpu_degraded"
CACHE_SERVED = "cache_served"

FLAGS: dict[str, str] = {
    IN_CACHE: "host arrays (a latency chase's working set, a pageable copy's host buffer) "
              "under 4x the last-level cache: partly a cache's figure, so the row has no DDR "
              "(or PCIe) peak beside it and is not the memory's headline figure",
    L2_RESIDENT: "GPU buffers (or a latency chase's working set) under 4x the L2: the cache is "
                 "in the figure, so the row has no HBM peak, no 'above peak' finding and is "
                 "not the HBM figure",
    C2C_LINK: "host memory reached over NVLink-C2C (Grace Hopper): no PCIe peak, no PCIe "
              "counter check, no HBM/PCIe ratio",
    SIMULATED: "measured by the simulated backend on the CPU: not a measurement",
    NOISY: "coefficient of variation above NOISY_CV: the figure moves between samples",
    BUSY_HOST: "a host job during which other processes took more than 5% of the measuring "
               "cores' time, or the hypervisor stole more than 5% (`host_others_pct`, "
               "`host_steal_pct`): the figure is partly theirs, so `accept` cannot judge it",
    NUMA_UNVERIFIED: "host memory could not be kept on, or confirmed on, the NUMA node asked "
                     "for",
    CACHE_UNKNOWN: "the last-level cache size is not /sys's full account: whether the arrays "
                   "are cache-resident is unsure",
    MIG_SLICE: "measured on a MIG slice (a GPU in MIG mode): the figure is the slice's, with "
               "its share of the memory and SMs, so no whole-GPU HBM peak is held against it "
               "and it compares only with the same slice profile",
    CONFIDENTIAL_COMPUTING: "confidential computing on: host-device copies go through "
                            "encrypted bounce buffers, so a host-link figure is that path's, "
                            "not the link's",
    GPU_DEGRADED: "a GPU the row measured got worse while its job ran: new uncorrected ECC "
                  "errors, rows remapped or pages retired (or one pending), or a hardware "
                  "Xid event (not corrected ECC errors alone, nor an application's Xid) "
                  "(system.json's telemetry.health has the counts): the figure may be a "
                  "failing GPU's",
    CACHE_SERVED: "a GPU chase through memory no GPU cache should serve (lat_h2d's pinned "
                  "host memory) whose samples ran under 0.6x its first, cold lap's time per "
                  "load: a GPU cache answered after the first lap, so the figure is that "
                  "cache's, not the link's round trip, and not the path's headline",
}
"""The vocabulary: flag -> what it means (docs/columns.md's flags table shows these)."""

NOISY_CV = 0.05
"""A figure whose samples spread more than this (CV, standard deviation over mean) is noisy."""

CACHE_RESIDENT: frozenset[str] = frozenset({IN_CACHE, L2_RESIDENT, CACHE_SERVED})
"""Flags that keep a row away from the DRAM/HBM peak and the memory's headline figure."""

SEPARATOR = "|"


def join_flags(flags: Iterable[str]) -> str:
    """The column's text: known flags in vocabulary order, each once."""
    return _joined(flags if isinstance(flags, frozenset) else frozenset(flags))


@lru_cache(maxsize=1024)
def _joined(wanted: frozenset[str]) -> str:
    """`join_flags` of a set, made once per distinct set (every ResultRow checks its flags
    this way: a fleet's rows hold a few sets between them)."""
    unknown = wanted - FLAGS.keys()
    if unknown:
        raise ValueError(f"unknown flag(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(FLAGS)}")
    return SEPARATOR.join(flag for flag in FLAGS if flag in wanted)


def split_flags(text: object) -> frozenset[str]:
    """The flags of a column cell ('' or missing: none); unknown ones are kept, for the
    reader to refuse by name."""
    if not isinstance(text, str) or not text:
        return frozenset()
    return frozenset(part.strip() for part in text.split(SEPARATOR) if part.strip())


def unknown_flags(text: object) -> list[str]:
    return sorted(split_flags(text) - FLAGS.keys())


def has_flag(text: object, flag: str) -> bool:
    return flag in split_flags(text)


def is_cache_resident(text: object) -> bool:
    """Whether a flags cell marks a cache's figure (`in_cache`, `l2_resident`,
    `cache_served`)."""
    return bool(split_flags(text) & CACHE_RESIDENT)
