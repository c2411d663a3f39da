"""One description per GPU: what CUDA reports, what NVML adds, its NUMA node and its peaks.

CUDA and NVML may number devices differently, so NVML metadata is matched by PCI bus id.
Where NVML is missing, the PCI sysfs entries supply the NUMA node, the local CPUs and the
PCIe link; where both are missing the fields stay None and `% of peak` stays empty.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bwprof.coerce import optional_number
from bwprof.cpulist import format_cpu_list, parse_cpu_list
from bwprof.gpu.backend import DeviceProperties, GpuBackend
from bwprof.pci import (
    PAYLOAD_KEY,
    HostLinkCeiling,
    PciePath,
    host_link_ceiling,
    max_payload_bytes,
    parse_pci_bus_id,
    read_pcie_path,
)
from bwprof.pci import SYS_PCI_DEVICES as SYS_PCI
from bwprof.peaks import hbm_peak_gbps, pcie_peak_gbps
from bwprof.schema.meta import GpuMeta, json_object
from bwprof.schema.text import decoded

_GTS_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}

Metadata = Callable[[DeviceProperties], dict[str, object]]

PCIE_PATH_KEY = "pcie_path"
"""The GPU metadata key (system.json) of its PCIe ports from the root bus down
(`bwprof.pci.PciePath.as_json`): what the host-link ceiling of all GPUs at once comes from."""


@dataclass(frozen=True)
class GpuDevice:
    index: int
    properties: DeviceProperties
    metadata: dict[str, object] = field(default_factory=dict)
    numa_node: int | None = None
    cpus: frozenset[int] | None = None
    peak_hbm_gbps: float | None = None
    peak_pcie_gbps: float | None = None
    peak_nvlink_gbps: float | None = None

    @property
    def name(self) -> str:
        return self.properties.name

    @property
    def label(self) -> str:
        return f"gpu{self.index}"

    @property
    def mig_slice(self) -> bool:
        """A MIG slice of a GPU in MIG mode: its figures are the slice's (its share of the
        memory and SMs), not the whole GPU's."""
        return bool(self.metadata.get("mig_mode"))

    @property
    def cc_mode(self) -> bool:
        """Confidential computing on: host-device copies go through encrypted bounce
        buffers, so a host-link figure is that path's, not the link's."""
        return bool(self.metadata.get("cc_mode"))

    @property
    def peak_c2c_gbps(self) -> float | None:
        """NVLink-C2C's peak one direction (NVML's link count x per-link maximum), where the
        driver gives it."""
        return optional_number(self.metadata.get("peak_c2c_gbps")) if self.host_link_c2c else None

    @property
    def host_link_c2c(self) -> bool:
        """Host memory over NVLink-C2C (Grace Hopper): PCIe's peak and counters do not
        describe its host copies."""
        return bool(self.metadata.get("c2c_enabled"))

    def as_meta(self) -> GpuMeta:
        """The device as system.json records it (its CPUs as a cpulist such as '0-15')."""
        return GpuMeta(
            index=self.index, properties=self.properties, metadata=json_object(self.metadata),
            numa_node=self.numa_node,
            cpus=format_cpu_list(self.cpus) if self.cpus else None,
            peak_hbm_gbps=self.peak_hbm_gbps, peak_pcie_gbps=self.peak_pcie_gbps,
            peak_nvlink_gbps=self.peak_nvlink_gbps,
        )

    def as_dict(self) -> dict[str, object]:
        return self.as_meta().as_dict()


def sysfs_dir(bus_id: str | None, root: Path = SYS_PCI) -> Path | None:
    """The sysfs folder of a PCI device, whichever way its bus id is spelled."""
    if not bus_id:
        return None
    try:
        path = root / parse_pci_bus_id(bus_id).sysfs()
    except ValueError:
        return None
    return path if path.is_dir() else None


def _read(path: Path) -> str | None:
    try:
        return decoded(path.read_bytes()).strip()  # not UTF-8: escaped, never a traceback
    except OSError:
        return None


def sysfs_metadata(bus_id: str | None, root: Path = SYS_PCI) -> dict[str, object]:
    """NUMA node, local CPUs and the PCIe link's maximum, read from the PCI sysfs entry."""
    folder = sysfs_dir(bus_id, root)
    if folder is None:
        return {}
    node_text = _read(folder / "numa_node")
    node = int(node_text) if node_text and node_text.lstrip("-").isdigit() else None
    speed = _read(folder / "max_link_speed") or ""
    match = re.match(r"([\d.]+)\s*GT/s", speed)
    width = _read(folder / "max_link_width")
    return {
        "numa_node": node if node is not None and node >= 0 else None,
        "cpu_affinity": _read(folder / "local_cpulist"),
        "pcie_gen_max": _GTS_TO_GEN.get(float(match.group(1))) if match else None,
        "pcie_width_max": int(width) if width and width.isdigit() else None,
    }


def nvml_metadata(properties: DeviceProperties) -> dict[str, object]:
    """NVML's view of a device, matched by PCI bus id; empty where NVML is unavailable."""
    from bwprof.telemetry import nvml

    if not properties.pci_bus_id or not nvml.available():
        return {}
    handle = nvml.handle_by_pci_bus_id(properties.pci_bus_id)
    return nvml.device_metadata(handle) if handle is not None else {}


def describe(
    backend: GpuBackend, metadata: Metadata | None = None, sysfs_root: Path = SYS_PCI,
    in_vm: bool | None = None,
) -> list[GpuDevice]:
    """Every device the backend sees, with metadata, NUMA placement and theoretical peaks.
    `in_vm` (default: the CPU's hypervisor flag) marks a PCIe tree read here as a VM's."""
    if in_vm is None:
        from bwprof.system import under_hypervisor

        in_vm = under_hypervisor()
    devices = []
    for index in range(backend.device_count()):
        props = backend.properties(index)
        meta = metadata(props) if metadata is not None else {}
        fallback = sysfs_metadata(props.pci_bus_id, sysfs_root)

        def pick(key: str, meta: dict[str, object] = meta,
                 fallback: dict[str, object] = fallback) -> object:
            value = meta.get(key)
            return fallback.get(key) if value is None else value

        hbm = optional_number(meta.get("peak_hbm_gbps")) or hbm_peak_gbps(
            props.memory_clock_khz / 1000 if props.memory_clock_khz else None,
            props.memory_bus_width_bits,
        )
        if meta.get("mig_mode"):
            # CUDA sees the slice (its memory and SMs, as cudaGetDeviceProperties reports
            # them); the whole GPU's HBM peak is not the slice's.
            hbm = None
            meta = {**meta, "mig_slice_multiprocessors": props.multiprocessors,
                    "mig_slice_memory_bytes": props.total_memory_bytes}
        gen, width = pick("pcie_gen_max"), pick("pcie_width_max")
        pcie = optional_number(meta.get("peak_pcie_gbps")) or pcie_peak_gbps(
            gen if isinstance(gen, int) else None, width if isinstance(width, int) else None)
        if meta.get("c2c_enabled"):  # host copies go over NVLink-C2C, not PCIe
            pcie = None
        node = pick("numa_node")
        # The ports above the GPU, read here unless the metadata brings them (a described
        # machine, whose bus ids name nothing on this one): which GPUs share an uplink sets
        # the ceiling of host copies by all at once.
        path = meta.get(PCIE_PATH_KEY)
        if path is None and props.pci_bus_id and backend.name != "described":
            path = read_pcie_path(props.pci_bus_id, sysfs_root, in_vm).as_json()
        if path is not None:
            meta = {**meta, PCIE_PATH_KEY: path}
        devices.append(GpuDevice(
            index=index,
            properties=props,
            # The negotiated max payload size sets how close to its line rate the link can
            # get (the verdicts' PCIe band); None where config space is root's only.
            metadata={**meta, PAYLOAD_KEY: max_payload_bytes(props.pci_bus_id, sysfs_root)},
            numa_node=node if isinstance(node, int) else None,
            cpus=parse_cpu_list(affinity) if isinstance(affinity := pick("cpu_affinity"), str)
            else None,
            peak_hbm_gbps=hbm,
            peak_pcie_gbps=pcie,
            peak_nvlink_gbps=optional_number(meta.get("peak_nvlink_gbps")),
        ))
    return devices


def host_ceiling(devices: Sequence[GpuDevice]) -> HostLinkCeiling:
    """The peak, one direction, of host copies by all of `devices` at once (h2d_all,
    d2h_all, h2d_all_bidir), from the PCIe tree their metadata records: GPUs behind one
    switch uplink share it. None without every GPU's own PCIe peak (NVLink-C2C: the executor
    gives its own peak and says so; none known at all: nothing to say), or, for several
    GPUs, where the tree was not read or is a VM's (the note says why)."""
    if not devices or any(d.host_link_c2c for d in devices):
        return HostLinkCeiling(None)
    unknown = [d.label for d in devices if not d.peak_pcie_gbps]
    if unknown:
        return HostLinkCeiling(None, "" if len(unknown) == len(devices) else
                               f"no % of peak: the PCIe link of {', '.join(unknown)} is unknown")
    return host_link_ceiling([(d.label, d.peak_pcie_gbps or 0.0,
                               PciePath.from_json(d.metadata.get(PCIE_PATH_KEY)))
                              for d in devices])
