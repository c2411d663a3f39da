"""Theoretical bandwidth peaks, so every measured figure can be shown as a share of what the
hardware could do at best.

Pure arithmetic on numbers that NVML (or a datasheet) reports; no GPU library is imported here.
GB/s means 10^9 bytes per second, per direction for links.
"""

from __future__ import annotations

# Usable GB/s per lane per direction after line encoding. Gen1/2 use 8b/10b, Gen3-5 128b/130b;
# Gen6 signals PAM4 at 64 GT/s and carries 242 data bytes in every 256-byte FLIT.
_PCIE_LANE_GBPS: dict[int, float] = {
    1: 2.5 * 8 / 10 / 8,
    2: 5.0 * 8 / 10 / 8,
    3: 8.0 * 128 / 130 / 8,
    4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8,
    6: 64.0 / 8 * 242 / 256,
}

# Per link, per direction. NVLink 3 halved the lanes per link but doubled their rate, and
# NVLink 4 kept that rate with more links, so 2-4 share one figure (V100 6, A100 12, H100 18
# links); NVLink 5 doubled it (B200: 18 links, 1.8 TB/s both directions together).
_NVLINK_LINK_GBPS: dict[int, float] = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}


def hbm_peak_gbps(max_memory_clock_mhz: float | None, bus_width_bits: int | None) -> float | None:
    """Device-memory peak: data moves on both clock edges, bus width bits at a time.

    Right for HBM, whose NVML clock is the real memory clock; GDDR boards report clocks that
    this formula does not model exactly, so treat their figure as approximate. None when either
    input is missing, since a made-up peak would mislead more than none.
    """
    if not max_memory_clock_mhz or not bus_width_bits:
        return None
    if max_memory_clock_mhz <= 0 or bus_width_bits <= 0:
        return None
    return 2 * max_memory_clock_mhz * 1e6 * bus_width_bits / 8 / 1e9


def pcie_lane_gbps(generation: int) -> float:
    """Usable GB/s of one PCIe lane in one direction, after line-encoding overhead.

    Raises ValueError for a generation this table does not know, so a new one is added on
    purpose rather than guessed.
    """
    try:
        return _PCIE_LANE_GBPS[generation]
    except KeyError:
        raise ValueError(f"unknown PCIe generation {generation!r}") from None


def pcie_peak_gbps(generation: int | None, width: int | None) -> float | None:
    """PCIe peak per direction: lanes × lane rate. None when the link is unknown.

    Protocol overhead (TLP headers, flow control) is not subtracted, so real copies reach
    about 85-90 % of this.
    """
    if not generation or not width or width <= 0 or generation not in _PCIE_LANE_GBPS:
        return None
    return width * pcie_lane_gbps(generation)


def ddr_peak_gbps(transfers_mts: list[int], data_widths_bits: list[int]) -> float | None:
    """Host DDR peak: every channel moves its data width once per transfer (DDR5's two
    32-bit sub-channels together make one 64-bit module); summed over the channels given."""
    if not transfers_mts or len(transfers_mts) != len(data_widths_bits):
        return None
    if any(t <= 0 for t in transfers_mts) or any(w <= 0 for w in data_widths_bits):
        return None
    return sum(t * 1e6 * w / 8 for t, w in zip(transfers_mts, data_widths_bits,
                                                strict=True)) / 1e9


def nvlink_peak_gbps(version: int | None, links: int) -> float | None:
    """NVLink peak per direction summed over the active links; None when unknown or no link."""
    if version is None or links is None or links <= 0:
        return None
    rate = _NVLINK_LINK_GBPS.get(version)
    return None if rate is None else rate * links


INVALID_ABOVE_PEAK = 1.05
"""A GPU figure above 1.05x its theoretical peak is marked invalid: a measurement error, not
noise (cache-resident sizes excepted)."""
FINDING_ABOVE_PEAK = 1.0
"""Any figure above its theoretical peak gets a finding, so a near miss is seen too."""


# -- compute ceilings -------------------------------------------------------------------------

# Dense FLOP per clock per SM (an FMA counts 2), by compute capability major.minor and the unit a
# dtype's multiply runs on. Sources: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020),
# table 1 (A100: 108 SMs; FP64 9.7 / FP64 tensor 19.5 / FP32 19.5 / TF32 156 / FP16 and BF16
# 312 TFLOP/s dense at 1410 MHz); NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022),
# table 2 (H100 SXM5: 132 SMs; FP64 67 (CUDA cores 128 FLOP/clk/SM, tensor 256), FP32 67,
# TF32 495, FP16/BF16 989 dense), whose tensor figures divide out at 1830 MHz and CUDA-core
# figures at 1980 MHz. H200 is the same GH100 die (sm_90, 132 SMs) with HBM3e: the datasheet's
# dense figures are H100 SXM's (fp64 tensor 67, tf32 495, bf16/fp16 989). Keys: "fp64"
# (CUDA-core FMA), "fp64_tensor" (DMMA, what cuBLAS uses for DGEMM from sm_80), "fp32"
# (CUDA-core FMA, what SGEMM uses without TF32), "tf32", "fp16", "bf16" (tensor cores).
_FLOP_PER_CLOCK_PER_SM: dict[tuple[int, int], dict[str, int]] = {
    (8, 0): {"fp64": 64, "fp64_tensor": 128, "fp32": 128, "tf32": 1024, "fp16": 2048,
             "bf16": 2048},
    (9, 0): {"fp64": 128, "fp64_tensor": 256, "fp32": 256, "tf32": 2048, "fp16": 4096,
             "bf16": 4096},
}
# Sources: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), table 1; NVIDIA H100
# Tensor Core GPU Architecture whitepaper (2022), table 2; H200 datasheet (dense, without
# sparsity).

GEMM_UNIT: dict[str, str] = {"fp64": "fp64_tensor", "fp32": "fp32", "tf32": "tf32",
                             "fp16": "fp16", "bf16": "bf16"}
"""The unit cuBLAS runs a square GEMM of each dtype on from sm_80 (DGEMM on the DMMA tensor
cores; SGEMM on CUDA cores unless TF32 is allowed)."""


def flop_per_clock_per_sm(compute_capability: tuple[int, int] | None, unit: str) -> int | None:
    """Dense FLOP per clock per SM of `unit` on that architecture; None where not tabled."""
    if compute_capability is None:
        return None
    return _FLOP_PER_CLOCK_PER_SM.get(tuple(compute_capability), {}).get(unit)  # type: ignore[arg-type]


def compute_peak_tflops(compute_capability: tuple[int, int] | None, multiprocessors: int | None,
                        sm_clock_mhz: float | None, unit: str) -> float | None:
    """SM count x clock x dense FLOP per clock per SM, in TFLOP/s; None where any is unknown.

    With the part's maximum SM clock (NVML) this is an upper bound: the whitepapers' tensor
    figures assume a lower sustained clock (H100 SXM: 1830 of 1980 MHz), so a healthy tensor
    GEMM reads about 8% further below this peak than below the datasheet's."""
    per_sm = flop_per_clock_per_sm(compute_capability, unit)
    if not per_sm or not multiprocessors or not sm_clock_mhz or sm_clock_mhz <= 0:
        return None
    return multiprocessors * sm_clock_mhz * 1e6 * per_sm / 1e12
