"""The C yardsticks the benchmarks compare bwprof with (../shared/ref/), built once a run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REFS = Path(__file__).resolve().parent.parent.parent / "shared" / "ref"


def build(source: Path, workdir: Path, flags: list[str]) -> Path:
    """Compile `source` with gcc and `flags` into `workdir`; exit with one line where the
    source or gcc is missing."""
    if not source.is_file():
        sys.exit(f"error: reference source {source} not found; pass --ref PATH")
    if shutil.which("gcc") is None:
        sys.exit("error: gcc not found; install gcc to build the reference")
    binary = workdir / source.stem
    subprocess.run(["gcc", *flags, str(source), "-o", str(binary)], check=True)
    return binary
