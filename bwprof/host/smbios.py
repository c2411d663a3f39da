"""The host's memory modules from SMBIOS (type 17, "Memory Device"), for the DDR peak.

Linux exposes each SMBIOS structure as /sys/firmware/dmi/entries/17-N/raw, readable by root
only; virtual machines often have none. Every field degrades to None, and the caller is told
in one line why nothing could be read, so a DDR row without a peak says why.
"""

from __future__ import annotations

import re
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

DMI_ENTRIES = Path("/sys/firmware/dmi/entries")
MEMORY_DEVICE = 17

# SMBIOS 3.x "Memory Type" (offset 0x12) names for the DDR generations a server may hold.
MEMORY_TYPES = {0x12: "DDR", 0x13: "DDR2", 0x18: "DDR3", 0x1A: "DDR4", 0x1B: "LPDDR",
                0x1C: "LPDDR2", 0x1D: "LPDDR3", 0x1E: "LPDDR4", 0x22: "DDR5", 0x23: "LPDDR5"}
# Types that are known not to be DDR channels: SRAM (caches), ROM and flash, logical
# non-volatile devices, on-package HBM. Any other type is unknown, and so is the peak.
NOT_DDR_TYPES = {0x06: "SRAM", 0x08: "ROM", 0x09: "Flash", 0x0A: "EEPROM", 0x0B: "FEPROM",
                 0x0C: "EPROM", 0x1F: "logical non-volatile", 0x20: "HBM", 0x21: "HBM2",
                 0x24: "HBM3"}
MIN_LENGTH = 0x13
"""A type-17 structure holds at least the fields up to Memory Type (SMBIOS 2.1)."""


@dataclass(frozen=True)
class MemoryDevice:
    """One memory slot: its labels, and for a populated one its size, speed and width."""

    locator: str
    bank_locator: str
    size_bytes: int | None
    """None when SMBIOS says unknown; 0 for an empty slot."""
    memory_type: str | None
    """A DDR generation's name; None for any other type (`type_code` says which)."""
    type_code: int
    data_width_bits: int | None
    speed_mts: int | None
    """The module's rated speed, MT/s."""
    configured_speed_mts: int | None
    """The speed the platform runs it at, MT/s: what the peak uses."""

    @property
    def populated(self) -> bool:
        return bool(self.size_bytes)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _word(raw: bytes, offset: int) -> int | None:
    return struct.unpack_from("<H", raw, offset)[0] if len(raw) >= offset + 2 else None


def _dword(raw: bytes, offset: int) -> int | None:
    return struct.unpack_from("<I", raw, offset)[0] if len(raw) >= offset + 4 else None


def _strings(raw: bytes, length: int) -> list[str]:
    """The structure's text strings, numbered from 1 after its formatted area."""
    return [s.decode("ascii", "replace").strip() for s in raw[length:].split(b"\0")]


def _text(strings: list[str], index: int | None) -> str:
    return strings[index - 1] if index and index <= len(strings) else ""


def _size_bytes(raw: bytes) -> int | None:
    size = _word(raw, 0x0C)
    if size is None or size == 0xFFFF:
        return None
    if size == 0x7FFF:  # the size is in the Extended Size field, in MiB
        extended = _dword(raw, 0x1C)
        return None if extended is None else (extended & 0x7FFFFFFF) << 20
    unit = 1 << 10 if size & 0x8000 else 1 << 20  # bit 15: KiB rather than MiB
    return (size & 0x7FFF) * unit


def _speed(raw: bytes, offset: int, extended_offset: int) -> int | None:
    """MT/s; 0xFFFF points to the 32-bit extended field (SMBIOS 3.3), 0 means unknown."""
    speed = _word(raw, offset)
    if speed == 0xFFFF:
        speed = _dword(raw, extended_offset)
        speed = None if speed is None else speed & 0x7FFFFFFF
    return speed or None


def parse_memory_device(raw: bytes) -> MemoryDevice | None:
    """One type-17 structure as the kernel exposes it (header, formatted area, strings); None
    for another type. Raises ValueError for a structure too short to hold its fields."""
    if len(raw) < 2 or raw[0] != MEMORY_DEVICE:
        return None
    length = raw[1]
    if length < MIN_LENGTH or len(raw) < length:
        raise ValueError(f"its length is {length} B in a {len(raw)} B entry "
                         f"(at least {MIN_LENGTH} B)")
    formatted, strings = raw[:length], _strings(raw, length)
    width = _word(formatted, 0x0A)
    return MemoryDevice(
        locator=_text(strings, formatted[0x10]),
        bank_locator=_text(strings, formatted[0x11]),
        size_bytes=_size_bytes(formatted),
        memory_type=MEMORY_TYPES.get(formatted[0x12]),
        type_code=formatted[0x12],
        data_width_bits=None if width in (None, 0, 0xFFFF) else width,
        speed_mts=_speed(formatted, 0x15, 0x54),
        configured_speed_mts=_speed(formatted, 0x20, 0x58),
    )


def read_memory_devices(entries: Path = DMI_ENTRIES) -> tuple[list[MemoryDevice], str | None]:
    """Every memory slot SMBIOS lists, and None; or no slots and why they could not be read."""
    if not entries.is_dir():
        return [], "no SMBIOS tables exposed (/sys/firmware/dmi/entries; usual in a VM)"
    folders = sorted(entries.glob(f"{MEMORY_DEVICE}-*"),
                     key=lambda p: int(p.name.split("-")[1]))
    if not folders:
        return [], "SMBIOS lists no memory devices (type 17)"
    devices = []
    for folder in folders:
        try:
            raw = (folder / "raw").read_bytes()
        except PermissionError:
            return [], "SMBIOS memory devices are readable by root only"
        except OSError as exc:
            return [], f"SMBIOS memory devices unreadable ({exc.strerror or exc})"
        try:
            device = parse_memory_device(raw)
        except ValueError as exc:  # a module left out would understate the peak
            return [], f"SMBIOS memory device {folder.name} is malformed: {exc}"
        if device is not None:
            devices.append(device)
    return devices, None


def channel_key(device: MemoryDevice) -> tuple[str, str]:
    """What names a slot's channel: its labels without the slot number at their end.

    Slots of one channel differ only in that number on every vendor layout seen ('DIMM_A1' /
    'DIMM_A2'; bank 'P0 CHANNEL A' with 'DIMM 0' / 'DIMM 1'), so two populated slots with the
    same key may share a channel's bandwidth."""
    def strip(text: str) -> str:
        return re.sub(r"\d+\s*$", "", text.strip()).strip()

    return strip(device.bank_locator), strip(device.locator)


def ddr_peak(devices: list[MemoryDevice]) -> tuple[float | None, str]:
    """The host's DDR peak in GB/s from its populated modules, with how it was derived; None
    and why where SMBIOS cannot say. Each module is taken to have a channel to itself (servers
    run one module per channel for full speed); where the labels suggest two modules share a
    channel the peak is left unknown, since counting them twice would halve `% of peak`."""
    from bwprof.peaks import ddr_peak_gbps

    # Only DDR modules: some firmware lists caches or non-volatile modules as devices too.
    # A module of a type not known either way may be a DIMM: leaving it out would understate
    # the peak, and a figure above it would read as a measurement error.
    populated = [d for d in devices if d.populated and d.type_code not in NOT_DDR_TYPES]
    unknown = sorted({d.type_code for d in populated if d.memory_type is None})
    if unknown:
        return None, ("SMBIOS gives memory modules of a type bwprof cannot place (type "
                      + ", ".join(f"0x{code:02X}" for code in unknown) + ")")
    if not populated:
        return None, "SMBIOS lists no populated DDR memory module"
    if any(d.data_width_bits is None or not (d.configured_speed_mts or d.speed_mts)
           for d in populated):
        return None, "SMBIOS gives no speed or width for some memory modules"
    keys = [channel_key(d) for d in populated]
    if len(set(keys)) < len(keys):
        return None, (f"{len(keys)} memory modules but only {len(set(keys))} distinct slot "
                      "names: modules may share channels, so the channel count is unknown")
    speeds = [d.configured_speed_mts or d.speed_mts or 0 for d in populated]
    widths = [d.data_width_bits or 0 for d in populated]  # both known: checked above
    peak = ddr_peak_gbps(speeds, widths)
    kinds = ", ".join(sorted({f"{d.memory_type or 'memory'} at "
                              f"{d.configured_speed_mts or d.speed_mts} MT/s x "
                              f"{d.data_width_bits} bit" for d in populated}))
    return peak, (f"SMBIOS: {len(populated)} modules ({kinds}), one per channel: "
                  "modules x transfers/s x width")
