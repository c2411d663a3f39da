"""The bands' arithmetic and the PCIe max payload size read from config space."""

from __future__ import annotations

import pytest

from bwprof.analysis import bands
from bwprof.pci import max_payload_bytes, max_payload_from_config


def config_with_payload(encoded: int, length: int = 256) -> bytes:
    """A config space whose capability list holds a power-management capability, then the
    PCI Express one with Device Control's max payload field set to `encoded`."""
    data = bytearray(length)
    data[0x06] = 0x10  # Status: a capability list
    data[0x34] = 0x60
    data[0x60:0x62] = bytes([0x01, 0x68])  # power management, next at 0x68
    data[0x68:0x6A] = bytes([0x10, 0x00])  # PCI Express, last
    data[0x68 + 8:0x68 + 10] = (encoded << 5).to_bytes(2, "little")
    return bytes(data)


@pytest.mark.parametrize(("encoded", "payload"), [(0, 128), (1, 256), (2, 512), (5, 4096)])
def test_the_max_payload_size_comes_from_device_control(encoded, payload):
    assert max_payload_from_config(config_with_payload(encoded)) == payload


def test_a_config_space_cut_at_the_header_has_no_payload(tmp_path):
    assert max_payload_from_config(config_with_payload(1)[:64]) is None  # not root
    assert max_payload_from_config(config_with_payload(7)) is None  # reserved
    folder = tmp_path / "0000:1b:00.0"
    folder.mkdir()
    (folder / "config").write_bytes(config_with_payload(1))
    assert max_payload_bytes("0000:1B:00.0", tmp_path) == 256
    assert max_payload_bytes("0000:1c:00.0", tmp_path) is None
    assert max_payload_bytes(None, tmp_path) is None


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200-NVL"), ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA GH200 144G HBM3e", "GH200-144GB"), ("NVIDIA H100 80GB HBM3", "H100-SXM"),
    ("NVIDIA H100 PCIe", "H100-PCIe"), ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM-40GB"), ("NVIDIA A100 80GB PCIe", "A100-PCIe-80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100-PCIe-40GB"), ("NVIDIA B200", "B200"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA RTX 4090", None),
])
def test_each_model_finds_its_part(name, key):
    part = bands.find_part(name)
    assert (part.key if part else None) == key


def test_pcie_is_held_against_the_parts_maximum_not_the_trained_link():
    part = bands.find_part("NVIDIA H100 80GB HBM3")
    link = bands.pcie_link(part, {"pcie_gen_max": 4, "pcie_width_max": 8,
                                  "pcie_max_payload_bytes": 512})
    assert link is not None and (link.generation, link.width) == (5, 16)
    band = bands.pcie_band("h2d", link)
    assert band.expected == pytest.approx(16 * 32 * 128 / 130 / 8 * 512 / 536 * 0.97)
    assert band.verdict(band.expected * 0.5) == "FAIL"  # what a Gen4 link would move


def test_links_down_fail_and_one_gpu_alone_needs_none():
    h200 = bands.find_part("NVIDIA H200")
    assert bands.nvlink_fault(h200, 17, 8) is not None
    assert bands.nvlink_fault(h200, 0, 8) is not None  # SXM: the baseboard's links
    assert bands.nvlink_fault(h200, 18, 8) is None
    assert bands.nvlink_fault(h200, 0, 1) is None
    h100_pcie = bands.find_part("NVIDIA H100 PCIe")
    assert bands.nvlink_fault(h100_pcie, 0, 2) is None  # no bridge fitted: PCIe peers
    assert bands.nvlink_fault(h100_pcie, 4, 2) is not None  # a bridge half seated
    band = bands.nvlink_band(h200)
    assert band is not None and band.reference == 18 * 25.0
