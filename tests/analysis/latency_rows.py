"""Synthetic rows of the latency cases (issue 19), shaped as the cases write them, for the
report tests: `lat_host` and `lat_gpu` sweeps with their cache levels and flags, NUMA pairs,
loaded phases, the host round trip, GPU pairs and small copies; and a run folder of them."""

from __future__ import annotations

from pathlib import Path

from bwprof.schema.meta import CacheLevel
from bwprof.schema.rows import ResultRow
from bwprof.store.export import RunWriter, write_system_json
from tests.schema.builders import gpu, gpus, host, meta
from tests.store.test_export import make_row

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
LLC = 32 * MiB
L2 = 60 * MiB
HOST_CACHES = (CacheLevel(1, "Data", 48 * KiB, 2), CacheLevel(2, "Unified", 1 * MiB, 2),
               CacheLevel(3, "Unified", LLC, 1))


def lat_row(ns: float, **fields: object) -> ResultRow:
    """One latency row of `ns` ns per load (its median, the figure every output shows; the
    best 2% under it, so a test shows which of the two an output took)."""
    values: dict[str, object] = dict(
        case="lat_host", metric="latency", unit="ns", higher_is_better=False,
        gbps_best=None, gbps_median=None, value_best=ns / 1.02, value_median=ns,
        threads=1, bytes_per_op=None, byte_convention="", repeats=9, cv=0.01, note="",
        size_bytes=1 * GiB)
    values.update(fields)
    return make_row(**values)


def host_level(size: int) -> str:
    return "L1" if size <= 48 * KiB else "L2" if size <= MiB else "L3" if size <= LLC else "DDR"


def host_ns(size: int) -> float:
    return {"L1": 1.2, "L2": 4.0, "L3": 14.0, "DDR": 95.0}[host_level(size)]


def lat_host(page_bytes: int = 4096, scale: float = 1.0, **fields: object) -> list[ResultRow]:
    """4 KiB to 4x the LLC (128 MiB) by 4x, and 1 GiB: in_cache under 4x the LLC."""
    sizes = [4 * KiB << (2 * i) for i in range(7)] + [128 * MiB, 1 * GiB]
    return [lat_row(host_ns(size) * scale, size_bytes=size, cache_level=host_level(size),
                    page_bytes=page_bytes,
                    flags=frozenset({"in_cache"}) if size < 4 * LLC else frozenset(),
                    **fields)
            for size in sizes]


def lat_host_numa(nodes: int = 2, local: float = 90.0, remote: float = 140.0) -> list[ResultRow]:
    return [lat_row(local if i == j else remote, case="lat_host_numa",
                    device=f"numa{i}->numa{j}", numa_node=j, cache_level="DDR",
                    page_bytes=4096)
            for i in range(nodes) for j in range(nodes)]


def loaded(case: str = "lat_host_loaded", device: str = "cpu", idle: float = 95.0,
           full_gbps: float = 40.0, **fields: object) -> list[ResultRow]:
    """load_0 ... load_100: latency rising with the load's achieved bandwidth."""
    return [lat_row(idle * (1 + 2 * n / 100), case=case, device=device, phase=f"load_{n}",
                    load_gbps=full_gbps * n / 100, cache_level="DDR" if device == "cpu"
                    else "HBM", **fields)
            for n in (0, 25, 50, 75, 100)]


def _gpu_fields(index: int) -> dict[str, object]:
    return dict(backend="cuda", device=f"gpu{index}", device_name="NVIDIA H200",
                memory="hbm", threads=None)


def gpu_level(size: int) -> str:
    return "L1" if size <= 256 * KiB else "L2" if size <= L2 else "HBM"


def lat_gpu(index: int = 0, hbm_ns: float = 480.0, backend: str = "cuda") -> list[ResultRow]:
    """4 KiB to 256 MiB by 4x (4x the L2 is 240 MiB): l2_resident under 240 MiB."""
    sizes = [4 * KiB << (2 * i) for i in range(9)]  # ... 256 MiB, 1 GiB
    ns = {"L1": 30.0, "L2": 200.0, "HBM": hbm_ns}
    return [lat_row(ns[gpu_level(size)], case="lat_gpu", size_bytes=size,
                    cache_level=gpu_level(size),
                    flags=frozenset({"l2_resident"}) if size < 4 * L2 else frozenset(),
                    **{**_gpu_fields(index), "backend": backend})
            for size in sizes]


def lat_h2d(index: int = 0, ns: float = 1100.0) -> list[ResultRow]:
    return [lat_row(ns, case="lat_h2d", size_bytes=64 * MiB,
                    **{**_gpu_fields(index), "memory": "pinned", "direction": "h2d"})]


def lat_p2p(count: int = 2, ns: float = 900.0, slow: str = "") -> list[ResultRow]:
    return [lat_row(ns * (1.5 if f"gpu{i}->gpu{j}" == slow else 1.0), case="lat_p2p",
                    size_bytes=64 * MiB,
                    **{**_gpu_fields(i), "device": f"gpu{i}->gpu{j}", "direction": "p2p"})
            for i in range(count) for j in range(count) if i != j]


def lat_memcpy(index: int = 0, scale: float = 1.0) -> list[ResultRow]:
    return [lat_row(ns * scale, case="lat_memcpy", size_bytes=4,
                    **{**_gpu_fields(index), "memory": memory, "direction": direction})
            for direction, memory, ns in (("h2d", "pinned", 2400.0), ("d2h", "pinned", 2600.0),
                                          ("within", "hbm", 1800.0))]


def hbm_triad(index: int = 0, gbps: float = 4300.0) -> ResultRow:
    return make_row(case="hbm_triad", size_bytes=1 * GiB, gbps_best=gbps, gbps_median=gbps,
                    **_gpu_fields(index))


def ddr_triad(gbps: float = 143.0) -> ResultRow:
    return make_row(case="ddr_triad", size_bytes=1 * GiB, gbps_best=gbps, gbps_median=gbps)


def every_case(gpu_count: int = 2) -> list[ResultRow]:
    """A box of `gpu_count` GPUs and two NUMA nodes with every latency case, beside
    ddr_triad and hbm_triad (HBM/DDR bandwidth 30x, latency about 5x)."""
    rows = [ddr_triad(), *lat_host(), *lat_host_numa(), *loaded()]
    for index in range(gpu_count):
        rows += [hbm_triad(index), *lat_gpu(index), *lat_h2d(index),
                 *loaded("lat_gpu_loaded", f"gpu{index}", idle=480.0, full_gbps=3000.0,
                         **{k: v for k, v in _gpu_fields(index).items() if k != "device"}),
                 *lat_memcpy(index)]
    return rows + lat_p2p(gpu_count)


def run_meta(gpu_count: int = 2, **fields: object):
    """A finished run's system.json: a host with three cache levels, `gpu_count` H200s."""
    return meta(**{"host": host(hostname="box", cpu_model="AMD EPYC 9654", caches=HOST_CACHES,
                                llc_bytes_total=LLC),
                   "gpus": gpus(*(gpu(i) for i in range(gpu_count))), **fields})


def write_run(folder: Path, rows: list[ResultRow], gpu_count: int = 2, **fields: object) -> Path:
    """A run folder as `bwprof run` writes it: results.csv, timings.csv, system.json."""
    folder.mkdir(parents=True, exist_ok=True)
    writer = RunWriter(folder)
    for row in rows:
        writer.add(row, [])
    writer.close()
    write_system_json(folder, run_meta(gpu_count, **fields))
    return folder
