"""The roofline from measured ceilings: where this box stops being memory-bound.

Compute ceilings are the best median TFLOP/s of each throughput case, device and dtype
(`gemm_gpu`, `fma_gpu`, `gemm_host` with every thread and with one); bandwidth ceilings the
best median GB/s of each memory (the statistic every output shows, `bwprof.analysis.figures`):
HBM (the `hbm_*` STREAM kernels and `d2d_copy` beyond the L2), L2 (the same kernels'
L2-resident sizes, where the run swept them: `--preset full`), the host link (`h2d_pinned`,
`d2h_pinned`) and host DDR (`ddr_triad`, the whole host). A ridge point is a
compute ceiling over a bandwidth ceiling, in FLOP per byte: a kernel doing fewer FLOP per
byte it moves is bound by that memory. Every figure is a row of results.csv; nothing here is
recomputed from samples, and simulated rows are never stated as measured. Analysis only:
`bwprof.render.rooflineplot` draws `roofline.png` from these ceilings.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import pandas as pd

from bwprof.analysis import figures
from bwprof.analysis.summary import is_numa_device
from bwprof.casespec import path_of
from bwprof.schema.flags import L2_RESIDENT, has_flag, is_cache_resident
from bwprof.schema.table import each_cell
from bwprof.store.formats import row_at

STREAM_KERNELS = ("hbm_copy", "hbm_scale", "hbm_add", "hbm_dot")
"""The HBM STREAM kernels besides the HBM path's own cases (read from the catalogue): HBM's
ceiling is the fastest of them all."""


def hbm_cases() -> tuple[str, ...]:
    """Every HBM kernel: the HBM and D2D paths' cases (`bwprof.casespec.PATHS`) and the other
    STREAM kernels; a ceiling is the fastest of them, not one path's headline."""
    return tuple(dict.fromkeys((*STREAM_KERNELS, *path_of("hbm").cases,
                                *path_of("d2d").cases)))


def link_cases() -> tuple[str, ...]:
    """The host link's cases: the host→device and device→host paths' headlines."""
    return (path_of("h2d").headline, path_of("d2h").headline)


VALUE, GBPS = figures.column("value"), figures.column("gbps")
"""The statistic a ceiling reads: the median, as every figure."""


@dataclass(frozen=True)
class Ceiling:
    device: str
    label: str
    """`bf16 (gemm_gpu)`, `HBM`, `fp64 1 thread (gemm_host)`."""
    value: float
    """TFLOP/s for compute, GB/s for bandwidth."""
    case: str
    simulated: bool
    dtype: str = ""
    threads: int | None = None


_READ = ["case", "device", "dtype", "threads", "metric", "flags", "backend", VALUE, GBPS]
"""The columns the ceilings read: only these are filtered (a fleet's million rows of every
column, text included, cost seconds to take)."""


def _ok(results: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The ok rows of `metric` with a usable figure, of the columns the ceilings read."""
    wanted = (results["status"] == "ok") & (results["metric"] == metric)
    rows = results.loc[wanted.to_numpy(dtype=bool), [c for c in _READ if c in results.columns]]
    return rows[_usable(rows[VALUE])]


def _usable(values: pd.Series) -> pd.Series:
    """Which figures can be a ceiling another is divided by: finite and at least the smallest
    normal float (`figures.a_peak`). A zero or subnormal figure of a damaged results.csv is
    no ceiling; the rows and the summary still show it."""
    numbers = pd.to_numeric(values, errors="coerce").astype(float)
    return (numbers >= sys.float_info.min) & (numbers < math.inf)  # NaN: False


def compute_ceilings(results: pd.DataFrame) -> list[Ceiling]:
    """The best median TFLOP/s per case, device, dtype and thread count (host), best first."""
    rows = _ok(results, "throughput")
    found = []
    for (case, device, dtype, threads), group in rows.groupby(
            ["case", "device", rows["dtype"].fillna(""), rows["threads"].fillna(0)],
            sort=False):
        best = row_at(group, group[VALUE].astype(float).idxmax())
        count = int(cast(int, threads)) or None  # a group key: its type is not known here
        label = f"{dtype or '?'}"
        if case == "gemm_host":
            label += f" {count} thread{'s' if count != 1 else ''}" if count else ""
        label += f" ({case})"
        found.append(Ceiling(str(device), label, float(best[VALUE]), str(case),
                             best["backend"] == "simulated", str(dtype), count))
    return sorted(found, key=lambda c: -c.value)


def _best(rows: pd.DataFrame) -> pd.Series | None:
    values = rows[GBPS].astype(float)
    return None if rows.empty else row_at(rows, values.idxmax())


def _each_distinct(values: pd.Series, test: Callable[[Any], bool]) -> pd.Series:
    """`test` of every cell, as booleans, called once per distinct cell: a fleet's million
    rows hold a few thousand devices and a handful of flag sets."""
    return pd.Series(each_cell(values, test), index=values.index, dtype=bool)


def bandwidth_ceilings(results: pd.DataFrame) -> list[Ceiling]:
    """HBM, L2 and host link per GPU; DDR for the host (device `cpu`)."""
    rows = _ok(results, "bandwidth")
    rows = rows[_usable(rows[GBPS])]
    found = []
    numa = _each_distinct(rows["device"], is_numa_device)
    cached = _each_distinct(rows["flags"], is_cache_resident)
    ddr = rows[(rows["case"] == path_of("ddr").headline) & ~numa & ~cached]
    if (row := _best(ddr)) is not None:
        found.append(Ceiling("cpu", "DDR", float(row[GBPS]), str(row["case"]),
                             row["backend"] == "simulated"))
    hbm, links = hbm_cases(), link_cases()
    gpu = rows[rows["device"].astype(str).str.fullmatch(r"gpu\d+")]
    for device, mine in gpu.groupby("device", sort=True):
        kernels = mine[mine["case"].isin(hbm)]
        l2 = _each_distinct(kernels["flags"], lambda text: has_flag(text, L2_RESIDENT))
        for label, part in (("HBM", kernels[~l2]), ("L2", kernels[l2])):
            if (row := _best(part)) is not None:
                found.append(Ceiling(str(device), label, float(row[GBPS]),
                                     str(row["case"]), row["backend"] == "simulated"))
        link = mine[mine["case"].isin(links)]
        if (row := _best(link)) is not None:
            found.append(Ceiling(str(device), "host link", float(row[GBPS]),
                                 str(row["case"]), row["backend"] == "simulated"))
    return found


@dataclass(frozen=True)
class Ceilings:
    """A run's ceilings, worked out once (`bwprof.analysis.run.Run.ceilings`)."""

    compute: list[Ceiling]
    bandwidth: list[Ceiling]


def ceilings(results: pd.DataFrame) -> Ceilings:
    """The compute and bandwidth ceilings of a run's rows."""
    if results.empty or "dtype" not in results.columns:
        return Ceilings([], [])
    return Ceilings(compute_ceilings(results), bandwidth_ceilings(results))


def ridge(compute: Ceiling, bandwidth: Ceiling) -> float:
    """FLOP per byte where the bandwidth's slope meets the compute ceiling."""
    return compute.value * 1e12 / (bandwidth.value * 1e9)


def panels(found: Ceilings) -> list[tuple[str, list[Ceiling], list[Ceiling]]]:
    """(device, its compute ceilings, the bandwidth ceilings drawn beside them) per device
    with a compute ceiling: a GPU's own HBM, L2 and host link and the host's DDR; the host's
    DDR for `cpu`."""
    compute, bandwidth = found.compute, found.bandwidth
    ddr = [c for c in bandwidth if c.label == "DDR"]
    out = []
    for device in sorted(dict.fromkeys(c.device for c in compute), key=_device_order):
        mine = [c for c in compute if c.device == device]
        memories = [c for c in bandwidth if c.device == device and c.label != "DDR"] + ddr
        if memories:
            out.append((device, mine, memories))
    return out


def primary_memory(memories: list[Ceiling]) -> Ceiling:
    """The memory a device's working data lives in: HBM for a GPU, else DDR."""
    return next((m for m in memories if m.label == "HBM"), memories[-1])


def short_label(ceiling: Ceiling) -> str:
    """`bf16` for a GEMM ceiling, `fp32 FMA` for the FMA kernel's."""
    return f"{ceiling.dtype} FMA" if ceiling.case == "fma_gpu" else ceiling.dtype


def intensity_text(value: float) -> str:
    """A ridge point's FLOP per byte as the sentences and the figure print it."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


def _device_order(device: str) -> tuple[int, str]:
    return (1, device) if device == "cpu" else (0, device)


def _ratio(numerator: Ceiling | None, denominator: Ceiling | None) -> str:
    if numerator is None or denominator is None:
        return "?"
    ratio = figures.ratio(numerator.value, denominator.value)
    if ratio is None:
        return "?"
    return f"{ratio:,.0f}×" if ratio >= 100 else f"{ratio:.1f}×"


def roofline_lines(found: Ceilings) -> list[str]:
    """The GPU/CPU matmul ratios, HBM/DDR and every ridge point, as sentences; a simulated
    side is said to be simulated, never compared. Only this box's measured ratios: no
    reference ratio is set beside them (a CPU's matrix multiply and DDR vary too much between
    servers for one published figure to hold against)."""
    compute, bandwidth = found.compute, found.bandwidth
    lines = []
    gpu = [c for c in compute if c.case == "gemm_gpu"]
    host = [c for c in compute if c.case == "gemm_host"]
    if gpu and host:
        if any(c.simulated for c in gpu + host):
            lines.append("GPU against CPU matrix multiply: the GPU rows are simulated, not "
                         "measurements, so there is no measured ratio.")
        else:
            all_threads = max((c.threads or 0) for c in host)
            wide = [c for c in host if (c.threads or 0) == all_threads]
            one = [c for c in host if c.threads == 1]
            fp32_gpu = next((c for c in gpu if c.dtype == "fp32"), None)
            fp32_cpu = next((c for c in wide if c.dtype == "fp32"), None)
            lines.append(
                f"GPU matrix multiply runs {_ratio(gpu[0], wide[0])} the CPU's here (best "
                f"dtype each: {gpu[0].dtype} {gpu[0].value:.1f} TFLOP/s on {gpu[0].device} "
                f"against {wide[0].dtype} {wide[0].value:.3f} with {all_threads} CPU "
                f"thread(s)); fp32 against fp32: {_ratio(fp32_gpu, fp32_cpu)}; against one CPU "
                f"thread: {_ratio(gpu[0], one[0] if one else None)}.")
    hbm = [c for c in bandwidth if c.label == "HBM"]
    ddr = [c for c in bandwidth if c.label == "DDR"]
    if hbm and ddr:
        best = max(hbm, key=lambda c: c.value)
        if best.simulated or ddr[0].simulated:
            lines.append("HBM against DDR ceilings: simulated rows, no measured ratio.")
        else:
            lines.append(f"HBM's measured ceiling is {_ratio(best, ddr[0])} DDR's "
                         f"({best.value:.0f} GB/s, {best.case} on {best.device}, against "
                         f"{ddr[0].value:.1f} GB/s {ddr[0].case}).")
    for device, mine, memories in panels(found):
        memory = primary_memory(memories)
        widest = max((c.threads or 0) for c in mine)
        points = ", ".join(f"{short_label(c)} {intensity_text(ridge(c, memory))}" for c in mine
                           if c.case != "gemm_host" or (c.threads or 0) == widest)
        simulated = " (simulated)" if memory.simulated or any(c.simulated for c in mine) else ""
        lines.append(f"ridge points on {device}{simulated}, FLOP per byte of {memory.label} "
                     f"({memory.value:.0f} GB/s): {points}; below them a kernel is bound by "
                     f"{memory.label}.")
    return lines
