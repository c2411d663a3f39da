"""`bwprof monitor`: the counters of every GPU, live in the terminal, every sample kept in a
CSV when asked. The same reader and sampler as a run, with nothing measured."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from rich.table import Table

from bwprof.report.schema import SCHEMA_VERSION
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
    ("NVLink rx MiB/s", "nvlink_rx_mibps", ".0f"),
    ("NVLink tx MiB/s", "nvlink_tx_mibps", ".0f"),
    ("clock events", "throttle_names", ""),
)


def _cell(sample: dict[str, object], key: str, spec: str) -> str:
    if key == "pcie_gen":
        gen, width = sample.get("pcie_gen"), sample.get("pcie_width")
        return "" if gen is None else f"Gen{gen} x{width}"
    value = sample.get(key)
    if value is None or value == "":
        return "-"
    return format(value, spec) if spec else str(value)


def table(latest: Sequence[dict[str, object]], interval_ms: float, count: int) -> Table:
    """The newest sample of each GPU as one table (DRAM and NVLink columns need GPM)."""
    view = Table(title=f"bwprof monitor: every {interval_ms:g} ms, {count} sample(s); Ctrl-C "
                       f"to stop", title_justify="left")
    view.add_column("gpu")
    for heading, _, _ in COLUMNS:
        view.add_column(heading, justify="right")
    for sample in latest:
        view.add_row(str(sample["device"]), *(_cell(sample, key, spec)
                                              for _, key, spec in COLUMNS))
    return view


class CsvSamples:
    """Every sample into a CSV file, flushed per batch so Ctrl-C keeps all of them; the
    columns of a run's samples.csv, `schema_version` included."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = open(path, "w", newline="")  # noqa: SIM115
        self._csv = csv.writer(self._file)
        self._csv.writerow([*SAMPLE_COLUMNS, "schema_version"])

    def add(self, batch: Sequence[dict[str, object]]) -> None:
        for sample in batch:
            self._csv.writerow(["" if sample.get(c) is None else sample.get(c)
                                for c in SAMPLE_COLUMNS] + [SCHEMA_VERSION])
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def monitor(reader: CounterReader, interval_s: float, csv_path: Path | None,
            show: object | None = None, count: int | None = None) -> int:
    """Sample until Ctrl-C (or `count` samples); returns the number of samples taken.
    `show(latest, taken)` redraws the view after each sample."""
    sink = CsvSamples(csv_path) if csv_path is not None else None
    taken = 0

    def on_samples(batch: list[dict[str, object]]) -> None:
        nonlocal taken
        taken += 1
        if sink is not None:
            sink.add(batch)
        if callable(show):
            show(batch, taken)

    sampler = Sampler(reader.read, interval_s, clock=reader.clock,  # type: ignore[arg-type]
                      on_samples=on_samples, keep=False)
    try:
        sampler.run(max_ticks=count)
    except KeyboardInterrupt:
        pass
    finally:
        if sink is not None:
            sink.close()
        reader.close()
    return taken
