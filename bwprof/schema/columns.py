"""The column dictionary of results.csv: what every column means, as data.

One source for docs/columns.md's table of columns (`markdown_table`, checked by
tests/schema/test_columns.py), the HTML report's dictionary and anyone reading a file. Columns
that share one meaning are declared together (`"gbps_median gbps_best"`); `RESULT_COLUMNS`
holds one entry per column, in file order (`bwprof.schema.rows.CSV_COLUMNS`). Meanings are
Markdown: `code` in backticks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

_NO_PEAK = ("empty where the row is cache-resident (`in_cache`, `l2_resident`): a cache's "
            "figure is not held against the memory's peak")
_HOST_SHARE = ("host rows: over the row's job, the share (%) of the measuring cores' time (the "
               "job's NUMA node's CPUs, else every CPU bwprof may use)")
_BUSY = ("Counted in 10 ms ticks per core. Above 5% (beyond one tick per core at each end of "
         "the window) the row is flagged `busy_host`; empty for GPU rows, and where "
         "`/proc/stat` cannot be read")

_CORE: dict[str, str] = {
    'run_id':
        '`<hostname>-<UTC start time>` (a fleet run adds `-mpi<ranks>`), the same for every row '
        'of a run',
    'host':
        'host name',
    'case':
        'case key',
    'backend':
        '`host` (CPU), `cuda` (real GPU; also GPU cases skipped because none was found), `mpi` '
        "(`net_p2p`, and a failed rank's `error` row) or `simulated` (test backend; never a "
        'measurement)',
    'device':
        "what the row measured: `cpu` (the whole host), `numaN` (one host NUMA node alone), "
        "`numaI->numaJ` (node I's CPUs reading node J's memory: `lat_host_numa`), `gpuN`, "
        '`gpuI->gpuJ` or `gpuI<->gpuJ` (`p2p_bidir`: both ways at once, summed), `all` (every '
        'GPU at once)',
    'device_name':
        "the model behind `device`: the CPU's model on host rows, the GPU's name (`NVIDIA "
        "H200`) on a GPU's; `A -> B` for a pair of GPUs, the models joined by ` + ` for `all`, "
        "the two nodes' host names for `net_p2p`",
    'memory':
        'memory kind: `ddr`, `hbm`, `pinned`, `pageable`, `host` (network buffers)',
    'direction':
        '`within` one memory, `h2d`, `d2h`, `both` (both ways at once), `p2p`, `net` (between '
        "nodes), `compute` (an overlap case's kernel); an overlap case's concurrent row names its"
        ' parts: `h2d+compute`, `d2h+compute`, `h2d+d2h+compute`, and `h2d+compute+d2h` for '
        '`pipeline_chunked`',
    'size_bytes':
        "bytes of one buffer (one STREAM array, one transfer; a latency chase's working set)",
    'threads':
        'host threads, where they apply',
    'streams':
        'CUDA streams, where they apply',
    'numa_node':
        'host NUMA node, where it applies',
    'repeats':
        'timed samples kept for the statistics (DDR: first repetition dropped; latency: after a '
        'warm-up lap; GPU: after a warm-up sample)',
    'ops_per_sample':
        'back-to-back operations inside one timed sample',
    'bytes_per_op':
        'bytes counted per operation (version 1 called it `bytes_per_rep`; files of that version '
        'still read)',
    'byte_convention':
        "`traffic` (bytes read + bytes written, STREAM's way) or `copy` (bytes copied, once)",
    'metric':
        'what the figure measures: `bandwidth`, `latency`, `throughput` or `efficiency`',
    'unit':
        "the figure's unit: `GB/s` (bandwidth), `ns` (latency), `TFLOP/s` (throughput) or "
        '`ratio` (efficiency)',
    'higher_is_better':
        'whether a higher figure is the better one: true, except for a latency (lower is '
        'better)',
    'work_per_op':
        "what one operation did in the metric's terms: bytes (bandwidth), floating-point "
        'operations (throughput), dependent loads (latency); the figure is derived from it and '
        'the timed seconds, so `timings.csv` can give it again',
    'time_median_s time_min_s':
        'median and best time of one operation, seconds',
    'value_median value_best':
        'the figure at those times, in `unit`: `work_per_op` per second for a rate, seconds per '
        "unit of work for a latency. `value_best` is the fastest sample's: the highest rate, or "
        'the lowest latency',
    'gbps_median gbps_best':
        'bandwidth rows: the same figures as GB/s (empty for other metrics)',
    'cv':
        'coefficient of variation of the samples (standard deviation / mean); empty with a single'
        ' sample',
    'peak_value':
        f'theoretical peak in `unit` where known; {_NO_PEAK}',
    'peak_gbps':
        f'bandwidth rows: `peak_value` as GB/s; {_NO_PEAK}',
    'pct_of_peak':
        f'`value_best` as a percentage of `peak_value`; {_NO_PEAK}',
    'status':
        '`ok`, `waived` (does not apply here), `skipped` (could not run here), `invalid` '
        '(validation failed), `error` (unexpected exception)',
    'flags':
        'facts about the row, joined by `|` (`in_cache|noisy`), from the closed list below; empty'
        ' for none. A file holding any other is malformed',
    'note':
        'the reason for any status other than `ok`, and remarks, for people',
    'phase':
        'overlap cases: `alone`, `paired` (`overlap_bidir_compute`: both copy directions at once '
        "without the kernel, the copies' part of the efficiency; a row per direction and their "
        'span, `both`), `overlapped`, `concurrent` or `pipeline`; loaded-latency cases '
        '(`lat_host_loaded`, `lat_gpu_loaded`): `load_N`, the nominal intensity in % of a '
        'concurrent streaming load on the other cores or SMs (`load_0`: idle); `one_to_all`, '
        '`all_to_one`: `copy_engine` or `sm` (SM copy kernels), the variant; `lat_h2d`: '
        '`random_tlb` on its second row (a random chase through a set >= 4x the L2, GPU TLB '
        'misses included; the headline, nvbandwidth\'s 2 MiB in-order chase, has none); empty '
        'elsewhere',
    'overlap_efficiency':
        'overlap cases only, on the `concurrent` row (see Method)',
    'schema_version':
        'version of this column layout, shared with `system.json`',
    'rank':
        'the MPI rank that measured the row (fleet runs); empty otherwise',
    'page_bytes':
        "size of the pages behind the row's host buffer: 4096, or 2097152 where transparent huge "
        'pages back it (a 4 KiB-page latency includes TLB misses); host latency and host↔device '
        'copy rows; empty where unknown (pinned memory the driver maps)',
    'cache_level':
        'latency rows: the level whose size holds the working set (`L1`, `L2`, `L3`) or the '
        'memory beyond every cache (`DDR`: a host set from 4x the last-level cache; `L3+DDR` '
        'between the last level and 4x it, flagged `in_cache`; `HBM`: a GPU set from 4x the '
        'L2; `L2+HBM` between the L2 and 4x it, flagged `l2_resident`); empty elsewhere',
    'load_gbps':
        'loaded-latency rows: the bandwidth (GB/s) the concurrent load achieved while the chase '
        "ran, each in its load's own convention: `lat_host_loaded`'s load only reads, so bytes "
        "read; `lat_gpu_loaded`'s is a STREAM copy, so bytes read plus written (traffic)",
    'copy_gbps_median copy_gbps_best':
        "rows of a copy: `gbps_median`/`gbps_best` counting each byte copied once, nvbandwidth's "
        "(and bandwidthTest's, OSU's) convention. Equal to them for a `copy`-convention row "
        '(host↔device, `bidir_pinned`, `*_all`, `p2p_*`, `net_p2p`); half of them for a '
        '`traffic`-convention copy, which counts the buffer read and the buffer written: '
        "`d2d_copy` (so its `gbps_*` reads 2× nvbandwidth's `device_local_copy`, its "
        "`copy_gbps_*` reads as nvbandwidth's), and the STREAM Copy kernels `hbm_copy` and "
        "`ddr_copy` (c = a copies one array; BabelStream's and STREAM's own figure stays "
        '`gbps_*`). Empty where the operation is not a copy: Scale, Add, Triad, Dot, latency '
        'chases, and the overlap and pipeline cases, whose rows mix copies with a kernel. Each '
        'case declares what it copies (`copied_factor`, bytes copied per operation as a factor of'
        ' the buffer); a file written before these columns reads them empty, and `bwprof '
        "report`/`compare` derive them again from each row's case",
    'dtype':
        'compute rows (`gemm_host`, `gemm_gpu`, `fma_gpu`): the arithmetic their FLOP were done '
        'in: `fp64`, `fp32`, `tf32` (fp32 inputs, tensor cores allowed to round them to tf32), '
        '`fp16`, `bf16`; empty elsewhere',
    'host_others_pct':
        f"{_HOST_SHARE} that other processes and interrupts took — what `/proc/stat` counts as "
        f"run there, less bwprof's own CPU time. {_BUSY}",
    'host_steal_pct':
        f"{_HOST_SHARE} that a hypervisor stole (`steal` in `/proc/stat`, 0 on bare metal). "
        f"{_BUSY}",
}

_COUNTERS = "over the row's counter samples"
_MOVING = ("over the samples in which PCIe moved at least 1 GiB/s (or half of what the link as "
           "trained carries, where that is less): an idle link drops its generation to save "
           "power")
_GPM = "mean and highest over the row's GPM values"
_TELEMETRY: dict[str, str] = {
    "telemetry_samples":
        "how many counter samples (NVML, GPM) fell in the row's window",
    "sm_clock_mhz_mean sm_clock_mhz_min": f"SM clock (MHz), mean and lowest {_COUNTERS}",
    "mem_clock_mhz_mean mem_clock_mhz_min": f"memory clock (MHz), mean and lowest {_COUNTERS}",
    "power_w_mean power_w_max": f"board power (W), mean and highest {_COUNTERS}",
    "temperature_c_max": f"GPU temperature (°C), highest {_COUNTERS}",
    "gpu_util_pct_mean gpu_util_pct_max": f"GPU utilisation (%), mean and highest {_COUNTERS}",
    "mem_util_pct_mean mem_util_pct_max":
        f"share of time the memory was busy (%, not bandwidth), mean and highest {_COUNTERS}",
    "pcie_tx_mibps_mean pcie_tx_mibps_max":
        f"PCIe TX, GPU to host (MiB/s, NVML's 20 ms average), mean and highest {_COUNTERS}",
    "pcie_rx_mibps_mean pcie_rx_mibps_max":
        f"PCIe RX, host to GPU (MiB/s, NVML's 20 ms average), mean and highest {_COUNTERS}",
    "pcie_gen_min": f"lowest PCIe generation {_MOVING}",
    "pcie_width_min": f"lowest PCIe width (lanes) {_MOVING}",
    "dram_bw_util_pct_mean dram_bw_util_pct_max":
        "GPM DRAM bandwidth utilisation (%), mean and highest over the GPM values whose whole "
        "interval lies in the row's window",
    "gpm_pcie_tx_mibps_mean gpm_pcie_tx_mibps_max": f"GPM PCIe TX (MiB/s), {_GPM}",
    "gpm_pcie_rx_mibps_mean gpm_pcie_rx_mibps_max": f"GPM PCIe RX (MiB/s), {_GPM}",
    "nvlink_tx_mibps_mean nvlink_tx_mibps_max": f"GPM NVLink TX (MiB/s), {_GPM}",
    "nvlink_rx_mibps_mean nvlink_rx_mibps_max": f"GPM NVLink RX (MiB/s), {_GPM}",
    "throttle_reasons":
        "clock-event reasons seen during the row; idle, sync boost and display clocks left "
        "out (`applications_clocks` is kept: clocks held at an application clock)",
    "window_gbps":
        "bytes the row's code moved in its window divided by the window's length (warm-up and "
        "gaps included)",
    "counter_gbps":
        "what the counters imply: GPM DRAM utilisation × HBM peak for device memory, PCIe RX "
        "for host-to-device, TX for device-to-host, NVLink plus PCIe TX for GPU-to-GPU",
    "counter_ratio":
        "`counter_gbps` over `window_gbps`, where the row moved at least 1 GB/s over its window "
        "and enough samples lie behind the counter figure",
}


def _each(groups: dict[str, str]) -> dict[str, str]:
    return {column: meaning for names, meaning in groups.items() for column in names.split()}


CORE_COLUMN_DOCS: dict[str, str] = _each(_CORE)
"""The row's own columns (`bwprof.schema.rows.CORE_COLUMNS`) -> meaning."""
TELEMETRY_COLUMN_DOCS: dict[str, str] = _each(_TELEMETRY)
"""The columns joined from the GPU's counters (`TELEMETRY_COLUMNS`) -> meaning."""
RESULT_COLUMNS: dict[str, str] = {**CORE_COLUMN_DOCS, **TELEMETRY_COLUMN_DOCS}
"""Every column of results.csv -> what it means."""


COLUMNS_FILE = "columns.csv"
"""The dictionary as a file beside the rows of every run folder (and every report)."""
PARQUET_METADATA_KEY = b"bwprof.columns"
"""Key of the dictionary (JSON: column -> meaning) in the metadata of bwprof's Parquet files."""


def dictionary_frame() -> pd.DataFrame:
    """The dictionary as a table: `column`, `meaning` (Markdown), in results.csv's order."""
    import pandas as pd

    return pd.DataFrame({"column": list(RESULT_COLUMNS), "meaning": list(RESULT_COLUMNS.values())})


def meanings_of(columns: Iterable[str]) -> dict[str, str]:
    """What each of `columns` means, for those the dictionary knows."""
    return {c: RESULT_COLUMNS[c] for c in columns if c in RESULT_COLUMNS}


def groups(columns: Iterable[str], docs: dict[str, str] = RESULT_COLUMNS
           ) -> list[tuple[list[str], str]]:
    """The columns in order, consecutive ones that share a meaning together."""
    out: list[tuple[list[str], str]] = []
    for column in columns:
        meaning = docs[column]
        if out and out[-1][1] == meaning:
            out[-1][0].append(column)
        else:
            out.append(([column], meaning))
    return out


def markdown_table(columns: Iterable[str] | None = None) -> str:
    """docs/columns.md's table of results.csv's own columns (`| column | meaning |`)."""
    rows = ["| column | meaning |", "|---|---|"]
    for names, meaning in groups(CORE_COLUMN_DOCS if columns is None else columns):
        cell = ", ".join(f"`{name}`" for name in names)
        rows.append(f"| {cell} | {meaning.replace('|', chr(92) + '|')} |")
    return "\n".join(rows) + "\n"
