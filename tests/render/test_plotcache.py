"""A report folder that holds a run's plots keeps them: drawn once per run and bwprof, never
stale (issue 36)."""

import json

import matplotlib
import pytest

from bwprof import cli
from bwprof.render.plotcache import MANIFEST


@pytest.fixture
def drawn(monkeypatch) -> list[str]:
    """One entry per figure saved from here on (PNG or the page's SVG)."""
    from matplotlib.figure import Figure

    saved: list[str] = []
    real = Figure.savefig
    monkeypatch.setattr(Figure, "savefig",
                        lambda figure, *args, **kwargs: saved.append("saved")
                        or real(figure, *args, **kwargs))
    return saved


def _report(run, out, *options) -> None:
    assert cli.main(["report", str(run), "--out", str(out), *options]) == 0


# Catches: every `bwprof report` drawing every plot again (7-8.5 s of CPU for the H200
# folder) when the folder already holds them, drawn from the same rows by the same bwprof
def test_a_second_report_draws_nothing_and_writes_the_same_files_and_page(run_copy, tmp_path,
                                                                          drawn):
    run, out = run_copy("host-ddr"), tmp_path / "out"
    _report(run, out, "--html")
    assert drawn
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    drawn.clear()
    _report(run, out, "--html")
    assert drawn == []
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first


def test_changed_rows_a_changed_plot_or_another_bwprof_draw_again(run_copy, tmp_path, drawn,
                                                                  monkeypatch):
    from bwprof.render import plotcache

    run, out = run_copy("host-ddr"), tmp_path / "out"
    _report(run, out)
    key = json.loads((out / MANIFEST).read_text())["key"]
    results = run / "results.csv"
    results.write_text(results.read_text().replace("cpu", "cpu ", 1))  # another row
    drawn.clear()
    _report(run, out)
    assert drawn and json.loads((out / MANIFEST).read_text())["key"] != key
    png = next(out.glob("*.png"))
    png.write_bytes(png.read_bytes() + b"\0")  # a plot changed since
    drawn.clear()
    _report(run, out)
    assert drawn
    monkeypatch.setattr(plotcache, "_source_digest", lambda: "another bwprof")
    drawn.clear()
    _report(run, out)
    assert drawn
    drawn.clear()
    _report(run, out)
    assert drawn == []
    with matplotlib.rc_context({"font.size": 13}):  # a matplotlibrc of another style
        _report(run, out)
    assert drawn


def test_a_page_after_a_report_without_one_draws_its_pictures(run_copy, tmp_path, drawn):
    run, out = run_copy("host-ddr"), tmp_path / "out"
    _report(run, out)
    drawn.clear()
    _report(run, out, "--html")
    assert drawn and "data:image/svg+xml" in (out / "report.html").read_text()


def test_plots_written_into_the_run_folder_keep_no_manifest(run_copy):
    run = run_copy("host-ddr")
    _report(run, run)
    assert (run / "bandwidth_vs_size.png").is_file()
    assert not (run / MANIFEST).exists()


# Catches (issue 37): a plot planted as a link to a file of the same bytes is taken as the
# one written and kept, and the report folder goes on pointing wherever the link does
def test_a_plot_or_manifest_planted_as_a_link_is_drawn_again(run_copy, tmp_path, drawn):
    run, out = run_copy("host-ddr"), tmp_path / "out"
    _report(run, out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plot = next(out.glob("*.png"))
    plot.rename(elsewhere / plot.name)
    plot.symlink_to(elsewhere / plot.name)
    drawn.clear()
    _report(run, out)
    assert drawn and not plot.is_symlink()
    manifest = out / MANIFEST
    manifest.rename(elsewhere / MANIFEST)
    manifest.symlink_to(elsewhere / MANIFEST)
    drawn.clear()
    _report(run, out)
    assert drawn and not manifest.is_symlink()


# Catches (issue 36): two reports into one folder at once, each hashing the files on disk
# after drawing, could record the other's plots under its own key (a later report of one
# run then kept the other run's pictures); a report now waits for the one drawing there
def test_a_report_waits_while_another_draws_into_its_folder(run_copy, tmp_path):
    import subprocess
    import sys
    import time

    from bwprof.render import plotcache

    run, out = run_copy("host-ddr"), tmp_path / "out"
    out.mkdir()
    with plotcache.held(out) as folder:
        assert folder is not None
        report = subprocess.Popen([sys.executable, "-m", "bwprof", "report", str(run),
                                   "--out", str(out)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not (out / "results.parquet").exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # the report's files before the plots are written
        time.sleep(2)
        assert report.poll() is None and not list(out.glob("*.png"))
        assert not (out / MANIFEST).exists()
    _, said = report.communicate(timeout=120)
    assert report.returncode == 0
    assert f"waiting for another bwprof report drawing into {out}" in said  # not silent
    assert list(out.glob("*.png")) and (out / MANIFEST).exists()


def test_two_reports_into_one_folder_at_once_leave_a_true_manifest(run_copy, tmp_path):
    import hashlib
    import subprocess
    import sys

    runs, out = [run_copy("host-ddr"), run_copy("sim-a")], tmp_path / "out"
    out.mkdir()
    reports = [subprocess.Popen([sys.executable, "-m", "bwprof", "report", str(run), "--out",
                                 str(out)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
               for run in runs]
    assert [report.wait(timeout=300) for report in reports] == [0, 0]
    manifest = json.loads((out / MANIFEST).read_text())
    assert set(manifest["files"]) in ({"bandwidth_vs_size.png", "summary_vs_peak.png"},
                                      {"bandwidth_vs_size.png", "summary_vs_peak.png",
                                       "p2p_heatmap.png"})  # one run's plots, whole
    for name, sha in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == sha, name
    assert {p.name for p in out.glob("*.png")} == set(manifest["files"])  # no leftovers


# Catches (issue 36): a folder reused for another run kept the plots of the first that the
# second does not draw (sim-a's p2p_heatmap.png beside host-ddr's plots), as if they were its
def test_another_runs_plots_are_removed_never_a_users_file(run_copy, tmp_path):
    run, other, out = run_copy("sim-a"), run_copy("host-ddr"), tmp_path / "out"
    _report(run, out)
    first = {p.name for p in out.glob("*.png")}
    assert "p2p_heatmap.png" in first and "summary_vs_peak.png" in first
    (out / "mine.png").write_bytes(b"a user's picture")
    (out / "bandwidth_vs_size.png").write_bytes(b"edited by the user")  # drawn again anyway
    _report(other, out)
    assert {p.name for p in out.glob("*.png")} == {"bandwidth_vs_size.png",
                                                   "summary_vs_peak.png", "mine.png"}
    assert (out / "mine.png").read_bytes() == b"a user's picture"
    # A plot of the first run the user changed since is the user's now: it stays.
    _report(run, out)
    (out / "p2p_heatmap.png").write_bytes(b"annotated by the user")
    _report(other, out)
    assert (out / "p2p_heatmap.png").read_bytes() == b"annotated by the user"


# Catches: a crafted manifest in a report folder (read from anywhere) getting a user's file
# removed: remove_stale unlinked any name it listed whose bytes matched, `../x` included
def test_a_manifest_naming_files_not_bwprofs_plots_removes_none_of_them(tmp_path):
    import hashlib
    import os

    from bwprof.render.plotcache import remove_stale

    out = tmp_path / "out"
    out.mkdir()
    files = {out / "summary.csv": b"another tool's rows\n", out / "notes.txt": b"mine\n",
             tmp_path / "outside.png": b"a picture beside the folder"}
    for path, data in files.items():
        path.write_bytes(data)
    (out / "p2p_heatmap.png").write_bytes(b"a plot bwprof wrote")
    before = {name: hashlib.sha256(data).hexdigest() for name, data in
              zip(["summary.csv", "notes.txt", "../outside.png"], files.values(), strict=True)}
    before["p2p_heatmap.png"] = hashlib.sha256(b"a plot bwprof wrote").hexdigest()
    folder = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert remove_stale(folder, before, []) == ["p2p_heatmap.png"]
    finally:
        os.close(folder)
    assert all(path.read_bytes() == data for path, data in files.items())
