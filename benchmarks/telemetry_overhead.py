"""Benchmark: does sampling the counters disturb what bwprof measures?

Runs `ddr_triad` (and, where there is a GPU, `h2d_pinned` at 256 MiB) alternately with the
telemetry sampler running and not, several rounds, in one process, and compares them as the
median of each round's on/off ratio (paired, so slow drift cancels) with a distribution-free 95%
interval (bar: within 1%; an interval that straddles the bar is reported as inconclusive: the
machine is too noisy to tell). Where NVML works, "on" is a real run's telemetry, everything
`bwprof run` does with it (the sampler reading every GPU's counters, the idle check, the
counter windows, the join); without a driver it is the sampler thread with a stand-in reader
that spends `--read-ms` per read (about what 20-30 NVML calls cost), which is the part that
can steal CPU time from the host STREAM threads, following the jobs as a run's telemetry
does (`session.follow_job`: no reads through host cases). A benchmark, not a test: it prints the
ratios, and exits 0 when every case is within the bar, VERDICT_EXIT when one is outside it or
inconclusive (a code of its own, so a caller can tell a verdict from a crash, which exits 1).

    python benchmarks/telemetry_overhead.py [--rounds 6] [--interval-ms 50] [--size 128MiB]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BAR = 0.01
VERDICT_EXIT = 3


def stand_in_reader(read_ms: float):
    def read() -> list[dict[str, object]]:
        end = time.perf_counter() + read_ms / 1000
        while time.perf_counter() < end:  # Python work, holding the GIL like pynvml calls do
            pass
        return [{"device": "gpu0", "power_w": 1.0}]
    return read


class Following:
    """Progress listener that has the stand-in's sampler follow the jobs as a run's telemetry
    session does, through the same function."""

    def __init__(self, sampler) -> None:
        self.sampler = sampler

    def start(self, total: int) -> None:
        pass

    def job_started(self, job) -> None:
        from bwprof.cases import get_case
        from bwprof.telemetry.session import follow_job

        follow_job(self.sampler, job, get_case(job.case).target)

    def job_finished(self, job, rows) -> None:
        self.sampler.untag()


def main() -> int:
    sys.path.insert(0, str(REPO))
    import bwprof
    from bwprof.gpu.runtime import probe
    from bwprof.telemetry import nvml
    from bwprof.telemetry.sampler import Sampler

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--interval-ms", type=float, default=50.0)
    parser.add_argument("--read-ms", type=float, default=1.0)
    parser.add_argument("--size", default=None, help="host array size (default: bwprof's)")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    real = nvml.available()
    stand_in = stand_in_reader(args.read_ms)
    source = ("a real run's telemetry (NVML counters)" if real
              else f"a stand-in reader ({args.read_ms} ms per read) following the jobs")
    cases = ["ddr_triad"] + (["h2d_pinned"] if probe().count else [])
    figures: dict[tuple[str, bool], list[float]] = {}
    paired: dict[str, list[float]] = {case: [] for case in cases}  # on/off within each round
    for round_index in range(args.rounds):
        this_round: dict[tuple[str, bool], float] = {}
        for sampling in ((False, True) if round_index % 2 == 0 else (True, False)):
            sampler = Sampler(stand_in, args.interval_ms / 1000) if sampling and not real else None
            if sampler is not None:
                sampler.start()
            try:
                result = bwprof.run(cases=",".join(cases), preset="quick", size=args.size,
                                    repeats=args.repeats, telemetry=sampling and real,
                                    sample_interval_ms=args.interval_ms,
                                    progress=None if sampler is None else Following(sampler))
            finally:
                if sampler is not None:
                    sampler.stop()
            frame = result.results
            for case in cases:
                rows = frame[(frame["case"] == case) & (frame["status"] == "ok")]
                if case == "h2d_pinned":
                    rows = rows[rows["size_bytes"] == rows["size_bytes"].max()]
                figures.setdefault((case, sampling), []).extend(rows["gbps_median"])
                this_round[(case, sampling)] = statistics.median(rows["gbps_median"])
        for case in cases:
            paired[case].append(this_round[(case, True)] / this_round[(case, False)])
        print(f"round {round_index + 1}/{args.rounds} done")

    print(f"\nsampler every {args.interval_ms:g} ms with {source}; {args.rounds} rounds")
    ok = True
    for case in cases:
        off = statistics.median(figures[(case, False)])
        on = statistics.median(figures[(case, True)])
        ratio = statistics.median(paired[case])
        low, high = median_interval(paired[case])
        if low >= 1 - BAR and high <= 1 + BAR:
            verdict = "within 1%"
        elif high < 1 - BAR or low > 1 + BAR:
            verdict = "OUTSIDE 1%"
        else:  # the interval straddles the bar: this machine's noise hides a 1% effect
            verdict = "INCONCLUSIVE: the machine's run-to-run noise is wider than the 1% bar"
        ok &= verdict == "within 1%"
        print(f"{case:>10}: median {off:.2f} GB/s without sampling, {on:.2f} GB/s with; "
              f"paired ratio {ratio:.4f}, 95% interval {low:.4f}..{high:.4f}: {verdict}")
    return 0 if ok else VERDICT_EXIT


def median_interval(values: list[float]) -> tuple[float, float]:
    """A distribution-free 95% interval for the median (order statistics of the binomial
    sign test); the whole range with fewer than six values."""
    ordered = sorted(values)
    n = len(ordered)
    k = max(0, math.floor((n - 1.96 * math.sqrt(n)) / 2)) if n >= 6 else 0
    return ordered[k], ordered[n - 1 - k]


if __name__ == "__main__":
    sys.exit(main())
