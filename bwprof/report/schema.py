"""The row every measurement becomes, and the columns of results.csv.

One dataclass defines the CSV columns, so the writer, the DataFrame and the README cannot drift.
Units live in column names (`_s`, `_gbps`, `_bytes`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
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

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


RESULT_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(ResultRow))

TIMING_COLUMNS: tuple[str, ...] = (
    "run_id",
    "case",
    "device",
    "direction",
    "size_bytes",
    "threads",
    "sample",
    "seconds_per_op",
)
