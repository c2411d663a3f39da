"""What the host cases know of this machine before measuring: its CPUs, cache levels, NUMA
nodes and memory, gathered once (from `system.json`'s host record) and shared by the DDR and
latency cases. Imports no Numba, so the case catalogue can use it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from bwprof.cpulist import parse_cpu_list
from bwprof.schema.meta import CacheLevel
from bwprof.system import NumaNode
from bwprof.units import format_bytes


@dataclass(frozen=True)
class HostNode:
    """A NUMA node measured on its own: its CPUs this process may use, and its memory."""

    node: int
    cpus: frozenset[int]
    memory_total_bytes: int | None


def allowed_cpus() -> frozenset[int]:
    """The CPUs this process may run on (empty where the platform cannot say)."""
    if hasattr(os, "sched_getaffinity"):
        return frozenset(os.sched_getaffinity(0))
    return frozenset()


def measurable_nodes(nodes: Sequence[NumaNode],
                     allowed: frozenset[int] | None = None) -> tuple[HostNode, ...]:
    """The nodes with memory and CPUs this process may use (`allowed`, default its affinity),
    when there are at least two; else none, as the whole-host figure is the one node's. A node
    whose memory is not told (gVisor's nodes have no meminfo, and CPU lists in the host's
    numbering) cannot be sized or trusted, so it is not measured."""
    if allowed is None:
        allowed = allowed_cpus()
    found = []
    for node in nodes:
        cpus = (parse_cpu_list(node.cpus) or frozenset()) & allowed
        if cpus and node.memory_total_bytes:
            found.append(HostNode(node.node, cpus, node.memory_total_bytes))
    return tuple(found) if len(found) > 1 else ()


@dataclass(frozen=True)
class HostFacts:
    """The machine as the host cases see it."""

    cpu_model: str
    caches: tuple[CacheLevel, ...] = ()
    """Data and unified cache levels, each with its size per instance (`system.host_caches`)."""
    cache_source: str | None = "sysfs"
    llc_bytes: int | None = None
    """Last-level cache across all of its instances (every socket, every CCX)."""
    nodes: tuple[HostNode, ...] = ()
    """NUMA nodes measured on their own (none on a one-node host)."""
    cpus: frozenset[int] = frozenset()
    """CPUs this process may use."""
    memory_available_bytes: int | None = None
    memory_total_bytes: int | None = None
    """The RAM: sizes bwprof chooses take at most `rules.DEFAULT_MEMORY_SHARE` of it."""

    def cache_caveat(self) -> str | None:
        """Why a working set may be partly cache-resident after all, where the cache sizes
        are not /sys's full account (a sandbox such as gVisor lists none)."""
        if self.cache_source == "sysfs":
            return None
        if self.cache_source == "cpuid" and self.llc_bytes:
            return (f"last-level cache {format_bytes(self.llc_bytes)} from CPUID, one instance "
                    "(/sys lists no caches): where the host has more, the arrays may be "
                    "partly cache-resident")
        return ("last-level cache size unknown (/sys lists no caches): the arrays may be "
                "partly cache-resident")

    def cache_level(self, working_set_bytes: int) -> str:
        """The smallest level whose one instance holds the working set (`L1`, `L2`, `L3`, as
        one thread sees it), `DDR` beyond them all, or '' where no level is known."""
        levels = sorted((c for c in self.caches if c.type in ("Data", "Unified")),
                        key=lambda c: c.level)
        if not levels:
            return ""
        for level in levels:
            if working_set_bytes <= level.size_bytes:
                return f"L{level.level}"
        return "DDR"
