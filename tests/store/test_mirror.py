"""results.parquet read in place of results.csv only where it is the CSV's copy as the CSV is
now (`bwprof.store.mirror`): the same rows, faster; never different rows."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import bwprof
from bwprof.render.outputs import write_report_files, write_results_parquet
from bwprof.store import mirror, runfolder
from bwprof.store.mirror import MIRROR_KEY, fingerprint, mirrors

DATA = Path(__file__).resolve().parents[1] / "data"


def _folder(tmp_path: Path, source: str = "sim-a") -> Path:
    folder = tmp_path / source
    shutil.copytree(DATA / source, folder)
    return folder


def _mirrored(folder: Path) -> Path:
    """`folder` with the Parquet copy of its results.csv that `bwprof run` leaves."""
    notes: list[str] = []
    results = bwprof.load(folder).results
    write_results_parquet(results, folder / "results.parquet", notes, folder / "results.csv")
    assert not notes
    return folder


def _csv_unread(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> pd.DataFrame:
        raise AssertionError("results.csv was parsed")
    monkeypatch.setattr(runfolder, "read_results", refuse)


@pytest.mark.parametrize("source", ["sim-a", "h200-quick", "host-ddr", "host-ddr-v2"])
def test_the_copy_reads_as_the_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   source: str) -> None:
    folder = _folder(tmp_path, source)
    from_csv = bwprof.load(folder).results
    _mirrored(folder)
    _csv_unread(monkeypatch)
    from_copy = bwprof.load(folder).results
    pd.testing.assert_frame_equal(from_copy, from_csv)


def test_a_csv_changed_after_the_copy_is_read_itself(tmp_path: Path) -> None:
    folder = _mirrored(_folder(tmp_path))
    path = folder / "results.csv"
    text = path.read_text()
    before = bwprof.load(folder).results
    # Same size, a later time: one figure's digit changed (an edit the copy does not hold).
    first = before["value_median"].dropna().iloc[0]
    digits = repr(float(first))
    changed = digits[:-1] + ("1" if digits[-1] != "1" else "2")
    assert text.count(digits) >= 1
    path.write_text(text.replace(digits, changed, 1))
    info = os.stat(path)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))
    after = bwprof.load(folder).results
    assert float(changed) in set(after["value_median"].dropna())
    assert float(changed) not in set(before["value_median"].dropna())


def test_a_copy_that_records_nothing_is_not_taken(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _folder(tmp_path)
    notes: list[str] = []
    write_results_parquet(bwprof.load(folder).results, folder / "results.parquet", notes)
    calls: list[Path] = []
    real = runfolder.read_results
    monkeypatch.setattr(runfolder, "read_results",
                        lambda path, notes=None: calls.append(path) or real(path, notes))
    bwprof.load(folder)
    assert calls == [folder / "results.csv"]


def test_a_damaged_copy_costs_nothing(tmp_path: Path) -> None:
    folder = _mirrored(_folder(tmp_path))
    expected = bwprof.load(folder).results
    copy = folder / "results.parquet"
    data = bytearray(copy.read_bytes())
    data[len(data) // 3: len(data) // 3 + 64] = b"\0" * 64  # the column data, footer kept
    copy.write_bytes(bytes(data))
    run = bwprof.load(folder)
    pd.testing.assert_frame_equal(run.results, expected)


def test_a_cut_last_line_is_never_mirrored(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    path = folder / "results.csv"
    path.write_bytes(path.read_bytes()[:-20])  # the last row cut off mid-line
    assert fingerprint(path) is None
    assert mirror.mirror_metadata(path) == {}
    _mirrored(folder)
    run = bwprof.load(folder)
    assert any("cut off" in note for note in run.notes)


def test_mirrors_needs_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "results.csv"
    path.write_text("a,b\n1,2\n")
    recorded = mirror.mirror_metadata(path)
    assert mirrors(recorded, path)
    assert not mirrors({}, path) and not mirrors(None, path)
    with path.open("a") as handle:
        handle.write("3,4\n")
    assert not mirrors(recorded, path)
    assert not mirrors({MIRROR_KEY: b"{}"}, path)
    path.unlink()
    assert fingerprint(path) is None and not mirrors(recorded, path)


def test_report_files_mark_only_a_copy_beside_its_csv(tmp_path: Path) -> None:
    """`bwprof run` writes results.parquet into the run folder (a copy of that results.csv);
    `bwprof report RUN` into RUN/report/, where no results.csv is beside it."""
    import pyarrow.parquet as pq

    folder = _folder(tmp_path)
    run = bwprof.load(folder)
    write_report_files(run, folder, plots=False)
    (folder / "report").mkdir()
    write_report_files(run, folder / "report", plots=False)
    beside = pq.read_schema(folder / "results.parquet").metadata
    inside = pq.read_schema(folder / "report" / "results.parquet").metadata
    assert mirrors(beside, folder / "results.csv")
    assert MIRROR_KEY not in (inside or {})


def test_a_run_leaves_a_copy_that_reads_as_its_csv(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows `bwprof run` holds when it writes results.parquet are the rows its
    results.csv reads back as: the copy it marks is one `load` may take."""
    import pyarrow.parquet as pq

    out = tmp_path / "run"
    bwprof.run(cases="ddr_triad,h2d_pinned,hbm_triad", simulate=True, out=out, plots=False,
               size="1MiB", repeats=3, threads="1")

    assert mirrors(pq.read_schema(out / "results.parquet").metadata, out / "results.csv")
    from_csv = runfolder.read_results(out / "results.csv")
    _csv_unread(monkeypatch)
    pd.testing.assert_frame_equal(bwprof.load(out).results,
                                  runfolder.with_copy_figures(from_csv))
