"""results.parquet as the fast copy of results.csv.

results.csv is the run's record: written row by row as the run measures, read by anyone, and
what bwprof trusts. Parsing it costs seconds for a fleet's million rows (pandas' CSV reader at
about 70 MB/s, and the file is half a gigabyte), where the typed Parquet copy beside it reads
in a fraction of that. So the copy records which results.csv it was made from (size and
modification time, and that the file ended with a whole row), and a reader takes the copy
only where results.csv is still exactly that file; anything else (the CSV edited, appended
to, replaced, the copy older than it, damaged, or written by a bwprof that did not record
this) reads results.csv as before. The copy is checked as strictly as the CSV
(`checked_results`), so it can make a read faster, never different.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

MIRROR_KEY = b"bwprof.mirrors_results_csv"
"""The Parquet schema metadata key naming the results.csv the file mirrors."""


def fingerprint(csv_path: Path) -> dict[str, int] | None:
    """What tells one results.csv from another without reading it: its size and modification
    time (nanoseconds). None where it is not a regular file, or its last line is cut (a run
    still writing, or stopped mid-row: its reader leaves that line out with a note, which a
    copy would not say)."""
    try:
        fd = os.open(csv_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
            return None
        if os.pread(fd, 1, info.st_size - 1) != b"\n":
            return None
        return {"size": info.st_size, "mtime_ns": info.st_mtime_ns}
    except OSError:
        return None
    finally:
        os.close(fd)


def mirror_metadata(csv_path: Path) -> dict[bytes, bytes]:
    """The schema metadata that marks a Parquet copy as made from `csv_path` as it is now;
    empty where it cannot be told apart (`fingerprint` is None): such a copy is never
    taken for the CSV."""
    print_ = fingerprint(csv_path)
    return {} if print_ is None else {MIRROR_KEY: json.dumps(print_, sort_keys=True).encode()}


def mirrors(metadata: Mapping[bytes, bytes] | None, csv_path: Path) -> bool:
    """Whether a Parquet file with schema `metadata` was made from `csv_path` as it is now."""
    recorded = (metadata or {}).get(MIRROR_KEY)
    if recorded is None:
        return False
    now = fingerprint(csv_path)
    return now is not None and recorded == json.dumps(now, sort_keys=True).encode()
