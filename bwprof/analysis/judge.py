"""Holding a run's figures against their bands: one Check per GPU (or host) and path.

Every figure judged is a row of results.csv at its largest size that no cache holds, and
its **median** (`value_median`): best-of-N hides the intermittent drop a sick box shows. A
figure whose CV is above the spec's `cv_max` is marked noisy. What the data cannot judge
says so instead of passing: a cache-resident, simulated, skipped or waived figure, a figure
measured while other processes took the host's cores (`busy_host`), a path the run did not
measure, a path without a band (host DDR without SMBIOS modules, latency without a spec). A
figure that failed validation fails: the box gave a wrong result. A path whose figure
bwprof itself could not give (an `error` row: an exception inside bwprof, at the size the
path is judged at or above it) is ERROR: a verdict of its own, never the box's, so the box's
verdict is the worst of the others.

A fleet run (`bwprof.fleet.merge`: devices `node7:gpu0`) is one box per node, and its
checks name their devices as its rows do ('node7:gpu0', 'node7:cpu') and their box by its
node where its host's label does not tell it apart (`fleet_box_names`). A fleet's figures
are picked on arrays for every GPU at once (`_judge_fleet`); a box whose rows need more
(a row that raised, a busy figure, latency rows) is judged as a single box is (`_Judge`),
and both give the same checks.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any, NamedTuple, cast

import numpy as np
import pandas as pd

from bwprof.analysis import bands
from bwprof.analysis.bands import Band, Part
from bwprof.analysis.figures import (
    a_peak,
    best_of,
    pick_per_group,
    ratio,
    size,
    source_of,
)
from bwprof.analysis.spec import Override, Spec
from bwprof.analysis.summary import column_cells, is_loaded, matrix_records, row_records
from bwprof.casespec import MEDIAN_BEYOND_CACHE, judged_paths, path_of
from bwprof.schema import flags
from bwprof.schema.meta import GpuMeta, GpusMeta, HostInfo, NodeMeta
from bwprof.schema.table import gc_paused
from bwprof.schema.text import one_line
from bwprof.store.formats import cell_float, cell_int
from bwprof.store.runfolder import RunFolder
from bwprof.units import format_bytes

PASS, WARN, FAIL, CANNOT_JUDGE = "PASS", "WARN", "FAIL", "CANNOT_JUDGE"
ERROR = "ERROR"
VERDICTS: tuple[str, ...] = (FAIL, WARN, PASS, CANNOT_JUDGE)
"""The box's verdicts, worst first: a path's or a box's verdict is the worst of its checks
(CANNOT_JUDGE only where nothing could be judged). ERROR is not among them: bwprof's own
error says nothing of the box."""
CHECK_VERDICTS: tuple[str, ...] = (*VERDICTS, ERROR)
"""Every verdict a check can have, in the order counts are told."""
NOT_JUDGED_SUFFIX = "the box was not judged on it"

HOST_DEVICE = "cpu"

LINK_PATHS = ("h2d", "d2h", "bidir")
OWN_PATHS = ("ddr", "p2p", "overlap", "latency")
"""Judged paths with a method of their own below; every other judged path is a GPU's
headline case at its largest size."""


def gpu_paths() -> tuple[tuple[str, str, str | None], ...]:
    """(path, case, direction): the rows each GPU path reads, read from the catalogue
    (`bwprof.casespec.PATHS`) when judging, so a changed headline is judged at once."""
    return tuple((key, path_of(key).headline, path_of(key).direction)
                 for key in judged_paths() if key not in OWN_PATHS)


@dataclass(frozen=True)
class Check:
    """One verdict: a GPU's (or the host's) path, the figure behind it and its band."""

    box: str
    run_dir: str
    device: str
    gpu_model: str
    part: str
    path: str
    case: str
    verdict: str
    reason: str
    size_bytes: int | None = None
    value: float | None = None
    unit: str = ""
    cv: float | None = None
    noisy: bool = False
    busy: bool = False
    """The figure's row is `busy_host`: measured while other processes took its cores."""
    reference: float | None = None
    expected: float | None = None
    warn: float | None = None
    fail: float | None = None
    pct_of_peak: float | None = None
    pct_of_band: float | None = None
    """The median in % of `expected` (100: what a healthy part reaches); None for a latency
    (`pct_of_band` the function says why). Not the verdict: that reads `warn` and `fail`."""
    higher_is_better: bool = True
    source: str = ""
    peak: float | None = None
    """The one peak `pct_of_peak` reads (the row's theoretical one, as the summary shows it;
    the band's reference where the row has none)."""
    peak_source: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


CHECK_COLUMNS: tuple[str, ...] = tuple(Check.__dataclass_fields__)
_CHECK_DEFAULTS: dict[str, object] = {
    name: field.default for name, field in Check.__dataclass_fields__.items()}


def worst(verdicts: list[str]) -> str:
    """The verdict of several checks: the worst judged one; CANNOT_JUDGE where none was
    (ERROR, bwprof's own, never decides it)."""
    for verdict in VERDICTS:
        if verdict in verdicts:
            return verdict
    return CANNOT_JUDGE


@dataclass(frozen=True)
class _Box:
    name: str
    prefix: str
    """'node7:' in a fleet run, '' in a run of one box."""
    host: HostInfo | None
    gpus: GpusMeta


def _boxes(run: RunFolder) -> list[_Box]:
    """The run's boxes: its one box, or a fleet's nodes (`fleet_box_names`)."""
    meta = run.meta
    if meta.nodes:
        names = fleet_box_names(meta.nodes)
        return [_Box(names[name], f"{name}:", node.host, node.gpus)
                for name, node in meta.nodes.items()]
    name = one_line(meta.box_label) or run.label
    return [_Box(name, "", meta.host, meta.gpus)]


def fleet_box_names(nodes: Mapping[str, NodeMeta]) -> dict[str, str]:
    """Each fleet node's box name (a Check's `box`): its host name and box key where recorded
    ('vm#3f2a9c1b7d4e') and no other node's is the same; the node's own name otherwise (nodes
    whose hosts all call themselves 'vm' are still told apart, as their rows' devices are,
    'node12:gpu0')."""
    labels = {name: one_line(node.host.box_label) if node.host is not None else ""
              for name, node in nodes.items()}
    seen = Counter(labels.values())
    return {name: label if label and seen[label] == 1 else one_line(name)
            for name, label in labels.items()}


Row = dict[str, Any]
"""One row of results.csv as the judge reads it: a dict of the `_READ` columns the frame has
(`bwprof.analysis.summary.row_records`), missing cells None or NaN."""

_READ = (
    "case", "device", "direction", "backend", "status", "value_median", "size_bytes", "flags",
    "note", "phase", "metric", "unit", "cv", "peak_value", "memory", "overlap_efficiency",
    "telemetry_samples", "pcie_gen_min", "pcie_width_min", "host_others_pct", "host_steal_pct",
)
"""The columns the judge reads of a row (`pick`, `the_peak`, `busy_reason`, the link check
and the pair matrix among them). A fleet's rows become these dicts once, from whole columns:
each box then selects among its hundred-odd dicts in microseconds, where a pandas selection
cost its per-operation overhead on a frame of every column (a quarter of a second a box)."""


def judged_cases() -> frozenset[str]:
    """Every case whose rows a check reads by its name, from the catalogue: each GPU path's
    headline, the host's DDR, the pair matrix's and the overlap cases (latency rows are read
    by their metric)."""
    cases = {case for _, case, _ in gpu_paths()}
    cases |= {path_of("ddr").headline, path_of("p2p").headline, *path_of("overlap").cases}
    return frozenset(cases)


_Factorized = dict[str, tuple[np.ndarray, int]]
"""A frame's columns factorized (codes, how many), by name, for `_groups` to share."""


def _read_rows(results: pd.DataFrame) -> pd.DataFrame:
    """The rows of `results` the judge can read (`judged_cases`, and every latency row), in
    order: selected on whole columns before any row becomes a dict, so the half of a
    fleet's rows no check reads (other cases and sizes' siblings) costs nothing per row."""
    columns = results[[c for c in _READ if c in results.columns]]  # not the other sixty
    if "case" not in columns or "metric" not in columns:  # nothing to select by
        return columns
    latency = (columns["metric"] == "latency").to_numpy(dtype=bool)
    wanted = columns["case"].isin(list(judged_cases())).to_numpy(dtype=bool) | latency
    factorized: _Factorized = {}  # device and case, factorized once for both
    wanted &= ~_unread_overlap_rows(columns, latency, factorized)
    wanted &= ~_unread_figure_rows(columns, latency, factorized)
    return columns if bool(wanted.all()) else columns[wanted]


def _is(column: pd.Series, value: str) -> np.ndarray:
    """`column == value` as a NumPy mask, a missing cell False (as the judge's `==` of a
    None cell is)."""
    return column.eq(value).to_numpy(dtype=bool, na_value=False)


def _numbers(column: pd.Series) -> np.ndarray:
    """A column as floats (`_coerced` of each cell), NaN where a cell holds none."""
    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _unread_figure_rows(columns: pd.DataFrame, latency: np.ndarray,
                        factorized: _Factorized | None = None) -> np.ndarray:
    """The rows of a GPU path's case that no check can read: in a (device, case, direction)
    with a figure row (`_figure_rows`), every row but the one `_largest` picks (the largest
    size, the best median, the first on a tie; picked on arrays by `pick_per_group`) and
    those that raised. With a figure there, `_unusable` reads only the rows that raised and
    the figure rows' largest size, and `_largest` only the rows at that size; the smaller
    sizes, the cache-resident, simulated, skipped and invalid rows beside them decide
    nothing. Kept all the same: every row the link check reads (`_link_fault`: an ok row
    with PCIe telemetry), every row of a group where a figure row has no size or no numeric
    median (`_largest_size` and `best_of` read those otherwise), and every row the pair
    matrix, the overlap, the host's and the latency checks read. Over half a fleet's judged
    rows: the smaller sizes of each GPU's transfer and copy sweeps."""
    none = np.zeros(len(columns), dtype=bool)
    needed = ("case", "device", "direction", "status", "value_median", "size_bytes", "flags",
              "backend")
    if any(c not in columns for c in needed):
        return none
    own = {path_of(key).headline for key in OWN_PATHS} | set(path_of("overlap").cases)
    cases = [case for _, case, _ in gpu_paths() if case not in own]
    index = np.flatnonzero(columns["case"].isin(cases).to_numpy(dtype=bool) & ~latency)
    if not index.size:
        return none
    # Whole columns, then these rows of them: no frame of the rows is taken (a pyarrow
    # take of each text column, most of this function's time at a million rows).
    status = columns["status"]
    figure = (_is(status, "ok") & columns["value_median"].notna().to_numpy(dtype=bool)
              & ~_is(columns["backend"], "simulated"))[index]
    codes, texts = pd.factorize(columns["flags"], use_na_sentinel=True)
    unjudged = np.array([bool(_flag_set(t) & (flags.CACHE_RESIDENT | {flags.SIMULATED}))
                         for t in texts] + [False], dtype=bool)  # code -1: no flags
    figure &= ~unjudged[codes[index]]
    group = _groups(columns, ("device", "case", "direction"), index, factorized)
    count = int(group.max()) + 1
    sizes, values = _numbers(columns["size_bytes"])[index], _numbers(columns["value_median"])[index]
    clean = figure & ~np.isnan(sizes) & ~np.isnan(values)
    dirty = np.bincount(group, weights=figure & ~clean, minlength=count) > 0
    picked = pick_per_group(group, count, sizes, values, among=clean & ~dirty[group])
    unread = picked[group] >= 0  # a group with its figure
    unread[picked[picked >= 0]] = False
    unread &= ~_is(status, "error")[index]
    link = columns["case"].isin(list(dict.fromkeys(path_of(k).headline for k in LINK_PATHS)))
    link_rows = (link.to_numpy(dtype=bool) & _is(status, "ok"))[index]
    if link_rows.any():
        telemetry = np.ones(len(index), dtype=bool)
        if "telemetry_samples" in columns:
            telemetry = _numbers(columns["telemetry_samples"])[index] > 0  # NaN: none, as 0
        figures = [~np.isnan(_numbers(columns[c])[index])
                   for c in ("pcie_gen_min", "pcie_width_min") if c in columns]
        read = np.logical_or.reduce(figures) if figures else np.zeros(len(index), dtype=bool)
        unread &= ~(link_rows & telemetry & read)
    none[index[unread]] = True
    return none


def _groups(columns: pd.DataFrame, names: tuple[str, ...], index: np.ndarray,
            factorized: _Factorized | None = None) -> np.ndarray:
    """The rows `index`'s groups by the cells of `names` (`groupby(names, dropna=False)`:
    a missing cell is a key of its own), numbered from 0: each column factorized whole
    (once, where `factorized` keeps them), the codes of these rows combined."""
    factorized = {} if factorized is None else factorized
    key = np.zeros(len(index), dtype=np.int64)
    for name in names:
        if name not in factorized:
            codes, uniques = pd.factorize(columns[name], use_na_sentinel=False)
            factorized[name] = codes, len(uniques)
        codes, count = factorized[name]
        key = key * (count + 1) + codes[index]
    return cast(np.ndarray, pd.factorize(key)[0]).astype(np.int64)


def _unread_overlap_rows(columns: pd.DataFrame, latency: np.ndarray,
                         factorized: _Factorized | None = None) -> np.ndarray:
    """The rows of an overlap case that `_Judge._overlap` cannot read: where the device's
    case has a concurrent row with its efficiency, its other rows (alone, overlapped)
    matter only if they raised. A third of a fleet's judged rows."""
    needed = ("case", "device", "phase", "overlap_efficiency", "status")
    if any(c not in columns for c in needed):
        return np.zeros(len(columns), dtype=bool)
    overlap = columns["case"].isin(list(path_of("overlap").cases)).to_numpy(dtype=bool)
    if not overlap.any():
        return np.zeros(len(columns), dtype=bool)
    concurrent = overlap & (columns["phase"] == "concurrent").to_numpy(dtype=bool) & \
        columns["overlap_efficiency"].notna().to_numpy(dtype=bool)
    index = np.flatnonzero(overlap)
    group = _groups(columns, ("device", "case"), index, factorized)  # a device's case
    has_concurrent = np.zeros(len(columns), dtype=bool)
    has_concurrent[index] = (np.bincount(group, weights=concurrent[index]) > 0)[group]
    raised = (columns["status"] == "error").to_numpy(dtype=bool)
    return has_concurrent & ~concurrent & ~raised & ~latency


def _has(value: object) -> bool:
    """A cell that holds a value (None, NaN and pd.NA do not): `Series.notna` of one cell."""
    return value is not None and value is not pd.NA and value == value


@lru_cache(maxsize=4096)
def _flag_set(text: object) -> frozenset[str]:
    """A flags cell's flags, parsed once per distinct cell (a fleet repeats a few)."""
    return flags.split_flags(text)


@lru_cache(maxsize=4096)
def _one_line(text: str) -> str:
    """`one_line` of a row's note, once per distinct note (a fleet's waived rows repeat
    one)."""
    return one_line(text)


def _flagged(row: Row, flag: str) -> bool:
    return flag in _flag_set(row["flags"])


def _cache_resident(row: Row) -> bool:
    return bool(_flag_set(row["flags"]) & flags.CACHE_RESIDENT)


def _rows_by_prefix(rows: list[Row], boxes: list[_Box]) -> dict[str, list[Row]] | None:
    """Each fleet box's rows (those whose device starts with its prefix, 'node7:'), split
    in one pass over the rows rather than one pass per box (a fleet of 10,000 boxes read
    its rows 10,000 times). None where a box's name holds a ':' itself: the part of a
    device before its first ':' is then not its box, and each box filters for its own."""
    if any(":" in box.prefix[:-1] for box in boxes):
        return None
    split: dict[str, list[Row]] = {}
    for row in rows:
        node, colon, _ = str(row["device"]).partition(":")
        if colon:
            split.setdefault(node + colon, []).append(row)
    return split


class _Models:
    """What is the same for every GPU of one model (and link) under one spec, worked out
    once per judging: the spec's section and overrides, the CV limit, the bands. A fleet
    of ten thousand GPUs of one model then costs ten thousand look-ups, not ten thousand
    regular-expression searches, override merges and band sources formatted again."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self._models: dict[str | None, str | None] = {}
        self._cv: dict[str | None, float] = {}
        self._overrides: dict[tuple[str | None, str], Override] = {}
        self._latency: dict[tuple[str | None, str, bool], Band | None] = {}
        self._bands: dict[tuple[object, ...], tuple[Band | None, str]] = {}
        self._overlap: dict[str | None, Band | None] = {}
        self._ddr: dict[float | None, Band | None] = {}
        # The catalogue's paths, read once per judging (not once per GPU).
        self.gpu_paths = gpu_paths()
        self.link_cases = tuple(dict.fromkeys(path_of(key).headline for key in LINK_PATHS))
        self.p2p_case = path_of("p2p").headline, path_of("p2p").direction
        self.overlap_cases = path_of("overlap").cases

    def model(self, gpu: GpuMeta | None) -> str | None:
        """The spec's section for `gpu`: its listed part's key, or an unlisted model's key
        whose words stand in its name (`Spec.model_key`); None for the host."""
        if gpu is None:
            return None
        name = gpu.name
        if name not in self._models:
            self._models[name] = self.spec.model_key(name)
        return self._models[name]

    def cv_limit(self, gpu: GpuMeta | None) -> float:
        model = self.model(gpu)
        if model not in self._cv:
            self._cv[model] = self.spec.cv_limit(model)
        return self._cv[model]

    def override(self, gpu: GpuMeta, path: str) -> Override:
        key = (self.model(gpu), path)
        if key not in self._overrides:
            self._overrides[key] = self.spec.override(*key)
        return self._overrides[key]

    def overlap_band(self, gpu: GpuMeta) -> Band | None:
        model = self.model(gpu)
        if model not in self._overlap:
            self._overlap[model] = self.override(gpu, "overlap").apply(
                bands.overlap_band(), "overlap", "ratio")
        return self._overlap[model]

    def ddr_band(self, peak_gbps: float | None) -> Band | None:
        """The host's DDR band: the SMBIOS peak's (`bands.ddr_band`) under the spec's
        [host.ddr]."""
        if peak_gbps not in self._ddr:
            self._ddr[peak_gbps] = self.spec.ddr.apply(bands.ddr_band(peak_gbps), "ddr", "GB/s")
        return self._ddr[peak_gbps]

    def latency_band(self, gpu: GpuMeta | None, case: str) -> Band | None:
        key = (self.model(gpu), case, gpu is None)
        if key not in self._latency:
            override = self.spec.latency_override(*key[:2], host=gpu is None)
            self._latency[key] = override.apply(None, "latency", "ns", higher_is_better=False)
        return self._latency[key]

    def gpu_band(self, path: str, gpu: GpuMeta, part: Part | None, c2c: bool,
                 inputs: bands.LinkInputs | None = None) -> tuple[Band | None, str]:
        """A GPU path's band and why there is none: the same for every GPU of one name,
        host link and PCIe metadata (what `_Judge._gpu_band` reads). `inputs`: the GPU's
        `bands.link_inputs`, where the caller read them once for its paths."""
        if inputs is None:
            inputs = bands.link_inputs(gpu.metadata)
        key = (path, gpu.name, c2c, inputs, gpu.peak_hbm_gbps)
        found = self._bands.get(key)
        if found is None:
            found = self._bands[key] = self._gpu_band(path, gpu, part, c2c)
        return found

    def _gpu_band(self, path: str, gpu: GpuMeta, part: Part | None,
                  c2c: bool) -> tuple[Band | None, str]:
        override = self.override(gpu, path)
        default: Band | None
        why = ""
        if path in LINK_PATHS:
            if c2c:
                default = bands.c2c_band(path, part) if part else None
                why = ("no band: NVLink-C2C both ways has no published figure" if path == "bidir"
                       else "no band: NVLink-C2C of an unknown model")
            else:
                link = bands.pcie_link(part, gpu.metadata)
                default = bands.pcie_band(path, link) if link else None
                why = "no band: the PCIe link's maximum is unknown"
        else:
            default = bands.hbm_band(path, part, gpu.peak_hbm_gbps)
            why = "no band: unknown GPU model without an HBM peak"
        banded = override.apply(default, path, "GB/s")
        return banded, why + " (give one in a spec)"


class _Judge:
    def __init__(self, run: RunFolder, box: _Box, spec: Spec,
                 rows: list[Row] | None = None, models: _Models | None = None) -> None:
        """`rows`: the box's own rows (`_READ` records) where the caller has split them
        already; `models`: what every box of one judging shares."""
        self.run, self.box, self.spec = run, box, spec
        self.label = run.label  # once a box: each of its checks names it
        self.models = models if models is not None and models.spec is spec else _Models(spec)
        if rows is None:
            rows = [r for r in row_records(_read_rows(run.results), _READ)
                    if str(r["device"]).startswith(box.prefix)]
        # A host job that raised has no device (its row is made before anything measured):
        # a whole-host job's, so its error belongs to the host's figure.
        host, prefix = box.prefix + HOST_DEVICE, box.prefix
        # `== prefix` is `str(device) == prefix`: a prefix ends in ':' (or is ''), which no
        # missing cell's text does.
        self.rows = [{**r, "device": host}
                     if r["device"] == prefix and r["backend"] == "host" else r
                     for r in rows]
        self._by_case: dict[tuple[str, object], list[Row]] = {}
        for row in self.rows:
            device = row["device"]
            key = (device if type(device) is str else str(device), row["case"])
            self._by_case.setdefault(key, []).append(row)
        self._matrices: dict[tuple[str, str | None], list[Row]] = {}
        self._latency_groups: dict[tuple[object, object, object], list[Row]] | None = None

    def check(self, device: str, gpu: GpuMeta | None, path: str, case: str, verdict: str,
              reason: str, **figures: object) -> Check:
        """`device` as the box names it ('gpu0', 'cpu'); the check names it as the rows do, a
        fleet's node first ('node12:gpu0'), so a fleet's GPUs are told apart."""
        return self._made(device, gpu, path, case, verdict, reason, figures)

    def _made(self, device: str, gpu: GpuMeta | None, path: str, case: str, verdict: str,
              reason: str, figures: dict[str, object]) -> Check:
        """`check` without its keyword arguments' dict, and without the frozen dataclass's
        one `object.__setattr__` per field (27 calls, the judge's largest cost per check in
        a fleet of 100,000 checks): the same fields, the defaults under `figures`."""
        part = bands.find_part(gpu.name) if gpu is not None else None  # cached per name
        check = object.__new__(Check)
        state = check.__dict__
        state.update(_CHECK_DEFAULTS)
        state.update(figures)
        state["box"] = self.box.name
        state["run_dir"] = self.label
        state["device"] = self.box.prefix + device
        state["gpu_model"] = gpu.name if gpu is not None else ""
        state["part"] = part.key if part is not None else ""
        state["path"] = path
        state["case"] = case
        state["verdict"] = verdict
        state["reason"] = reason
        return check

    def _model(self, gpu: GpuMeta | None) -> str | None:
        """The spec's section for `gpu`: its listed part's key, or an unlisted model's key
        whose words stand in its name (`Spec.model_key`); None for the host."""
        return self.models.model(gpu)

    # -- choosing the figure -------------------------------------------------------------

    def _device_rows(self, case: str, device: str, direction: str | None) -> list[Row]:
        rows = self._by_case.get((self.box.prefix + device, case), [])
        if direction is not None:
            rows = [r for r in rows if r["direction"] == direction]
        return rows

    @staticmethod
    def _unusable(rows: list[Row], what: str,
                  errors: list[Row] | None = None) -> tuple[str, str] | None:
        """(verdict, reason) where `rows` (one case of one device) give no figure to judge.
        `errors`: the rows that raised, where they are not among `rows` (an overlap job's
        error row has no phase). A failed validation fails; bwprof's own error is ERROR
        where it took the figure the path is judged on: no figure left, or the error at
        the largest size (a working set beyond the caches that raised leaves only the
        cache-resident ones)."""
        if not rows and not errors:
            return CANNOT_JUDGE, f"not measured: no {what} row in this run"
        ok = [r for r in rows if r["status"] == "ok" and _has(r["value_median"])]
        broken = [r for r in rows if r["status"] == "invalid"]
        if not ok and broken:
            first = broken[0]
            return FAIL, f"{what} {first['status']}: {_one_line(str(first['note']))}"
        errors = [r for r in rows if r["status"] == "error"] if errors is None else errors
        if errors:
            figures = _Judge._figure_rows(rows)
            if not figures or _largest_size(errors) >= _largest_size(figures):
                return ERROR, error_reason(what, errors)
        if not ok:
            first = rows[0]
            return CANNOT_JUDGE, f"{what} {first['status']}: {_one_line(str(first['note']))}"
        if (all(_flagged(r, flags.SIMULATED) for r in ok)
                or all(r["backend"] == "simulated" for r in ok)):
            return CANNOT_JUDGE, f"{what} is simulated: not a measurement"
        if all(_cache_resident(r) for r in ok):
            return CANNOT_JUDGE, f"every {what} row is cache-resident: a cache's figure"
        return None

    @staticmethod
    def _figure_rows(rows: list[Row]) -> list[Row]:
        return [r for r in rows
                if r["status"] == "ok" and _has(r["value_median"])
                and r["backend"] != "simulated" and not _cache_resident(r)
                and not _flagged(r, flags.SIMULATED)]

    @staticmethod
    def _largest(rows: list[Row], higher_is_better: bool = True) -> Row:
        """The row that stands for the path, picked as every output picks it
        (`bwprof.analysis.figures.pick`: the best median at the largest size). `rows` are
        `_figure_rows`, each one `pick` counts already, so only its choice among them is
        made here: the largest size, the best figure there (its own `size`, `best_of`)."""
        if not rows:
            raise ValueError("no row gives the path's figure")
        if len(rows) == 1:
            return rows[0]
        assert MEDIAN_BEYOND_CACHE.at_largest_size and MEDIAN_BEYOND_CACHE.beyond_cache
        sizes = [_size(r) for r in rows]
        top = max(sizes)
        return cast(Row, best_of([r for r, s in zip(rows, sizes, strict=True) if s == top],
                                 higher_is_better))

    # -- holding it against the band -----------------------------------------------------

    def _judged(self, device: str, gpu: GpuMeta | None, path: str, row: Row,
                band: Band | None, why_no_band: str, value: float | None = None,
                fault: str | None = None) -> Check:
        value = cell_float(row["value_median"]) if value is None else value
        cv = cell_float(row["cv"])
        noisy = cv is not None and cv > self.models.cv_limit(gpu)
        busy = flags.BUSY_HOST in _flag_set(row["flags"])
        row_unit = str(row["unit"])
        unit = "ratio" if path == "overlap" else row_unit
        figures: dict[str, object] = {
            "size_bytes": cell_int(row["size_bytes"]), "value": value, "cv": cv,
            "noisy": noisy, "busy": busy, "unit": unit,
            "higher_is_better": band.higher_is_better if band else path != "latency"}
        case = str(row["case"])
        if busy:  # the figure is partly other processes': neither PASS nor FAIL
            return self._made(device, gpu, path, case, CANNOT_JUDGE, busy_reason(row), figures)
        if band is None or value is None:
            return self._made(device, gpu, path, case, CANNOT_JUDGE, why_no_band, figures)
        # An overlap check's figure is a ratio, not its row's GB/s: only the band's applies.
        reference = band.reference
        peak, peak_source = (_the_peak(row, reference, band.source) if unit == row_unit
                             else (reference, band.source))
        pct_peak = ratio(100 * value, peak)  # None where the peak is 0 or subnormal
        figures["reference"] = reference
        figures["expected"] = band.expected
        figures["warn"] = band.warn
        figures["fail"] = band.fail
        figures["pct_of_peak"] = pct_peak
        figures["pct_of_band"] = (ratio(100.0 * value, band.expected)
                                  if band.higher_is_better else None)  # `pct_of_band`
        figures["source"] = band.source
        figures["peak"] = peak
        figures["peak_source"] = peak_source
        verdict = band.verdict(value)
        reason = _band_reason(value, band, unit, pct_peak, verdict, peak)
        if fault is not None:
            verdict, reason = FAIL, f"{fault}; {reason}"
        if noisy:
            reason += f"; noisy (CV {cv:.1%})"
        return self._made(device, gpu, path, case, verdict, reason, figures)

    def _gpu_band(self, path: str, gpu: GpuMeta, part: Part | None, row: Row,
                  inputs: bands.LinkInputs | None = None) -> tuple[Band | None, str]:
        c2c = gpu.host_link_c2c or _flagged(row, flags.C2C_LINK)
        return self.models.gpu_band(path, gpu, part, c2c, inputs)

    def _link_fault(self, device: str, gpu: GpuMeta, part: Part | None) -> str | None:
        """A PCIe link that trained below the part's maximum under load (the telemetry of
        the device's transfer rows), or None."""
        if gpu.host_link_c2c:
            return None
        link = bands.pcie_link(part, gpu.metadata)
        if link is None:
            return None
        rows = [r for case in self.models.link_cases for r in self._device_rows(case, device, None)
                if r["status"] == "ok"]
        if rows and "telemetry_samples" in rows[0]:  # a frame with the column
            rows = [r for r in rows if (_coerced(r["telemetry_samples"]) or 0) > 0]
        return _link_fault_text(link, _least(rows, "pcie_gen_min"),
                                _least(rows, "pcie_width_min"))

    # -- the paths -----------------------------------------------------------------------

    def gpu_checks(self, gpu: GpuMeta) -> list[Check]:
        device, part = gpu.label, bands.find_part(gpu.name)
        out = []
        fault = self._link_fault(device, gpu, part)
        inputs = bands.link_inputs(gpu.metadata)  # once a GPU, not once a path
        for path, case, direction in self.models.gpu_paths:
            rows = self._device_rows(case, device, direction)
            unusable = self._unusable(rows, case)
            if unusable is not None:
                out.append(self.check(device, gpu, path, case, *unusable))
                continue
            row = self._largest(self._figure_rows(rows))
            band, why = self._gpu_band(path, gpu, part, row, inputs)
            out.append(self._judged(device, gpu, path, row, band, why,
                                    fault=fault if path in LINK_PATHS else None))
        out.append(self._p2p(gpu, part))
        out += self._overlap(gpu, part)
        out += self._latency(gpu, part)
        return out

    def _p2p(self, gpu: GpuMeta, part: Part | None) -> Check:
        device = gpu.label
        fault = bands.nvlink_fault(part, gpu.metadata.get("nvlink_links_up"),
                                   len(self.box.gpus.devices))
        case, direction = self.models.p2p_case
        pairs = self._matrix(case, direction)
        source = f"{self.box.prefix}{device}->"
        mine = self._figure_rows([r for r in pairs if str(r["device"]).startswith(source)])
        if not mine:
            return self._p2p_unmeasured(gpu, fault, [r for r in self.rows if r["case"] == case])
        row = min(mine, key=lambda r: float(r["value_median"]))  # the first of the lowest
        links_up = gpu.metadata.get("nvlink_links_up")
        nvlinked = part is not None and part.nvlink_links and (
            part.nvlink_baseboard or (isinstance(links_up, int) and links_up > 0))
        if nvlinked and part is not None:
            default = bands.nvlink_band(part)
        else:
            link = bands.pcie_link(part, gpu.metadata)
            default = bands.pcie_p2p_band(link) if link else None
        band = self.models.override(gpu, "p2p").apply(default, "p2p", "GB/s")
        check = self._judged(device, gpu, "p2p", row, band,
                             "no band: neither NVLink nor the PCIe link is known (give one "
                             "in a spec)", fault=fault)
        return replace(check, reason=f"{row['device']} (slowest pair): {check.reason}")

    def _p2p_unmeasured(self, gpu: GpuMeta, fault: str | None, rows: list[Row]) -> Check:
        """The P2P check of a GPU without a pair figure of its own: its NVLink fault, or why
        the box's `rows` of the pair case give none."""
        device = gpu.label
        case = self.models.p2p_case[0]
        if fault is not None:
            return self.check(device, gpu, "p2p", case, FAIL, fault)
        unusable = self._unusable(rows, case) or (
            CANNOT_JUDGE, f"no {case} figure from {self.box.prefix}{device}")
        return self.check(device, gpu, "p2p", case, *unusable)

    def _overlap(self, gpu: GpuMeta, part: Part | None) -> list[Check]:
        out = []
        band = self.models.overlap_band(gpu)
        for case in self.models.overlap_cases:
            rows = self._device_rows(case, gpu.label, None)
            if not rows:
                continue
            concurrent = [r for r in rows
                          if r["phase"] == "concurrent" and _has(r["overlap_efficiency"])]
            unusable = self._unusable(concurrent or rows, case,
                                      errors=[r for r in rows if r["status"] == "error"])
            if unusable is not None:
                out.append(self.check(gpu.label, gpu, "overlap", case, *unusable))
                continue
            figure_rows = self._figure_rows(concurrent)
            if not figure_rows:  # the case stopped before its concurrent phase (a full disk)
                out.append(self.check(gpu.label, gpu, "overlap", case, CANNOT_JUDGE,
                                      f"{case} has no concurrent row with its efficiency: "
                                      "the case did not finish"))
                continue
            row = self._largest(figure_rows)
            out.append(self._judged(gpu.label, gpu, "overlap", row, band, "",
                                    value=cell_float(row["overlap_efficiency"])))
        if not out:
            out.append(self.check(gpu.label, gpu, "overlap", "overlap_*", CANNOT_JUDGE,
                                  "not measured: no overlap_* row in this run"))
        return out

    def _matrix(self, case: str, direction: str | None) -> list[Row]:
        """The box's pair matrix of `case` (`matrix_records`), once per box: each of its
        GPUs reads it."""
        key = (case, direction)
        if key not in self._matrices:
            self._matrices[key] = matrix_records(self.rows, case, direction)
        return self._matrices[key]

    def _latency_rows(self) -> list[Row]:
        return [r for r in self.rows if r["metric"] == "latency" and not is_loaded(r["phase"])]

    def _latency_groups_of(self) -> dict[tuple[object, object, object], list[Row]]:
        """The box's latency rows by (case, device, direction), in the order each first
        appears; once per box, for the host and each GPU."""
        if self._latency_groups is None:
            groups: dict[tuple[object, object, object], list[Row]] = {}
            for row in self._latency_rows():
                groups.setdefault((row["case"], row["device"], row["direction"]),
                                  []).append(row)
            self._latency_groups = groups
        return self._latency_groups

    def _latency(self, gpu: GpuMeta | None, part: Part | None) -> list[Check]:
        """Each latency case of the GPU (`gpu`), or of the host (None), per direction and
        device; judged only against a spec's band."""
        groups = self._latency_groups_of()
        label = gpu.label if gpu is not None else None
        out = []
        for (case, device, direction), group in groups.items():
            own = str(device).removeprefix(self.box.prefix)
            is_gpu = own.split("->", 1)[0] == label if label else False
            if label is not None and not is_gpu:
                continue
            if label is None and own.split("->", 1)[0].startswith("gpu"):
                continue
            what = f"{case} ({direction})" if case == "lat_memcpy" else str(case)
            unusable = self._unusable(group, what)
            if unusable is not None:
                out.append(self.check(own, gpu, "latency", str(case), *unusable))
                continue
            row = self._largest_latency(self._figure_rows(group))
            band = self.models.latency_band(gpu, str(case))
            out.append(self._judged(own, gpu, "latency", row, band,
                                    f"no band: give {case} one in a spec "
                                    f"(warn_ns, fail_ns)"))
        return out

    @staticmethod
    def _largest_latency(rows: list[Row]) -> Row:
        return _Judge._largest(rows, higher_is_better=False)

    def host_checks(self) -> list[Check]:
        case = path_of("ddr").headline
        rows = self._device_rows(case, HOST_DEVICE, None)
        out = []
        unusable = self._unusable(rows, case)
        if unusable is not None:
            out.append(self.check(HOST_DEVICE, None, "ddr", case, *unusable))
        else:
            out.append(self.host_figure(self._largest(self._figure_rows(rows))))
        return out + self._latency(None, None)

    def host_figure(self, row: Row) -> Check:
        """The host's DDR check on `row`, its figure (the best thread count)."""
        host = self.box.host
        band = self.models.ddr_band(host.ddr_peak_gbps if host else None)
        note = host.ddr_peak_note if host is not None and host.ddr_peak_note else \
            "no SMBIOS memory modules listed"
        return self._judged(HOST_DEVICE, None, "ddr", row, band,
                            f"no band: no DDR peak ({one_line(note)}); give "
                            "[host.ddr] peak_gbps in a spec")


def _the_peak(row: Row, fallback: float | None, fallback_source: str) -> tuple[float | None, str]:
    """`the_peak` of a row, its peak's source (`peak_source`) looked up once per distinct
    memory, direction and flags."""
    own = a_peak(cell_float(row.get("peak_value")))
    if own:
        return own, _source_of(row.get("memory"), row.get("direction"), row.get("flags"))
    return (fallback, fallback_source) if a_peak(fallback) else (None, "")


@lru_cache(maxsize=4096)
def _source_of(memory: object, direction: object, flag_text: object) -> str:
    return source_of(memory, direction, flag_text)


def _link_fault_text(link: bands.Link, gen: float | None, width: float | None) -> str | None:
    """Why a link fails (it trained below `link` under load: the least generation and width
    its transfer rows' telemetry saw), or None."""
    low_gen = gen is not None and gen < link.generation
    low_width = width is not None and width < link.width
    if not (low_gen or low_width):
        return None
    shown_gen = int(gen) if gen is not None else "?"
    shown_width = int(width) if width is not None else "?"
    return (f"link trained at Gen{shown_gen} x{shown_width} under load, below its "
            f"Gen{link.generation} x{link.width} maximum")


def _size(row: Row) -> float:
    """`bwprof.analysis.figures.size` of a row (its size, 0 where it has none), an int
    cell (what an Int64 column gives) told apart first: that takes no pandas call."""
    value = row.get("size_bytes")
    return float(value) if type(value) is int else size(row)


def _coerced(value: object) -> float | None:
    """A cell as a number, None where it is none (`pd.to_numeric(errors='coerce')` of one
    cell)."""
    if not _has(value):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return number if number == number else None


def _least(rows: list[Row], column: str) -> float | None:
    """The smallest number in `column` among `rows`; None where none holds one."""
    values = [v for v in (_coerced(r.get(column)) for r in rows) if v is not None]
    return min(values) if values else None


def _size_or_inf(row: Row) -> float:
    size = _coerced(row["size_bytes"])
    return float("inf") if size is None else size


def _largest_size(rows: list[Row]) -> float:
    """The largest size among `rows`; infinite where one has none (a job that raised before
    its size was known could have been the largest)."""
    return max(_size_or_inf(r) for r in rows)


def error_reason(what: str, errors: list[Row]) -> str:
    """'bwprof error in lat_host (1 GiB): OverflowError: ...; the box was not judged on it':
    the largest size that raised and its one-line message."""
    first = max(errors, key=_size_or_inf)  # the first of the largest, as idxmax
    size = cell_int(first["size_bytes"])
    at = f" ({format_bytes(size)})" if size else ""
    more = f", and {len(errors) - 1} more row(s)" if len(errors) > 1 else ""
    return (f"bwprof error in {what}{at}{more}: {one_line(str(first['note']))}; "
            f"{NOT_JUDGED_SUFFIX}")


def busy_reason(row: Row) -> str:
    """'busy: other processes took 63% of the measuring cores' time while it ran; ...'
    from the row's shares (`host_others_pct`, `host_steal_pct`), where it has them: the
    number first, so the table's why column keeps it."""
    others = cell_float(row.get("host_others_pct"))
    steal = cell_float(row.get("host_steal_pct"))
    took = (f"other processes took {others:.0f}% of the measuring cores' time"
            if others is not None else "other work ran on the measuring cores")
    if steal is not None and steal >= 0.5:
        took += f", the hypervisor stole {steal:.0f}%"
    return f"busy: {took} while it ran; measure again on a quiet host"


def pct_of_band(band: Band, value: float) -> float | None:
    """The median in % of the band's expected figure (what a healthy part reaches: 100), for
    a higher-is-better figure. None for a lower-is-better one (latency): its band is only a
    spec's ceiling (`warn_ns`, `fail_ns`), no figure a healthy part reaches, and a % of it
    would read the wrong way round (a latency 9x its line as 11%). The verdict reads the
    `warn` and `fail` lines, not this: a spec may set them above the expected figure, so a
    WARN or FAIL can read 100% or more (docs/verdicts.md)."""
    return ratio(100.0 * value, band.expected) if band.higher_is_better else None


def _figure(value: float, unit: str) -> str:
    if unit == "ratio":
        return f"{value:.3f}"
    return f"{value:.0f} {unit}" if value >= 100 else f"{value:.1f} {unit}"


def _band_reason(value: float, band: Band, unit: object, pct_peak: float | None,
                 verdict: str, peak: float | None = None) -> str:
    """The figure against its one peak; where the band starts from another figure (the
    datasheet's), the reason names both. What follows the figure's own numbers is the same
    for every GPU of a band (`_peak_words`, `_band_words`): made once, not once a GPU."""
    unit = str(unit)
    peak = band.reference if peak is None else peak
    text = f"{_figure(value, unit)} (median)"
    if pct_peak is not None and peak:
        text += f", {pct_peak:.1f}{_peak_words(peak, band.reference, unit)}"
    return text + _band_words(band, unit, verdict)


@lru_cache(maxsize=4096)
def _peak_words(peak: float, reference: float | None, unit: str) -> str:
    """'% of the 4814 GB/s peak (band from the part's 4800 GB/s)': after a figure's % of
    its peak."""
    text = "% of ideal overlap" if unit == "ratio" else f"% of the {_figure(peak, unit)} peak"
    if reference and not math.isclose(peak, reference, rel_tol=1e-3):
        text += f" (band from the part's {_figure(reference, unit)})"
    return text


@lru_cache(maxsize=4096)
def _band_words(band: Band, unit: str, verdict: str) -> str:
    """'; passes at >= 3942 GB/s', '; below 3528 GB/s (73% of peak)': the line a verdict
    crossed, or passed."""
    better = ">=" if band.higher_is_better else "<="
    if verdict == PASS:
        return f"; passes at {better} {_figure(band.warn, unit)}"
    threshold = band.fail if verdict == FAIL else band.warn
    word = "below" if band.higher_is_better else "above"
    limit = (f"{100 * threshold / band.reference:.0f}% of peak"
             if band.reference and band.higher_is_better else "")
    if band.higher_is_better and threshold > band.expected:  # a spec's line: % of band >= 100
        limit += f"{', ' if limit else ''}over a healthy part's {_figure(band.expected, unit)}"
    limit = f" ({limit})" if limit else ""
    return f"; {word} {_figure(threshold, unit)}{limit}"


def judge_run(run: RunFolder, spec: Spec) -> list[Check]:
    """Every check of one run folder: per box, the host's then each GPU's."""
    with gc_paused():  # a fleet's boxes and checks: Python objects by the hundred thousand
        boxes = _boxes(run)
        read = _read_rows(run.results)
        fleet = _judge_fleet(run, spec, boxes, read) if boxes[0].prefix else None
    if fleet is not None:
        return fleet
    # once, from whole columns, for every box
    records = row_records(read, _READ)
    with gc_paused():  # a fleet's checks: Python objects by the hundred thousand
        split = _rows_by_prefix(records, boxes) if boxes[0].prefix else None
        return _judge_boxes(run, spec, boxes, records, split)


def _judge_boxes(run: RunFolder, spec: Spec, boxes: list[_Box], records: list[Row],
                 split: dict[str, list[Row]] | None,
                 models: _Models | None = None) -> list[Check]:
    out = []
    models = models or _Models(spec)  # every box's GPUs share their models' bands
    for box in boxes:
        if split is not None:
            rows = split.get(box.prefix, [])
        elif box.prefix:
            rows = [r for r in records if str(r["device"]).startswith(box.prefix)]
        else:
            rows = records
        judge = _Judge(run, box, spec, rows, models)
        out += judge.host_checks()
        for gpu in box.gpus.devices:
            out += judge.gpu_checks(gpu)
    return out


# -- a fleet, judged on arrays ----------------------------------------------------------------

_FLEET_COLUMNS = ("case", "device", "direction", "backend", "status", "value_median",
                  "size_bytes", "flags", "phase", "metric", "unit", "cv", "peak_value",
                  "memory", "overlap_efficiency")
"""The columns the fleet's array judging reads; a frame without one is judged box by box."""

_PICKED_COLUMNS = ("case", "direction", "status", "value_median", "size_bytes", "flags",
                   "unit", "cv", "peak_value", "memory", "overlap_efficiency")
"""What `_Judge._judged` and `the_peak` read of the row a check stands on."""


class _FleetRows:
    """A fleet's judged rows (`_read_rows`) as arrays: each device's rows of a case grouped
    by the device's number (`code`), and what `_Judge` asks of them (a figure row, a row that
    raised, a busy one) as masks over every row at once."""

    def __init__(self, read: pd.DataFrame, boxes: list[_Box]) -> None:
        self.read = read
        codes, names = pd.factorize(read["device"], use_na_sentinel=True)
        self.names = [str(name) for name in names]
        self.count = len(self.names)
        self.code = {name: i for i, name in enumerate(self.names)}
        valid = codes >= 0
        self.codes = np.where(valid, codes, 0)
        self.valid = valid
        prefixes = {box.prefix: i for i, box in enumerate(boxes)}
        # A device's box: the part before its first ':' (`_rows_by_prefix`); -1 for none.
        box_of = [prefixes.get(name.partition(":")[0] + ":", -1) if ":" in name else -1
                  for name in self.names]
        self.device_box = np.array([*box_of, -1], dtype=np.int64)
        self.row_box = np.where(valid, self.device_box[self.codes], -1)
        self.cases, self.case_names = pd.factorize(read["case"], use_na_sentinel=True)
        self.case_code = {str(name): i for i, name in enumerate(self.case_names)}
        status = read["status"]
        self.ok = _is(status, "ok")
        self.error = _is(status, "error")
        has_value = read["value_median"].notna().to_numpy(dtype=bool)
        self.value = _numbers(read["value_median"])
        sizes = _numbers(read["size_bytes"])
        self.size = np.where(np.isnan(sizes), 0.0, sizes)  # `_size`: 0 where none
        flag_codes, texts = pd.factorize(read["flags"], use_na_sentinel=True)
        sets = [_flag_set(t) for t in texts] + [_flag_set(None)]  # code -1: no flags

        def flagged(test: Callable[[frozenset[str]], bool]) -> np.ndarray:
            return np.array([test(f) for f in sets], dtype=bool)[flag_codes]

        self.busy = flagged(lambda f: flags.BUSY_HOST in f)
        unjudged = flagged(lambda f: bool(f & flags.CACHE_RESIDENT) or flags.SIMULATED in f)
        self.figure = (self.ok & has_value & ~_is(read["backend"], "simulated") & ~unjudged
                       & valid)
        self.direction = read["direction"]
        self.concurrent = (_is(read["phase"], "concurrent")
                           & read["overlap_efficiency"].notna().to_numpy(dtype=bool))
        # A box the arrays do not judge (`_judge_fleet` says which): its rows become dicts
        # and `_Judge` judges it as any box.
        self.slow = np.zeros(len(boxes) + 1, dtype=bool)  # the last: rows of no box
        self.slow[self.row_box[self.error]] = True
        self.slow[self.row_box[_is(read["metric"], "latency")]] = True
        self.slow[self.row_box[self.figure & np.isnan(self.value)]] = True
        own = np.zeros(self.count, dtype=bool)  # a box's own name as a device ('node7:')
        own[[self.code[box.prefix] for box in boxes if box.prefix in self.code]] = True
        if own.any():  # a host job that raised before it knew its device
            self.slow[self.row_box[own[self.codes] & valid & _is(read["backend"], "host")]] = True

    def of_case(self, case: str, direction: str | None = None) -> np.ndarray:
        """The rows of `case` (in `direction`, where given) on a device."""
        code = self.case_code.get(case)
        if code is None:
            return np.zeros(len(self.read), dtype=bool)
        mask = (self.cases == code) & self.valid
        if direction is not None:
            mask &= _is(self.direction, direction)
        return mask

    def picked(self, rows: np.ndarray, among: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per device: how many of `rows` it has, and the row `_Judge._largest` picks of
        those `among` marks (-1 for none). A device with rows but none to pick, or whose
        pick is busy, leaves its box to `_Judge` (`slow`)."""
        counted = np.bincount(self.codes[rows], minlength=self.count)
        picked = pick_per_group(self.codes, self.count, self.size, self.value,
                                among=rows & among)
        unusable = (counted > 0) & (picked < 0)
        self.slow[self.device_box[np.flatnonzero(unusable)]] = True
        busy = picked[(picked >= 0)]
        self.slow[self.row_box[busy[self.busy[busy]]]] = True
        return counted, picked

    def link_least(self, cases: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """Per device, the least PCIe generation and width under load (`_link_fault`'s
        `_least` of its ok transfer rows with telemetry); NaN where none says."""
        rows = np.zeros(len(self.read), dtype=bool)
        for case in cases:
            rows |= self.of_case(case)
        rows &= self.ok
        if "telemetry_samples" in self.read:
            rows &= _numbers(self.read["telemetry_samples"]) > 0
        out = []
        for column in ("pcie_gen_min", "pcie_width_min"):
            least = np.full(self.count, np.nan)
            if column in self.read:
                values = _numbers(self.read[column])
                np.fmin.at(least, self.codes[rows], values[rows])
            out.append(least)
        return out[0], out[1]


def _judge_fleet(run: RunFolder, spec: Spec, boxes: list[_Box],
                 read: pd.DataFrame) -> list[Check] | None:
    """A fleet's checks, the same as `_Judge` gives box by box, with each (device, case)'s
    figure picked on arrays for every GPU at once: per GPU, only its checks are made in
    Python. A box whose rows need more than a figure picked (a row that raised, a latency
    row, a path with rows but no figure, a busy figure) is judged by `_Judge` on its rows as
    dicts. None (judge box by box) where a box's name holds a ':' or a column is missing."""
    if any(c not in read.columns for c in _FLEET_COLUMNS) or any(
            ":" in box.prefix[:-1] for box in boxes):
        return None
    models = _Models(spec)
    rows = _FleetRows(read, boxes)
    paths = [(path, case, rows.picked(rows.of_case(case, direction), rows.figure))
             for path, case, direction in models.gpu_paths]
    ddr_case = path_of("ddr").headline
    ddr = rows.picked(rows.of_case(ddr_case), rows.figure)
    overlap = [(case, rows.picked(rows.of_case(case), rows.figure & rows.concurrent))
               for case in models.overlap_cases]
    gen, width = rows.link_least(models.link_cases)
    p2p_case = models.p2p_case[0]
    p2p = rows.of_case(p2p_case)
    arrow = np.array(["->" in name for name in rows.names] + [False], dtype=bool)
    pairs_in = np.zeros(len(boxes) + 1, dtype=bool)  # boxes with a pair's row
    pairs_in[rows.row_box[p2p & arrow[rows.codes]]] = True

    # The rows checks stand on, as columns of cells (what `row_records` gives a row's), and
    # the box's pair-case rows and every row of a box `_Judge` judges, as its dicts.
    slow = rows.slow  # the last: rows of no box
    chosen = [p for _, _, (_, p) in paths] + [ddr[1]] + [p for _, (_, p) in overlap]
    taking = np.zeros(len(read), dtype=bool)
    for picked in chosen:
        taking[picked[picked >= 0]] = True
    index = np.flatnonzero(taking)  # in order, each once
    index = index[(rows.row_box[index] >= 0) & ~slow[rows.row_box[index]]]
    position = np.full(len(read) + 1, -1, dtype=np.int64)  # the last: no row
    position[index] = np.arange(len(index))
    taken = read[list(_Cells._fields)].iloc[index]  # the columns it reads, not every one
    cells = _Cells(*(column_cells(taken[c]) for c in _Cells._fields))

    def at(picked: np.ndarray) -> list[int]:
        """Each device's picked row, as its place in `cells` (-1: none)."""
        return cast(list[int], position[picked].tolist())

    p2p_index = np.flatnonzero(p2p & (rows.row_box >= 0))
    p2p_rows: dict[int, list[Row]] = {}
    for box, row in zip(rows.row_box[p2p_index].tolist(),
                        row_records(read.iloc[p2p_index], _READ), strict=True):
        p2p_rows.setdefault(box, []).append(row)
    slow_index = np.flatnonzero((rows.row_box >= 0) & slow[rows.row_box])
    slow_records = row_records(read.iloc[slow_index], _READ) if slow_index.size else []
    split = _rows_by_prefix(slow_records, boxes) or {}

    figures = _Figures(cells, models, run.label)
    gpu_paths = [(path, case, at(picked), path in LINK_PATHS)
                 for path, case, (_, picked) in paths]
    overlaps = [at(picked) for _, (_, picked) in overlap]
    ddr_at = at(ddr[1])
    gen_list, width_list = gen.tolist(), width.tolist()
    code = rows.code
    slow_list = slow.tolist()
    pairs_list = pairs_in.tolist()
    judge = _Judge(run, boxes[0], spec, [], models)  # no rows: its box changes below
    gpus: dict[int, tuple[GpuMeta, Part | None, bands.LinkInputs, bands.Link | None,
                          dict[tuple[str, bool], tuple[Band | None, str]]]] = {}
    notes: dict[str, str] = {}
    out: list[Check] = []
    for number, box in enumerate(boxes):
        if slow_list[number]:
            out += _judge_boxes(run, spec, [box], [], split, models)
            continue
        judge.box = box
        prefix = box.prefix
        figures.box = box
        # the host
        device = code.get(prefix + HOST_DEVICE, -1)
        place = ddr_at[device] if device >= 0 else -1
        if place < 0:
            out.append(judge.check(HOST_DEVICE, None, "ddr", ddr_case, CANNOT_JUDGE,
                                   f"not measured: no {ddr_case} row in this run"))
        else:
            host = box.host
            note = host.ddr_peak_note if host is not None and host.ddr_peak_note else \
                "no SMBIOS memory modules listed"
            why = notes.get(note)
            if why is None:  # a fleet's hosts say a few
                why = notes[note] = (f"no band: no DDR peak ({one_line(note)}); give "
                                     "[host.ddr] peak_gbps in a spec")
            out.append(figures.check(HOST_DEVICE, None, "ddr", place,
                                     models.ddr_band(host.ddr_peak_gbps if host else None),
                                     why))
        box_p2p = p2p_rows.get(number, [])
        pairs = _Judge(run, box, spec, box_p2p, models) if pairs_list[number] else None
        for gpu in box.gpus.devices:
            label = gpu.label
            device = code.get(prefix + label, -1)
            known = gpus.get(id(gpu))  # nodes alike share their GPUs' records
            if known is None or known[0] is not gpu:
                part = bands.find_part(gpu.name)
                inputs = bands.link_inputs(gpu.metadata)
                link = None if gpu.host_link_c2c else bands.link_of(part, inputs)
                known = gpus[id(gpu)] = (gpu, part, inputs, link, {})
            _, part, inputs, link, path_bands = known
            fault = None
            if link is not None and device >= 0:
                fault = _link_fault_text(link, _float(gen_list[device]),
                                         _float(width_list[device]))
            for path, case, places, link_path in gpu_paths:
                place = places[device] if device >= 0 else -1
                if place < 0:
                    out.append(judge.check(label, gpu, path, case, CANNOT_JUDGE,
                                           f"not measured: no {case} row in this run"))
                    continue
                c2c = gpu.host_link_c2c or flags.C2C_LINK in _flag_set(cells.flags[place])
                banded = path_bands.get((path, c2c))
                if banded is None:
                    banded = path_bands[path, c2c] = models.gpu_band(path, gpu, part, c2c,
                                                                     inputs)
                band, why = banded
                out.append(figures.check(label, gpu, path, place, band, why,
                                         fault=fault if link_path else None))
            if pairs is not None:
                out.append(pairs._p2p(gpu, part))
            else:
                out.append(judge._p2p_unmeasured(gpu, bands.nvlink_fault(
                    part, gpu.metadata.get("nvlink_links_up"), len(box.gpus.devices)), box_p2p))
            band = models.overlap_band(gpu)
            measured = False
            for places in overlaps:
                place = places[device] if device >= 0 else -1
                if place < 0:
                    continue
                measured = True
                out.append(figures.check(label, gpu, "overlap", place, band, "",
                                         value=cell_float(cells.overlap_efficiency[place])))
            if not measured:
                out.append(judge.check(label, gpu, "overlap", "overlap_*", CANNOT_JUDGE,
                                       "not measured: no overlap_* row in this run"))
    return out


class _Cells(NamedTuple):
    """The picked rows' cells, a list per column (`row_records`' cells: None where missing
    in a nullable column), read by place."""

    case: list[Any]
    direction: list[Any]
    value_median: list[Any]
    size_bytes: list[Any]
    flags: list[Any]
    unit: list[Any]
    cv: list[Any]
    peak_value: list[Any]
    memory: list[Any]
    overlap_efficiency: list[Any]


class _Figures:
    """`_Judge._judged` of a fleet's picked rows (`_Cells`), a figure at a time without a
    row's dict: the same fields, the same reasons. What is the same for every GPU of a
    model on a path (its band's fields, the words after a verdict) is a template made once.
    A busy row never comes here (its box is `_Judge`'s)."""

    def __init__(self, cells: _Cells, models: _Models, label: str) -> None:
        self.cells, self.models, self.label = cells, models, label
        self.box: _Box = _Box("", "", None, GpusMeta())
        self._templates: dict[tuple[object, ...], tuple[dict[str, object], Band | None,
                                                        float, dict[str, str]]] = {}

    def _template(self, gpu: GpuMeta | None, path: str, band: Band | None
                  ) -> tuple[dict[str, object], Band | None, float, dict[str, str]]:
        """The fields every check of `gpu`'s model on `path` against `band` shares, the
        band, the model's CV limit and the words after each verdict (`_band_words`)."""
        key = (gpu.name if gpu is not None else None, path, id(band))
        found = self._templates.get(key)
        if found is not None and found[1] is band:
            return found
        part = bands.find_part(gpu.name) if gpu is not None else None
        state = dict(_CHECK_DEFAULTS)
        state.update(run_dir=self.label, gpu_model=gpu.name if gpu is not None else "",
                     part=part.key if part is not None else "", path=path, busy=False,
                     higher_is_better=band.higher_is_better if band else path != "latency")
        words: dict[str, str] = {}
        if band is not None:
            state.update(reference=band.reference, expected=band.expected, warn=band.warn,
                         fail=band.fail, source=band.source)
        found = (state, band, self.models.cv_limit(gpu), words)
        self._templates[key] = found
        return found

    def check(self, device: str, gpu: GpuMeta | None, path: str, place: int,
              band: Band | None, why_no_band: str, value: float | None = None,
              fault: str | None = None) -> Check:
        cells = self.cells
        found = self._templates.get((gpu.name if gpu is not None else None, path, id(band)))
        if found is None or found[1] is not band:
            found = self._template(gpu, path, band)
        template, _, cv_limit, words = found
        if value is None:
            value = _float_cell(cells.value_median[place])
        cv = _float_cell(cells.cv[place])
        noisy = cv is not None and cv > cv_limit
        row_unit = str(cells.unit[place])
        unit = "ratio" if path == "overlap" else row_unit
        box = self.box
        check = object.__new__(Check)
        state = template.copy()  # then set as the check's own: no second copy
        state["box"] = box.name
        state["device"] = box.prefix + device
        state["case"] = str(cells.case[place])
        state["size_bytes"] = cell_int(cells.size_bytes[place])
        state["value"] = value
        state["unit"] = unit
        state["cv"] = cv
        state["noisy"] = noisy
        object.__setattr__(check, "__dict__", state)
        if band is None or value is None:
            state.update(verdict=CANNOT_JUDGE, reason=why_no_band, reference=None,
                         expected=None, warn=None, fail=None, source="")
            return check
        reference = band.reference
        if unit != row_unit:  # an overlap check's ratio: only the band's peak applies
            peak, peak_source = reference, band.source
        else:
            own = a_peak(_float_cell(cells.peak_value[place]))
            if own:
                peak, peak_source = own, _source_of(cells.memory[place],
                                                    cells.direction[place], cells.flags[place])
            elif a_peak(reference):
                peak, peak_source = reference, band.source
            else:
                peak, peak_source = None, ""
        pct_peak = ratio(100 * value, peak)
        verdict = band.verdict(value)
        after = words.get(verdict + unit)
        if after is None:
            after = words[verdict + unit] = _band_words(band, unit, verdict)
        # `_band_reason`, with the words after the verdict made once
        reason = (f"{value:.3f}" if unit == "ratio" else
                  f"{value:.0f} {unit}" if value >= 100 else f"{value:.1f} {unit}") + " (median)"
        shown = reference if peak is None else peak
        if pct_peak is not None and shown:
            reason += f", {pct_peak:.1f}{_peak_words(shown, reference, unit)}"
        reason += after
        if fault is not None:
            verdict, reason = FAIL, f"{fault}; {reason}"
        if noisy:
            reason += f"; noisy (CV {cv:.1%})"
        state["verdict"] = verdict
        state["reason"] = reason
        state["pct_of_peak"] = pct_peak
        if band.higher_is_better:
            state["pct_of_band"] = ratio(100.0 * value, band.expected)
        state["peak"] = peak
        state["peak_source"] = peak_source
        return check


def _float_cell(value: object) -> float | None:
    """`cell_float`, a float cell told apart first (most of a fleet's)."""
    if type(value) is float:
        return None if value != value else value
    return cell_float(value)


def _float(value: float) -> float | None:
    return None if value != value else float(value)


def summary_bands(checks: list[Check]) -> dict[str, tuple[float, float]]:
    """Each summary path's achievable band in % of the part's peak, for the summary plot to
    shade: from where a figure passes (`warn`) to what a healthy part reaches (`expected`);
    the first judged device's where several GPUs of one model share a path."""
    bands: dict[str, tuple[float, float]] = {}
    for check in checks:
        if (check.path in bands or not check.higher_is_better or not check.reference
                or check.warn is None or check.expected is None):
            continue
        bands[check.path] = (100 * check.warn / check.reference,
                             100 * check.expected / check.reference)
    return bands


def checks_frame(checks: list[Check]) -> pd.DataFrame:
    return pd.DataFrame([c.as_dict() for c in checks], columns=list(CHECK_COLUMNS))


LINE_WIDTH = 160
"""A verdict line fits the fleet table's terminal; the table and --json say the rest."""


def _what(check: Check) -> str:
    """'HBM gpu0'; the case where a path has several (each overlap and latency case)."""
    name = check.case if check.path in ("overlap", "latency") else bands.PATH_LABELS[check.path]
    return f"{name} {check.device}".rstrip()


def _line(check: Check) -> float | None:
    """The threshold a WARN or FAIL figure crossed: `fail` for FAIL, `warn` for WARN."""
    return check.fail if check.verdict == FAIL else check.warn


def _short(check: Check) -> str:
    """'73% of band, 68% of peak' for a WARN or FAIL figure; '4302 GB/s, below the FAIL line
    at 4560 GB/s (95% of peak)' where a % of band would not say why (a spec's line above
    what a healthy part reaches, or a latency, which has no % of band); the reason's first
    words where the figure is not why (a link fault fails a figure that would pass)."""
    figure_passes = check.warn is not None and check.value is not None and (
        check.value >= check.warn if check.higher_is_better else check.value <= check.warn)
    if check.verdict == FAIL and figure_passes:
        return check.reason.split("; ")[0]
    line = _line(check)
    if (check.pct_of_band is not None and check.value is not None and line is not None
            and check.expected is not None and line <= check.expected):
        peak = f", {check.pct_of_peak:.0f}% of peak" if check.pct_of_peak is not None else ""
        return f"{check.pct_of_band:.0f}% of band{peak}"
    if check.value is not None and line is not None:
        word = "below" if check.higher_is_better else "above"
        peak = (f" ({100 * line / check.reference:.0f}% of peak)"
                if check.reference and check.higher_is_better and check.unit != "ratio" else "")
        return (f"{_figure(check.value, check.unit)}, {word} the {check.verdict} line at "
                f"{_figure(line, check.unit)}{peak}")
    return check.reason if len(check.reason) <= 60 else check.reason[:59] + "…"


def verdict_line(box: str, checks: list[Check]) -> str:
    """'vm: PASS — 11 checks: 9 pass, 2 cannot judge (DDR, P2P)' and, where some fail or
    warn, which and why; where bwprof itself raised, each such error after it, said to be
    bwprof's and not the box's. A path not judged because the host was busy says so
    ('DDR busy')."""
    verdicts = [c.verdict for c in checks]
    overall = worst(verdicts)
    counts = ", ".join(f"{verdicts.count(v)} {v.lower().replace('_', ' ')}"
                       for v in (PASS, WARN, FAIL, CANNOT_JUDGE, ERROR) if v in verdicts)
    line = f"{box}: {overall.replace('_', ' ')} — {len(checks)} checks: {counts}"
    bad = [c for c in checks if c.verdict in (FAIL, WARN)]
    if bad:
        line += ": " + "; ".join(f"{c.verdict} {_what(c)} {_short(c)}"
                                 for c in sorted(bad, key=lambda c: VERDICTS.index(c.verdict)))
    else:
        order = list(bands.PATH_LABELS.values())
        unjudged = [c for c in checks if c.verdict == CANNOT_JUDGE]
        labels = sorted({bands.PATH_LABELS[c.path] for c in unjudged}, key=order.index)
        busy = {bands.PATH_LABELS[c.path] for c in unjudged if c.busy}
        if labels:
            shown = (label + (" busy" if label in busy else "") for label in labels)
            line += f" ({', '.join(shown)})"
    tail = error_clause(checks)
    if len(line) + len(tail) > LINE_WIDTH:  # what failed is cut first: --json has it all
        line = line[:max(0, LINE_WIDTH - len(tail) - 12)] + "… (--json)"
    line += tail
    return line if len(line) <= LINE_WIDTH else line[:LINE_WIDTH - 12] + "… (--json)"


ERROR_DETAIL_WIDTH = 60
"""The exception's words in a verdict line, at most (the check's reason has them whole)."""


def error_detail(reason: str) -> str:
    """The exception's one line inside an ERROR check's reason (`error_reason`)."""
    detail = reason.split(": ", 1)[-1]
    return detail.removesuffix(f"; {NOT_JUDGED_SUFFIX}")


def error_clause(checks: list[Check]) -> str:
    """'; bwprof error in lat_host: OverflowError: ...; the box was not judged on it' for
    the ERROR checks among `checks` ('' where none): the cases, and the first one's
    exception."""
    errors = [c for c in checks if c.verdict == ERROR]
    if not errors:
        return ""
    cases = list(dict.fromkeys(c.case for c in errors))
    detail = error_detail(errors[0].reason)
    if len(detail) > ERROR_DETAIL_WIDTH:
        detail = detail[:ERROR_DETAIL_WIDTH - 1] + "…"
    suffix = NOT_JUDGED_SUFFIX if len(cases) == 1 else NOT_JUDGED_SUFFIX.replace(" it", " them")
    return f"; bwprof error in {', '.join(cases)}: {detail}; {suffix}"
