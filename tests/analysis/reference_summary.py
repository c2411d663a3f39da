"""The summary and the ResultRows as bwprof built them before issue 36 made them a column at
a time: every results row a dict (`_records`), each path's rows selected and picked in Python
(`figures.pick` per device), the summary frame made of a dict per row; `rows_from_frame` a
`ResultRow(**fields)` per row. Kept here, unchanged but for this docstring and the imports
it needs, as the oracle of `tests/analysis/test_summary_columns.py`: the column-wise builders
must give the same frames, in the same order, of the same dtypes, and the same rows, on
every frame, the degenerate ones included. Not a second production path."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import Any, cast

import numpy as np
import pandas as pd

from bwprof.analysis import figures
from bwprof.casespec import AGGREGATE_SUFFIX, path_of, summary_cases, summary_paths
from bwprof.casespec import PATHS as PATH_SPECS
from bwprof.coerce import number
from bwprof.schema import flags as f
from bwprof.schema.flags import split_flags
from bwprof.schema.metrics import EFFICIENCY, get_metric
from bwprof.schema.rows import (
    OPTIONAL_COLUMNS,
    RESULT_COLUMNS,
    SCHEMA_VERSION,
    TELEMETRY_COLUMNS,
    ResultRow,
)
from bwprof.schema.table import (
    _FLOAT_COLUMNS,
    _INTEGER_COLUMNS,
    _OPTIONAL_INTEGER_COLUMNS,
    gc_paused,
    is_missing,
)
from bwprof.store.formats import cell_float, cell_text, plain

SUMMARY_FILE = "summary.csv"

SUMMARY_COLUMNS: tuple[str, ...] = (
    "run_id", "host", "path", "case", "backend", "device", "device_name", "memory", "direction",
    "dtype", "size_bytes", "threads", "repeats", "metric", "unit", "higher_is_better", "value",
    "value_median", "gbps", "gbps_median", "copy_gbps", "copy_gbps_median", "value_best",
    "gbps_best", "copy_gbps_best", "cv", "peak_value",
    "peak_gbps", "pct_of_peak", "peak_source", "overlap_efficiency", "hbm_over_ddr",
    "hbm_over_pcie", "status",
    "flags", "note", "schema_version",
)

PATHS: tuple[str, ...] = summary_paths()
"""The summary's paths, in order: each a section of `bwprof.casespec.PATHS`."""
PATH_LABELS: dict[str, str] = {p.key: p.label for p in PATH_SPECS if p.key in PATHS}
OPTIONAL_PATHS: tuple[str, ...] = tuple(p.key for p in PATH_SPECS
                                        if p.optional and p.key in PATHS)
"""Paths shown only when the run has rows of them (fleet runs; latency and compute cases),
not as 'not in this run'."""
METRIC_PATHS: dict[str, str] = {p.key: p.metric for p in PATH_SPECS if p.metric}
"""Paths that hold every case of one metric, whatever the case."""
SLOWEST_PAIR = "slowest pair"


Record = dict[str, object]
"""One results row as a dict (`_records`). The summary makes some forty selections among a
few hundred rows at most: on dicts each costs microseconds, where a pandas selection costs
its per-operation overhead (a summary took 20-40 ms, whatever the run's size, and a run's
end, report and compare each build one or more)."""

_READ_COLUMNS = (
    "run_id", "host", "case", "backend", "device", "device_name", "memory", "direction",
    "dtype", "size_bytes", "threads", "repeats", "metric", "unit", "higher_is_better",
    "value_best", "value_median", "gbps_best", "gbps_median", "copy_gbps_best",
    "copy_gbps_median", "cv", "peak_value", "peak_gbps", "status", "flags", "note", "phase",
    "overlap_efficiency", "page_bytes",
)
"""The columns of results.csv the summary reads."""


def _cells(column: pd.Series) -> list[object]:
    """A column's cells as to_dict("records") gives them: a nullable column's missing
    cells as None, not pd.NA."""
    if getattr(column.dtype, "na_value", None) is pd.NA:
        return [None if value is pd.NA else value for value in column.tolist()]
    return column.tolist()


def _records(results: pd.DataFrame, read: Iterable[str] = _READ_COLUMNS) -> list[Record]:
    """The rows of `results` in order, as dicts of the columns the summary reads (or those
    of `read`; a column the frame lacks is absent; a missing value is None or NaN)."""
    present = [c for c in read if c in results.columns]
    # Each column to Python values once, then zipped: what to_dict("records") gives (ints,
    # floats, str, NA), without its per-row boxing (seconds for a fleet's 100,000 rows).
    with gc_paused():
        columns = [_cells(results[c]) for c in present]
        return _Rows(dict(zip(present, values, strict=True))
                     for values in zip(*columns, strict=True))


def _figure_row(path: str, row: Record, **extra: object) -> dict[str, object]:
    value = figures.figure(row)
    peak = figures.a_peak(cell_float(row["peak_value"]))  # a zero or subnormal one: none
    higher = plain(row["higher_is_better"])
    values: dict[str, object] = {
        "run_id": row["run_id"], "host": row["host"], "path": path, "case": row["case"],
        "backend": row["backend"], "device": row["device"], "device_name": row["device_name"],
        "memory": row["memory"], "direction": row["direction"],
        "dtype": cell_text(row.get("dtype")),
        "size_bytes": plain(row["size_bytes"]), "threads": plain(row["threads"]),
        "repeats": plain(row["repeats"]), "metric": row["metric"], "unit": row["unit"],
        "higher_is_better": higher, "value": value,
        "value_median": plain(row["value_median"]),
        "gbps": plain(row.get(figures.column("gbps"))),
        "gbps_median": plain(row["gbps_median"]),
        "copy_gbps": plain(row.get(figures.column("copy_gbps"))),
        "copy_gbps_median": plain(row.get("copy_gbps_median")),
        "value_best": plain(row.get("value_best")), "gbps_best": plain(row.get("gbps_best")),
        "copy_gbps_best": plain(row.get("copy_gbps_best")), "cv": plain(row["cv"]),
        "peak_value": peak, "peak_gbps": plain(row["peak_gbps"]),
        "pct_of_peak": (figures.ratio(100.0 * value, peak)
                        if value is not None and higher else None),
        "peak_source": figures.peak_source(row) if peak else "",
        "overlap_efficiency": None, "hbm_over_ddr": None, "hbm_over_pcie": None,
        "status": row["status"], "flags": row["flags"], "note": "",
        "schema_version": SCHEMA_VERSION,
    }
    values.update(extra)
    if _counts_more_than_copied(values):
        values["note"] = "; ".join(n for n in (str(values["note"] or ""), TRAFFIC_COPY_NOTE) if n)
    return values


TRAFFIC_COPY_NOTE = ("counts bytes read + written (STREAM's convention); `copied` (copy_gbps) "
                     "counts each byte copied once, as nvbandwidth does")


def _counts_more_than_copied(row: dict[str, object]) -> bool:
    """A copy whose figure counts more than the bytes it copied (`d2d_copy`: the buffer read
    and the buffer written), so its copy-convention figure differs from it."""
    copied, counted = cell_float(row.get("copy_gbps")), cell_float(row.get("gbps"))
    return copied is not None and counted is not None and copied < counted * (1 - 1e-9)


def _without_figure(row: dict[str, object]) -> dict[str, object]:
    """A figure row emptied of its figures (a path whose rows cannot give one)."""
    return {**row, **dict.fromkeys(("value", "value_median", "gbps", "gbps_median", "copy_gbps",
                                    "copy_gbps_median", "value_best", "gbps_best",
                                    "copy_gbps_best", "cv", "pct_of_peak"))}


def _in_cache_row(path: str, row: Record, note: str) -> dict[str, object]:
    """The row of a path whose every figure is a cache's: its status says so, no figure."""
    return _without_figure(_figure_row(path, row, status="in cache", note=note))


def _size(row: Record) -> float:
    """A row's size in bytes, 0 where it has none (so it is never the largest)."""
    return cell_float(row["size_bytes"]) or 0.0


def _value(row: Record) -> float:
    return figures.value(row)


def _largest(rows: list[Record]) -> Record:
    """The row of the largest size; the first of them on a tie, as pandas' idxmax is."""
    return max(rows, key=_size)


def cache_resident(rows: pd.DataFrame) -> pd.Series:
    """Which rows are a cache's figure (`in_cache`, `l2_resident`), as a boolean mask."""
    return rows["flags"].map(f.is_cache_resident).astype(bool)


def _resident(row: Record) -> bool:
    return f.is_cache_resident(row["flags"])


def _has_flag(row: Record, flag: str) -> bool:
    return f.has_flag(row["flags"], flag)


def _grouped(rows: list[Record], column: str) -> dict[object, list[Record]]:
    """The rows of each value of `column`, values in the order they first appear."""
    groups: dict[object, list[Record]] = {}
    for row in rows:
        groups.setdefault(row[column], []).append(row)
    return groups


def _missing_row(path: str, records: list[Record], run_id: str,
                 host: str) -> dict[str, object]:
    """The row of a path with no figure: why its headline case (the first of its cases,
    `summary_cases`, that ran) did not give one."""
    cases = summary_cases(path) or tuple(dict.fromkeys(
        str(r["case"]) for r in records if r["metric"] == METRIC_PATHS.get(path, "")))
    others = [r for r in records if r["case"] in cases and r["status"] != "ok"]
    case = cases[0] if len(cases) == 1 else ""
    if others:
        rank = {name: index for index, name in enumerate(cases)}
        first = min(others, key=lambda r: rank[str(r["case"])])  # earliest case, then row
        status, note, case = str(first["status"]), str(first["note"]), str(first["case"])
    elif path == "overlap" and any(r["case"] in cases for r in records):
        status, note = "absent", "no concurrent row carries an overlap efficiency"
    else:
        shown = "overlap_*" if path == "overlap" else " or ".join(cases)
        status, note = "absent", f"no {shown} row in this run"
    return {
        **dict.fromkeys(SUMMARY_COLUMNS), "run_id": run_id, "host": host, "path": path,
        "case": case, "backend": "", "device": "",
        "device_name": "", "memory": "", "direction": "", "metric": "", "unit": "",
        "status": status, "flags": "", "note": note.replace("\n", " "),
        "schema_version": SCHEMA_VERSION,
    }


def _largest_per_device(rows: list[Record]) -> list[Record]:
    """For each device (in run order) the row at its largest size."""
    return [_largest(mine) for mine in _grouped(rows, "device").values()]


def _measured(row: Record) -> bool:
    """An ok row with its figure."""
    return figures.measured(row)


class _Rows(list[Record]):
    """A run's records (`_records`) with their rows of each case, grouped on first use: the
    summary selects a case's rows some twenty times, each a pass over a fleet's million."""

    _by_case: dict[object, list[Record]] | None = None

    def of_case(self, case: str) -> list[Record]:
        if self._by_case is None:
            self._by_case = _grouped(self, "case")
        return self._by_case.get(case, [])


def _ok(records: list[Record], case: str, direction: str | None = None) -> list[Record]:
    if isinstance(records, _Rows):
        records = records.of_case(case)
    return [r for r in records if r["case"] == case and _measured(r)
            and (direction is None or r["direction"] == direction)]


def is_numa_device(device: object) -> bool:
    """A DDR row of one NUMA node alone ('numa1', 'node7:numa1'), not the whole host, and
    not a pair of nodes ('numa0->numa1': one node's CPUs reading another's memory)."""
    own = str(device).rsplit(":", 1)[-1]
    return own.startswith("numa") and "->" not in own


def numa_pair(device: object) -> tuple[str, str] | None:
    """('numa0', 'numa1') for a NUMA pair device ('numa0->numa1', 'node7:numa0->numa1':
    CPUs of the first node reading memory of the second); None for anything else."""
    own = str(device).rsplit(":", 1)[-1]
    source, arrow, target = own.partition("->")
    if not arrow or not source.startswith("numa") or not target.startswith("numa"):
        return None
    return source, target


def _ddr_rows(records: list[Record]) -> list[dict[str, object]]:
    """The ddr_triad row of each host (one in a single run, one per node in a fleet),
    then each NUMA node's on its own where the host has several."""
    case = path_of("ddr").headline
    by_device = _grouped(_ok(records, case), "device")
    hosts = list(dict.fromkeys(node_of(d) for d in by_device))
    out = []
    for device in sorted(by_device, key=lambda d: (hosts.index(node_of(d)), is_numa_device(d))):
        everything = by_device[device]
        # DDR's figure uses arrays of at least 4x the last-level cache, as STREAM's rule says:
        # a smaller array is partly served by the cache and reads several times faster.
        mine = [r for r in everything if not _resident(r)]
        if not mine:
            out.append(_in_cache_row(
                "ddr", _largest(everything),
                note=f"every {case} row's arrays are under 4x the last-level cache: cache "
                     "bandwidth, not DDR; use a larger --size (or free memory where bwprof "
                     "had to shrink them)"))
            continue
        best = _picked(mine)
        at_size = [r for r in mine if _size(r) == _size(best)]
        notes = ([f"the best median of {len(at_size)} {case} rows (threads) at its largest "
                  "size"] if len(at_size) > 1 else [])
        if len(mine) < len(everything):
            notes.append(f"{len(everything) - len(mine)} row(s) with arrays under 4x the "
                         "last-level cache left out")
        out.append(_figure_row("ddr", best, note="; ".join(notes)))
    return out


def _picked(rows: list[Record]) -> Record:
    """The row that stands for one device's path (`figures.pick`: the largest size, the best
    median there); rows are all measured, of one metric."""
    lower = any(r["higher_is_better"] is False or r["higher_is_better"] is np.False_
                for r in rows)
    picked = figures.pick(rows, higher_is_better=not lower)
    assert picked is not None
    return cast(Record, picked)


def node_of(device: object) -> str:
    """The node part of a fleet run's device label ('node7:gpu0' -> 'node7'; '' otherwise)."""
    text = str(device)
    return text.split(":", 1)[0] if ":" in text else ""


C2C_SUMMARY_NOTE = "host link is NVLink-C2C: no peak known for it (PCIe's does not apply)"


def _per_gpu_rows(path: str, records: list[Record], cases: Iterable[str],
                  direction: str | None) -> list[dict[str, object]]:
    """Each case per device at its largest size, cache-resident sizes left out (a device with
    nothing else keeps its largest as 'in cache', without a figure)."""
    out = []
    for case in cases:
        rows = _ok(records, case, direction)
        if case.endswith(AGGREGATE_SUFFIX):  # the aggregate row: 'all' ('node7:all': fleet)
            rows = [r for r in rows if str(r["device"]).rsplit(":", 1)[-1] == "all"]
        measured = [r for r in rows if not _resident(r)]
        for row in map(_picked, _grouped(measured, "device").values()):
            out.append(_figure_row(path, row, note=C2C_SUMMARY_NOTE
                                   if _has_flag(row, f.C2C_LINK) else ""))
        figured = {r["device"] for r in measured}
        only_cached = [r for r in rows if _resident(r) and r["device"] not in figured]
        for row in _largest_per_device(only_cached):
            out.append(_in_cache_row(
                path, row,
                note=f"every {case} row of {row['device']} fits in its cache: cache bandwidth, "
                     "not the memory's"))
    return out


def _metric_rows(path: str, records: list[Record]) -> list[dict[str, object]]:
    """Every case of the path's metric (latency, throughput), per device at its largest size."""
    rows = [r for r in records if r["metric"] == METRIC_PATHS[path] and _measured(r)
            and not _resident(r)]  # a cache's latency is not the memory's
    out = []
    for mine in _grouped(rows, "case").values():
        out += [_figure_row(path, _picked(theirs))
                for theirs in _grouped(mine, "device").values()]
    return out


def _threads(row: Record) -> float | None:
    try:
        return cell_float(row["threads"])
    except (TypeError, ValueError):  # not a count: as pandas' to_numeric(errors="coerce")
        return None


def _ceiling_rows(records: list[Record]) -> list[dict[str, object]]:
    """The compute path: each throughput case's ceiling per device, its fastest row over
    every dtype and size (with the most threads on a host: one thread is the GPU/CPU
    sentence's). Not the largest size: that is fp64's (8 bytes an element), its slowest
    arithmetic, so an H200 would read 60 TFLOP/s where bf16 reaches ten times that."""
    rows = [r for r in records if r["metric"] == METRIC_PATHS["compute"] and _measured(r)]
    out = []
    for mine in _grouped(rows, "case").values():
        for theirs in _grouped(mine, "device").values():
            counts = [t for t in map(_threads, theirs) if t is not None]
            if counts:
                theirs = [r for r in theirs if _threads(r) == max(counts)]
            out.append(_figure_row("compute", max(theirs, key=_value)))
    return out


# The latency cases the summary knows by name; any other latency case is shown
# per device at its largest size, as `_metric_rows` does.
HOST_LATENCY = "lat_host"
NUMA_LATENCY = "lat_host_numa"
GPU_LATENCY = "lat_gpu"
H2D_LATENCY = "lat_h2d"
P2P_LATENCY = "lat_p2p"
MEMCPY_LATENCY = "lat_memcpy"
H2D_TLB_PHASE = "random_tlb"
"""lat_h2d's second row (`bwprof.gpu.latency.H2D_RANDOM_PHASE`): the random chase through a
set >= 4x the L2, TLB misses included; the host round trip is the row without a phase."""
LOADED_LATENCY: tuple[str, ...] = ("lat_host_loaded", "lat_gpu_loaded")
LATENCY_ORDER: tuple[str, ...] = (HOST_LATENCY, NUMA_LATENCY, GPU_LATENCY, H2D_LATENCY,
                                  P2P_LATENCY, MEMCPY_LATENCY)
MEMCPY_DIRECTIONS: tuple[str, ...] = ("h2d", "d2h", "within")
SLOWEST_GPU = "slowest GPU"
LOAD_PREFIX = "load_"


def is_loaded(phase: object) -> bool:
    """A loaded-latency row's phase (`load_N`: a concurrent streaming load of nominal
    intensity N%, `load_0` idle)."""
    return isinstance(phase, str) and phase.startswith(LOAD_PREFIX)


def load_percent(phase: object) -> int | None:
    """N of a `load_N` phase; None for any other phase."""
    if not is_loaded(phase):
        return None
    digits = str(phase).removeprefix(LOAD_PREFIX)
    return int(digits) if digits.isdigit() else None


def _page_text(value: object) -> str:
    from bwprof.units import format_bytes

    size = cell_float(value)
    return "" if size is None else f"{format_bytes(int(size))} pages"


def _memory_latency_rows(rows: list[Record], case: str) -> list[dict[str, object]]:
    """A memory's own load latency, per device: the largest working set that is not
    cache-resident (`in_cache`, `l2_resident`); where several page sizes were chased at
    that size, the lowest. A device whose every working set fits in a cache keeps its
    largest as 'in cache', without a figure."""
    out = []
    for device, everything in _grouped([r for r in rows if r["case"] == case],
                                       "device").items():
        beyond = [r for r in everything if not _resident(r)]
        if not beyond:
            out.append(_in_cache_row(
                "latency", _largest(everything),
                note=f"every {case} working set of {device} fits in a cache (under 4x its "
                     "size): a cache's latency, not the memory's"))
            continue
        top = max(_size(r) for r in beyond)
        at_size = [r for r in beyond if _size(r) == top]
        best = min(at_size, key=_value)
        notes = []
        pages = [p for p in dict.fromkeys(cell_float(r.get("page_bytes")) for r in at_size)
                 if p is not None]
        if len(pages) > 1:
            own = cell_float(best.get("page_bytes"))
            others = [_page_text(p) for p in pages if p != own]
            notes.append(f"on {_page_text(own)}, the lowest of "
                         f"{len(at_size)} page sizes ({', '.join(others)} in results.csv)")
        out.append(_figure_row("latency", best, note="; ".join(notes)))
    return out


def _matrix(records: list[Record], case: str, direction: str | None = None) -> list[Record]:
    """`matrix_rows` of records."""
    rows = [r for r in _ok(records, case, direction) if not is_loaded(r["phase"])]
    sized = [r for r in rows if not is_missing(r["size_bytes"])]
    if not sized:
        return rows
    pairs: dict[object, set[object]] = {}
    for row in sized:
        pairs.setdefault(row["size_bytes"], set()).add(row["device"])
    most = max(len(devices) for devices in pairs.values())
    size = max(number(s) for s, devices in pairs.items() if len(devices) == most)
    return [r for r in sized if number(r["size_bytes"]) == size]


def row_records(results: pd.DataFrame, read: Iterable[str] = _READ_COLUMNS) -> list[Record]:
    """The rows of `results` as dicts of the columns in `read` (the summary's by default),
    built from whole columns: the judge reads a fleet's rows this way, one pass for every
    box."""
    return _records(results, read)


def matrix_records(rows: list[Record], case: str, direction: str | None = None) -> list[Record]:
    """`matrix_rows` of records (`row_records`): the same rows, as the same dicts."""
    return _matrix(rows, case, direction)


def matrix_rows(results: pd.DataFrame, case: str, direction: str | None = None) -> pd.DataFrame:
    """The ok rows of a pair case (`p2p_copy`, `lat_p2p`, `lat_host_numa`) at the size its
    matrix was measured at: the size the most pairs have (a first pair may sweep every
    size), the largest of those on a tie."""
    records = _records(results)
    chosen = {id(row) for row in _matrix(records, case, direction)}
    return results.iloc[[i for i, row in enumerate(records) if id(row) in chosen]]


def _slowest_pair_row(path: str, rows: list[Record], what: str = "") -> list[dict[str, object]]:
    """The worst figure of a pair matrix (the lowest bandwidth, the highest latency), as one
    row of device SLOWEST_PAIR; `what` says what a pair's order means."""
    if not rows:
        return []
    higher_is_better = get_metric(str(rows[0]["metric"])).higher_is_better
    slowest = min(rows, key=_value) if higher_is_better else max(rows, key=_value)
    note = f"{slowest['device']} is the slowest of {len(rows)} ordered pair(s)"
    return [_figure_row(path, slowest, device=SLOWEST_PAIR,
                        note=f"{note} ({what})" if what else note)]


def _memcpy_rows(rows: list[Record]) -> list[dict[str, object]]:
    """Small-copy latency per direction: the one GPU's, or the slowest GPU's of several."""
    by_direction = _grouped([r for r in rows if r["case"] == MEMCPY_LATENCY], "direction")
    directions: list[object] = [d for d in MEMCPY_DIRECTIONS if d in by_direction]
    directions += [d for d in by_direction if d not in directions]
    out = []
    for direction in directions:
        chosen = _largest_per_device(by_direction[direction])
        slowest = max(chosen, key=_value)
        if len(chosen) == 1:
            out.append(_figure_row("latency", slowest))
        else:
            out.append(_figure_row(
                "latency", slowest, device=SLOWEST_GPU,
                note=f"{slowest['device']} is the slowest of {len(chosen)} GPUs "
                     f"({direction})"))
    return out


def _latency_rows(records: list[Record]) -> list[dict[str, object]]:
    """The latency path: DDR (lat_host) and, where the host has several nodes, the slowest
    NUMA pair (lat_host_numa); HBM (lat_gpu) and the host round trip (lat_h2d) per GPU; the
    slowest GPU pair (lat_p2p); small copies per direction (lat_memcpy); then any other
    latency case per device at its largest size. Loaded rows (`load_N`) are never the idle
    figure: they have lines of their own (`terminal.loaded_latency_lines`)."""
    rows = [r for r in records if r["metric"] == METRIC_PATHS["latency"] and _measured(r)
            and not is_loaded(r["phase"])]
    out = _memory_latency_rows(rows, HOST_LATENCY)
    out += _slowest_pair_row("latency", _matrix(rows, NUMA_LATENCY),
                             "CPUs of the first node reading memory of the second")
    out += _memory_latency_rows(rows, GPU_LATENCY)
    out += _memory_latency_rows([r for r in rows if r["phase"] != H2D_TLB_PHASE], H2D_LATENCY)
    out += _slowest_pair_row("latency", _matrix(rows, P2P_LATENCY),
                             "the first GPU reading memory of the second")
    out += _memcpy_rows(rows)
    out += _metric_rows("latency", [r for r in rows if r["case"] not in LATENCY_ORDER
                                    and r["case"] not in LOADED_LATENCY])
    return out


def p2p_matrix_rows(results: pd.DataFrame) -> pd.DataFrame:
    """The ok p2p_copy rows at the size the matrix was measured at: the size the most pairs
    have (only the first pair sweeps every size), the largest of those on a tie."""
    p2p = path_of("p2p")
    return matrix_rows(results, p2p.headline, p2p.direction)


def _p2p_rows(records: list[Record]) -> list[dict[str, object]]:
    p2p = path_of("p2p")
    return _slowest_pair_row("p2p", _matrix(records, p2p.headline, p2p.direction))


def _overlap_rows(records: list[Record]) -> list[dict[str, object]]:
    concurrent = [r for r in records if r["phase"] == "concurrent" and r["status"] == "ok"
                  and not is_missing(r["overlap_efficiency"])]
    out = []
    for mine in _grouped(concurrent, "case").values():
        for row in _largest_per_device(mine):
            efficiency = number(row["overlap_efficiency"])
            out.append(_figure_row(
                "overlap", row, metric=EFFICIENCY.name, unit=EFFICIENCY.unit,
                higher_is_better=EFFICIENCY.higher_is_better, value=efficiency,
                value_median=efficiency, value_best=None, peak_value=None, pct_of_peak=None,
                peak_source="",
                overlap_efficiency=efficiency))
    return out


def _add_ratios(rows: list[dict[str, object]]) -> None:
    """HBM/DDR and HBM/PCIe (host→device, same GPU) on every hbm_triad row, and HBM/DDR
    latency on every lat_gpu row."""
    hbm_case, h2d_case = path_of("hbm").headline, path_of("h2d").headline
    ddr = {node_of(r["device"]): number(r["gbps"]) for r in rows
           if r["path"] == "ddr" and r["gbps"] and not is_numa_device(r["device"])}
    h2d = {r["device"]: number(r["gbps"]) for r in rows
           if r["case"] == h2d_case and r["gbps"]
           and not _has_flag(r, f.C2C_LINK)}  # HBM÷PCIe: not against NVLink-C2C
    # HBM latency over DDR latency (per dependent load) on every lat_gpu row, beside the
    # bandwidth ratio of the hbm_triad rows: the same column, each in its own metric.
    ddr_ns = {node_of(r["device"]): number(r["value"]) for r in rows
              if r["case"] == HOST_LATENCY and r["value"] and not is_numa_device(r["device"])}
    for row in rows:
        if row["case"] == GPU_LATENCY and row["value"]:
            node_ns = ddr_ns.get(node_of(row["device"]))
            row["hbm_over_ddr"] = figures.ratio(number(row["value"]), node_ns)
    for row in rows:
        if row["case"] == hbm_case and row["gbps"]:
            hbm = number(row["gbps"])
            node_ddr = ddr.get(node_of(row["device"]))  # the same node's DDR in a fleet
            row["hbm_over_ddr"] = figures.ratio(hbm, node_ddr)  # None: not comparable
            pcie = h2d.get(row["device"])
            row["hbm_over_pcie"] = figures.ratio(hbm, pcie)


def build_summary(results: pd.DataFrame) -> pd.DataFrame:
    """The summary frame (columns SUMMARY_COLUMNS) of one run's results."""
    records = _records(results)
    run_id = str(records[0]["run_id"]) if records else ""
    host = str(records[0]["host"]) if records else ""
    by_path = {
        "ddr": _ddr_rows(records),
        "hbm": _per_gpu_rows("hbm", records, summary_cases("hbm"), None),
        "h2d": _per_gpu_rows("h2d", records, summary_cases("h2d"), "h2d"),
        "d2h": _per_gpu_rows("d2h", records, summary_cases("d2h"), "d2h"),
        "p2p": _p2p_rows(records),
        "net": _per_gpu_rows("net", records, summary_cases("net"), "net"),
        "overlap": _overlap_rows(records),
        "latency": _latency_rows(records),
        "compute": _ceiling_rows(records),
    }
    rows: list[dict[str, object]] = []
    for path in PATHS:
        if path in OPTIONAL_PATHS and not by_path[path] and not _has_rows_of(path, records):
            continue
        rows += by_path[path] or [_missing_row(path, records, run_id, host)]
    _add_ratios(rows)
    frame = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    for column in ("size_bytes", "threads", "repeats", "schema_version"):
        frame[column] = pd.to_numeric(frame[column]).astype("Int64")
    for column in ("value", "value_median", "gbps", "gbps_median", "copy_gbps",
                   "copy_gbps_median", "cv", "peak_value",
                   "peak_gbps", "pct_of_peak", "overlap_efficiency", "hbm_over_ddr",
                   "hbm_over_pcie"):
        frame[column] = pd.to_numeric(frame[column]).astype("float64")
    frame["higher_is_better"] = frame["higher_is_better"].astype("boolean")
    for column in ("metric", "unit", "flags", "note", "peak_source"):
        frame[column] = frame[column].fillna("").astype(str)
    return frame


def _has_rows_of(path: str, records: list[Record]) -> bool:
    if path in METRIC_PATHS:
        return any(r["metric"] == METRIC_PATHS[path] for r in records)
    cases = set(summary_cases(path))  # once, not once a row
    return any(r["case"] in cases for r in records)



def rows_from_frame(frame: pd.DataFrame) -> list[ResultRow]:
    """ResultRows from a results frame, with missing values as None; telemetry columns, where
    the file has them, become the rows' counters. Each column is made Python values once
    (missing as None, text's missing as '', numbers as int or float, flags parsed once per
    distinct cell), then zipped into rows: a Python call per cell cost a fleet's report
    half a millisecond a row."""
    telemetry = [c for c in TELEMETRY_COLUMNS if c in frame.columns]
    optional = [c for c in OPTIONAL_COLUMNS if c in frame.columns]
    names = [*RESULT_COLUMNS, *optional]
    integers = {*_INTEGER_COLUMNS, *_OPTIONAL_INTEGER_COLUMNS}
    texts = ("note", "phase", "device", "device_name", "metric", "unit", "cache_level")

    def cells(column: str) -> list[Any]:
        values = cast(Any, frame[column]).to_numpy(dtype=object, na_value=None).tolist()
        if column in texts:
            return [value or "" for value in values]
        if column == "flags":
            parsed = {value: split_flags(value) for value in set(values)}
            return [parsed[value] for value in values]
        if column == "higher_is_better":
            return [None if value is None else bool(value) for value in values]
        if column in integers:
            return [None if value is None else int(value) for value in values]
        if column in _FLOAT_COLUMNS:
            return [None if value is None else float(value) for value in values]
        return values

    with gc_paused():
        columns = [cells(c) for c in names]
        counters = [cells(c) for c in telemetry]
        counted = zip(*counters, strict=True) if counters else repeat(())
        rows = []
        for values, counts in zip(zip(*columns, strict=True), counted, strict=False):
            row = dict(zip(names, values, strict=True))
            row["counters"] = dict(zip(telemetry, counts, strict=True))
            rows.append(ResultRow(**row))
    return rows
