"""`bwprof monitor`: the counters of every GPU, live in the terminal, every sample kept in a
CSV when asked. The same reader and sampler as a run, with nothing measured.

Where GPM answers (Hopper and newer) the view shows bandwidths: DRAM as GPM's utilisation x the
GPU's HBM peak, PCIe from GPM's rates (NVML's 20 ms throughput sample elsewhere)."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rich.table import Table

from bwprof.coerce import number
from bwprof.errors import OutputError, write_failure
from bwprof.schema.cells import spreadsheet_text
from bwprof.schema.rows import SCHEMA_VERSION
from bwprof.telemetry.counters import CounterReader
from bwprof.telemetry.sampler import Sampler
from bwprof.telemetry.session import SAMPLE_COLUMNS

COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("SM MHz", "sm_clock_mhz", ".0f"),
    ("mem MHz", "mem_clock_mhz", ".0f"),
    ("power W", "power_w", ".0f"),
    ("temp C", "temperature_c", ".0f"),
    ("util %", "gpu_util_pct", ".0f"),
    ("mem busy %", "mem_util_pct", ".0f"),
    ("PCIe rx MiB/s", "pcie_rx_mibps", ".0f"),
    ("PCIe tx MiB/s", "pcie_tx_mibps", ".0f"),
    ("link", "pcie_gen", ""),
    ("DRAM bw %", "dram_bw_util_pct", ".1f"),
    ("DRAM GB/s", "dram_gbps", ".0f"),
    ("NVLink rx MiB/s", "nvlink_rx_mibps", ".0f"),
    ("NVLink tx MiB/s", "nvlink_tx_mibps", ".0f"),
    ("clock events", "throttle_names", ""),
)


def _value(sample: dict[str, object], key: str, hbm_peak_gbps: float | None) -> object:
    """A column's value: GPM's PCIe rate before NVML's where both exist; DRAM GB/s from
    GPM's utilisation and the peak (None without either)."""
    if key == "dram_gbps":
        util = sample.get("dram_bw_util_pct")
        return (None if util is None or not hbm_peak_gbps
                else number(util) / 100 * hbm_peak_gbps)
    if key in ("pcie_rx_mibps", "pcie_tx_mibps") and sample.get(f"gpm_{key}") is not None:
        return sample[f"gpm_{key}"]
    return sample.get(key)


def _cell(sample: dict[str, object], key: str, spec: str,
          hbm_peak_gbps: float | None = None) -> str:
    if key == "pcie_gen":
        gen, width = sample.get("pcie_gen"), sample.get("pcie_width")
        return "" if gen is None else f"Gen{gen} x{width}"
    value = _value(sample, key, hbm_peak_gbps)
    if value is None or value == "":
        return "-"
    return format(value, spec) if spec else str(value)


def table(latest: Sequence[dict[str, object]], interval_ms: float, count: int,
          hbm_peaks: Mapping[str, float | None] | None = None) -> Table:
    """The newest sample of each GPU as one table (DRAM and NVLink columns need GPM;
    `hbm_peaks`, GB/s by GPU label, turn DRAM utilisation into GB/s)."""
    peaks = hbm_peaks or {}
    view = Table(title=f"bwprof monitor: every {interval_ms:g} ms, {count} sample(s); Ctrl-C "
                       f"to stop", title_justify="left")
    view.add_column("gpu")
    for heading, _, _ in COLUMNS:
        view.add_column(heading, justify="right")
    for sample in latest:
        peak = peaks.get(str(sample["device"]))
        view.add_row(str(sample["device"]), *(_cell(sample, key, spec, peak)
                                              for _, key, spec in COLUMNS))
    return view


class CsvSamples:
    """Every sample into a CSV file, flushed per batch so Ctrl-C keeps all of them; the
    columns of a run's samples.csv, `schema_version` included, text cells following the
    spreadsheet rule. A write that fails (a full disk) is an OutputError naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file: IO[str] = open(path, "w", newline="", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise write_failure(path, exc, option="--csv") from None
        self._csv = csv.writer(self._file)
        try:
            self._write([[*SAMPLE_COLUMNS, "schema_version"]])
        except OutputError:
            self.close()  # never unlinked: the path is the user's (it may be /dev/full)
            raise

    def add(self, batch: Sequence[dict[str, object]]) -> None:
        self._write([["" if sample.get(c) is None else spreadsheet_text(sample.get(c))
                      for c in SAMPLE_COLUMNS] + [SCHEMA_VERSION] for sample in batch])

    def _write(self, rows: Sequence[Sequence[object]]) -> None:
        try:
            self._csv.writerows(rows)
            self._file.flush()
        except OSError as exc:
            raise write_failure(self.path, exc, option="--csv") from None

    def close(self) -> None:
        with suppress(OSError):  # a failed flush was already said by _write
            self._file.close()


@dataclass(frozen=True)
class Monitored:
    """What a monitor session did: samples taken, and the reads that failed (the first few
    kept, all counted), so a GPU that answers nothing is said, not shown as an empty view."""

    taken: int
    errors: tuple[str, ...]
    error_count: int


def monitor(reader: CounterReader, interval_s: float, csv_path: Path | None,
            show: object | None = None, count: int | None = None) -> Monitored:
    """Sample until Ctrl-C (or `count` ticks). `show(latest, taken)` redraws the view after
    each sample."""
    sink = CsvSamples(csv_path) if csv_path is not None else None
    taken = 0

    def on_samples(batch: list[dict[str, object]]) -> None:
        nonlocal taken
        taken += 1
        if sink is not None:
            sink.add(batch)
        if callable(show):
            show(batch, taken)

    sampler = Sampler(reader.read, interval_s, clock=reader.clock,
                      on_samples=on_samples, keep=False)
    try:
        sampler.run(max_ticks=count)
    except KeyboardInterrupt:
        pass
    finally:
        if sink is not None:
            sink.close()
        reader.close()
    return Monitored(taken, tuple(sampler.errors), sampler.error_count)
