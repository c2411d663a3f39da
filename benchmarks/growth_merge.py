"""Benchmark: rank 0's merge of a fleet run as the fleet grows (issue 36: 10, 100, 1,000 ranks).

No MPI: the streamed merge (`bwprof.fleet.merge.MergeStream`) is fed synthetic rank reports
as `Fleet.stream` hands them over, one at a time in rank order, after every rank's name (what
`Fleet.gather` gives first). Each rank's report is a copy of the stored H200 run
(`tests/data/h200-quick`: 93 rows, 446 timings, 494 telemetry samples, an overlap timeline,
the box's system.json) renamed to its node (`tests/fleet/synthetic.py`); the figures are the
stored run's, replicated, not a fleet's measurement.

Each size runs in a child process of its own and reports:

- `merge`: MergeStream from the names to close() (results.csv, timings.csv, samples.csv,
  findings.csv, timelines.json, system.json): wall and CPU seconds, and the peak of Python's
  traced memory (tracemalloc: what rank 0 holds, the reports made one at a time inside it);
- `report`: then `MergeStream.result` (the merged folder read back and summary.csv written,
  no plots): what `bwprof run` shows at the end, linear in rows as `bwprof report` is;
- `maxrss`: the child's peak resident memory (ru_maxrss, interpreter and imports included).

The fitted exponent is the log-log slope between the smallest and largest size. The bar
(issue 36): rank 0's `merge` peak at 1,000 ranks within 2x of 10 ranks'; exit 1 where missed.

    python benchmarks/growth_merge.py [--sizes 10,100,1000] [--no-trace]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PEAK_BAR = 2.0

_CHILD = r"""
import gc, json, resource, sys, tempfile, time, tracemalloc
from pathlib import Path
sys.path.insert(0, {repo!r})
from bwprof.fleet.merge import MergeStream
from tests.fleet import synthetic
size, trace = int(sys.argv[1]), sys.argv[2] == "trace"
source = synthetic.Source()
out = Path(tempfile.mkdtemp(prefix="bwprof-merge-"))
gc.collect()
if trace:
    tracemalloc.start()
wall, cpu = time.perf_counter(), time.process_time()
stream = MergeStream(out, "fleet", synthetic.names(size), size, 60.0)
for report in synthetic.reports(source, size):
    stream.add(report)
    del report
stream.close()
merge = {{"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
          "peak_mib": tracemalloc.get_traced_memory()[1] / 2**20 if trace else float("nan")}}
if trace:
    tracemalloc.reset_peak()
wall, cpu = time.perf_counter(), time.process_time()
result = stream.result({{"plots": False}})
report = {{"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
           "peak_mib": tracemalloc.get_traced_memory()[1] / 2**20 if trace else float("nan"),
           "rows": len(result.results)}}
maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"merge": merge, "report": report, "maxrss_mib": maxrss}}))
"""


def measure(size: int, trace: bool) -> dict[str, Any]:
    """One size in a child process (see the module's docstring)."""
    done = subprocess.run([sys.executable, "-c", _CHILD.format(repo=str(REPO)), str(size),
                           "trace" if trace else "plain"], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"{size} ranks failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--no-trace", action="store_true",
                        help="no tracemalloc (faster wall times; no traced peak)")
    options = parser.parse_args()
    sizes = [int(s) for s in options.sizes.split(",")]
    trace = not options.no_trace
    figures: dict[int, dict[str, Any]] = {}
    print(f"{'ranks':>6} {'rows':>7} {'merge s':>8} {'cpu s':>7} {'peak MiB':>9} "
          f"{'report s':>9} {'peak MiB':>9} {'maxrss MiB':>11}")
    for size in sizes:  # each line as soon as it is measured
        f = figures[size] = measure(size, trace)
        merge, report = f["merge"], f["report"]
        print(f"{size:>6} {report['rows']:>7} {merge['wall']:8.2f} {merge['cpu']:7.2f} "
              f"{merge['peak_mib']:9.2f} {report['wall']:9.2f} {report['peak_mib']:9.2f} "
              f"{f['maxrss_mib']:11.0f}", flush=True)
    if len(sizes) < 2:
        return 0
    small, large = min(sizes), max(sizes)

    def slope(step: str, kind: str) -> float:
        return (math.log(figures[large][step][kind] / figures[small][step][kind])
                / math.log(large / small))

    print(f"\nfitted exponent ({small} to {large} ranks): merge wall {slope('merge', 'wall'):.2f}"
          f", cpu {slope('merge', 'cpu'):.2f}; report wall {slope('report', 'wall'):.2f}")
    if not trace:
        return 0
    ratio = figures[large]["merge"]["peak_mib"] / figures[small]["merge"]["peak_mib"]
    print(f"rank 0's merge peak: {ratio:.2f}x from {small} to {large} ranks "
          f"(exponent {slope('merge', 'peak_mib'):.3f}); report step "
          f"{slope('report', 'peak_mib'):.2f} (it reads the merged rows back)")
    if large >= 1000 and small <= 10:
        met = ratio <= PEAK_BAR
        print(f"bar: peak at {large} ranks within {PEAK_BAR:g}x of {small} ranks': "
              f"{'met' if met else 'missed'}")
        return 0 if met else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
