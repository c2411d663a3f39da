"""The row every measurement becomes, and the columns of results.csv.

One dataclass defines the CSV columns, so the writer, the DataFrame and the README cannot drift.
Units live in column names (`_s`, `_gbps`, `_bytes`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Literal

SCHEMA_VERSION = 1

Status = Literal["ok", "waived", "skipped", "invalid", "error"]
STATUSES: tuple[str, ...] = ("ok", "waived", "skipped", "invalid", "error")
FAILED_STATUSES: frozenset[str] = frozenset({"invalid", "error"})


@dataclass(frozen=True)
class ResultRow:
    """One case × size × threads/device outcome, measured or not."""

    run_id: str
    host: str
    case: str
    backend: str  # host | cuda | simulated
    device: str  # cpu | gpu0 | gpu0->gpu1 | all
    device_name: str
    memory: str  # ddr | hbm | pinned | pageable ...
    direction: str  # within | h2d | d2h | both ...
    size_bytes: int | None
    threads: int | None
    streams: int | None
    numa_node: int | None
    repeats: int | None  # timed samples kept for the statistics
    ops_per_sample: int | None
    bytes_per_rep: int | None  # bytes counted per operation
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
    phase: str = ""
    """Overlap cases: `alone`, `overlapped`, `concurrent` or `pipeline`; empty elsewhere."""
    overlap_efficiency: float | None = None
    schema_version: int = SCHEMA_VERSION
    rank: int | None = None
    """MPI rank that measured the row (fleet runs); empty otherwise."""
    counters: dict[str, object] = field(default_factory=dict, compare=False, repr=False)
    """What the GPU's counters saw during the row (TELEMETRY_COLUMNS); empty without them."""

    @classmethod
    def bare(cls, *, run_id: str, host: str, case: str, backend: str, status: str, note: str,
             **values: object) -> ResultRow:
        """A row with every measured field empty, for what was not measured (skipped,
        waived, error), with `values` set on top."""
        empty = dict.fromkeys(f.name for f in fields(cls) if f.name not in (
            "run_id", "host", "case", "backend", "status", "note", "phase",
            "overlap_efficiency", "schema_version", "rank", "counters"))
        text = {"device": "", "device_name": "", "memory": "", "direction": "",
                "byte_convention": ""}
        return cls(run_id=run_id, host=host, case=case, backend=backend, status=status,
                   note=note, **{**empty, **text, **values})  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, object]:
        """Core columns, then every telemetry column (None where not measured)."""
        values = asdict(self)
        counters = values.pop("counters")
        return {**values, **{c: counters.get(c) for c in TELEMETRY_COLUMNS}}


OPTIONAL_COLUMNS: tuple[str, ...] = ("rank",)
"""Core columns a reader does not require (files written before fleet runs existed)."""

RESULT_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(ResultRow) if f.name not in ("counters", *OPTIONAL_COLUMNS)
)

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

CSV_COLUMNS: tuple[str, ...] = RESULT_COLUMNS + OPTIONAL_COLUMNS + TELEMETRY_COLUMNS

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
)
