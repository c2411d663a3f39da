"""The capacity-review summary: one row per memory path, each figure beside its peak.

Paths, in order (declared once, `bwprof.casespec.PATHS`): DDR (`ddr_triad` of each host,
then of each of its NUMA nodes alone where it has several), HBM (`hbm_triad` and `d2d_copy`
per GPU), host→device and device→host (`h2d_pinned` / `d2h_pinned` at the largest size per
GPU, and `h2d_all` / `d2h_all` for all GPUs at once), GPU↔GPU (`p2p_copy` at the largest
size, the slowest ordered pair), network (fleet runs only: `net_p2p` host buffers at the
largest size per rank pair), overlap efficiency (the `concurrent` rows of the overlap
cases), and, where a run has rows of those metrics, latency and compute. Latency: DDR
(`lat_host`'s largest working set beyond the caches), the slowest NUMA pair
(`lat_host_numa`), HBM (`lat_gpu`'s largest working set beyond the L2) and the host round
trip (`lat_h2d`) per GPU, the slowest GPU pair (`lat_p2p`), small copies per direction
(`lat_memcpy`), any other latency case per device at its largest size; rows under a
concurrent load (`load_N`) are never among them. Compute: each throughput case's ceiling per
device (its fastest dtype and size, with every selected thread on a host; `dtype` names it).
A path with no figure keeps one row with an empty figure and the reason, so the table always
says what was not measured. The HBM rows carry the ratios HBM/DDR and HBM/PCIe per GPU,
the lat_gpu rows HBM/DDR latency.

Every figure is the MEDIAN of a row of results.csv (or a ratio of two), the row picked by
`bwprof.analysis.figures` as every output picks it (ok, no cache's, the largest size, the best
median there); the best is beside it, labelled (`value_best`, `gbps_best`). Never recomputed
from samples, it keeps the row's metric, unit and direction (`value`, `unit`,
`higher_is_better`; bandwidth figures also as `gbps`; a copy's also as `copy_gbps`, each
byte copied counted once as nvbandwidth counts it: half of `gbps` for `d2d_copy`, whose own
convention counts the buffer read and the buffer written). A cache-resident row
(`in_cache`, `l2_resident`) is never a memory's headline figure. A summary of simulated
rows keeps `backend` = `simulated`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from typing import cast

import numpy as np
import pandas as pd

from bwprof.analysis import figures
from bwprof.casespec import AGGREGATE_SUFFIX, path_of, summary_cases, summary_paths
from bwprof.casespec import PATHS as PATH_SPECS
from bwprof.coerce import number
from bwprof.schema import flags as f
from bwprof.schema.metrics import EFFICIENCY, get_metric
from bwprof.schema.rows import SCHEMA_VERSION
from bwprof.schema.table import each_cell, each_distinct, gc_paused, is_missing
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
"""One results row as a dict (`_records`): what the judge reads a fleet's rows as
(`row_records`), and what the summary's pair, latency and compute paths read their own few
rows as (`_Table.records`); the paths of a row per GPU select and pick on whole columns."""

_READ_COLUMNS = (
    "run_id", "host", "case", "backend", "device", "device_name", "memory", "direction",
    "dtype", "size_bytes", "threads", "repeats", "metric", "unit", "higher_is_better",
    "value_best", "value_median", "gbps_best", "gbps_median", "copy_gbps_best",
    "copy_gbps_median", "cv", "peak_value", "peak_gbps", "status", "flags", "note", "phase",
    "overlap_efficiency", "page_bytes",
)
"""The columns of results.csv the summary reads."""


def column_cells(column: pd.Series) -> list[object]:
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
    # floats, str, NA), without its per-row boxing (seconds for a fleet's 100,000 rows);
    # each dict made by map, not a generator's Python step a row (a third of the time).
    with gc_paused():
        columns = [column_cells(results[c]) for c in present]
        return _Rows(map(dict, map(zip, repeat(present), zip(*columns, strict=True))))


Spec = dict[str, object]
"""One summary row as a path chooses it: the position of its results row (`_POS`; -1 for a
path with no row, `_missing_row`), its path and what it says other than that row (`extra`,
`_BLANK` where it keeps no figure). `_summary_columns` makes every spec's cells at once, a
column at a time: a fleet's summary has a row per GPU and path, a hundred thousand at a
million rows, and a dict of forty cells each cost tens of microseconds."""

_POS = "__pos"
_BLANK = "__blank"
_KEEP = object()
"""An override cell that keeps the results row's own value."""


def _figure_row(path: str, row: Record, **extra: object) -> Spec:
    """The summary row of `row` (a record of `_path_records`, which carries its position)."""
    return {_POS: row[_POS], "path": path, **extra}


TRAFFIC_COPY_NOTE = ("counts bytes read + written (STREAM's convention); `copied` (copy_gbps) "
                     "counts each byte copied once, as nvbandwidth does")

_FIGURES = ("value", "value_median", "gbps", "gbps_median", "copy_gbps", "copy_gbps_median",
            "value_best", "gbps_best", "copy_gbps_best", "cv", "pct_of_peak")
"""The cells a row without a figure leaves empty (`_in_cache_row`)."""


def _in_cache_row(path: str, row: Record, note: str) -> Spec:
    """The row of a path whose every figure is a cache's: its status says so, no figure."""
    return {**_figure_row(path, row, status="in cache", note=note), _BLANK: True}


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


def _grouped(rows: list[Record], column: str) -> dict[object, list[Record]]:
    """The rows of each value of `column`, values in the order they first appear."""
    groups: dict[object, list[Record]] = {}
    for row in rows:
        groups.setdefault(row[column], []).append(row)
    return groups


def _missing_row(path: str, table: _Table, run_id: str, host: str) -> Spec:
    """The row of a path with no figure: why its headline case (the first of its cases,
    `summary_cases`, that ran) did not give one."""
    metric = METRIC_PATHS.get(path, "")
    cases = summary_cases(path) or tuple(dict.fromkeys(
        str(c) for c in table.cells("case", np.flatnonzero(table.equal("metric", metric)))))
    # On the columns, not records: a fleet's path without a figure (p2p_copy on boxes of one
    # GPU) has a waived row per box.
    mine = table.among("case", cases)
    others = np.flatnonzero(mine & ~table.equal("status", "ok"))
    case = cases[0] if len(cases) == 1 else ""
    if others.size:
        rank = {name: index for index, name in enumerate(cases)}
        codes, distinct = table._factorized("case")
        ranks = np.array([rank.get(str(c), len(rank)) for c in distinct], dtype=np.int64)
        first = others[np.argmin(ranks[codes[others]])]  # earliest case, then row
        status, note, case = (str(table.cells(c, np.array([first]))[0])
                              for c in ("status", "note", "case"))
    elif path == "overlap" and mine.any():
        status, note = "absent", "no concurrent row carries an overlap efficiency"
    else:
        shown = "overlap_*" if path == "overlap" else " or ".join(cases)
        status, note = "absent", f"no {shown} row in this run"
    return {
        _POS: -1, "run_id": run_id, "host": host, "path": path,
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


def _ddr_rows(table: _Table) -> list[_Piece]:
    """The ddr_triad row of each host (one in a single run, one per node in a fleet),
    then each NUMA node's on its own where the host has several."""
    case = path_of("ddr").headline
    rows = np.flatnonzero(table.equal("case", case) & table.measured)
    if not rows.size:
        return []
    devices, count = _local_codes(table.codes("device")[rows])
    names = table.cells("device", rows[_first_rows(devices, count)])
    hosts = list(dict.fromkeys(node_of(d) for d in names))
    host_rank = {host: index for index, host in enumerate(hosts)}
    # DDR's figure uses arrays of at least 4x the last-level cache, as STREAM's rule says:
    # a smaller array is partly served by the cache and reads several times faster.
    resident = table.resident[rows]
    mine = ~resident
    sizes = table.sizes[rows]
    best = figures.pick_per_group(devices, count, sizes, table.values[rows], table.lower[rows],
                                  mine)
    largest = figures.pick_per_group(devices, count, sizes)
    everything = np.bincount(devices, minlength=count)
    kept = np.bincount(devices[mine], minlength=count)
    top = sizes[np.maximum(best, 0)]
    at_size = np.bincount(devices[mine & (sizes == top[devices])], minlength=count)
    order = sorted(range(count), key=lambda d: (host_rank[node_of(names[d])],
                                                is_numa_device(names[d])))
    positions, notes, blank = [], [], []
    for device in order:
        if not kept[device]:
            positions.append(rows[largest[device]])
            blank.append(True)
            notes.append(f"every {case} row's arrays are under 4x the last-level cache: cache "
                         "bandwidth, not DDR; use a larger --size (or free memory where bwprof "
                         "had to shrink them)")
            continue
        said = ([f"the best median of {at_size[device]} {case} rows (threads) at its largest "
                 "size"] if at_size[device] > 1 else [])
        if kept[device] < everything[device]:
            said.append(f"{everything[device] - kept[device]} row(s) with arrays under 4x the "
                        "last-level cache left out")
        positions.append(rows[best[device]])
        blank.append(False)
        notes.append("; ".join(said))
    status: list[object] = [("in cache" if b else _KEEP) for b in blank]
    return [_Piece(np.array(positions, dtype=np.int64), "ddr",
                   {"note": notes, "status": status}, np.array(blank, dtype=bool))]


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


def _per_gpu_rows(path: str, table: _Table, cases: Iterable[str],
                  direction: str | None) -> list[_Piece]:
    """Each case per device at its largest size, cache-resident sizes left out (a device with
    nothing else keeps its largest as 'in cache', without a figure)."""
    out = []
    for case in cases:
        wanted = table.equal("case", case) & table.measured
        if direction is not None:
            wanted &= table.equal("direction", direction)
        if case.endswith(AGGREGATE_SUFFIX):  # the aggregate row: 'all' ('node7:all': fleet)
            wanted &= table.where("device", lambda d: str(d).rsplit(":", 1)[-1] == "all")
        rows = np.flatnonzero(wanted)
        if not rows.size:
            continue
        resident = table.resident[rows]
        measured = rows[~resident]
        if measured.size:
            devices, count = _local_codes(table.codes("device")[measured])
            picked = measured[figures.pick_per_group(devices, count, table.sizes[measured],
                                    table.values[measured], table.lower[measured])]
            c2c = table.c2c[picked]
            out.append(_Piece(picked, path, {"note": [C2C_SUMMARY_NOTE if linked else ""
                                                      for linked in c2c.tolist()]}))
        figured = table.codes("device")[measured]
        cached = rows[resident]
        cached = cached[~np.isin(table.codes("device")[cached], figured)]
        if cached.size:
            devices, count = _local_codes(table.codes("device")[cached])
            largest = cached[figures.pick_per_group(devices, count, table.sizes[cached])]
            names = table.cells("device", largest)
            out.append(_Piece(largest, path, {
                "status": "in cache",
                "note": [f"every {case} row of {name} fits in its cache: cache bandwidth, "
                         "not the memory's" for name in names]}, np.ones(len(largest), bool)))
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
    table = _Table(results)
    records = table.records(table.equal("case", case))
    chosen = [cast(int, row[_POS]) for row in _matrix(records, case, direction)]
    return results.iloc[chosen]


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


def _overlap_rows(table: _Table) -> list[_Piece]:
    """Each overlap case's concurrent row per device, at its largest size: the efficiency."""
    concurrent = (table.equal("phase", "concurrent") & table.equal("status", "ok")
                  & ~table.missing("overlap_efficiency"))
    rows = np.flatnonzero(concurrent)
    if not rows.size:
        return []
    cases, _ = _local_codes(table.codes("case")[rows])
    devices = table.codes("device")[rows].astype(np.int64)
    pairs, count = _local_codes(cases.astype(np.int64) * (int(devices.max()) + 1) + devices)
    largest = figures.pick_per_group(pairs, count, table.sizes[rows])
    pair_case = cases[_first_rows(pairs, count)]
    chosen = rows[largest[np.lexsort((np.arange(count), pair_case))]]  # by case, then device
    efficiency = [number(value) for value in table.cells("overlap_efficiency", chosen)]
    return [_Piece(chosen, "overlap", {
        "metric": EFFICIENCY.name, "unit": EFFICIENCY.unit,
        "higher_is_better": EFFICIENCY.higher_is_better, "value": efficiency,
        "value_median": efficiency, "value_best": None, "peak_value": None,
        "pct_of_peak": None, "peak_source": "", "overlap_efficiency": efficiency})]


def _add_ratios(columns: dict[str, list[object]]) -> None:
    """HBM/DDR and HBM/PCIe (host→device, same GPU) on every hbm_triad row, and HBM/DDR
    latency on every lat_gpu row."""
    hbm_case, h2d_case = path_of("hbm").headline, path_of("h2d").headline
    paths, cases, devices, flag_cells = (columns[c] for c in ("path", "case", "device", "flags"))
    gbps, value = columns["gbps"], columns["value"]
    at = range(len(paths))
    ddr = {node_of(devices[i]): number(gbps[i]) for i in at
           if paths[i] == "ddr" and gbps[i] and not is_numa_device(devices[i])}
    h2d = {devices[i]: number(gbps[i]) for i in at
           if cases[i] == h2d_case and gbps[i]
           and not f.has_flag(flag_cells[i], f.C2C_LINK)}  # HBM÷PCIe: not against NVLink-C2C
    # HBM latency over DDR latency (per dependent load) on every lat_gpu row, beside the
    # bandwidth ratio of the hbm_triad rows: the same column, each in its own metric.
    ddr_ns = {node_of(devices[i]): number(value[i]) for i in at
              if cases[i] == HOST_LATENCY and value[i] and not is_numa_device(devices[i])}
    over_ddr, over_pcie = columns["hbm_over_ddr"], columns["hbm_over_pcie"]
    for i in at:
        if cases[i] == GPU_LATENCY and value[i]:
            node_ns = ddr_ns.get(node_of(devices[i]))
            over_ddr[i] = figures.ratio(number(value[i]), node_ns)
    for i in at:
        if cases[i] == hbm_case and gbps[i]:
            hbm = number(gbps[i])
            node_ddr = ddr.get(node_of(devices[i]))  # the same node's DDR in a fleet
            over_ddr[i] = figures.ratio(hbm, node_ddr)  # None: not comparable
            over_pcie[i] = figures.ratio(hbm, h2d.get(devices[i]))


def build_summary(results: pd.DataFrame) -> pd.DataFrame:
    """The summary frame (columns SUMMARY_COLUMNS) of one run's results. Each path selects
    its rows with masks over whole columns and picks per device on arrays
    (`figures.pick_per_group`); only the pair, latency and compute paths, whose rules are
    many but whose rows are few, read their own rows as records."""
    table = _Table(results)
    run_id = host = ""
    if len(results):  # the first row's, as every missing row says
        run_id, host = (str(table.cells(c, np.zeros(1, np.intp))[0]) for c in ("run_id", "host"))
    # Only measured rows: each path that reads records keeps those alone (`_measured`), and
    # a fleet's p2p_copy rows may be ten thousand waived ones.
    records = table.records((table.equal("case", path_of("p2p").headline)
                             | table.among("metric", (METRIC_PATHS["latency"],
                                                      METRIC_PATHS["compute"])))
                            & table.measured)
    by_path: dict[str, list[_Piece]] = {
        "ddr": _ddr_rows(table),
        "hbm": _per_gpu_rows("hbm", table, summary_cases("hbm"), None),
        "h2d": _per_gpu_rows("h2d", table, summary_cases("h2d"), "h2d"),
        "d2h": _per_gpu_rows("d2h", table, summary_cases("d2h"), "d2h"),
        "p2p": _pieces(_p2p_rows(records)),
        "net": _per_gpu_rows("net", table, summary_cases("net"), "net"),
        "overlap": _overlap_rows(table),
        "latency": _pieces(_latency_rows(records)),
        "compute": _pieces(_ceiling_rows(records)),
    }
    pieces: list[_Piece] = []
    for path in PATHS:
        if path in OPTIONAL_PATHS and not by_path[path] and not _has_rows_of(path, table):
            continue
        pieces += by_path[path] or _pieces([_missing_row(path, table, run_id, host)])
    table.forget_codes(keep=("dtype",))  # 8 bytes a row each, not read from here on
    columns = _summary_columns(table, pieces)
    _add_ratios(columns)
    frame = pd.DataFrame(columns, columns=list(SUMMARY_COLUMNS))
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


def _has_rows_of(path: str, table: _Table) -> bool:
    if path in METRIC_PATHS:
        return bool(table.equal("metric", METRIC_PATHS[path]).any())
    return bool(table.among("case", summary_cases(path)).any())


# -- the summary's rows as arrays ----------------------------------------------------------


class _Table:
    """A results frame as the summary selects on it: each column's codes (pandas'
    factorize: one code a distinct value, in order of first appearance) made once, so a
    selection ("case == 'hbm_triad'") is a test of the few distinct values and an array
    comparison, and sizes, figures and flags as arrays."""

    def __init__(self, results: pd.DataFrame) -> None:
        self.frame = results
        self._codes: dict[str, tuple[np.ndarray, list[object]]] = {}
        self._floats: dict[str, np.ndarray] = {}

    def _factorized(self, column: str) -> tuple[np.ndarray, list[object]]:
        if column not in self._codes:
            if column in self.frame.columns:
                codes, uniques = pd.factorize(self.frame[column], use_na_sentinel=False)
                self._codes[column] = (np.asarray(codes), column_cells(pd.Series(uniques)))
            else:  # a column the frame lacks: every cell None, as a record's .get gives
                self._codes[column] = (np.zeros(len(self.frame), np.intp), [None])
        return self._codes[column]

    def forget_codes(self, keep: Iterable[str] = ()) -> None:
        """Let go of the columns' codes but `keep`'s (made again if asked for)."""
        kept = set(keep)
        self._codes = {column: codes for column, codes in self._codes.items()
                       if column in kept}

    def codes(self, column: str) -> np.ndarray:
        return self._factorized(column)[0]

    def where(self, column: str, test: Callable[[object], bool]) -> np.ndarray:
        """The rows whose cell passes `test`, called once per distinct value."""
        return each_distinct(*self._factorized(column), test)

    def equal(self, column: str, text: str) -> np.ndarray:
        """The rows whose cell is the text `text` (as a record's `==`: missing is not)."""
        return self.where(column, lambda value: isinstance(value, str) and value == text)

    def among(self, column: str, texts: Iterable[str]) -> np.ndarray:
        wanted = set(texts)
        return self.where(column, lambda value: isinstance(value, str) and value in wanted)

    def missing(self, column: str) -> np.ndarray:
        if column not in self.frame.columns:
            return np.ones(len(self.frame), bool)
        return self.frame[column].isna().to_numpy(dtype=bool)

    def floats(self, column: str) -> np.ndarray:
        """The column as floats (`cell_float`), NaN where a cell holds none."""
        if column not in self._floats:
            values = self.frame[column]
            if pd.api.types.is_numeric_dtype(values.dtype) and not pd.api.types.is_bool_dtype(
                    values.dtype):
                self._floats[column] = values.to_numpy(dtype="float64", na_value=np.nan)
            else:
                self._floats[column] = np.array(
                    [np.nan if (v := cell_float(cell)) is None else v
                     for cell in column_cells(values)],
                    dtype="float64")
        return self._floats[column]

    @cached_property
    def measured(self) -> np.ndarray:
        """ok rows with their figure (`figures.measured`)."""
        return self.equal("status", "ok") & ~self.missing(figures.column("value"))

    @cached_property
    def resident(self) -> np.ndarray:
        """Cache-resident rows (`in_cache`, `l2_resident`): never a memory's figure."""
        return self.where("flags", f.is_cache_resident)

    @cached_property
    def c2c(self) -> np.ndarray:
        return self.where("flags", lambda cell: f.has_flag(cell, f.C2C_LINK))

    @cached_property
    def lower(self) -> np.ndarray:
        """Rows that say lower is better (`_picked`)."""
        return self.where("higher_is_better", lambda cell: cell is False or cell is np.False_)

    @cached_property
    def sizes(self) -> np.ndarray:
        """Each row's size in bytes, 0 where it has none (`figures.size`)."""
        return np.nan_to_num(self.floats("size_bytes"), nan=0.0)

    @cached_property
    def values(self) -> np.ndarray:
        """Each row's figure (`figures.value`), NaN where it has none."""
        return self.floats(figures.column("value"))

    def cells(self, column: str, rows: np.ndarray) -> list[object]:
        """The cells of `rows` (positions) as a record holds them (`column_cells`)."""
        if column not in self.frame.columns:
            return [None] * len(rows)
        return column_cells(self.frame[column].take(rows))

    def shared_cells(self, column: str, rows: np.ndarray) -> list[object]:
        """`cells`, each distinct text one object: a fleet's summary repeats a few cases,
        hosts and devices over a hundred thousand rows, each cell its own str object was
        tens of MB of fresh memory (the same values; a column not of text as `cells`)."""
        if column not in self.frame.columns or self.frame[column].dtype != "str":
            return self.cells(column, rows)
        codes, uniques = pd.factorize(self.frame[column].take(rows), use_na_sentinel=False)
        distinct = np.empty(len(uniques), dtype=object)
        distinct[:] = column_cells(pd.Series(uniques))
        return cast(list[object], distinct[codes].tolist())

    def records(self, mask: np.ndarray) -> list[Record]:
        """The rows `mask` marks as records (`_records`), each with its position."""
        rows = np.flatnonzero(mask)
        records = _records(self.frame.take(rows))
        for record, row in zip(records, rows.tolist(), strict=True):
            record[_POS] = row
        return records


def _local_codes(codes: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes of a selection renumbered from 0 in the order they first appear, and how many."""
    local, uniques = pd.factorize(codes)
    return np.asarray(local), len(uniques)


def _first_rows(groups: np.ndarray, count: int) -> np.ndarray:
    """The index of each group's first row (groups numbered in order of first appearance)."""
    first = np.full(count, -1, dtype=np.int64)
    first[groups[::-1]] = np.arange(len(groups) - 1, -1, -1)
    return first


@dataclass
class _Piece:
    """Summary rows of one path: their results rows' positions (-1: none) and what each
    says other than its row (`extra`: a column's cell for every row, or one per row;
    `_KEEP` keeps the row's own), `blank` where a row keeps no figure."""

    rows: np.ndarray
    path: str
    extra: dict[str, object] = field(default_factory=dict)
    blank: np.ndarray | None = None


def _pieces(specs: list[Spec]) -> list[_Piece]:
    """The specs of a record-read path as one piece."""
    if not specs:
        return []
    keys = dict.fromkeys(k for spec in specs for k in spec if k not in (_POS, _BLANK, "path"))
    paths = {spec["path"] for spec in specs}
    assert len(paths) == 1
    return [_Piece(np.array([spec[_POS] for spec in specs], dtype=np.int64), str(paths.pop()),
                   {k: [spec.get(k, _KEEP) for spec in specs] for k in keys},
                   np.array([bool(spec.get(_BLANK)) for spec in specs], dtype=bool))]


def _plain_cells(column: str, table: _Table, rows: np.ndarray) -> list[object]:
    """`plain` of each cell (None for NaN and NA, Python numbers)."""
    dtype = table.frame[column].dtype if column in table.frame.columns else None
    if dtype == np.float64:
        values = table.frame[column].to_numpy()[rows]
        cells = values.astype(object)  # Python floats
        cells[np.isnan(values)] = None
        return cast(list[object], cells.tolist())
    if dtype in _NULLABLE:  # `column_cells` gives Python ints and bools, None where missing
        return table.cells(column, rows)
    return [plain(cell) for cell in table.cells(column, rows)]


_NULLABLE = (pd.Int64Dtype(), pd.BooleanDtype())


def _summary_columns(table: _Table, pieces: list[_Piece]) -> dict[str, list[object]]:
    """Every summary row's cells, a column at a time: what `_figure_row` made of each row
    (figure, peak, % of peak, the copy-convention note), then each piece's own cells."""
    rows = (np.concatenate([p.rows for p in pieces]) if pieces
            else np.zeros(0, dtype=np.int64))
    count = len(rows)
    none = np.flatnonzero(rows < 0)
    at = np.where(rows < 0, 0, rows) if len(table.frame) else np.zeros(0, dtype=np.int64)

    def raw(column: str) -> list[object]:
        cells: list[object] = (table.shared_cells(column, at) if len(table.frame)
                               else [None] * count)
        for i in none.tolist():
            cells[i] = None
        return cells

    def plains(column: str) -> list[object]:
        cells: list[object] = (_plain_cells(column, table, at) if len(table.frame)
                               else [None] * count)
        for i in none.tolist():
            cells[i] = None
        return cells

    columns: dict[str, list[object]] = {}
    for column in ("run_id", "host", "case", "backend", "device", "device_name", "memory",
                   "direction", "metric", "unit", "status", "flags"):
        columns[column] = raw(column)
    codes, distinct = table._factorized("dtype")  # each distinct cell's text once
    texts = [cell_text(cell) for cell in distinct]
    columns["dtype"] = [texts[code] for code in codes[at].tolist()] if len(table.frame) else (
        [""] * count)
    for column in ("size_bytes", "threads", "repeats", "value_median", "gbps_median",
                   "copy_gbps_median", "value_best", "gbps_best", "copy_gbps_best", "cv",
                   "peak_gbps"):
        columns[column] = plains(column)
    columns["higher_is_better"] = plains("higher_is_better")
    value = [cell_float(cell) for cell in plains(figures.column("value"))]
    peak = [figures.a_peak(cell_float(cell)) for cell in plains("peak_value")]
    columns["value"] = cast(list[object], value)
    columns["gbps"] = plains(figures.column("gbps"))
    columns["copy_gbps"] = plains(figures.column("copy_gbps"))
    columns["peak_value"] = cast(list[object], peak)
    columns["pct_of_peak"] = [
        figures.ratio(100.0 * v, p) if v is not None and h else None
        for v, p, h in zip(value, peak, columns["higher_is_better"], strict=True)]
    columns["peak_source"] = [
        figures.source_of(memory, direction, flags) if p else ""
        for p, memory, direction, flags in zip(peak, columns["memory"], columns["direction"],
                                               columns["flags"], strict=True)]
    for column in ("overlap_efficiency", "hbm_over_ddr", "hbm_over_pcie"):
        columns[column] = [None] * count
    columns["note"] = [""] * count
    columns["schema_version"] = [SCHEMA_VERSION] * count
    columns["path"] = [None] * count
    for i in none.tolist():  # a path without a row: only what its piece says
        for column in columns:
            columns[column][i] = None
    # A copy whose figure counts more than the bytes it copied (`d2d_copy`: the buffer read
    # and the buffer written), so its copy-convention figure differs from it (NaN: never).
    copied, counted = (table.floats(figures.column(c))[at] if len(table.frame)
                       else np.full(count, np.nan) for c in ("copy_gbps", "gbps"))
    more = copied < counted * (1 - 1e-9)
    more[none] = False
    copied_more = np.flatnonzero(more).tolist()

    start = 0
    for piece in pieces:
        stop = start + len(piece.rows)
        columns["path"][start:stop] = [piece.path] * (stop - start)
        for column, cells in piece.extra.items():
            target = columns[column]
            if isinstance(cells, list):
                target[start:stop] = [old if new is _KEEP else new
                                      for old, new in zip(target[start:stop], cells,
                                                          strict=True)]
            else:
                target[start:stop] = [cells] * (stop - start)
        start = stop
    notes = columns["note"]
    for i in copied_more:
        notes[i] = "; ".join(n for n in (str(notes[i] or ""), TRAFFIC_COPY_NOTE) if n)
    start = 0
    for piece in pieces:
        stop = start + len(piece.rows)
        if piece.blank is not None and piece.blank.any():
            for i in (np.flatnonzero(piece.blank) + start).tolist():
                for column in _FIGURES:
                    columns[column][i] = None
        start = stop
    return columns


def has_figure(row: pd.Series | Mapping[str, object]) -> bool:
    return plain(row["value"]) is not None


def _why_no_figure(row: pd.Series) -> str:
    """' (reason)' for a summary row without a figure; skipped and waived reasons are said
    once, in the lines under the table, so not here."""
    if row["status"] in ("skipped", "waived"):
        return ""
    return f" ({row['note']})" if row["status"] == "absent" else (
        f" ({row['status']}: {row['note']})")


def headline_sentence(summary: pd.DataFrame) -> str:
    """The HBM-versus-DDR ratio in one sentence (the headline of a capacity review)."""
    hbm_case, ddr_case, h2d_case = (path_of(key).headline for key in ("hbm", "ddr", "h2d"))
    hbm = summary[(summary["case"] == hbm_case) & summary["gbps"].notna()]
    ddr = summary[(summary["path"] == "ddr") & summary["gbps"].notna()
                  & ~each_cell(summary["device"], is_numa_device)]
    if ddr.empty and hbm.empty:
        return "No DDR and no HBM figure in this run, so there is no HBM/DDR ratio."
    if hbm.empty:
        why = _why_no_figure(summary[summary["path"] == "hbm"].iloc[0])
        text = f"No HBM figure{why or ' in this run'}, so there is no HBM/DDR ratio"
        if len(ddr):
            text += f"; DDR's is {float(ddr['gbps'].iloc[0]):.1f} GB/s ({ddr_case})"
        return text + "."
    if ddr.empty:
        ddr_row = summary[summary["path"] == "ddr"].iloc[0]
        why = (f" (every {ddr_case} row's arrays fit in the cache)"
               if ddr_row["status"] == "in cache" else _why_no_figure(ddr_row))
        return f"No DDR figure{why}, so there is no HBM/DDR ratio."
    if (hbm["backend"] == "simulated").any() or (ddr["backend"] == "simulated").any():
        return ("HBM against DDR: the GPU rows of this run are simulated, not measurements, so "
                "there is no measured ratio (summary.csv keeps the arithmetic, labelled "
                "simulated).")
    ddr_gbps = float(ddr["gbps"].iloc[0])
    ratios = hbm["hbm_over_ddr"].dropna()
    names = ", ".join(dict.fromkeys(hbm["device_name"]))
    pcie = hbm["hbm_over_pcie"].dropna()
    if ratios.empty:  # a fleet whose HBM rows come from nodes without a DDR row
        return ("No node has both an HBM and a DDR figure in this run, so there is no "
                "HBM/DDR ratio.")
    if len(ddr) > 1:  # a fleet: each GPU against its own node's DDR
        text = (f"HBM moves {_span(ratios)}× the bandwidth of DDR, per GPU against its own "
                f"node's {ddr_case} ({len(hbm)} GPUs on {len(ddr)} nodes, {names})")
        if len(pcie):
            text += f", and {_span(pcie)}× each GPU's host→device link ({h2d_case})"
        return text + "."
    if len(hbm) == 1:
        row = hbm.iloc[0]
        text = (f"HBM moves {ratios.iloc[0]:.1f}× the bandwidth of DDR on this box: "
                f"{row['gbps']:.0f} GB/s ({hbm_case}, {row['device']} {row['device_name']}) "
                f"against {ddr_gbps:.1f} GB/s ({ddr_case})")
        if len(pcie):
            text += f", and {pcie.iloc[0]:.1f}× its host→device link ({h2d_case})"
        return text + "."
    span = _span(ratios)
    text = (f"HBM moves {span}× the bandwidth of DDR on this box, per GPU ({len(hbm)} GPUs, "
            f"{names}: {hbm_case} against {ddr_case}, {ddr_gbps:.1f} GB/s)")
    if len(pcie):
        text += f", and {_span(pcie)}× each GPU's host→device link ({h2d_case})"
    return text + "."


def _span(values: pd.Series) -> str:
    low, high = float(values.min()), float(values.max())
    return f"{low:.1f}" if math.isclose(low, high, rel_tol=0.005) else f"{low:.1f}–{high:.1f}"


def _figure_text(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _ns_span(values: pd.Series) -> str:
    low, high = float(values.min()), float(values.max())
    if math.isclose(low, high, rel_tol=0.005):
        return f"{_figure_text(low)} ns"
    return f"{_figure_text(low)}–{_figure_text(high)} ns"


def latency_sentence(summary: pd.DataFrame) -> str | None:
    """HBM against DDR in bandwidth and in latency, side by side ('HBM/DDR bandwidth 30.0×,
    latency 4.2×: ...'): HBM moves many times the bytes, yet each dependent load from it
    waits longer than one from DDR, so "HBM ~10 ns" is no claim to repeat. None where the
    run has neither a lat_host nor a lat_gpu row."""
    own = summary[summary["case"].isin((HOST_LATENCY, GPU_LATENCY))]
    if own.empty:
        return None
    gpu = own[(own["case"] == GPU_LATENCY) & own["value"].notna()]
    ddr = own[(own["case"] == HOST_LATENCY) & own["value"].notna()]
    if ddr.empty:
        rows = own[own["case"] == HOST_LATENCY]
        why = _why_no_figure(rows.iloc[0]) if len(rows) else " in this run"
        return f"No DDR latency figure (lat_host){why or ' in this run'}, so there is no " \
               "HBM/DDR latency ratio."
    ddr_text = f"{_ns_span(ddr['value'])} from DDR (lat_host" + (
        f", {len(ddr)} nodes)" if len(ddr) > 1 else ")")
    if gpu.empty:
        rows = own[own["case"] == GPU_LATENCY]
        if rows.empty:
            return f"A dependent load takes {ddr_text}; no GPU latency in this run."
        return (f"A dependent load takes {ddr_text}; no HBM latency figure (lat_gpu)"
                f"{_why_no_figure(rows.iloc[0]) or ' in this run'}, so there is no HBM/DDR "
                "latency ratio.")
    if (gpu["backend"] == "simulated").any():
        return ("HBM against DDR latency: the GPU rows of this run are simulated, not "
                "measurements, so there is no measured latency ratio (summary.csv keeps the "
                "arithmetic, labelled simulated).")
    latency = gpu["hbm_over_ddr"].dropna()
    if latency.empty:
        return "No node has both an HBM and a DDR latency figure, so there is no HBM/DDR " \
               "latency ratio."
    hbm_case, ddr_case = path_of("hbm").headline, path_of("ddr").headline
    hbm = summary[(summary["case"] == hbm_case) & summary["hbm_over_ddr"].notna()
                  & (summary["backend"] != "simulated")]
    bandwidth = (f"bandwidth {_span(hbm['hbm_over_ddr'])}×" if len(hbm)
                 else f"bandwidth ? (no {hbm_case} and {ddr_case} figures)")
    names = ", ".join(dict.fromkeys(gpu["device_name"]))
    where = (f"{gpu['device'].iloc[0]} {names}" if len(gpu) == 1
             else f"{len(gpu)} GPUs, {names}")
    return (f"HBM/DDR {bandwidth}, latency {_span(latency)}×: a dependent load takes "
            f"{_ns_span(gpu['value'])} from HBM (lat_gpu, {where}) against {ddr_text}.")
