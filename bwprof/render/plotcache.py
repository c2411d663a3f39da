"""Plots drawn once per run: `bwprof report` into a folder that already holds this run's plots,
drawn by this same bwprof, reuses them instead of drawing them again (drawing is nearly all
of a report's time).

A manifest beside the plots (`.bwprof-plots.json`) records a key and each file's SHA-256.
The key is a digest of everything a plot is drawn from: the rows, the samples, system.json,
the recorded timelines, bwprof's own source (every module and template: any change of code
draws again), matplotlib's version and its settings (a matplotlibrc). The plots are reused
only where the key is the same and every file is still the one written (a file changed or
removed draws them all again); a page's pictures (SVG) are kept in the manifest, so `report
--html` reuses them too. Anything unreadable in the manifest is a miss, never an error: the
plots are drawn as before.

Two reports into one folder at once take turns (`held`: an flock on the folder itself), so
a manifest never records the other's files under its key. A report that draws removes the
plots the folder's previous manifest says bwprof wrote there and this report did not write
(another run's P2P heatmap, say), each only where it is still the very file written (its
SHA-256) and its name is one of bwprof's plots (`is_plot_name`): never a file of the user's.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bwprof.errors import BwprofError
from bwprof.store.atomic import Picture, atomic_file
from bwprof.store.export import TIMELINES_FILE

if TYPE_CHECKING:
    import pandas as pd

    from bwprof.analysis.run import Run

MANIFEST = ".bwprof-plots.json"
MANIFEST_VERSION = 1
LOCK_WAIT_S = 300.0
"""How long a report waits for another drawing into the same folder before it draws without
the manifest (it then records none: a later report draws again)."""


@cache
def _source_digest() -> str:
    """SHA-256 of bwprof's modules and templates (and matplotlib's version)."""
    import matplotlib

    import bwprof

    digest = hashlib.sha256(f"matplotlib {matplotlib.__version__}\n".encode())
    root = Path(bwprof.__file__).parent
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.j2")]):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _style_digest() -> str:
    """SHA-256 of matplotlib's settings now (a matplotlibrc's fonts and colours draw too)."""
    import matplotlib

    settings = sorted((key, repr(value)) for key, value in matplotlib.rcParams.items())
    return hashlib.sha256(repr(settings).encode()).hexdigest()


def _frame_digest(frame: pd.DataFrame | None) -> str:
    import pandas as pd

    if frame is None:
        return "none"
    hashed = pd.util.hash_pandas_object(frame, index=False).to_numpy()
    head = json.dumps([[str(c), str(t)] for c, t in frame.dtypes.items()])
    return hashlib.sha256(head.encode() + hashed.tobytes()).hexdigest()


def plot_key(run: Run) -> str | None:
    """The digest the run's plots are drawn from; None where it cannot be told (the plots
    are then drawn, never reused)."""
    try:
        if run.timelines is not None:
            timelines = json.dumps(run.timelines, sort_keys=True, default=str).encode()
        elif run.path is not None and (run.path / TIMELINES_FILE).is_file():
            timelines = _read(run.path / TIMELINES_FILE)
        else:
            timelines = b""
        parts = [_source_digest(), _style_digest(), _frame_digest(run.results),
                 _frame_digest(run.samples),
                 json.dumps(run.meta.as_dict(), sort_keys=True, default=str),
                 hashlib.sha256(timelines).hexdigest()]
    except (OSError, TypeError, ValueError):
        return None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _read(path: Path) -> bytes:
    """A file of a folder bwprof reads (a plot, the manifest, timelines.json): a regular
    file, never through a link planted at its name (OSError otherwise: a miss)."""
    from bwprof.schema.reading import MAX_JSON_BYTES, read_bytes

    try:
        return read_bytes(path, 4 * MAX_JSON_BYTES, links=False)
    except BwprofError as exc:
        raise OSError(str(exc)) from None


def _sha(path: Path) -> str:
    return hashlib.sha256(_read(path)).hexdigest()


@dataclass(frozen=True)
class Drawn:
    """The plots a folder holds for a key: the files, the notes drawing them gave, and the
    page's pictures where they were rendered."""

    files: list[Path]
    notes: list[str]
    pictures: list[Picture] | None


def reuse(out_dir: Path, key: str | None, pictures: bool) -> Drawn | None:
    """The plots `out_dir` holds for `key`, each file checked unchanged; None where any is
    missing or changed, the key differs, or `pictures` are wanted and were not kept."""
    if key is None:
        return None
    try:
        manifest = json.loads(_read(out_dir / MANIFEST).decode("utf-8"))
        if manifest.get("version") != MANIFEST_VERSION or manifest.get("key") != key:
            return None
        files = [out_dir / name for name in manifest["files"]]
        if any(Path(name).name != name for name in manifest["files"]):
            return None
        if any(not path.is_file() or _sha(path) != manifest["files"][path.name]
               for path in files):
            return None
        kept = manifest.get("pictures")
        if pictures and kept is None:
            return None
        found = None if kept is None else [
            Picture(str(p["name"]), str(p["mime"]), base64.b64decode(p["data"]))
            for p in kept]
        return Drawn(files, [str(note) for note in manifest["notes"]], found)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def record(out_dir: Path, key: str | None, drawn: Drawn) -> None:
    """Write the manifest of plots just drawn (whole; a manifest that cannot be written only
    costs the next report a drawing). Without a key, any old manifest is removed."""
    target = out_dir / MANIFEST
    if key is None:
        with suppress(OSError):
            target.unlink()
        return
    manifest: dict[str, Any] = {
        "version": MANIFEST_VERSION, "key": key,
        "files": {path.name: _sha(path) for path in drawn.files},
        "notes": drawn.notes,
        "pictures": None if drawn.pictures is None else [
            {"name": p.name, "mime": p.mime, "data": base64.b64encode(p.data).decode()}
            for p in drawn.pictures],
    }
    with suppress(OSError, ValueError, BwprofError), atomic_file(target) as handle:
        json.dump(manifest, handle)


@contextmanager
def held(out_dir: Path) -> Iterator[int | None]:
    """The report folder held against another bwprof drawing into it at the same moment:
    an exclusive flock on the folder itself (nothing is left in it), waited for up to
    LOCK_WAIT_S. Yields the folder, open (`written_before` and `remove_stale` work inside
    this very folder, whatever its path names meanwhile), or None where it is not held (a
    file system without flock, or the wait ran out): then no manifest may be written."""
    try:
        fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    locked = False
                    break
                if not waited:  # a silent wait of minutes reads as a hang
                    with suppress(OSError, ValueError):
                        print(f"waiting for another bwprof report drawing into {out_dir} "
                              f"(up to {LOCK_WAIT_S:g} s)", file=sys.stderr, flush=True)
                    waited = True
                time.sleep(0.05)
            except OSError:  # no flock here (some network file systems)
                locked = False
                break
        yield fd if locked else None
    finally:
        os.close(fd)  # closing drops the flock


def _read_in(folder: int, name: str) -> bytes:
    """A regular file directly in the open `folder`, never through a link (OSError)."""
    from bwprof.schema.reading import MAX_JSON_BYTES

    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 dir_fd=folder)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > 4 * MAX_JSON_BYTES:
            raise OSError(f"{name} is not a plot bwprof wrote")
        return handle.read()


def written_before(folder: int) -> dict[str, str]:
    """{file name: SHA-256} of the plots the manifest of the open `folder` (`held`) says
    bwprof wrote there (any key); {} where there is none or it cannot be read."""
    try:
        manifest = json.loads(_read_in(folder, MANIFEST).decode("utf-8"))
        files = manifest["files"] if manifest.get("version") == MANIFEST_VERSION else {}
        return {str(name): str(sha) for name, sha in files.items()
                if isinstance(name, str) and Path(name).name == name and name != MANIFEST}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def is_plot_name(name: str) -> bool:
    """Whether `name` is one bwprof's plots take (`write_plots`: a fixed plot or an overlap
    timeline): a manifest is read from a report folder, so one naming a user's file
    (`summary.csv`, `../x`, `.profile`) must not get it removed."""
    from bwprof.render.plots import PLOT_FILES
    from bwprof.render.timeline import TIMELINE_FILE

    if "/" in name or ".." in name or name.startswith(".") or \
            Path(name).suffix.lower() not in (".png", ".svg"):
        return False
    return name in PLOT_FILES or TIMELINE_FILE.fullmatch(name) is not None


def remove_stale(folder: int, before: dict[str, str], written: list[Path]) -> list[str]:
    """Remove from the open `folder` (`held`) the files bwprof wrote there before
    (`written_before`) that this report did not write, each only where it is still that very
    file (a regular file of the same SHA-256: one the user replaced or made since stays);
    the names removed."""
    kept = {path.name for path in written}
    removed = []
    for name, sha in before.items():
        if name in kept or not is_plot_name(name):
            continue
        try:
            if hashlib.sha256(_read_in(folder, name)).hexdigest() != sha:
                continue
            os.unlink(name, dir_fd=folder)
        except OSError:  # gone, unreadable, a link: not ours to remove
            continue
        removed.append(name)
    return removed

