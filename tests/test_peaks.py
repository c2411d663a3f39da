"""Theoretical peaks against datasheet figures."""

from __future__ import annotations

import pytest

from bwprof.peaks import hbm_peak_gbps, nvlink_peak_gbps, pcie_lane_gbps, pcie_peak_gbps


@pytest.mark.parametrize(
    ("mhz", "bits", "expected_gbps"),
    [
        (3201, 6144, 4917.0),  # H200 SXM, six full stacks; datasheet 4.8 TB/s
        (3201, 6016, 4814.3),  # the H200 NVML reported in tests/data/h200-quick
        (2619, 5120, 3352.0),  # H100 SXM, datasheet 3.35 TB/s
        (1215, 5120, 1555.0),  # A100 40GB, datasheet 1555 GB/s
    ],
)
def test_hbm_peak_matches_datasheets(mhz: int, bits: int, expected_gbps: float) -> None:
    assert hbm_peak_gbps(mhz, bits) == pytest.approx(expected_gbps, rel=1e-3)


def test_hbm_peak_formula_is_ddr() -> None:
    assert hbm_peak_gbps(1000, 8) == pytest.approx(2.0)  # 2 × 1e9 × 1 byte


@pytest.mark.parametrize(
    ("mhz", "bits"), [(None, 6144), (3201, None), (0, 6144), (3201, 0), (-1, 6144), (3201, -8)]
)
def test_hbm_peak_unknown_is_none(mhz: float | None, bits: int | None) -> None:
    assert hbm_peak_gbps(mhz, bits) is None


@pytest.mark.parametrize(
    ("gen", "lane_gbps"),
    [(1, 0.25), (2, 0.5), (3, 0.9846), (4, 1.9692), (5, 3.9385), (6, 7.5625)],
)
def test_pcie_lane_rates(gen: int, lane_gbps: float) -> None:
    assert pcie_lane_gbps(gen) == pytest.approx(lane_gbps, rel=1e-4)


@pytest.mark.parametrize("gen", [0, 7, -1])
def test_pcie_lane_unknown_generation_raises(gen: int) -> None:
    with pytest.raises(ValueError, match="PCIe generation"):
        pcie_lane_gbps(gen)


@pytest.mark.parametrize(
    ("gen", "width", "expected_gbps"),
    [(5, 16, 63.0), (4, 16, 31.5), (3, 16, 15.75), (5, 8, 31.5), (6, 16, 121.0)],
)
def test_pcie_peak_per_direction(gen: int, width: int, expected_gbps: float) -> None:
    assert pcie_peak_gbps(gen, width) == pytest.approx(expected_gbps, rel=1e-3)


@pytest.mark.parametrize(("gen", "width"), [(None, 16), (5, None), (0, 16), (5, 0), (9, 16)])
def test_pcie_peak_unknown_is_none(gen: int | None, width: int | None) -> None:
    assert pcie_peak_gbps(gen, width) is None


@pytest.mark.parametrize(
    ("version", "links", "expected_gbps"),
    [
        (4, 18, 450.0),  # H100 SXM: 900 GB/s both directions together
        (3, 12, 300.0),  # A100 SXM: 600 GB/s
        (2, 6, 150.0),  # V100 SXM2: 300 GB/s
        (5, 18, 900.0),  # B200: 1.8 TB/s
        (1, 4, 80.0),  # P100
    ],
)
def test_nvlink_peak_per_direction(version: int, links: int, expected_gbps: float) -> None:
    assert nvlink_peak_gbps(version, links) == pytest.approx(expected_gbps)


@pytest.mark.parametrize(("version", "links"), [(None, 18), (4, 0), (9, 18), (0, 4)])
def test_nvlink_peak_unknown_is_none(version: int | None, links: int) -> None:
    assert nvlink_peak_gbps(version, links) is None


def test_ddr_peak_from_channels_transfers_and_width():
    from bwprof.peaks import ddr_peak_gbps

    # Intel Sapphire Rapids, one socket: 8 channels of DDR5-4800 x 64 bit = 307.2 GB/s.
    assert ddr_peak_gbps([4800] * 8, [64] * 8) == pytest.approx(307.2)
    assert ddr_peak_gbps([], []) is None
    assert ddr_peak_gbps([4800, 0], [64, 64]) is None
    assert ddr_peak_gbps([4800], [64, 64]) is None
