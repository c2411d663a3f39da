"""Benchmark: how `bwprof trend --no-plots` grows with the history store, against pyarrow
reading the same store as one dataset.

Synthesises history stores of N runs (issue 36: 10 to 10,000), written the way `bwprof
history add` writes them (`bwprof.store.history`: one Parquet file per run, `arrow_schema`,
`run-<run_id>-<key>.parquet`): the rows `prepare_run` makes of the stored H200 run
(`tests/data/h200-quick`, 12 headline figures) repeated with a run id, key, start time,
host, box key, GPU UUID and serial of their own and figures moved by a few percent, over
N/20 boxes measured once a day (about 20 runs each).

Each measurement runs in a child process of its own (so peak memory is the command's, from
`resource.getrusage`'s maxrss, import included) and reports wall and CPU seconds:

- `dataset`: `pyarrow.dataset.dataset(STORE).to_table()`, the reference every figure is
  divided by (the store's bytes read once, no check, no analysis);
- `files`: `bwprof.saved.trend(STORE, plots=False)` on the store without its index (every
  run file read from itself, as a store never compacted is read);
- `compact`: `bwprof history compact --store STORE` (`bwprof.saved.history_compact`), the
  index written from every file (what `history add` does once 200 runs are outside it);
- then, with the index: `trend` (`trend --store S --no-plots`), `trend_gpu` (`--gpu`, one
  box's GPU UUID), `trend_case` (`--case hbm_triad`), `trend_both` (`--gpu` and `--case`);
- `recompact`: one run file added, then `history compact` again (the old index's rows kept,
  one file read).

The fitted exponent of each command is the slope of log(wall) over log(runs) between the
smallest and largest store. The bar (issue 36): every trend with the index ≤ 10 s at 10,000
runs; exit 1 where it is missed (only when 10,000 runs were measured).

    python benchmarks/growth_history.py [--sizes 10,100,1000,10000] [--keep DIR]
        [--profile COMMAND --sizes N]   # cProfile of one command, top 40 by cumulative time
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

try:  # run as `python benchmarks/X.py` or imported as benchmarks.X
    from benchmarks.childtime import measure_child
except ImportError:
    from childtime import measure_child  # type: ignore[no-redef]
sys.path.insert(0, str(REPO))

SOURCE = REPO / "tests" / "data" / "h200-quick"
COMMANDS = ("dataset", "files", "compact", "trend", "trend_gpu", "trend_case", "trend_both",
            "recompact")
TRENDS = ("trend", "trend_gpu", "trend_case", "trend_both")
RUNS_PER_BOX = 20
SECONDS_BAR = 10.0
CASE = "hbm_triad"

_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {repo!r})
command, store, gpu = sys.argv[1], sys.argv[2], sys.argv[3]
def run():
    if command == "dataset":
        import pyarrow.dataset as ds
        return ds.dataset(store, format="parquet").to_table().num_rows
    from bwprof import saved
    if command in ("compact", "recompact"):
        return saved.history_compact(store).covered
    options = {{"files": {{}}, "trend": {{}}, "trend_gpu": {{"gpu": gpu}},
               "trend_case": {{"case": {case!r}}},
               "trend_both": {{"gpu": gpu, "case": {case!r}}}}}[command]
    result = saved.trend(store, plots=False, **options)
    return len(result.rows)
"""


def gpu_of(box: int) -> str:
    return f"GPU-bench-{box:05d}"


def make_store(target: Path, runs: int, first: int = 0, boxes: int | None = None) -> Path:
    """A history store of `runs` synthetic runs (see the module's doc); `first`, `boxes`:
    runs numbered from `first` of a fleet of `boxes` (to add runs to a store)."""
    import hashlib
    from datetime import datetime, timezone

    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    import bwprof
    from bwprof.store import history, history_schema

    base = history.prepare_run(bwprof.load(SOURCE), datetime(2026, 12, 1, tzinfo=timezone.utc))
    table = pa.Table.from_pandas(base.rows, schema=history_schema.arrow_schema(),
                                 preserve_index=False)
    width = table.num_rows
    boxes = boxes or max(1, runs // RUNS_PER_BOX)
    start = pd.Timestamp("2026-01-01T00:00:00Z")
    target.mkdir(parents=True, exist_ok=True)
    values = table.column("value").to_numpy(zero_copy_only=False)
    medians = table.column("value_median").to_numpy(zero_copy_only=False)
    gpu_rows = pa.compute.equal(table.column("device"), "gpu0").fill_null(False)
    for i in range(first, first + runs):
        box, day = i % boxes, i // boxes
        run_id = f"bench-{box:05d}-{day:04d}"
        key = hashlib.sha256(run_id.encode()).hexdigest()[:16]
        factor = 1.0 + 0.01 * (((i * 7919) % 11) - 5) / 5  # within ±1 %: few falls
        started = start + pd.Timedelta(days=day, minutes=box)
        host = f"node{box:05d}"

        def const(value: object, kind: pa.DataType) -> pa.Array:
            return pa.array([value] * width, type=kind)

        def on_gpu(value: str) -> pa.Array:
            return pa.compute.if_else(gpu_rows, value, pa.scalar(None, pa.string()))

        stamp = pa.timestamp("us", tz="UTC")
        columns = {
            "run_key": const(key, pa.string()), "run_id": const(run_id, pa.string()),
            "started_utc": const(started, stamp), "finished_utc": const(started, stamp),
            "host": const(host, pa.string()), "box": const(f"bench{box:05d}", pa.string()),
            "gpu_uuid": on_gpu(gpu_of(box)), "gpu_serial": on_gpu(f"{box:013d}"),
            "value": pa.array(values * factor, type=pa.float64()),
            "value_median": pa.array(medians * factor, type=pa.float64()),
            "source": const(f"/runs/{run_id}", pa.string()),
        }
        one = table
        for name, column in columns.items():
            one = one.set_column(one.schema.get_field_index(name), name, column)
        name = f"{history_schema.FILE_PREFIX}{run_id}-{key}{history_schema.FILE_SUFFIX}"
        pq.write_table(one, target / name)
    return target


INDEX_FILE = "_bwprof-index.parquet"


def _drop_index(store: Path) -> None:
    """The store as never compacted."""
    (store / INDEX_FILE).unlink(missing_ok=True)


def measure(command: str, store: Path, gpu: str, profile: bool = False) -> dict[str, float]:
    """One command in a child process: its wall and CPU seconds and peak memory (MiB)."""
    return measure_child(_CHILD.format(repo=str(REPO), case=CASE), [command, str(store), gpu],
                         command, profile)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--keep", type=Path, help="build (or reuse) the stores here")
    parser.add_argument("--profile", choices=COMMANDS, help="cProfile one command")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]
    commands = [c for c in options.commands.split(",") if c]
    if "dataset" not in commands:
        commands.insert(0, "dataset")
    root = options.keep or Path(tempfile.mkdtemp(prefix="bwprof-history-"))
    figures: dict[int, dict[str, dict[str, float]]] = {}
    for size in sizes:
        store = root / f"store{size}"
        if not store.exists():
            make_store(store, size)
        gpu = gpu_of(0)
        _drop_index(store)  # a store kept from an earlier round: without its index first
        if options.profile:
            if options.profile in TRENDS:
                measure("compact", store, gpu)
            measure(options.profile, store, gpu, profile=True)
            continue
        figures[size] = {}
        for command in commands:
            added = store / "added"
            if command == "files":
                _drop_index(store)
            elif command == "recompact":
                if not (store / INDEX_FILE).exists():
                    measure("compact", store, gpu)
                make_store(added, 1, first=size, boxes=max(1, size // RUNS_PER_BOX))
                (new,) = added.iterdir()
                new.rename(store / new.name)
            elif command in TRENDS and not (store / INDEX_FILE).exists():
                measure("compact", store, gpu)
            figures[size][command] = measure(command, store, gpu)
            if command == "recompact":
                (store / new.name).unlink()
                added.rmdir()
        _drop_index(store)
        reference = figures[size]["dataset"]["wall"]
        print(f"\n{size:,} runs (pyarrow dataset to_table {reference:.2f} s)")
        print(f"  {'command':<11} {'wall s':>8} {'cpu s':>8} {'peak MiB':>9} {'rows':>8} "
              f"{'× dataset':>10}")
        for command in commands:
            f = figures[size][command]
            print(f"  {command:<11} {f['wall']:8.2f} {f['cpu']:8.2f} {f['peak_mib']:9.0f} "
                  f"{int(f['out']):8d} {f['wall'] / reference:10.1f}", flush=True)
    if options.profile or len(sizes) < 2:
        return 0
    small, large = min(sizes), max(sizes)
    print(f"\nfitted exponent (log-log slope of wall time, {small:,} to {large:,} runs)")
    missed = False
    for command in commands:
        slope = (math.log(figures[large][command]["wall"] / figures[small][command]["wall"])
                 / math.log(large / small))
        wall = figures[large][command]["wall"]
        bad = command in TRENDS and wall > SECONDS_BAR
        missed |= bad
        print(f"  {command:<11} {slope:5.2f}  ({wall:.2f} s at {large:,})"
              f"{'  MISSED' if bad else ''}")
    if large >= 10_000:
        print(f"bar: trend with the index ≤ {SECONDS_BAR:g} s at 10,000 runs: "
              f"{'missed' if missed else 'met'}")
        return 1 if missed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
