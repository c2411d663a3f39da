"""Benchmark: bwprof's host matrix multiply (`gemm_host`) against a bare NumPy `matmul`.

For several rounds, runs `bwprof run --cases gemm_host` and a bare child process that times
`numpy.matmul(a, b, out=c)` the same way (n x n uniform inputs, one untimed multiply, then
`--repeats` multiplies each between two `time.perf_counter()` reads), alternately, at the same
matrix order and thread counts. The bare child sets its BLAS threads the plain way, through
`OPENBLAS_NUM_THREADS`/`OMP_NUM_THREADS`/`MKL_NUM_THREADS` before NumPy loads; bwprof sets
them in-process (threadpoolctl, or OpenBLAS's own call). Each side's figure is its best
TFLOP/s over all rounds (2 n^3 FLOP a multiply), and the bar is bwprof within 5% of the bare
figure for every dtype and thread count. This is a benchmark, not a test: it prints the
ratios and exits 1 when the bar is missed.

    python benchmarks/gemm_host_vs_numpy.py [--rounds 3] [--repeats 10] [--n 1024]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BAR = 0.05

BARE = r"""
import json, sys, time
import numpy as np
n, repeats, dtype = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(23 + n)
kind = {"fp64": np.float64, "fp32": np.float32}[dtype]
a = rng.uniform(-1.0, 1.0, (n, n)).astype(kind)
b = rng.uniform(-1.0, 1.0, (n, n)).astype(kind)
c = np.empty_like(a)
np.matmul(a, b, out=c)
samples = []
for _ in range(repeats):
    start = time.perf_counter()
    np.matmul(a, b, out=c)
    samples.append(time.perf_counter() - start)
print(json.dumps(2.0 * n**3 / min(samples) / 1e12))
"""


def bare(n: int, repeats: int, dtype: str, threads: int) -> float:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, "-c", BARE, str(n), str(repeats), dtype], env=env,
                         check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1]))


def bwprof(repeats: int, preset: str, workdir: Path, round_: int) -> dict[tuple[str, int], float]:
    out = workdir / f"run{round_}"
    subprocess.run([sys.executable, "-m", "bwprof", "run", "--cases", "gemm_host", "--quiet",
                    "--no-plots", "--no-telemetry", "--preset", preset, "--repeats",
                    str(repeats), "--out", str(out)], check=True, cwd=REPO)
    with open(out / "results.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["case"] == "gemm_host"]
    bad = [(r["dtype"], r["threads"], r["status"]) for r in rows if r["status"] != "ok"]
    if bad or not rows:
        sys.exit(f"error: gemm_host rows not ok: {bad or 'none written'}")
    return {(r["dtype"], int(float(r["threads"]))): float(r["value_best"]) for r in rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--preset", default="standard",
                        help="bwprof preset, whose matrix order the bare side uses too")
    args = parser.parse_args()
    from bwprof.host.gemm import SIZES

    n = SIZES[args.preset][-1]
    best_bw: dict[tuple[str, int], float] = {}
    best_bare: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            figures = bwprof(args.repeats, args.preset, Path(tmp), round_)
            for key, value in figures.items():
                best_bw[key] = max(best_bw.get(key, 0.0), value)
            for dtype, threads in figures:
                value = bare(n, args.repeats, dtype, threads)
                best_bare[(dtype, threads)] = max(best_bare.get((dtype, threads), 0.0), value)
    print(f"n = {n}, {args.rounds} rounds x {args.repeats} repeats, best of each side")
    print(f"{'dtype':6} {'threads':>7} {'bwprof TFLOP/s':>15} {'numpy TFLOP/s':>14} "
          f"{'ratio':>7}")
    missed = False
    for key in sorted(best_bw):
        ratio = best_bw[key] / best_bare[key]
        missed |= ratio < 1 - BAR
        print(f"{key[0]:6} {key[1]:7d} {best_bw[key]:15.4f} {best_bare[key]:14.4f} "
              f"{ratio:7.3f}{'  MISSED' if ratio < 1 - BAR else ''}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
