"""A machine described in a file instead of read from this one: what `bwprof run --dry-run
--machine FILE` plans for, and the machine shapes the tests hold the planner to.

The file is JSON with the run folder's own vocabulary, so an earlier run's system.json is
one: `host` (a `HostInfo`, of which only what planning reads is needed: CPUs, caches, NUMA
nodes, memory) and `gpus` (each GPU's CUDA `properties` and NVML `metadata`, its NUMA node
and CPUs; a list, or system.json's `{"devices": [...]}`). A shape adds `name`,
`description` and `budgets_s` (preset -> the seconds a run of it must be estimated within).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bwprof.coerce import shorten
from bwprof.cpulist import parse_cpu_list
from bwprof.errors import BwprofError
from bwprof.schema.meta import CacheLevel, DeviceProperties, HostInfo, MetaError

MAX_FILE_BYTES = 4 << 20
"""A machine's description is kilobytes; a file far larger is not one."""


@dataclass(frozen=True)
class DescribedGpu:
    """One GPU as the file describes it: what CUDA and NVML would report."""

    properties: DeviceProperties
    metadata: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class DescribedMachine:
    name: str
    description: str
    host: HostInfo
    gpus: tuple[DescribedGpu, ...] = ()
    budgets_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def cpus(self) -> frozenset[int]:
        """The CPUs a process may use there: its allowed list, else the first usable_cpus."""
        allowed = parse_cpu_list(self.host.cpus_allowed) if self.host.cpus_allowed else None
        return allowed or frozenset(range(self.host.usable_cpus))

    def line(self) -> str:
        """'hgx-8xh200: 2 sockets, 224 CPUs, 2 TiB, 8x NVIDIA H200'."""
        from bwprof.units import format_bytes

        parts = [f"{self.host.usable_cpus} CPUs"]
        if self.host.sockets:
            parts.insert(0, f"{self.host.sockets} socket(s)")
        if self.host.memory_total_bytes:
            parts.append(format_bytes(self.host.memory_total_bytes))
        if self.gpus:
            names = sorted({g.properties.name for g in self.gpus})
            parts.append(f"{len(self.gpus)}x {', '.join(names)}")
        return f"{self.name}: " + ", ".join(parts)


_HOST_DEFAULTS: dict[str, object] = {
    "physical_cores": None, "sockets": None, "memory_total_bytes": None,
    "numa_nodes": [], "os": "described", "kernel": "", "python": "",
    "cache_source": "sysfs",
}


def _host(data: object, name: str) -> HostInfo:
    if not isinstance(data, Mapping):
        raise MetaError("host should be an object")
    given = dict(data)
    given.setdefault("hostname", name)
    given.setdefault("usable_cpus", given.get("logical_cpus"))
    for key, value in _HOST_DEFAULTS.items():
        given.setdefault(key, value)
    caches = given.get("caches")
    if "llc_bytes_total" not in given and isinstance(caches, list):
        levels = [CacheLevel.from_dict(c, "host.caches") for c in caches]
        top = max((c.level for c in levels), default=None)
        given["llc_bytes_total"] = (sum(c.size_bytes * c.instances for c in levels
                                        if c.level == top) if top is not None else None)
    total = given.get("memory_total_bytes")
    if "memory_available_bytes" not in given:
        given["memory_available_bytes"] = int(0.9 * total) if isinstance(total, int) else None
    return HostInfo.from_dict(given, "host")


def _gpus(data: object) -> tuple[DescribedGpu, ...]:
    if isinstance(data, Mapping):  # system.json: {"count": ..., "devices": [...]}
        data = data.get("devices", [])
    if not isinstance(data, list):
        raise MetaError("gpus should be a list of devices")
    gpus = []
    for index, entry in enumerate(data):
        where = f"gpus[{index}]"
        if not isinstance(entry, Mapping):
            raise MetaError(f"{where} should be an object")
        properties = DeviceProperties.from_dict({"index": index, **entry.get("properties", {})},
                                                f"{where}.properties")
        metadata = dict(entry.get("metadata") or {})
        for key, meta_key in (("numa_node", "numa_node"), ("cpus", "cpu_affinity"),
                              ("peak_nvlink_gbps", "peak_nvlink_gbps"),
                              ("peak_pcie_gbps", "peak_pcie_gbps"),
                              ("peak_hbm_gbps", "peak_hbm_gbps")):
            if entry.get(key) is not None:
                metadata.setdefault(meta_key, entry[key])
        gpus.append(DescribedGpu(properties, metadata))
    return tuple(gpus)


def load_machine(path: str | Path) -> DescribedMachine:
    """The machine a file describes, or a one-line BwprofError saying what is wrong."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise BwprofError(f"cannot read the machine description {path}: "
                          f"{exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise BwprofError(f"{path} is over {MAX_FILE_BYTES >> 20} MiB: not a machine "
                          "description (a system.json or a shape file)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BwprofError(f"{path} is not JSON: {shorten(str(exc))}") from None
    if not isinstance(data, Mapping) or "host" not in data:
        raise BwprofError(f"{path} describes no machine: it needs a 'host' object (a "
                          "system.json of an earlier run, or a shape file)")
    name = str(data.get("name") or path.stem)
    try:
        host = _host(data["host"], name)
        gpus = _gpus(data.get("gpus", []))
    except MetaError as exc:
        raise BwprofError(f"{path}: {exc}") from None
    budgets = data.get("budgets_s") or {}
    if not isinstance(budgets, Mapping) or not all(
            isinstance(v, (int, float)) for v in budgets.values()):
        raise BwprofError(f"{path}: budgets_s should map presets to seconds")
    return DescribedMachine(name, str(data.get("description", "")), host, gpus,
                            {str(k): float(v) for k, v in budgets.items()})
