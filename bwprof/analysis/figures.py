"""A path's figure, picked one way for every output (summary, verdicts, compare, fleet,
trend, roofline): the rule each path declares (`bwprof.casespec.FigureRule`) applied to the
rows of results.csv. Here so that no two outputs pick a path's figure apart: the statistic
(the median; the best beside it, labelled), which rows count (ok, a figure, no cache's) and
which row of a device stands for it (the largest size, the best of what is left)."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bwprof.casespec import MEDIAN_BEYOND_CACHE, FigureRule
from bwprof.coerce import number
from bwprof.schema import flags as f
from bwprof.schema.table import is_missing
from bwprof.store.formats import cell_float

Record = Mapping[Any, Any]
"""A results row: a dict of results.csv's columns (a pandas record, or the summary's)."""

BEST = "best"
"""The other statistic, shown beside the figure and labelled: STREAM's and BabelStream's."""


def column(name: str, rule: FigureRule = MEDIAN_BEYOND_CACHE) -> str:
    """results.csv's column of a figure ('value', 'gbps', 'copy_gbps') in the rule's
    statistic: 'value_median'."""
    return f"{name}_{rule.statistic}"


def best_column(name: str) -> str:
    return f"{name}_{BEST}"


def figure(row: Record, rule: FigureRule = MEDIAN_BEYOND_CACHE) -> float | None:
    """A row's figure in the rule's statistic; None where it has none."""
    return cell_float(row.get(column("value", rule)))


def value(row: Record, rule: FigureRule = MEDIAN_BEYOND_CACHE) -> float:
    """A row's figure as a number (NaN where it has none), for ordering rows."""
    return number(row.get(column("value", rule)))


def measured(row: Record, rule: FigureRule = MEDIAN_BEYOND_CACHE) -> bool:
    """An ok row with its figure."""
    return row["status"] == "ok" and not is_missing(row.get(column("value", rule)))


def counts(row: Record, rule: FigureRule = MEDIAN_BEYOND_CACHE) -> bool:
    """A row the rule lets give the path's figure: measured, and no cache's where the rule
    says so (`in_cache`, `l2_resident`: buffers under 4x the cache)."""
    return measured(row, rule) and not (rule.beyond_cache and f.is_cache_resident(row["flags"]))


def size(row: Record) -> float:
    """A row's size in bytes, 0 where it has none (so it is never the largest)."""
    return cell_float(row.get("size_bytes")) or 0.0


def best_of(rows: Sequence[Record], higher_is_better: bool = True,
            rule: FigureRule = MEDIAN_BEYOND_CACHE) -> Record:
    """The row of the best figure (highest, or lowest where lower is better); the first of
    them on a tie."""
    return (max(rows, key=lambda r: value(r, rule)) if higher_is_better
            else min(rows, key=lambda r: value(r, rule)))


def pick(rows: Sequence[Record], higher_is_better: bool = True,
         rule: FigureRule = MEDIAN_BEYOND_CACHE) -> Record | None:
    """The row that stands for one device's path: of the rows the rule counts, at the
    largest size where the rule says so, the best figure (a DDR row per thread count). None
    where no row counts."""
    mine = [r for r in rows if counts(r, rule)]
    if not mine:
        return None
    if rule.at_largest_size:
        top = max(size(r) for r in mine)
        mine = [r for r in mine if size(r) == top]
    return best_of(mine, higher_is_better, rule)


def pick_per_group(groups: np.ndarray, count: int, sizes: np.ndarray,
                   values: np.ndarray | None = None, lower: np.ndarray | None = None,
                   among: np.ndarray | None = None) -> np.ndarray:
    """`pick` of many groups at once, on arrays: for each group (`groups`: each row's group,
    numbered from 0 below `count`), the index of its row at the largest size and, where
    `values` are given, the best value there (the highest; the lowest in a group where any
    row's `lower` says so), the first of them on a tie, as `pick` gives. The rows must be
    those `pick` counts (measured, no cache's: `counts`), with sizes as `size` gives them
    (0 where none); only rows `among` marks take part. -1 for a group without a row. One
    sort of the rows, where `pick` per group cost a fleet a Python call per device."""
    out = np.full(count, -1, dtype=np.int64)
    index = np.arange(len(groups)) if among is None else np.flatnonzero(among)
    if not index.size:
        return out
    mine = groups[index]
    keys: list[np.ndarray] = [index]
    if values is not None:
        value = values[index]
        if lower is not None:
            low = np.bincount(mine, weights=lower[index], minlength=count) > 0
            value = np.where(low[mine], value, -value)
        else:
            value = -value
        keys.append(value)
    keys += [-sizes[index], mine]
    order = np.lexsort(keys)
    ordered = mine[order]
    first = order[np.r_[True, ordered[1:] != ordered[:-1]]]
    out[mine[first]] = index[first]
    return out


def peak_source(row: Mapping[Any, Any]) -> str:
    """Where a row's theoretical peak (`peak_value`, set when it was measured) comes from,
    named once for every output."""
    return source_of(row.get("memory"), row.get("direction"), row.get("flags"))


def source_of(memory: object, direction: object, flags: object) -> str:
    """`peak_source` of a row's memory, direction and flags cells (the summary's columns)."""
    memory, direction = str(memory or ""), str(direction or "")
    if memory == "hbm":
        return "NVML: 2 × max memory clock × bus width"
    if memory == "ddr":
        return "SMBIOS memory modules: speed × width × modules"
    if direction in ("h2d", "d2h", "both"):
        if f.has_flag(flags, f.C2C_LINK):
            return "NVLink-C2C: the part's host link"
        return "PCIe: the link's maximum generation × width (NVML)"
    if direction == "p2p":
        return "the GPU pair's link: NVLink links × rate, or PCIe"
    return "the row's peak_value"


def the_peak(row: Mapping[Any, Any], fallback: float | None = None,
             fallback_source: str = "") -> tuple[float | None, str]:
    """(peak, source): the one peak a path's figure is shown against. The row's own
    theoretical peak where it has one (what results.csv, the summary and the plots hold it
    against); else `fallback` (a verdict band's reference: the datasheet's) with its source.
    A verdict's band may start from another figure (the datasheet's 4800 GB/s HBM against
    NVML's 4814): the band judges, this peak is what "% of peak" reads."""
    own = a_peak(cell_float(row.get("peak_value")))
    if own:
        return own, peak_source(row)
    return (fallback, fallback_source) if a_peak(fallback) else (None, "")


def a_peak(value: float | None) -> float | None:
    """`value` where it can stand as a peak a figure is divided by: finite and at least the
    smallest normal float. A zero, negative-zero, negative, subnormal, infinite or NaN peak
    (a damaged results.csv) is no peak: "% of peak" is not comparable there (None, shown
    "—"), never a ZeroDivisionError nor an infinite percentage."""
    if value is None or not math.isfinite(value) or value < sys.float_info.min:
        return None
    return value


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """`numerator / denominator` where that is a finite number; None (not comparable, shown
    "—") where either is missing or not finite, or the denominator is zero or so small (a
    subnormal figure read from a damaged file) that the quotient overflows."""
    if numerator is None or denominator is None or not denominator:
        return None
    try:
        quotient = numerator / denominator
    except (ZeroDivisionError, OverflowError):
        return None
    return quotient if math.isfinite(quotient) else None
