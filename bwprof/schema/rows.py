"""The row every measurement becomes, and the columns of results.csv (schema version 2).

One dataclass defines a row; `CSV_COLUMNS` fixes the order of the file, so the writer, the
DataFrame and docs/columns.md cannot drift. Units live in column names (`_s`, `_gbps`, `_bytes`)
or, for a row's figure, in its `unit` column: `value_median` and `value_best` are in the
row's `unit`, for any metric (`bwprof.schema.metrics`); bandwidth rows also carry them as
`gbps_median` and `gbps_best`, as version 1 did. Facts code acts on are `flags`
(`bwprof.schema.flags`), never words in the note.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from bwprof.schema.flags import join_flags
from bwprof.schema.metrics import BANDWIDTH

SCHEMA_VERSION = 2
READABLE_VERSIONS: tuple[int, ...] = (1, 2)
"""Versions a reader accepts: version 1 folders are upgraded once, on read
(`bwprof.schema.upgrade`)."""


def unreadable_version(path: object, version: str) -> str:
    """The one-line refusal of a file whose schema version (as `version` spells it) this
    bwprof cannot read: the same words for every file of a run folder."""
    return (f"{path} has schema version {version}, this bwprof reads "
            f"{' and '.join(map(str, READABLE_VERSIONS))}; use the bwprof version that wrote it")

Status = Literal["ok", "waived", "skipped", "invalid", "error"]
STATUSES: tuple[str, ...] = ("ok", "waived", "skipped", "invalid", "error")
FAILED_STATUSES: frozenset[str] = frozenset({"invalid", "error"})
MEASURED_STATUSES: tuple[str, ...] = ("ok", "invalid")
"""Rows with a figure: validated, or measured and failed validation."""


@dataclass(frozen=True)
class ResultRow:
    """One case × size × threads/device outcome, measured or not."""

    run_id: str
    host: str
    case: str
    backend: str  # host | cuda | simulated | mpi
    device: str  # cpu | numa0 | gpu0 | gpu0->gpu1 | all | rank0->rank1
    device_name: str
    memory: str  # ddr | hbm | pinned | pageable ...
    direction: str  # within | h2d | d2h | both ...
    size_bytes: int | None
    threads: int | None
    streams: int | None
    numa_node: int | None
    repeats: int | None  # timed samples kept for the statistics
    ops_per_sample: int | None
    bytes_per_op: int | None  # bytes counted per operation (version 1: bytes_per_rep)
    byte_convention: str  # copy | traffic
    time_median_s: float | None
    time_min_s: float | None
    gbps_median: float | None
    gbps_best: float | None
    cv: float | None
    peak_gbps: float | None
    pct_of_peak: float | None
    status: str
    note: str
    metric: str = "bandwidth"
    unit: str = "GB/s"
    higher_is_better: bool | None = True
    work_per_op: float | None = None
    """What one operation did in the metric's terms: bytes (bandwidth), FLOP (throughput),
    dependent loads (latency); the value is derived from it and the timed seconds."""
    value_median: float | None = None
    value_best: float | None = None
    """The best sample's figure: the highest where higher is better, else the lowest."""
    peak_value: float | None = None
    """Theoretical peak in the row's unit; None where unknown or where it does not apply
    (a cache-resident row is not held against the memory's peak)."""
    flags: frozenset[str] = field(default_factory=frozenset)
    phase: str = ""
    """Overlap cases: `alone`, `paired` (both copy directions at once without the kernel:
    the copies' part of `overlap_bidir_compute`'s efficiency), `overlapped`, `concurrent` or
    `pipeline`; loaded-latency cases:
    `load_N`, the concurrent load's nominal intensity in percent of full (`load_0`: idle);
    `one_to_all`, `all_to_one`: `copy_engine` or `sm` (SM copy kernels), the variant;
    empty elsewhere."""
    overlap_efficiency: float | None = None
    schema_version: int = SCHEMA_VERSION
    rank: int | None = None
    """MPI rank that measured the row (fleet runs); empty otherwise."""
    page_bytes: int | None = None
    """Size of the pages holding the row's host buffer (4096, or 2 MiB where transparent huge
    pages back it): a 4 KiB-page latency includes TLB misses. Empty where not known."""
    cache_level: str = ""
    """Latency rows: the level whose size holds the working set (`L1`, `L2`, `L3`); a cache
    and the memory beyond it where the set is past the last level but under 4x it
    (`L3+DDR`, `L2+HBM`: flagged `in_cache`); or the memory beyond every cache (`DDR`,
    `HBM`); empty elsewhere."""
    load_gbps: float | None = None
    """Loaded-latency rows: the bandwidth the concurrent load achieved while the chase ran,
    in the load's own convention (the host's reads: bytes read; the GPU's STREAM copy: bytes
    read plus written)."""
    copy_gbps_median: float | None = None
    copy_gbps_best: float | None = None
    """Rows of a copy (`CaseSpec.copied_factor`): `gbps_median`/`gbps_best` counting the
    bytes copied once, as nvbandwidth does: equal to them for a `copy`-convention row, half
    for a `traffic`-convention copy (`d2d_copy`, STREAM Copy: the buffer read and the
    buffer written); empty where the operation is not a copy."""
    dtype: str = ""
    """Matrix-multiply and FMA rows (`gemm_*`, `fma_gpu`): the arithmetic the row's
    FLOP were done in (`fp64`, `fp32`, `tf32`, `fp16`, `bf16`); empty elsewhere."""
    host_others_pct: float | None = None
    host_steal_pct: float | None = None
    """Host rows: the share (%) of the measuring cores' time that other processes took, and
    that a hypervisor stole, over the row's job; empty for GPU rows and where /proc/stat
    cannot tell. Beyond 5% the row is flagged `busy_host`."""
    counters: dict[str, object] = field(default_factory=dict, compare=False, repr=False)
    """What the GPU's counters saw during the row (TELEMETRY_COLUMNS); empty without them."""

    def __post_init__(self) -> None:
        """Flags come from the vocabulary (a typo is refused here, where the row is made,
        not when it is written). A bandwidth row carries its figures twice, as
        `value_*`/`peak_value` and as `gbps_*`/`peak_gbps` (version 1's columns): whichever
        is given fills the other."""
        join_flags(self.flags)  # raises ValueError naming an unknown flag
        if self.metric != BANDWIDTH.name:
            return
        for value, gbps in (("value_median", "gbps_median"), ("value_best", "gbps_best"),
                            ("peak_value", "peak_gbps")):
            if getattr(self, value) is None and getattr(self, gbps) is not None:
                object.__setattr__(self, value, getattr(self, gbps))
            elif getattr(self, gbps) is None and getattr(self, value) is not None:
                object.__setattr__(self, gbps, getattr(self, value))

    @classmethod
    def bare(cls, *, run_id: str, host: str, case: str, backend: str, status: str, note: str,
             **values: object) -> ResultRow:
        """A row with every measured field empty, for what was not measured (skipped,
        waived, error), with `values` set on top."""
        kept = {"run_id", "host", "case", "backend", "status", "note", "phase",
                "overlap_efficiency", "schema_version", "rank", "counters", "metric", "unit",
                "higher_is_better", "work_per_op", "value_median", "value_best", "peak_value",
                "flags"}
        empty = dict.fromkeys(f.name for f in fields(cls) if f.name not in kept)
        text = {"device": "", "device_name": "", "memory": "", "direction": "",
                "byte_convention": "", "cache_level": "", "dtype": ""}
        return cls(run_id=run_id, host=host, case=case, backend=backend, status=status,
                   note=note, **{**empty, **text, **values})  # type: ignore[arg-type]  # by field name

    @property
    def bytes_per_rep(self) -> int | None:
        """Version 1's name of `bytes_per_op` (it always held bytes per operation)."""
        return self.bytes_per_op

    @property
    def measured(self) -> bool:
        return self.status in MEASURED_STATUSES

    def as_dict(self) -> dict[str, object]:
        """Every column of results.csv (CSV_COLUMNS), telemetry None where not measured.
        Read field by field: every column is a scalar field but the flags, joined here, so
        the deep copy dataclasses.asdict makes (two thirds of building a results frame)
        would copy nothing that matters."""
        values: dict[str, object] = {c: getattr(self, c) for c in CORE_COLUMNS}
        values["flags"] = join_flags(self.flags)
        return {**values, **{c: self.counters.get(c) for c in TELEMETRY_COLUMNS}}


CORE_COLUMNS: tuple[str, ...] = (
    "run_id", "host", "case", "backend", "device", "device_name", "memory", "direction",
    "size_bytes", "threads", "streams", "numa_node", "repeats", "ops_per_sample",
    "bytes_per_op", "byte_convention", "metric", "unit", "higher_is_better", "work_per_op",
    "time_median_s", "time_min_s", "value_median", "value_best", "gbps_median", "gbps_best",
    "cv", "peak_value", "peak_gbps", "pct_of_peak", "status", "flags", "note", "phase",
    "overlap_efficiency", "schema_version", "rank", "page_bytes", "cache_level", "load_gbps",
    "copy_gbps_median", "copy_gbps_best", "dtype", "host_others_pct", "host_steal_pct",
)
"""The row's own columns, in file order."""

ADDED_COLUMNS: tuple[str, ...] = ("page_bytes", "cache_level", "load_gbps",
                                  "copy_gbps_median", "copy_gbps_best", "dtype",
                                  "host_others_pct", "host_steal_pct")
"""Columns version 2 gained after its first files (latency; the copy-convention figures; the
compute rows' dtype; how busy the host was): optional on read, and read as empty from a file
without them (the report derives the copy figures of a known case again:
`bwprof.store.runfolder`)."""
OPTIONAL_COLUMNS: tuple[str, ...] = ("rank", *ADDED_COLUMNS)
"""Core columns a reader does not require (files written before fleet runs existed, or
before the columns were added)."""

RESULT_COLUMNS: tuple[str, ...] = tuple(c for c in CORE_COLUMNS if c not in OPTIONAL_COLUMNS)
"""The columns a results file of this version must have."""

TELEMETRY_COLUMNS: tuple[str, ...] = (
    "telemetry_samples",
    "sm_clock_mhz_mean", "sm_clock_mhz_min", "mem_clock_mhz_mean", "mem_clock_mhz_min",
    "power_w_mean", "power_w_max", "temperature_c_max", "gpu_util_pct_mean",
    "gpu_util_pct_max", "mem_util_pct_mean", "mem_util_pct_max", "pcie_tx_mibps_mean",
    "pcie_tx_mibps_max", "pcie_rx_mibps_mean", "pcie_rx_mibps_max", "pcie_gen_min",
    "pcie_width_min", "dram_bw_util_pct_mean", "dram_bw_util_pct_max",
    "gpm_pcie_tx_mibps_mean", "gpm_pcie_tx_mibps_max", "gpm_pcie_rx_mibps_mean",
    "gpm_pcie_rx_mibps_max", "nvlink_tx_mibps_mean", "nvlink_tx_mibps_max",
    "nvlink_rx_mibps_mean", "nvlink_rx_mibps_max", "throttle_reasons", "window_gbps",
    "counter_gbps", "counter_ratio",
)
"""Columns joined from the hardware counters (issue: telemetry); empty without NVML."""

CSV_COLUMNS: tuple[str, ...] = CORE_COLUMNS + TELEMETRY_COLUMNS

TIMING_COLUMNS: tuple[str, ...] = (
    "run_id",
    "result_row",
    "case",
    "backend",
    "device",
    "direction",
    "size_bytes",
    "threads",
    "sample",
    "seconds_per_op",
    "schema_version",
    "host",
    "rank",
)
"""Columns of timings.csv: one line per kept sample; `result_row` is the 0-based number of
its row in results.csv (`host` and `rank` say where it ran in a fleet run)."""
