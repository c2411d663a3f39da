"""Benchmark: how the reading commands grow with a run's rows, against pandas reading the
same results.csv.

Synthesises fleet run folders of N rows (issue 36: 10k, 100k, 1M): the rows of the stored
H200 run (`tests/data/h200-quick`, about 93 cases) replicated over N/93 nodes, each row's
device named `node{i}:gpu0` and its host `node{i}`, as `bwprof.fleet.merge` names them, with a
system.json that lists every node, results.csv written through the project's typed frame
(`typed_results`) and results.parquet beside it, as `bwprof run` leaves a folder. A second
folder of the same shape (figures 2 % lower) is the other side of `compare`.

Each measurement runs in a child process of its own (so peak memory is the command's, from
`resource.getrusage`'s maxrss, import included) and reports wall and CPU seconds. The
commands run as a user types them, through the CLI's entry point with stdout sent to
/dev/null (so what the terminal is given is made, and every file the command writes is
written):

- `read_csv`: pandas' `read_csv` of results.csv, the reference every figure is divided by;
- `load`: `bwprof.load(DIR)` and its `.results`;
- `report`: `bwprof report --no-plots DIR` (the terminal's text, and DIR/report/'s files);
- `report_json`: `bwprof report --no-plots --json DIR`;
- `accept`: `bwprof accept DIR`;
- `compare`: `bwprof compare A B`.

The fitted exponent of each command is the slope of log(wall) over log(rows) between the
smallest and largest size, printed beside the slope of its CPU seconds (on a machine others
share, wall time grows with their load too). The bar (issue 36): every wall exponent ≤ 1.1,
and every command ≤ 10 s at 1M rows; exit 1 where it is missed (only when 1M rows were
measured).

    python benchmarks/growth_read.py [--sizes 10000,100000,1000000] [--keep DIR]
        [--profile COMMAND --sizes N]   # cProfile of one command, top 30 by cumulative time
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

REPO = Path(__file__).resolve().parent.parent

try:  # run as `python benchmarks/X.py` or imported as benchmarks.X
    from benchmarks.childtime import measure_child
except ImportError:
    from childtime import measure_child  # type: ignore[no-redef]
sys.path.insert(0, str(REPO))

if TYPE_CHECKING:
    from bwprof.schema.meta import GpuMeta, NodeMeta, RunMeta

SOURCE = REPO / "tests" / "data" / "h200-quick"
COMMANDS = ("read_csv", "load", "report", "report_json", "accept", "compare")
EXPONENT_BAR = 1.1
SECONDS_BAR = 10.0

_CHILD = r"""
import contextlib, json, os, resource, sys, time
sys.path.insert(0, {repo!r})
command, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
CLI = {{"report": ["report", "--no-plots", a], "report_json": ["report", "--no-plots", "--json", a],
       "accept": ["accept", a], "compare": ["compare", a, b]}}
def run():
    if command == "read_csv":
        import pandas as pd
        return len(pd.read_csv(a + "/results.csv", low_memory=False))
    if command == "load":
        import bwprof
        return len(bwprof.load(a).results)
    if command not in CLI:
        raise SystemExit(f"unknown command {{command}}")
    from bwprof.entry import main
    sys.argv = ["bwprof", *CLI[command]]
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # the command's own output, as a user's redirect gets it
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
    if code not in (0, 1):  # accept and compare say 1 for a verdict, not a failure
        raise SystemExit(f"bwprof {{' '.join(CLI[command])}} exited {{code}}")
    return code
"""


def make_folder(target: Path, rows: int, scale: float = 1.0) -> Path:
    """A fleet run folder of about `rows` rows (whole nodes of the stored run's rows)."""
    import pandas as pd

    import bwprof
    from bwprof.render.outputs import write_results_parquet
    from bwprof.schema.rows import CSV_COLUMNS
    from bwprof.schema.table import typed_results
    from bwprof.store.export import write_system_json

    base = bwprof.load(SOURCE)
    one = base.results[list(CSV_COLUMNS)]
    nodes = max(1, round(rows / len(one)))
    names = [f"node{i}" for i in range(nodes)]
    frame = pd.concat([one] * nodes, ignore_index=True)
    node = pd.Series(names).repeat(len(one)).reset_index(drop=True)
    device = one["device"].astype(str)
    frame["device"] = (node + ":" + pd.concat([device] * nodes, ignore_index=True))
    frame["host"] = node
    frame["rank"] = pd.Series(range(nodes)).repeat(len(one)).reset_index(drop=True)
    frame["run_id"] = f"fleet-{rows}-{scale:g}"
    for column in ("value_median", "value_best", "gbps_median", "gbps_best",
                   "copy_gbps_median", "copy_gbps_best"):
        frame[column] = frame[column] * scale
    frame = typed_results(frame)
    target.mkdir(parents=True, exist_ok=True)
    frame.to_csv(target / "results.csv", index=False)
    notes: list[str] = []
    write_results_parquet(frame, target / "results.parquet", notes, target / "results.csv")
    meta = base.meta
    meta = replace(meta, run_id=f"fleet-{rows}-{scale:g}", simulated=False,
                   nodes={name: _node(meta, name) for name in names})
    write_system_json(target, meta)
    return target


def _node(meta: RunMeta, name: str) -> NodeMeta:
    """The stored box as node `name` of a fleet, with its own host name and GPU UUIDs, as
    a real fleet's nodes differ (no two nodes' system.json the same)."""
    import hashlib

    from bwprof.schema.meta import NodeMeta

    def uuid(device: GpuMeta) -> str:
        digest = hashlib.sha1(f"{name}/{device.index}".encode()).hexdigest()
        return (f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-"
                f"{digest[20:32]}")

    devices = [replace(device, metadata={**device.metadata, "uuid": uuid(device)})
               if device.metadata else device for device in meta.gpus.devices]
    return NodeMeta(host=replace(meta.host, hostname=name),
                    gpus=replace(meta.gpus, devices=devices), telemetry=meta.telemetry)


def measure(command: str, a: Path, b: Path, profile: bool = False) -> dict[str, float]:
    """One command in a child process: its wall and CPU seconds and peak memory (MiB)."""
    return measure_child(_CHILD.format(repo=str(REPO)), [command, str(a), str(b)], command,
                         profile)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--keep", type=Path, help="build (or reuse) the folders here")
    parser.add_argument("--profile", choices=COMMANDS, help="cProfile one command")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]
    commands = [c for c in options.commands.split(",") if c]
    if "read_csv" not in commands:
        commands.insert(0, "read_csv")
    root = options.keep or Path(tempfile.mkdtemp(prefix="bwprof-growth-"))
    figures: dict[int, dict[str, dict[str, float]]] = {}
    for size in sizes:
        a, b = root / f"a{size}", root / f"b{size}"
        if not (a / "system.json").exists():
            make_folder(a, size)
        if not (b / "system.json").exists():
            make_folder(b, size, scale=0.98)
        if options.profile:
            measure(options.profile, a, b, profile=True)
            continue
        figures[size] = {"read_csv": measure("read_csv", a, b)}
        reference = figures[size]["read_csv"]["wall"]
        print(f"\n{size:,} rows (pandas read_csv {reference:.2f} s)")
        print(f"  {'command':<11} {'wall s':>8} {'cpu s':>8} {'peak MiB':>9} {'× read_csv':>11}")
        for command in commands:  # each line as soon as it is measured
            f = figures[size].get(command) or measure(command, a, b)
            figures[size][command] = f
            print(f"  {command:<11} {f['wall']:8.2f} {f['cpu']:8.2f} {f['peak_mib']:9.0f} "
                  f"{f['wall'] / reference:11.1f}", flush=True)
    if options.profile or len(sizes) < 2:
        return 0
    small, large = min(sizes), max(sizes)
    print(f"\nfitted exponent (log-log slope, {small:,} to {large:,} rows): of wall time, and "
          "of CPU time (the steadier on a shared machine)")
    missed = False
    timed = large >= 1_000_000  # the seconds bar is the 1M-row one
    for command in commands:
        def slope(kind: str, command: str = command) -> float:
            return (math.log(figures[large][command][kind] / figures[small][command][kind])
                    / math.log(large / small))
        wall, cpu = figures[large][command]["wall"], figures[large][command]["cpu"]
        bad = command != "read_csv" and (slope("wall") > EXPONENT_BAR
                                         or (timed and wall > SECONDS_BAR))
        missed |= bad
        flag = "  MISSED" if bad else ""
        print(f"  {command:<11} wall {slope('wall'):5.2f}  cpu {slope('cpu'):5.2f}  "
              f"({wall:.2f} s, {cpu:.2f} s CPU at {large:,}){flag}")
    if large >= 1_000_000:
        print(f"bar: exponent ≤ {EXPONENT_BAR} and ≤ {SECONDS_BAR:g} s at 1M rows: "
              f"{'missed' if missed else 'met'}")
        return 1 if missed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
