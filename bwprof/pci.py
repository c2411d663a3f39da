"""PCI addresses: parsed once, written in the spelling each consumer wants (CUDA, NVML,
sysfs). Shared by the GPU code (peer links, sysfs lookups) and the NVML layer, so neither
imports the other for it. Also the PCIe tree above a GPU (its ports up to the root bus, read
from sysfs) and the ceiling it puts on host copies by several GPUs at once: GPUs behind one
switch uplink share that link, so their own links' sum would overstate what they can move."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

from bwprof.peaks import pcie_peak_gbps
from bwprof.schema.text import decoded

SYS_PCI_DEVICES = Path("/sys/bus/pci/devices")

_PCI_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<device>[0-9a-f]{1,2})"
    r"\.(?P<function>[0-7])$"
)


class PciAddress(NamedTuple):
    """A PCI address, parsed once and written in each consumer's spelling."""

    domain: int
    bus: int
    device: int
    function: int

    def cuda(self) -> str:
        """CUDA's spelling, e.g. '0000:1B:00.0'; bwprof's canonical form."""
        return f"{self.domain:04X}:{self.bus:02X}:{self.device:02X}.{self.function:X}"

    def nvml(self) -> str:
        """NVML's own spelling (8-digit domain), e.g. '00000000:1B:00.0'."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function:X}"

    def sysfs(self) -> str:
        """The directory name under /sys/bus/pci/devices, e.g. '0000:1b:00.0'."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function:x}"


def parse_pci_bus_id(bus_id: str) -> PciAddress:
    """Parse 'DDDD:BB:DD.F' in any case, with a 4- or 8-digit domain or none (domain 0)."""
    match = _PCI_RE.match(bus_id.strip().lower())
    if not match:
        raise ValueError(f"not a PCI bus id: {bus_id!r} (expected e.g. 0000:1B:00.0)")
    return PciAddress(
        int(match["domain"] or "0", 16),
        int(match["bus"], 16),
        int(match["device"], 16),
        int(match["function"], 16),
    )


def same_device(x: str | None, y: str | None) -> bool:
    """Whether two bus ids, spelled any way, name one device (False where either is unknown
    or not a bus id)."""
    if not x or not y:
        return False
    try:
        return parse_pci_bus_id(x) == parse_pci_bus_id(y)
    except ValueError:
        return False


PAYLOAD_KEY = "pcie_max_payload_bytes"
"""The GPU metadata key (system.json) of the negotiated PCIe max payload size, in bytes; None
where config space could not be read."""

PCIE_CAPABILITY_ID = 0x10
"""The PCI Express capability's id in the capability list (PCIe base spec, 7.5.3)."""
_DEVICE_CONTROL = 0x08
"""Offset of the Device Control register inside the PCI Express capability."""


def max_payload_from_config(config: bytes) -> int | None:
    """The negotiated max payload size, in bytes, from a device's PCI config space: the
    PCI Express capability's Device Control bits 7:5 (128 << value). None where the bytes
    stop short of it: without root, sysfs hands out only the 64-byte header, and the
    capability list lives beyond it."""
    if len(config) < 0x40 or not config[0x06] & 0x10:  # Status bit 4: a capability list
        return None
    pointer, seen = config[0x34] & 0xFC, set()
    while pointer and pointer not in seen and pointer + 2 <= len(config):
        seen.add(pointer)
        if config[pointer] == PCIE_CAPABILITY_ID:
            at = pointer + _DEVICE_CONTROL
            if at + 2 > len(config):
                return None
            control = int.from_bytes(config[at:at + 2], "little")
            encoded = (control >> 5) & 0x7
            return 128 << encoded if encoded <= 5 else None  # 6 and 7 are reserved
        pointer = config[pointer + 1] & 0xFC
    return None


def max_payload_bytes(bus_id: str | None, root: Path = SYS_PCI_DEVICES) -> int | None:
    """The max payload size the OS negotiated for the device at `bus_id` (what every TLP
    of its copies carries at most), read from sysfs's `config`; None where unreadable."""
    if not bus_id:
        return None
    try:
        path = root / parse_pci_bus_id(bus_id).sysfs() / "config"
        with open(path, "rb") as handle:
            return max_payload_from_config(handle.read(256))
    except (OSError, ValueError):
        return None


# -- the PCIe tree ------------------------------------------------------------------------------

_ROOT_BUS_RE = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")
"""A root bus's folder under /sys/devices, e.g. 'pci0000:00' (VMD nests 'pci10000:00')."""
_SYSFS_BDF_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_GTS_RE = re.compile(r"([\d.]+)\s*GT/s")
GTS_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
"""sysfs's link speed (GT/s) to the PCIe generation."""

VIRTUAL_BRIDGE_VENDORS = {"0x1b36": "QEMU", "0x15ad": "VMware", "0x1414": "Hyper-V",
                          "0x5853": "Xen", "0x1ab8": "Parallels", "0x80ee": "VirtualBox"}
"""PCI vendor ids of bridges a hypervisor emulates: the links they report are invented."""


def link_generation(speed: str | None) -> int | None:
    """The generation of a sysfs link speed ('32.0 GT/s PCIe', older kernels '8 GT/s');
    None for 'Unknown' or anything else."""
    match = _GTS_RE.match(speed or "")
    return GTS_TO_GEN.get(float(match.group(1))) if match else None


def _width(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and 0 < int(text) <= 32 else None


def _read(path: Path) -> str | None:
    try:
        return decoded(path.read_bytes()).strip()  # not UTF-8: escaped, never a traceback
    except OSError:
        return None


@dataclass(frozen=True)
class PciePort:
    """One device on a GPU's way to its root bus (a root port, a switch's ports, the GPU
    itself) and the link its registers describe: the one below a root or downstream port,
    the one above a switch's upstream port or an endpoint, so every link on the way is read
    from at least one of its ends. `link` is False for a device without link registers (a
    root-complex integrated device such as a VMD controller)."""

    bdf: str
    vendor: str | None = None
    gen_max: int | None = None
    width_max: int | None = None
    gen: int | None = None
    width: int | None = None
    link: bool = True

    @property
    def link_gbps(self) -> float | None:
        """The link's peak one direction from its maximum generation and width (a link
        trained lower reads low against it, as a GPU's own does); None where unknown."""
        return pcie_peak_gbps(self.gen_max, self.width_max) if self.link else None

    def text(self) -> str:
        return f"{self.bdf} (Gen{self.gen_max} x{self.width_max})"

    def as_json(self) -> dict[str, object]:
        return {"bdf": self.bdf, "vendor": self.vendor, "gen_max": self.gen_max,
                "width_max": self.width_max, "gen": self.gen, "width": self.width,
                "link": self.link}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> PciePort:
        def number(key: str) -> int | None:
            value = data.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        vendor = data.get("vendor")
        return cls(str(data["bdf"]), vendor if isinstance(vendor, str) else None,
                   number("gen_max"), number("width_max"), number("gen"), number("width"),
                   data.get("link", True) is not False)


@dataclass(frozen=True)
class PciePath:
    """A GPU's ports from its root bus down to itself (itself last), as sysfs places it;
    `hidden` says why the tree seen is not the host's (a VM), or why none was read."""

    root_bus: str | None
    ports: tuple[PciePort, ...] = ()
    hidden: str = ""

    def as_json(self) -> dict[str, object]:
        """What system.json records in the GPU's metadata (`pcie_path`)."""
        return {"root_bus": self.root_bus, "ports": [p.as_json() for p in self.ports],
                "hidden": self.hidden}

    @classmethod
    def from_json(cls, data: object) -> PciePath | None:
        """The path a system.json or a machine shape records; None where it records none
        or something else."""
        if not isinstance(data, Mapping):
            return None
        ports = data.get("ports")
        if not isinstance(ports, list) or not all(
                isinstance(p, Mapping) and isinstance(p.get("bdf"), str) for p in ports):
            return None
        root = data.get("root_bus")
        return cls(root if isinstance(root, str) else None,
                   tuple(PciePort.from_json(p) for p in ports), str(data.get("hidden") or ""))


def _port(folder: Path) -> PciePort:
    speed_max = _read(folder / "max_link_speed")
    return PciePort(
        folder.name, _read(folder / "vendor"), link_generation(speed_max),
        _width(_read(folder / "max_link_width")), link_generation(_read(folder /
                                                                         "current_link_speed")),
        _width(_read(folder / "current_link_width")), link=speed_max is not None)


def read_pcie_path(bus_id: str | None, root: Path = SYS_PCI_DEVICES,
                   in_vm: bool = False) -> PciePath:
    """The ports from the device's root bus down to it: /sys/bus/pci/devices/<bdf> links
    into /sys/devices/pci<domain>:<bus>/<port>/.../<bdf>, one folder a device on the way.
    `in_vm` (the CPU's hypervisor flag): the tree a guest sees is the hypervisor's."""
    if not bus_id:
        return PciePath(None, (), "no PCI bus id")
    try:
        name = parse_pci_bus_id(bus_id).sysfs()
    except ValueError:
        return PciePath(None, (), f"not a PCI bus id: {bus_id!r}")
    entry = root / name
    if not entry.exists():
        return PciePath(None, (), f"no sysfs entry for {name}")
    parts = Path(os.path.realpath(entry)).parts
    start = next((i for i, part in enumerate(parts) if _ROOT_BUS_RE.match(part)), None)
    if start is None:
        return PciePath(None, (), f"{name} is under no PCI root bus in sysfs")
    ports = tuple(_port(Path(*parts[:i + 1])) for i in range(start + 1, len(parts))
                  if _SYSFS_BDF_RE.match(parts[i]))
    return PciePath(parts[start], ports, _hidden(ports, in_vm))


def _hidden(ports: Sequence[PciePort], in_vm: bool) -> str:
    """Why these ports are not the host's tree, or ''."""
    for port in ports[:-1]:
        if port.vendor in VIRTUAL_BRIDGE_VENDORS:
            return (f"{port.bdf} is a virtual bridge ({VIRTUAL_BRIDGE_VENDORS[port.vendor]}): "
                    "a VM, whose links are the hypervisor's invention")
    if len(ports) < 2:
        return "no PCIe port above it on its root bus: a VM hides the host's tree"
    if in_vm:
        return "a VM (the CPU's hypervisor flag): the tree it shows is the hypervisor's"
    return ""


@dataclass(frozen=True)
class HostLinkCeiling:
    """What GPUs copying to or from host memory at once can move one direction: `gbps`,
    and a note saying how the tree lowered it below their own links' sum, or why there is
    none (`gbps` None)."""

    gbps: float | None
    note: str = ""


NO_PERCENT = "no % of peak"


def link_ends(path: PciePath) -> dict[str, PciePort]:
    """Each port of a path and the port at the other end of its link: a root or downstream
    port describes the link below it, the switch upstream port or endpoint under it the same
    link from above, so the ports with link registers pair off from the top (root port with
    upstream port, downstream port with the GPU). An odd count (a port whose kind cannot be
    placed) pairs nothing: each port then stands for its link alone."""
    linked = [port for port in path.ports if port.link]
    if len(linked) % 2:
        return {}
    ends: dict[str, PciePort] = {}
    for upper, lower in zip(linked[::2], linked[1::2], strict=True):
        ends[upper.bdf], ends[lower.bdf] = lower, upper
    return ends


def host_link_ceiling(leaves: Sequence[tuple[str, float, PciePath | None]]) -> HostLinkCeiling:
    """The ceiling of host copies by every GPU of `leaves` (label, own link's peak, its
    path) at once: over the tree their paths make, each port passes the lesser of its link
    and what its children pass, a GPU its own link; the root buses add up (a max-flow bound
    over a tree: a link shared by two GPUs is counted once). One GPU shares nothing, so a
    hidden tree leaves it its own link; for several, a path not read or hidden (a VM) gives
    no ceiling, with the reason."""
    if not leaves:
        return HostLinkCeiling(None)
    own_sum = sum(own for _, own, _ in leaves)
    if len(leaves) == 1:
        label, own, path = leaves[0]
        ports = path.ports if path is not None and not path.hidden else ()
        narrow = [p for p in ports if p.link_gbps is not None and p.link_gbps < own]
        if not narrow:
            return HostLinkCeiling(own)
        port = min(narrow, key=lambda p: p.link_gbps or 0.0)
        return HostLinkCeiling(port.link_gbps, f"PCIe ceiling of {label} behind {port.text()}")
    for label, _, path in leaves:
        if path is None:
            return HostLinkCeiling(None, f"{NO_PERCENT}: the PCIe tree above {label} was not "
                                         "read, so which GPUs share an uplink is unknown")
        if path.hidden or path.root_bus is None:
            return HostLinkCeiling(None, f"{NO_PERCENT}: which GPUs share an uplink is "
                                         f"unknown ({label}: {path.hidden or 'no root bus'})")
    children: dict[str, list[str]] = {}
    port_of: dict[str, PciePort] = {}
    other_end: dict[str, PciePort] = {}
    for _, _, path in leaves:
        assert path is not None
        other_end.update(link_ends(path))
    gpu_of = {f"gpu:{label}": gbps for label, gbps, _ in leaves}
    roots: list[str] = []
    for label, _, path in leaves:
        assert path is not None and path.root_bus is not None
        chain = [f"root:{path.root_bus}", *(p.bdf for p in path.ports), f"gpu:{label}"]
        port_of.update((p.bdf, p) for p in path.ports)
        if chain[0] not in roots:
            roots.append(chain[0])
        for parent, child in pairwise(chain):
            kids = children.setdefault(parent, [])
            if child not in kids:
                kids.append(child)

    def under(node: str) -> list[str]:
        if node in gpu_of:
            return [node[4:]]
        return [label for child in children.get(node, []) for label in under(child)]

    binding: list[str] = []
    unknown: list[str] = []

    def cap(node: str) -> float:
        if node in gpu_of:
            return gpu_of[node]
        passed = sum(cap(child) for child in children.get(node, []))
        port = port_of.get(node)
        if port is None:  # a root bus: its ports add up
            return passed
        end = port  # the end of the port's link whose figure is read
        if port.link_gbps is None and node in other_end:  # a port reading "Unknown"
            end = other_end[node]
        link = end.link_gbps
        if link is None:
            if port.link and len(under(node)) > 1:
                unknown.append(f"{port.bdf} above {', '.join(under(node))}")
            return passed
        if link < passed * (1 - 1e-9):
            binding.append(f"{' + '.join(under(node))} share {end.text()}, "
                           f"{link:.1f} GB/s" if len(under(node)) > 1 else
                           f"{under(node)[0]} behind {end.text()}, {link:.1f} GB/s")
        return min(link, passed)

    total = sum(cap(root) for root in roots)
    if unknown:
        return HostLinkCeiling(None, f"{NO_PERCENT}: the link of a port shared by several "
                                     f"GPUs is unreadable at both ends "
                                     f"({'; '.join(unknown)})")
    if not binding:
        return HostLinkCeiling(total)
    return HostLinkCeiling(total, f"PCIe ceiling {total:.1f} GB/s from the tree, not the "
                                  f"{own_sum:.1f} of {len(leaves)} GPU links: "
                                  + "; ".join(binding))
