"""SMBIOS memory devices from hand-built type-17 structures, and the DDR peak from them."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from bwprof.host.smbios import (
    MemoryDevice,
    channel_key,
    ddr_peak,
    parse_memory_device,
    read_memory_devices,
)


def type17(locator: str, bank: str, size_mib: int = 32768, *, memory_type: int = 0x22,
           width: int = 64, speed: int = 5600, configured: int = 4800,
           extended_speed: int = 0, extended_rated: int = 0, size_kib: int = 0) -> bytes:
    """A Memory Device structure as SMBIOS 3.3 lays it out: formatted area, then strings."""
    raw = bytearray(0x5C)
    raw[0], raw[1] = 17, len(raw)
    struct.pack_into("<HH", raw, 0x08, width + 8, width)  # total width (ECC), data width
    if size_kib:
        struct.pack_into("<H", raw, 0x0C, 0x8000 | size_kib)  # bit 15: the size is in KiB
    elif size_mib >= 0x7FFF:
        struct.pack_into("<H", raw, 0x0C, 0x7FFF)
        struct.pack_into("<I", raw, 0x1C, size_mib)
    else:
        struct.pack_into("<H", raw, 0x0C, size_mib)
    raw[0x10], raw[0x11], raw[0x12] = 1, 2, memory_type
    struct.pack_into("<H", raw, 0x15, speed)
    struct.pack_into("<H", raw, 0x20, configured)
    struct.pack_into("<I", raw, 0x54, extended_rated)
    struct.pack_into("<I", raw, 0x58, extended_speed)
    return bytes(raw) + locator.encode() + b"\0" + bank.encode() + b"\0\0"


def test_a_memory_device_reads_as_smbios_lays_it_out():
    device = parse_memory_device(type17("P1-DIMMA1", "P0_Node0_Channel0_Dimm0"))
    assert device == MemoryDevice("P1-DIMMA1", "P0_Node0_Channel0_Dimm0", 32 << 30, "DDR5",
                                  0x22, 64, 5600, 4800)
    big = parse_memory_device(type17("A1", "", size_mib=128 * 1024))  # extended size field
    assert big.size_bytes == 128 << 30
    empty = parse_memory_device(type17("A2", "", size_mib=0, speed=0, configured=0))
    assert not empty.populated and empty.speed_mts is None
    fast = parse_memory_device(type17("A3", "", configured=0xFFFF, extended_speed=8800))
    assert fast.configured_speed_mts == 8800
    rated = parse_memory_device(type17("A4", "", speed=0xFFFF, extended_rated=9600))
    assert rated.speed_mts == 9600
    assert parse_memory_device(type17("A5", "", size_kib=512)).size_bytes == 512 << 10
    assert parse_memory_device(b"\x10" + bytes(40)) is None  # another structure type
    with pytest.raises(ValueError, match="length is 15 B"):
        parse_memory_device(b"\x11\x0f" + bytes(40))  # too short for its own fields


def test_reading_the_entries_or_saying_why_not(tmp_path, monkeypatch):
    assert read_memory_devices(tmp_path / "absent")[1].startswith("no SMBIOS tables")
    for n, raw in enumerate([type17("DIMM 0", "P0 CHANNEL A"), type17("DIMM 0", "P0 CHANNEL B")]):
        (tmp_path / f"17-{n}").mkdir()
        (tmp_path / f"17-{n}" / "raw").write_bytes(raw)
    (tmp_path / "16-0").mkdir()  # another structure type: not read
    devices, why = read_memory_devices(tmp_path)
    assert why is None and [d.bank_locator for d in devices] == ["P0 CHANNEL A", "P0 CHANNEL B"]
    (tmp_path / "17-2").mkdir()  # a malformed entry: no peak rather than one module short
    (tmp_path / "17-2" / "raw").write_bytes(b"\x11\x0f" + bytes(40))
    assert read_memory_devices(tmp_path) == (
        [], "SMBIOS memory device 17-2 is malformed: its length is 15 B in a 42 B entry "
            "(at least 19 B)")

    def refused(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", refused)
    assert read_memory_devices(tmp_path) == ([], "SMBIOS memory devices are readable by root only")


def _devices(*pairs, **fields):
    return [parse_memory_device(type17(locator, bank, **fields)) for locator, bank in pairs]


def test_the_ddr_peak_counts_every_populated_module_on_its_own_channel():
    # One socket of AMD Genoa: 12 channels of DDR5-4800, 460.8 GB/s by the datasheet.
    modules = _devices(*(("DIMM 0", f"P0 CHANNEL {c}") for c in "ABCDEFGHIJKL"))
    modules += _devices(("DIMM 1", "P0 CHANNEL A"), size_mib=0)  # an empty second slot
    modules += _devices(("CACHE", ""), size_mib=1, memory_type=0x06)  # firmware listing a cache
    peak, how = ddr_peak(modules)
    assert peak == pytest.approx(460.8)
    assert how.startswith("SMBIOS: 12 modules (DDR5 at 4800 MT/s x 64 bit), one per channel")


def test_no_peak_where_modules_may_share_a_channel_or_say_too_little():
    two_per_channel = _devices(("P1-DIMMA1", "P0_Node0_Channel0_Dimm0"),
                               ("P1-DIMMA2", "P0_Node0_Channel0_Dimm1"))
    peak, why = ddr_peak(two_per_channel)
    assert peak is None and "may share channels" in why
    assert channel_key(two_per_channel[0]) == channel_key(two_per_channel[1])
    assert ddr_peak(_devices(("A1", ""), speed=0, configured=0)) == (
        None, "SMBIOS gives no speed or width for some memory modules")
    assert ddr_peak([]) == (None, "SMBIOS lists no populated DDR memory module")
    # A populated module of a type neither DDR nor known otherwise may be a DIMM.
    unknown = _devices(("A1", "")) + _devices(("A2", ""), memory_type=0x02)
    assert ddr_peak(unknown) == (None, "SMBIOS gives memory modules of a type bwprof cannot "
                                       "place (type 0x02)")
