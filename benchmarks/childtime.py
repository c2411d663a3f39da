"""One command timed in a child process of its own, for the growth benchmarks: its peak
memory is then the command's (`resource.getrusage`'s maxrss, imports included), beside its
wall and CPU seconds.

A benchmark's child script defines `run()` (the command, returning something to print) and
takes its arguments from `sys.argv[1:4]`; `TIMED_RUN` is appended to it and times `run()`,
under cProfile where a fourth argument asks for it.
"""

from __future__ import annotations

import json
import subprocess
import sys

TIMED_RUN = r"""
wall, cpu = time.perf_counter(), time.process_time()
if len(sys.argv) > 4:
    import cProfile, pstats
    profile = cProfile.Profile()
    profile.enable()
    out = run()
    profile.disable()
    pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
else:
    out = run()
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall": wall, "cpu": cpu, "peak_mib": peak, "out": out}))
"""


def measure_child(script: str, args: list[str], what: str,
                  profile: bool = False) -> dict[str, float]:
    """`script` + TIMED_RUN run with `args`: its wall and CPU seconds and peak memory (MiB);
    with `profile`, its cProfile listing printed. SystemExit naming `what` where it fails."""
    command = [sys.executable, "-c", script + TIMED_RUN, *args]
    done = subprocess.run([*command, "profile"] if profile else command, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")
    if profile:
        print(done.stderr)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
