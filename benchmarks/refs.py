"""The C yardsticks the benchmarks compare bwprof with (`benchmarks/ref/`, the project's own
sources), built once a run with the flags their headers give."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REFS = Path(__file__).resolve().parent / "ref"
STREAM_REF = REFS / "stream_ref.c"
LAT_REF = REFS / "lat_ref.c"
STREAM_FLAGS = ("-O3", "-march=native", "-fopenmp")
"""STREAM's usual build: every core through OpenMP, vector loads for this CPU."""
LAT_FLAGS = ("-O2",)
"""A dependent-load chase needs no more; the run is pinned with `taskset -c CPU`."""


def build(source: Path, workdir: Path, flags: tuple[str, ...] | list[str]) -> Path:
    """Compile `source` with gcc and `flags` into `workdir`; exit with one line where the
    source or gcc is missing."""
    if not source.is_file():
        sys.exit(f"error: reference source {source} not found; pass --ref PATH")
    if shutil.which("gcc") is None:
        sys.exit("error: gcc not found; install gcc to build the reference")
    binary = workdir / source.stem
    subprocess.run(["gcc", *flags, str(source), "-o", str(binary)], check=True)
    return binary
