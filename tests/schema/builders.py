"""Metadata for tests: a whole `RunMeta` (or a host, a GPU) with only what a test is about
given, the rest plain and valid, since the model requires what every bwprof run records."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bwprof.schema.meta import DeviceProperties, GpuMeta, GpusMeta, HostInfo, RunMeta
from bwprof.schema.rows import SCHEMA_VERSION

HOST = HostInfo(
    hostname="vm", cpu_model="CPU, with comma", logical_cpus=2, usable_cpus=2,
    physical_cores=2, sockets=1, caches=(), llc_bytes_total=None, memory_total_bytes=None,
    memory_available_bytes=None, numa_nodes=(), os="Linux", kernel="6.18", python="3.11.7",
)


def host(**fields: Any) -> HostInfo:
    return replace(HOST, **fields)


def gpu(index: int = 0, *, name: str = "NVIDIA H200", total_memory_bytes: int = 141 << 30,
        **fields: Any) -> GpuMeta:
    """One GPU; `fields` are GpuMeta's (metadata=, peak_hbm_gbps= ...)."""
    properties = DeviceProperties(
        index=index, name=name, pci_bus_id=f"0000:{index + 0x1b:02x}:00.0",
        total_memory_bytes=total_memory_bytes, l2_bytes=60 << 20, multiprocessors=132,
        compute_capability=(9, 0), async_engines=3, memory_bus_width_bits=None,
        memory_clock_khz=None)
    return GpuMeta(index=index, properties=properties, **fields)


def gpus(*devices: GpuMeta, **fields: Any) -> GpusMeta:
    return GpusMeta(count=len(devices), reason=None, devices=devices, **fields)


FINISHED = "2026-01-01T00:00:00+00:00"


def meta(**fields: Any) -> RunMeta:
    """A finished run's metadata: this version's schema, `fields` on top (host=, gpus=, ...;
    finished_utc=None for a run never finalised)."""
    return RunMeta(schema_version=SCHEMA_VERSION, **{"finished_utc": FINISHED, **fields})
