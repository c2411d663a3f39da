"""PCI addresses: parsed once, written in the spelling each consumer wants (CUDA, NVML,
sysfs). Shared by the GPU code (peer links, sysfs lookups) and the NVML layer, so neither
imports the other for it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

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
