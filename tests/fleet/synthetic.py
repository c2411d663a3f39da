"""Synthetic rank reports for merge tests and benchmarks/growth_merge.py: every rank a copy of
the stored H200 run (`tests/data/h200-quick`: 93 rows, their timings, telemetry samples, an
overlap timeline and the box's system.json) as that rank's own folder would give it, renamed
to its node. Shapes and sizes are a real rank's; the figures are the stored run's, never
offered as a fleet's measurement."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pandas as pd

from bwprof.coerce import integer
from bwprof.fleet.merge import RankName, RankReport
from bwprof.render.timeline import read_timelines
from bwprof.schema.meta import MachineIdentity, RunMeta
from bwprof.schema.rows import SCHEMA_VERSION
from bwprof.schema.table import read_results, read_run_csv
from bwprof.store.runfolder import read_system

SOURCE = Path(__file__).resolve().parent.parent / "data" / "h200-quick"


class Source:
    """The stored run's records, read once."""

    def __init__(self, folder: Path = SOURCE) -> None:
        notes: list[str] = []
        self.meta: RunMeta = read_system(folder / "system.json")

        def records(frame: pd.DataFrame) -> list[dict[str, object]]:
            return [{str(k): v for k, v in r.items()} for r in frame.to_dict("records")]

        def table(name: str) -> pd.DataFrame:
            return read_run_csv(folder / name, notes)

        # The stored run predates schema version 2: its rows as this version writes them.
        self.rows = records(read_results(folder / "results.csv").assign(
            schema_version=SCHEMA_VERSION))
        self.timings = records(table("timings.csv").assign(schema_version=SCHEMA_VERSION))
        self.samples = records(table("samples.csv"))
        self.timelines = read_timelines(folder)


def host_of(rank: int, per_node: int = 1) -> str:
    return f"node{rank // per_node:04d}"


def report(source: Source, rank: int, *, per_node: int = 1, box: str | None = None,
           error: str | None = None, driver: str | None = None,
           rows: int | None = None) -> RankReport:
    """Rank `rank`'s report: `per_node` ranks share a node (one GPU each, the first runs the
    host cases); `box` gives its machine a box key; `driver` another driver version; `rows`
    only that many of the stored run's rows (every `len // rows`-th), their timings, as many
    samples and no timeline."""
    host = host_of(rank, per_node)
    local = rank % per_node
    gpu = local if per_node > 1 else 0
    meta = source.meta
    assert meta.host is not None
    identity = (MachineIdentity(box=box, box_source="machine_id", machine_id=box)
                if box is not None else None)
    devices = tuple(replace(d, index=gpu) for d in meta.gpus.devices[:1])
    if driver is not None:
        devices = tuple(replace(d, metadata={**d.metadata, "driver_version": driver})
                        for d in devices)
    meta = replace(meta, run_id=f"rank{rank}", mpi_rank=rank,
                   host=replace(meta.host, hostname=host, identity=identity),
                   gpus=replace(meta.gpus, devices=devices, used=(gpu,)))
    keep = [i for i, row in enumerate(source.rows)
            if per_node == 1 or local == 0 or row.get("backend") != "host"]
    if rows is not None:
        keep = keep[::max(1, len(keep) // rows)][:rows]
    number = {old: new for new, old in enumerate(keep)}
    renamed = [{**source.rows[i], "host": host, "rank": rank,
             "device": f"gpu{gpu}" if source.rows[i].get("device") == "gpu0"
             else source.rows[i].get("device")} for i in keep]
    timings = [{**t, "result_row": number[integer(t["result_row"])], "host": host,
                "rank": rank} for t in source.timings if integer(t["result_row"]) in number]
    return RankReport(
        rank=rank, host=host, local_rank=local, local_size=per_node, gpus=[gpu],
        host_cases=local == 0, rows=renamed, timings=timings,
        samples=[dict(s) for s in source.samples[:rows]],
        findings=[{"severity": "info", "device": f"gpu{gpu}", "what": f"rank {rank} note",
                   "why": "synthetic", "evidence": "-", "schema_version": 2}],
        timelines=[dict(t) for t in source.timelines] if rows is None else [], meta=meta,
        notes=[f"synthetic note of rank {rank}"] if rank % 7 == 3 else [], error=error)


def reports(source: Source, size: int, skip: frozenset[int] = frozenset(),
            **options: object) -> Iterator[RankReport]:
    """Every rank's report in rank order, made one at a time (as they arrive at rank 0)."""
    for rank in range(size):
        if rank not in skip:
            yield report(source, rank, **options)  # type: ignore[arg-type]


def names(size: int, skip: frozenset[int] = frozenset(), per_node: int = 1,
          boxes: dict[int, str] | None = None) -> dict[int, RankName]:
    """What `Fleet.gather` gives rank 0 before the records: each rank's `RankName`."""
    return {rank: RankName(host_of(rank, per_node), (boxes or {}).get(rank))
            for rank in range(size) if rank not in skip}
