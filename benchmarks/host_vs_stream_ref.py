"""Benchmark: bwprof host DDR figures against the C/OpenMP STREAM reference, in one run.

Builds benchmarks/ref/stream_ref.c (the project's own C source) with `gcc -O3 -march=native
-fopenmp`, then for several rounds runs it and `bwprof run --cases ddr_copy,ddr_triad` alternately
(both as child processes of this script, same array size, repeats and thread count) and compares
the best figure of each over all rounds as a ratio. The bar is bwprof best >= 0.95 x reference
best, like for like: bwprof is run with NumPy's huge-page request off, since the reference's arrays
get 4 KiB pages where the kernel's transparent huge pages are 'madvise'. bwprof as it runs (NumPy's
2 MiB pages, about a tenth faster) is printed beside it. This is a benchmark, not a test: it prints
the ratios and exits 1 when the bar is missed.

    python benchmarks/host_vs_stream_ref.py [--rounds 5] [--size 256MiB] [--threads N]
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    from benchmarks import refs
except ImportError:  # run as a script (python benchmarks/...): its own folder is on the path
    import refs  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parent.parent
DEFAULT_REF = refs.STREAM_REF
KERNELS = ("copy", "triad")
BAR = 0.95


def build_reference(source: Path, workdir: Path) -> Path:
    return refs.build(source, workdir, refs.STREAM_FLAGS)


def run_reference(binary: Path, elements: int, repeats: int, threads: int) -> dict[str, float]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([str(binary), str(elements), str(repeats)], env=env, check=True,
                         capture_output=True, text=True).stdout
    rows = csv.DictReader(out.splitlines())
    return {row["kernel"]: float(row["best_GBps"]) for row in rows if row["kernel"] in KERNELS}


# bwprof's CLI in a child process, with NumPy's huge-page request switched as asked: the
# reference's aligned_alloc arrays never ask for huge pages, so under the kernel's 'madvise'
# mode they get 4 KiB pages while NumPy's get 2 MiB ones (fewer TLB misses).
BWPROF_CHILD = (
    "import sys\n"
    "from numpy._core import multiarray\n"
    "multiarray._set_madvise_hugepage(sys.argv.pop(1) == 'huge')\n"
    "from bwprof.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def run_bwprof(out: Path, size_bytes: int, repeats: int, threads: int,
               huge_pages: bool) -> dict[str, float]:
    subprocess.run(
        [sys.executable, "-c", BWPROF_CHILD, "huge" if huge_pages else "small", "run",
         "--cases", "ddr_copy,ddr_triad", "--quiet", "--no-plots",
         "--size", str(size_bytes), "--repeats", str(repeats), "--threads", str(threads),
         "--out", str(out)],
        check=True, cwd=REPO, stdout=subprocess.DEVNULL,
    )
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    if any(row["status"] != "ok" for row in rows):
        sys.exit(f"error: bwprof rows not ok: {[(r['case'], r['status']) for r in rows]}")
    return {row["case"].removeprefix("ddr_"): float(row["gbps_best"]) for row in rows}


def main() -> int:
    sys.path.insert(0, str(REPO))
    from bwprof.plan import default_host_array_bytes, parse_size
    from bwprof.system import caches, llc_bytes_total, transparent_hugepages, usable_cpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", type=Path, default=DEFAULT_REF)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--size", help="bytes per array (default: bwprof's default)")
    parser.add_argument("--threads", type=int, default=usable_cpus())
    args = parser.parse_args()

    size = parse_size(args.size) if args.size else default_host_array_bytes(
        llc_bytes_total(caches()))
    elements = size // 8
    runners = ("ref", "bwprof", "bwprof-huge")
    results: dict[str, dict[str, list[float]]] = {k: {r: [] for r in runners} for k in KERNELS}
    with tempfile.TemporaryDirectory() as tmp:
        binary = build_reference(args.ref, Path(tmp))
        for round_index in range(args.rounds):
            shift = round_index % len(runners)  # each runs first, middle and last in turn
            for who in runners[shift:] + runners[:shift]:
                if who == "ref":
                    figures = run_reference(binary, elements, args.repeats, args.threads)
                else:
                    figures = run_bwprof(Path(tmp) / f"{who}{round_index}", elements * 8,
                                         args.repeats, args.threads, who == "bwprof-huge")
                for kernel in KERNELS:
                    results[kernel][who].append(figures[kernel])
            line = "; ".join(
                f"{k} " + ", ".join(f"{r} {results[k][r][-1]:.2f}" for r in runners)
                for k in KERNELS
            )
            print(f"round {round_index + 1}: {line} GB/s")

    print(f"\n{elements} float64 per array ({elements * 8 / 2**20:.0f} MiB), "
          f"{args.repeats} repeats, {args.threads} threads, {args.rounds} rounds; "
          f"transparent huge pages '{transparent_hugepages() or 'unknown'}'")
    ok = True
    for kernel in KERNELS:
        ref = max(results[kernel]["ref"])
        ours, huge = max(results[kernel]["bwprof"]), max(results[kernel]["bwprof-huge"])
        ratio = ours / ref
        ok &= ratio >= BAR
        print(f"{kernel:>6}: reference best {ref:7.2f} GB/s; bwprof best {ours:7.2f} GB/s on "
              f"4 KiB pages as the reference, ratio {ratio:.3f} "
              f"({'meets' if ratio >= BAR else 'MISSES'} the {BAR} bar); "
              f"{huge:.2f} GB/s as bwprof runs (NumPy asks for huge pages), ratio "
              f"{huge / ref:.3f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
