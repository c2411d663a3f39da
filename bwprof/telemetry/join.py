"""Joining counters to result rows: what the hardware saw while each row was measured.

Each row gains the mean, min or max of the samples of its GPU inside its time window (units
in the column names), the throttle reasons seen, and a counter-derived bandwidth beside the
measured one: GPM DRAM utilisation x HBM peak for device-memory rows, PCIe (or NVLink) rates
for copies. Counters average over the whole window, so they are compared with the bytes the
row's code moved in that window divided by its length, not with the per-sample figure.

A GPM value covers the interval since the GPU's previous GPM sample, so only values whose
whole interval lies in the window count (an interval reaching back before the row would mix
in idle time), and it trails its read by up to GPM_LAG_S: Hopper refreshes GPM counters at
most every 100 ms, so an interval must begin that long after the window does. The link's
generation and width count only from samples taken while PCIe was busy: an idle link drops to
a lower generation to save power, which is no fault. Busy means 1 GiB/s, or half of what the
link as trained at that moment can carry where that is less, so a link trained far down
(Gen1 x4, x1) still counts as busy when it is the bottleneck.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence

from bwprof.coerce import integer, number
from bwprof.peaks import pcie_peak_gbps
from bwprof.telemetry.counters import BENIGN_REASONS, throttle_names

MIB = 1 << 20
GPM_LAG_S = 0.1
"""How far a GPM value may trail its read: on the H200 the first 150 ms interval of an HBM
row's window, the GPU busy all through it by the bytes moved, read 8-11% DRAM utilisation
against 86-88% after it (the GPM counters refresh every 100 ms; DCGM issue #310)."""
MIN_GPM_VALUES_FOR_RATIO = 3
"""GPM values behind a ratio drawn from GPM: each averages the whole interval it covers."""
MIN_SNAPSHOTS_FOR_RATIO = 10
"""Plain samples behind a ratio drawn from them: NVML's PCIe throughput counts bytes over
20 ms of each sampling interval, so a copy that runs in bursts (an op, then validation or the
next enqueue) is caught busy or idle by chance; with 3 samples a 1 GiB copy read 0.75 of what
moved on the H200, with 10 or more every row read within 15%."""
MIN_GBPS_FOR_RATIO = 1.0
"""Below this rate moved in the window the counters' background (a few MiB/s of driver and
NVML traffic on an idle link) weighs in the ratio: a 4 KiB row read 0.09 on the H200."""
PCIE_BUSY_MIBPS = 1024
"""PCIe traffic (either direction, MiB/s) above which a sample shows the link under load."""
PCIE_BUSY_SHARE = 0.5
"""...or this share of what the link, as trained at the sample, carries, if that is less."""
GPM_FIELDS = frozenset({"dram_bw_util_pct", "gpm_pcie_tx_mibps", "gpm_pcie_rx_mibps",
                        "nvlink_tx_mibps", "nvlink_rx_mibps"})
LINK_FIELDS = frozenset({"pcie_gen", "pcie_width"})

_STATS: dict[str, Callable[[list[float]], float]] = {
    "mean": statistics.fmean, "min": min, "max": max,
}

# (column, sample field, statistic)
_SPEC: tuple[tuple[str, str, str], ...] = (
    ("sm_clock_mhz_mean", "sm_clock_mhz", "mean"),
    ("sm_clock_mhz_min", "sm_clock_mhz", "min"),
    ("mem_clock_mhz_mean", "mem_clock_mhz", "mean"),
    ("mem_clock_mhz_min", "mem_clock_mhz", "min"),
    ("power_w_mean", "power_w", "mean"),
    ("power_w_max", "power_w", "max"),
    ("temperature_c_max", "temperature_c", "max"),
    ("gpu_util_pct_mean", "gpu_util_pct", "mean"),
    ("gpu_util_pct_max", "gpu_util_pct", "max"),
    ("mem_util_pct_mean", "mem_util_pct", "mean"),
    ("mem_util_pct_max", "mem_util_pct", "max"),
    ("pcie_tx_mibps_mean", "pcie_tx_mibps", "mean"),
    ("pcie_tx_mibps_max", "pcie_tx_mibps", "max"),
    ("pcie_rx_mibps_mean", "pcie_rx_mibps", "mean"),
    ("pcie_rx_mibps_max", "pcie_rx_mibps", "max"),
    ("pcie_gen_min", "pcie_gen", "min"),
    ("pcie_width_min", "pcie_width", "min"),
    ("dram_bw_util_pct_mean", "dram_bw_util_pct", "mean"),
    ("dram_bw_util_pct_max", "dram_bw_util_pct", "max"),
    ("gpm_pcie_tx_mibps_mean", "gpm_pcie_tx_mibps", "mean"),
    ("gpm_pcie_tx_mibps_max", "gpm_pcie_tx_mibps", "max"),
    ("gpm_pcie_rx_mibps_mean", "gpm_pcie_rx_mibps", "mean"),
    ("gpm_pcie_rx_mibps_max", "gpm_pcie_rx_mibps", "max"),
    ("nvlink_tx_mibps_mean", "nvlink_tx_mibps", "mean"),
    ("nvlink_tx_mibps_max", "nvlink_tx_mibps", "max"),
    ("nvlink_rx_mibps_mean", "nvlink_rx_mibps", "mean"),
    ("nvlink_rx_mibps_max", "nvlink_rx_mibps", "max"),
)



INTO_ONE = "all->"
"""How a row of every other GPU's bytes into one GPU is labelled (all_to_one: 'all->gpu0')."""


def source_device(device: str) -> str:
    """The GPU whose counters describe a row: 'gpu0->gpu1' and 'gpu0<->gpu1' by gpu0, the
    sender; 'all->gpu0' by gpu0, the receiver, whose link carries every byte of the row."""
    if device.startswith(INTO_ONE):
        return device[len(INTO_ONE):]
    return device.split("<->")[0].split("->")[0]


def received(device: str) -> bool:
    """Whether a row's counters are its GPU's bytes in, not out ('all->gpu0')."""
    return device.startswith(INTO_ONE)


def _number(sample: dict[str, object], name: str) -> float | None:
    value = sample.get(name)
    return None if value is None else number(value)


def _pcie_busy(sample: dict[str, object]) -> bool:
    rates = [_number(sample, name) for name in ("pcie_tx_mibps", "pcie_rx_mibps",
                                                "gpm_pcie_tx_mibps", "gpm_pcie_rx_mibps")]
    gen, width = sample.get("pcie_gen"), sample.get("pcie_width")
    link_gbps = pcie_peak_gbps(integer(gen), integer(width)) if gen and width else None
    threshold = PCIE_BUSY_MIBPS if link_gbps is None else min(
        PCIE_BUSY_MIBPS, PCIE_BUSY_SHARE * link_gbps * 1e9 / MIB)
    return any(rate is not None and rate >= threshold for rate in rates)


def _gpm_inside(sample: dict[str, object], start: float) -> bool:
    """Whether the GPM value's interval, moved back by GPM_LAG_S, lies after `start`."""
    interval = _number(sample, "gpm_interval_s")
    return (interval is not None
            and number(sample["t_s"]) - interval >= start + GPM_LAG_S)


def _in_window(samples: Sequence[dict[str, object]], device: str,
               window: tuple[float, float]) -> tuple[list[dict[str, object]],
                                                     list[dict[str, object]]]:
    """One GPU's samples whose time falls inside `window`, and those of them whose GPM
    interval lies wholly inside it, allowing for GPM_LAG_S."""
    start, end = window
    chosen = [s for s in samples if s.get("device") == device
              and start <= number(s["t_s"]) <= end]
    return chosen, [s for s in chosen if _gpm_inside(s, start)]


def counters_for(samples: Sequence[dict[str, object]], device: str,
                 window: tuple[float, float]) -> dict[str, object]:
    """Statistics of one GPU's samples whose time falls inside `window` (seconds)."""
    return _statistics(*_in_window(samples, device, window))


def _statistics(chosen: list[dict[str, object]],
                gpm: list[dict[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {"telemetry_samples": len(chosen)}
    busy = [s for s in chosen if _pcie_busy(s)]
    for column, name, stat in _SPEC:
        source = gpm if name in GPM_FIELDS else busy if name in LINK_FIELDS else chosen
        values = [number(s[name]) for s in source if s.get(name) is not None]
        out[column] = _STATS[stat](values) if values else None
    mask = 0
    for s in chosen:
        mask |= integer(s.get("throttle_reasons") or 0)
    out["throttle_reasons"] = throttle_names(mask & ~BENIGN_REASONS)
    return out


def _mibps_to_gbps(value: object) -> float | None:
    return None if value is None else number(value) * MIB / 1e9


def counter_gbps(counters: dict[str, object], *, direction: str, memory: str,
                 peak_gbps: float | None, host_over_pcie: bool = True,
                 into: bool = False) -> float | None:
    """The bandwidth the counters imply for a row of this kind, in GB/s (None where they
    cannot say): DRAM utilisation x peak for device memory, PCIe RX for host-to-device, TX
    for device-to-host, both for the sum, NVLink TX for GPU-to-GPU (RX where the row's GPU
    is the one receiving, `into`: 'all->gpu0'). Host copies of a GPU whose host link is not
    PCIe (NVLink-C2C) pass no PCIe counter: None."""
    if not host_over_pcie and direction in ("h2d", "d2h", "both") and memory != "hbm":
        return None
    def prefer(gpm: str, plain: str) -> float | None:
        value = counters.get(gpm)
        return _mibps_to_gbps(value if value is not None else counters.get(plain))

    if direction == "within" and memory == "hbm":
        util = counters.get("dram_bw_util_pct_mean")
        return None if util is None or not peak_gbps else number(util) / 100 * peak_gbps
    if direction == "h2d":
        return prefer("gpm_pcie_rx_mibps_mean", "pcie_rx_mibps_mean")
    if direction == "d2h":
        return prefer("gpm_pcie_tx_mibps_mean", "pcie_tx_mibps_mean")
    if direction == "both" and memory != "hbm":
        rx = prefer("gpm_pcie_rx_mibps_mean", "pcie_rx_mibps_mean")
        tx = prefer("gpm_pcie_tx_mibps_mean", "pcie_tx_mibps_mean")
        return None if rx is None or tx is None else rx + tx
    if direction == "p2p":  # over NVLink or, without it, over PCIe: the sender's bytes out
        names = (("nvlink_rx_mibps_mean", "gpm_pcie_rx_mibps_mean") if into
                 else ("nvlink_tx_mibps_mean", "gpm_pcie_tx_mibps_mean"))
        sent = [counters.get(name) for name in names]
        known = [number(value) for value in sent if value is not None]
        return _mibps_to_gbps(sum(known)) if known else None
    return None


def from_gpm(counters: dict[str, object], *, direction: str) -> bool:
    """Whether `counter_gbps` draws on GPM rates for a row of this direction."""
    if direction in ("within", "p2p"):
        return True
    names = {"h2d": ["gpm_pcie_rx_mibps_mean"], "d2h": ["gpm_pcie_tx_mibps_mean"],
             "both": ["gpm_pcie_rx_mibps_mean", "gpm_pcie_tx_mibps_mean"]}.get(direction, [])
    return any(counters.get(name) is not None for name in names)


def _gpm_medians(gpm: list[dict[str, object]]) -> dict[str, float]:
    """The median of each GPM rate over the window, under its `_mean` column's name, for
    `counter_gbps`: Hopper refreshes GPM counters every 100 ms, so now and then an interval of
    100-150 ms holds no refresh (it reads 0) and the next holds two (it reads double; DRAM
    utilisation then clamps at 100%). On the H200 such a pair in a steady copy pulled the
    mean to 0.80 of the bytes moved; the median stays on the steady level."""
    out = {}
    for name in GPM_FIELDS:
        values = [number(s[name]) for s in gpm if s.get(name) is not None]
        if values:
            out[f"{name}_mean"] = statistics.median(values)
    return out


def join_every_gpu(samples: Sequence[dict[str, object]], *, devices: Sequence[str],
                   direction: str, memory: str, window: tuple[float, float],
                   window_bytes: int | None, c2c: Iterable[str] = ()) -> dict[str, object]:
    """The counter check of an every-GPU row (h2d_all's `all`): each GPU's counter figure over
    the window, as its own row would read it, summed against the bytes all of them moved.
    Clocks, power and the rest stay on each GPU's own row: a sum or mean of them says little."""
    share = window_bytes // len(devices) if window_bytes and devices else None
    no_pcie = set(c2c)
    parts = [join_row(samples, device=device, direction=direction, memory=memory,
                      peak_gbps=None, window=window, window_bytes=share,
                      host_over_pcie=device not in no_pcie) for device in devices]
    length = window[1] - window[0]
    window_gbps = window_bytes / length / 1e9 if window_bytes and length > 0 else None
    figures = [part["counter_gbps"] for part in parts]
    numbers = [f for f in figures if isinstance(f, (int, float))]
    derived = sum(numbers) if figures and len(numbers) == len(figures) else None
    checked = bool(parts) and all(part["counter_ratio"] is not None for part in parts)
    return {
        "telemetry_samples": sum(integer(part["telemetry_samples"]) for part in parts),
        "window_gbps": window_gbps, "counter_gbps": derived,
        "counter_ratio": derived / window_gbps if checked and derived and window_gbps else None,
    }


def join_row(samples: Sequence[dict[str, object]], *, device: str, direction: str,
             memory: str, peak_gbps: float | None, window: tuple[float, float],
             window_bytes: int | None, host_over_pcie: bool = True) -> dict[str, object]:
    """Every telemetry column for one row; the counter figure reads GPM rates by their median
    (`_gpm_medians`), plain samples by their mean. The ratio needs MIN_GBPS_FOR_RATIO moved and,
    behind the counter figure, MIN_GPM_VALUES_FOR_RATIO GPM values whose interval lies in the
    window where it uses them (GPM is read at most every 100 ms), or else
    MIN_SNAPSHOTS_FOR_RATIO plain samples."""
    chosen, gpm = _in_window(samples, source_device(device), window)
    counters = _statistics(chosen, gpm)
    length = window[1] - window[0]
    window_gbps = window_bytes / length / 1e9 if window_bytes and length > 0 else None
    derived = counter_gbps({**counters, **_gpm_medians(gpm)}, direction=direction,
                           memory=memory, peak_gbps=peak_gbps, host_over_pcie=host_over_pcie,
                           into=received(device))
    if from_gpm(counters, direction=direction):
        enough = len(gpm) >= MIN_GPM_VALUES_FOR_RATIO
    else:
        enough = len(chosen) >= MIN_SNAPSHOTS_FOR_RATIO
    enough = enough and window_gbps is not None and window_gbps >= MIN_GBPS_FOR_RATIO
    counters["window_gbps"] = window_gbps
    counters["counter_gbps"] = derived
    counters["counter_ratio"] = (derived / window_gbps
                                 if derived is not None and window_gbps and enough else None)
    return counters
