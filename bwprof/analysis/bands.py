"""Achievable bands: per path and GPU model, what a healthy part reaches, with its source.

A band has the part's *reference* figure (the theoretical peak of the full part, never of
what this box trained or brought up), the *expected* figure a healthy part reaches (a
datasheet peak times a published achievable share), and two thresholds in the figure's
unit: at or above `warn` PASS, at or above `fail` WARN, below FAIL (latency: the other way
round). By default `warn` is WARN_SHARE and `fail` FAIL_SHARE of the expected figure; a spec
file (`bwprof.analysis.spec`) moves any of them per GPU model.

A peak never shrinks with a fault: PCIe is held against the part's maximum generation and
width (a link trained at Gen4 on a Gen5 part gets the Gen5 band, so it fails), NVLink
against the part's full link count (links down fail; the peak is not recomputed from the
links that are up). Pure arithmetic and tables: no file, no GPU. So each band is worked
out once per part (and link) and shared: the functions below are cached, and a fleet of
ten thousand GPUs of one model looks its bands up rather than making them again per GPU
(issue 36). A Band is frozen: sharing one is safe.

Sources are named beside each figure. "assumed" marks a share no published figure in
DESIGN.md's table or the issue reports cited backs for that model: a spec should pin it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from bwprof.casespec import judged_paths, path_of
from bwprof.peaks import nvlink_peak_gbps, pcie_peak_gbps

PATHS: tuple[str, ...] = judged_paths()
"""The paths a verdict judges (`bwprof.casespec.PATHS`), in the order the tables show them."""

PATH_LABELS: dict[str, str] = {key: path_of(key).short for key in PATHS}

WARN_SHARE = 0.95
"""Default: a figure within 5 % of the expected one passes."""
FAIL_SHARE = 0.85
"""Default: a figure more than 15 % short of the expected one fails (between: WARN)."""

# -- PCIe ---------------------------------------------------------------------------------

DEFAULT_PAYLOAD_BYTES = 256
"""Assumed where config space could not be read (it needs root). 256 B is what x86 servers
negotiate for GPUs, and what the stored H200 run suggests: its PCIe counters read 1.07x the
bytes copied, about 18 B of overhead per 256 B TLP."""
TLP_OVERHEAD_BYTES = 24
"""Per TLP on Gen3-5: 4 B framing token with sequence number, 16 B header (64-bit
addresses), 4 B LCRC (PCIe base spec; the 128b/130b line code is in the lane rate)."""
DLLP_SHARE = 0.97
"""What ACK and flow-control DLLPs leave of the link: about 3 %. With 256 B payloads this
gives 0.887 of the line rate, 55.9 GB/s on Gen5 x16, beside 56-57 GB/s pinned one way in
cuda-samples and nvbandwidth issue reports (DESIGN.md) and 55.5 in the stored H200 run."""
BIDIR_SHARE = 0.80
"""Both directions at once, of twice the line rate: about 101 GB/s of 126 on Gen5 x16
(cuda-samples and nvbandwidth issue reports, DESIGN.md; the stored H200 run: 101.7). Read
requests and completions of one direction ride the other, so it is less than 2x one way."""
PCIE_P2P_SHARE = 0.83
"""GPU to GPU over PCIe, of one direction's line rate: 26.3 of 31.5 GB/s on Gen4 x16
(NVIDIA/nvbandwidth#50, device_to_device_memcpy_read_ce without NVLink)."""


def pcie_efficiency(payload_bytes: int) -> float:
    """The share of a PCIe link's line rate a bulk copy can reach with this payload size."""
    return payload_bytes / (payload_bytes + TLP_OVERHEAD_BYTES) * DLLP_SHARE


# -- NVLink and C2C -----------------------------------------------------------------------

NVLINK_SHARE = 0.84
"""A GPU pair's one-way copy over NVLink, of the links' peak: 376-380 GB/s of 450 on HGX
H100 (NVIDIA/nccl#1264, p2pBandwidthLatencyTest and nvbandwidth)."""
C2C_H2D_SHARE = 0.77
"""Host to GH200 over NVLink-C2C, of 450 GB/s a direction: 346 GB/s with copy engines
(NVIDIA/nvbandwidth#23, host_to_device_memcpy_ce, GH200 96 GB)."""
C2C_D2H_SHARE = 0.67
"""GH200 to host: about 15 % below host to device in the same report (NVIDIA/nvbandwidth#23)."""

# -- device memory and the host -----------------------------------------------------------

OVERLAP_EXPECTED = 0.95
"""Overlap efficiency (1.0: copies and kernels run fully side by side) a healthy GPU
reaches in every overlap case: 0.998 one way, 0.95 both ways (the stored H200 run)."""
DDR_SHARE = 0.75
"""STREAM Triad of a server's DDR, of its channels' peak: assumed (McCalpin STREAM results on
two-socket servers spread over 70-80 %); a spec should pin it per platform."""
ASSUMED_TRIAD_SHARE = 0.87
"""HBM Triad where no published result for the model is in DESIGN.md: assumed, about what
H100 SXM (0.89) and H200 (0.86) reach in Azure's BabelStream results."""
ASSUMED_COPY_SHARE = 0.85
"""HBM Copy likewise: H100 SXM 0.87, H200 0.84 (Azure's BabelStream results)."""

AZURE = "Azure AI-benchmarking-guide BabelStream"


@dataclass(frozen=True)
class Part:
    """A GPU model as its datasheet has it: what the full part has, whatever a box shows."""

    key: str
    """The model's name in spec files and tables ('H200', 'A100-SXM-80GB')."""
    pattern: str
    """Regular expression (case-insensitive) the NVML/CUDA name matches."""
    hbm_gbps: float
    hbm_source: str
    pcie_gen: int
    pcie_width: int
    nvlink_version: int | None = None
    nvlink_links: int = 0
    nvlink_baseboard: bool = False
    """SXM parts: the links are wired on the baseboard, so in a box of several GPUs every
    link must be up. PCIe parts reach peers over an optional bridge."""
    c2c_gbps: float | None = None
    """NVLink-C2C to the host, per direction (GH200)."""
    triad_share: float = ASSUMED_TRIAD_SHARE
    copy_share: float = ASSUMED_COPY_SHARE
    stream_source: str = "assumed (no published BabelStream result in DESIGN.md)"

    def matches(self, name: str) -> bool:
        return re.search(self.pattern, name, re.IGNORECASE) is not None


PARTS: tuple[Part, ...] = (
    # Most specific first: the first part whose pattern matches a name is the part.
    Part("GH200-144GB", r"GH200.*(144|HBM3e)", 4900.0,
         "NVIDIA GH200 datasheet: HBM3e 4.9 TB/s", 5, 16, 4, 18,
         c2c_gbps=450.0),  # datasheet: NVLink-C2C 900 GB/s both ways
    Part("GH200", r"GH200", 4000.0, "NVIDIA GH200 datasheet: HBM3 96 GB, 4 TB/s", 5, 16, 4,
         18, c2c_gbps=450.0),
    Part("H200-NVL", r"H200 NVL", 4800.0, "NVIDIA H200 NVL datasheet: 4.8 TB/s", 5, 16, 4,
         18, triad_share=4150 / 4800, copy_share=4010 / 4800,
         stream_source=f"{AZURE}, ND H200 v5 (SXM): Copy 4.01, Triad 4.15 TB/s"),
    Part("H200", r"H200", 4800.0, "NVIDIA H200 datasheet: 4.8 TB/s", 5, 16, 4, 18, True,
         triad_share=4150 / 4800, copy_share=4010 / 4800,
         stream_source=f"{AZURE}, ND H200 v5: Copy 4.01, Triad 4.15 TB/s"),
    Part("H100-NVL", r"H100 NVL", 3900.0, "NVIDIA H100 NVL datasheet: 3.9 TB/s", 5, 16, 4,
         12),  # NVLink bridge 600 GB/s both ways
    Part("H100-PCIe", r"H100.*PCIe", 2000.0, "NVIDIA H100 PCIe datasheet: HBM2e 2 TB/s", 5,
         16, 4, 12),  # NVLink bridge 600 GB/s both ways
    Part("H100-SXM", r"H100", 3350.0, "NVIDIA H100 SXM datasheet: 3.35 TB/s", 5, 16, 4, 18,
         True, triad_share=2970 / 3350, copy_share=2900 / 3350,
         stream_source=f"{AZURE}, ND H100 v5: Copy 2.90, Triad 2.97 TB/s"),
    Part("A100-PCIe-80GB", r"A100.*80GB.*PCIe|A100.*PCIe.*80GB", 1935.0,
         "NVIDIA A100 datasheet: 80GB PCIe 1,935 GB/s", 4, 16, 3, 12),  # bridge 600 GB/s
    Part("A100-PCIe-40GB", r"A100.*PCIe", 1555.0,
         "NVIDIA A100 datasheet: 40GB PCIe 1,555 GB/s", 4, 16, 3, 12),
    Part("A100-SXM-80GB", r"A100.*80GB", 2039.0, "NVIDIA A100 datasheet: 80GB SXM 2,039 GB/s",
         4, 16, 3, 12, True),  # NVLink 3: 12 links, 600 GB/s both ways
    Part("A100-SXM-40GB", r"A100", 1555.0, "NVIDIA A100 datasheet: 40GB SXM 1,555 GB/s", 4,
         16, 3, 12, True),
    Part("B200", r"B200", 8000.0, "NVIDIA DGX B200 datasheet: 64 TB/s over 8 GPUs", 5, 16, 5,
         18, True),  # NVLink 5: 18 links, 1.8 TB/s both ways
    Part("L40S", r"L40S", 864.0, "NVIDIA L40S datasheet: GDDR6 864 GB/s", 4, 16),
)
PART_KEYS: tuple[str, ...] = tuple(part.key for part in PARTS)
PARTS_BY_KEY: dict[str, Part] = {part.key: part for part in PARTS}


@lru_cache(maxsize=1024)
def find_part(name: str | None) -> Part | None:
    """The part a GPU's name (NVML's or CUDA's) is, or None for a model without defaults.
    Cached: a fleet names a few models thousands of times, and each miss tries every
    pattern."""
    if not name:
        return None
    return next((part for part in PARTS if part.matches(name)), None)


@dataclass(frozen=True)
class Band:
    """What a healthy part reaches on one path, and where WARN and FAIL start."""

    path: str
    unit: str
    expected: float
    warn: float
    fail: float
    source: str
    reference: float | None = None
    """The full part's theoretical figure (`% of peak` is of this); None for latency."""
    higher_is_better: bool = True

    def verdict(self, value: float) -> str:
        if self.higher_is_better:
            return "PASS" if value >= self.warn else "WARN" if value >= self.fail else "FAIL"
        return "PASS" if value <= self.warn else "WARN" if value <= self.fail else "FAIL"

    def pct_of_band(self, value: float) -> float:
        """A higher-is-better figure against the expected one, in % (100: what a healthy
        part reaches). A latency band has no such figure (`judge.pct_of_band` gives None)."""
        return 100.0 * value / self.expected


def band(path: str, unit: str, reference: float | None, share: float, source: str,
         higher_is_better: bool = True) -> Band:
    """A band whose expected figure is `share` of `reference`, thresholds at the defaults."""
    expected = (reference or 0.0) * share
    return Band(path, unit, expected, expected * WARN_SHARE, expected * FAIL_SHARE, source,
                reference, higher_is_better)


@dataclass(frozen=True)
class Link:
    """A GPU's PCIe link as judged: the part's maximum, the payload size and where it came
    from (for the source column)."""

    generation: int
    width: int
    payload_bytes: int
    payload_known: bool

    @property
    def line_gbps(self) -> float:
        return pcie_peak_gbps(self.generation, self.width) or 0.0

    @property
    def text(self) -> str:
        payload = (f"{self.payload_bytes} B payloads" if self.payload_known
                   else f"{self.payload_bytes} B payloads assumed (config space unreadable)")
        return f"PCIe Gen{self.generation} x{self.width}, {payload}"


LinkInputs = tuple[int | None, int | None, int | None]
"""What `pcie_link` reads of a GPU's NVML metadata: its maximum generation and width and
its payload size, each an int or None."""


def link_inputs(metadata: Mapping[str, object]) -> LinkInputs:
    """The metadata `pcie_link` reads, as ints (None where absent or not an int): a key
    for the GPUs whose links are judged alike."""
    def number(key: str) -> int | None:
        value = metadata.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    return number("pcie_gen_max"), number("pcie_width_max"), number("pcie_max_payload_bytes")


def pcie_link(part: Part | None, metadata: Mapping[str, object]) -> Link | None:
    """The link a GPU is held against: the higher of the part's and the GPU's own maximum
    (never the current state, nor the slot's maximum: a Gen5 GPU in a Gen4 slot is a box
    that cannot give the part its due); None where neither says."""
    return link_of(part, link_inputs(metadata))


@lru_cache(maxsize=1024)
def link_of(part: Part | None, inputs: LinkInputs) -> Link | None:
    """`pcie_link` of `link_inputs`: once per part and metadata (a fleet's GPUs share a
    few)."""
    gen_max, width_max, payload = inputs
    generation = max(filter(None, (part.pcie_gen if part else None, gen_max)), default=None)
    width = max(filter(None, (part.pcie_width if part else None, width_max)), default=None)
    if not generation or not width or pcie_peak_gbps(generation, width) is None:
        return None
    return Link(generation, width, payload or DEFAULT_PAYLOAD_BYTES, payload is not None)


@lru_cache(maxsize=1024)
def pcie_band(path: str, link: Link) -> Band:
    """H2D, D2H or both ways over PCIe, from the link's maximum and its payload size."""
    efficiency = pcie_efficiency(link.payload_bytes)
    if path == "bidir":
        # Scaled from 256 B, the payload size behind BIDIR_SHARE's reports.
        share = BIDIR_SHARE * efficiency / pcie_efficiency(256)
        return band(path, "GB/s", 2 * link.line_gbps, share,
                    f"{link.text}: {share:.0%} of 2x {link.line_gbps:.1f} GB/s line rate "
                    "(cuda-samples/nvbandwidth reports: ~101 of 126 GB/s on Gen5 x16)")
    return band(path, "GB/s", link.line_gbps, efficiency,
                f"{link.text}: {efficiency:.1%} of {link.line_gbps:.1f} GB/s line rate "
                f"(TLP {TLP_OVERHEAD_BYTES} B overhead, DLLPs {1 - DLLP_SHARE:.0%})")


@lru_cache(maxsize=1024)
def c2c_band(path: str, part: Part) -> Band | None:
    """Host copies over NVLink-C2C (GH200); None both ways at once (no published figure:
    NVIDIA/nvbandwidth#41 reports half the peak, under investigation)."""
    if part.c2c_gbps is None or path == "bidir":
        return None
    share = C2C_H2D_SHARE if path == "h2d" else C2C_D2H_SHARE
    return band(path, "GB/s", part.c2c_gbps, share,
                f"{part.key} datasheet: NVLink-C2C 900 GB/s both ways; {share:.0%} of "
                f"{part.c2c_gbps:.0f} (NVIDIA/nvbandwidth#23)")


@lru_cache(maxsize=1024)
def hbm_band(path: str, part: Part | None, nvml_peak_gbps: float | None) -> Band | None:
    """HBM Triad (`hbm`) or the copy engines' device copy (`d2d`, read plus write counted,
    as BabelStream's Copy counts it): the datasheet peak times the published share; for an
    unknown model, the NVML peak times the assumed share."""
    copy = path == "d2d"
    if part is not None:
        share = part.copy_share if copy else part.triad_share
        return band(path, "GB/s", part.hbm_gbps, share,
                    f"{part.hbm_source}; {share:.0%} ({part.stream_source})")
    if not nvml_peak_gbps:
        return None
    share = ASSUMED_COPY_SHARE if copy else ASSUMED_TRIAD_SHARE
    return band(path, "GB/s", nvml_peak_gbps, share,
                f"theoretical peak from NVML's clock and bus width; {share:.0%} assumed")


@lru_cache(maxsize=1024)
def nvlink_band(part: Part) -> Band | None:
    """A GPU pair's one-way copy over the part's full set of links."""
    peak = nvlink_peak_gbps(part.nvlink_version, part.nvlink_links)
    if peak is None:
        return None
    return band("p2p", "GB/s", peak, NVLINK_SHARE,
                f"{part.key}: {part.nvlink_links} NVLink {part.nvlink_version} links, "
                f"{peak:.0f} GB/s a direction; {NVLINK_SHARE:.0%} (NVIDIA/nccl#1264)")


@lru_cache(maxsize=1024)
def pcie_p2p_band(link: Link) -> Band:
    return band("p2p", "GB/s", link.line_gbps, PCIE_P2P_SHARE,
                f"{link.text}: {PCIE_P2P_SHARE:.0%} of the line rate without NVLink "
                "(NVIDIA/nvbandwidth#50)")


@lru_cache(maxsize=1024)
def overlap_band() -> Band:
    return band("overlap", "ratio", 1.0, OVERLAP_EXPECTED,
                f"ideal overlap 1.0; a healthy H200 reaches 0.95-0.998 (the stored "
                f"h200-quick run): {OVERLAP_EXPECTED} expected")


@lru_cache(maxsize=1024)
def ddr_band(peak_gbps: float | None, note: str = "") -> Band | None:
    """STREAM Triad of host DDR against the SMBIOS modules' peak; None where SMBIOS lists
    none (a VM): no band, so no verdict."""
    if not peak_gbps:
        return None
    return band("ddr", "GB/s", peak_gbps, DDR_SHARE,
                f"SMBIOS modules' peak {peak_gbps:.1f} GB/s{f' ({note})' if note else ''}; "
                f"{DDR_SHARE:.0%} assumed (STREAM on servers: 70-80 %)")


def nvlink_fault(part: Part | None, links_up: object, gpus_in_box: int) -> str | None:
    """Why a GPU's NVLink fails, or None: fewer links up than the part has, where its links
    must be up (an SXM part in a box of several GPUs, or any part with some links up: a
    bridge half seated). One GPU alone needs no link (a VM given one SXM GPU)."""
    if part is None or not part.nvlink_links or gpus_in_box < 2:
        return None
    up = links_up if isinstance(links_up, int) and not isinstance(links_up, bool) else None
    if up is None:
        return None
    if up < part.nvlink_links and (part.nvlink_baseboard or up > 0):
        return (f"{up} of {part.key}'s {part.nvlink_links} NVLinks up: held against the full "
                "part")
    return None
