"""Benchmark: the planner's estimate (`bwprof run --dry-run`) against a real run of this
machine, case by case, as ratios.

Plans the run in this process (`bwprof.api.plan_run`: the estimate of each case and of the
whole run), then runs `python -m bwprof run` with the same options as a child, reading its
progress lines (one per job: stderr is a pipe) as they come and timing each case from its
first job's line to the next case's. The bar: the whole run takes at most its estimate (the
estimate is of a slow machine: `bwprof/costs.py`) and at least a quarter of it (an estimate
far too high would make `--budget` thin a run for nothing). Cases are printed, not judged:
one case's share moves with what else the VM runs. Exit 1 when the bar is missed.

    python benchmarks/plan_estimate.py [bwprof run options, e.g. --preset quick]
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LOW_BAR = 0.25
HIGH_BAR = 1.0
PROGRESS = re.compile(r"^\[(\d+)/(\d+) [^\]]*\] (\S+)")


def case_seconds(events: list[tuple[float, str]], end: float) -> dict[str, float]:
    """Seconds each case took, from its first job's line to the next case's first line (the
    last case to `end`)."""
    firsts: list[tuple[float, str]] = []
    for stamp, case in events:
        if not firsts or firsts[-1][1] != case:
            firsts.append((stamp, case))
    spans: dict[str, float] = {}
    for (start, case), (following, _) in zip(firsts, [*firsts[1:], (end, "")], strict=True):
        spans[case] = spans.get(case, 0.0) + following - start
    return spans


def within_bar(actual: float, estimate: float) -> bool:
    return LOW_BAR * estimate <= actual <= HIGH_BAR * estimate


def main(argv: list[str]) -> int:
    from bwprof import api
    from bwprof.cli import app  # noqa: F401  (the options are the CLI's)

    options = dict(zip(argv[::2], argv[1::2], strict=False))
    planned = api.plan_run(preset=options.get("--preset", "standard"),
                           cases=options.get("--cases"))
    estimate = {w.case.key: w.seconds for w in planned.estimate.work if not w.unavailable}
    with tempfile.TemporaryDirectory() as tmp:
        began = time.monotonic()
        child = subprocess.Popen([sys.executable, "-m", "bwprof", "run", *argv, "--out",
                                  str(Path(tmp) / "run")], cwd=REPO, text=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert child.stderr is not None
        events = []
        for line in child.stderr:
            if match := PROGRESS.match(line):
                events.append((time.monotonic() - began, match.group(3)))
        child.wait()
        total = time.monotonic() - began
    if child.returncode not in (0, 1):
        print(f"error: bwprof run exited {child.returncode}", file=sys.stderr)
        return 2
    spans = case_seconds(events, total)
    print(f"{'case':<18} {'estimate':>9} {'actual':>8} {'ratio':>6}")
    for case, seconds in estimate.items():
        took = spans.get(case)
        if took is not None:
            print(f"{case:<18} {seconds:>8.1f}s {took:>7.1f}s {took / seconds:>6.2f}")
    whole = planned.estimate.seconds
    ok = within_bar(total, whole)
    print(f"{'whole run':<18} {whole:>8.1f}s {total:>7.1f}s {total / whole:>6.2f}  "
          f"bar {LOW_BAR}-{HIGH_BAR} x the estimate: {'met' if ok else 'missed'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
