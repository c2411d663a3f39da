"""What `bwprof report` and `compare` write: every input checked before the first file,
every file whole, and a run folder that cannot be written still shown."""

from __future__ import annotations

import json
import shutil
import subprocess

import pandas as pd
import pytest

from bwprof import cli
from bwprof.errors import EXIT_OUTPUT, EXIT_USAGE
from bwprof.render.outputs import write_table
from tests.faults import mount_tmpfs, read_only, unmount


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


# Catches: `bwprof report RUN` on read-only storage refuses to show anything, even with
# --json --no-plots, or leaves an empty report/ folder behind
@pytest.mark.parametrize("plots", [False, True])
def test_a_run_folder_that_cannot_be_written_is_still_reported(run_copy, monkeypatch, capsys,
                                                               plots):
    run = run_copy("host-ddr")
    before = _names(run)
    read_only(monkeypatch, run)
    code = cli.main(["report", str(run), "--html", *([] if plots else ["--no-plots"])])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    left = ("summary.csv, results.parquet, the plots, report.html, columns.csv" if plots
            else "summary.csv, results.parquet, report.html, columns.csv")
    note = (f"not written to {run / 'report'}: {left} (Read-only file system); pass --out DIR "
            "to write them elsewhere")
    assert captured.err == note + "\n"  # on stderr, where a person sees it
    assert "ddr" in captured.out
    assert _names(run) == before  # nothing half-written, no temporary file


# Catches: `report RUN --json` writing RUN_DIR/report/ although issue 21 says "stdout only
# (--json)": a script reading the JSON of an archived run changes the archive
@pytest.mark.parametrize("plots", [False, True])
def test_report_json_without_out_is_stdout_only(run_copy, capsys, plots):
    run = run_copy("host-ddr")
    before = _names(run)
    code = cli.main(["report", str(run), "--json", *([] if plots else ["--no-plots"])])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["files"] == [] and report["notes"] == [] and report["summary"]
    assert captured.err == ""
    assert _names(run) == before  # no report/ folder, no file


def test_the_terminal_report_of_a_read_only_run_says_which_files_were_not_written(
        run_copy, monkeypatch, capsys):
    run = run_copy("host-ddr")
    read_only(monkeypatch, run)
    assert cli.main(["report", str(run), "--no-plots"]) == 0
    captured = capsys.readouterr()
    out = " ".join(captured.out.split())
    assert "ddr" in out and "wrote" not in out and "not written" not in out
    # on stderr, as docs/reports.md says: seen even where stdout goes to a file or a pipe
    assert captured.err == (f"not written to {run / 'report'}: summary.csv, results.parquet, "
                            "columns.csv (Read-only file "
                            "system); pass --out DIR to write them elsewhere\n")


# Catches: `report A --out B` where B is another run's folder silently replaces B's own
# summary.csv and plots with A's
@pytest.mark.parametrize("mark", ["system.json", "results.csv", ".bwprof.lock"])
def test_report_refuses_to_write_into_another_runs_folder(run_copy, tmp_path, capsys, mark):
    run = run_copy("host-ddr")
    other = tmp_path / "other"
    other.mkdir()
    (other / mark).write_text("{}" if mark == "system.json" else "x")
    before = {p.name: p.read_bytes() for p in other.iterdir()}
    code = cli.main(["report", str(run), "--out", str(other), "--no-plots"])
    captured = capsys.readouterr()
    assert code == EXIT_USAGE and captured.out == ""
    assert captured.err == (f"error: --out {other} is another run's folder (it holds {mark}); "
                            "its summary.csv and plots would be replaced by this run's: "
                            "choose another --out\n")
    assert {p.name: p.read_bytes() for p in other.iterdir()} == before


def test_report_out_may_name_the_run_folder_itself_by_any_path(run_copy, tmp_path, capsys):
    run = run_copy("host-ddr")
    (tmp_path / "link").symlink_to(run)
    for out in (run, tmp_path / "link", run / "." / ".." / run.name):
        assert cli.main(["report", str(run), "--out", str(out), "--no-plots"]) == 0, out
        assert "error" not in capsys.readouterr().err
    assert (run / "summary.csv").is_file()
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")  # a folder of other files is no run's
    assert cli.main(["report", str(run), "--out", str(plain), "--no-plots"]) == 0
    assert (plain / "summary.csv").is_file()


def test_an_out_folder_that_cannot_be_written_is_one_line_before_anything_is_shown(
        run_copy, tmp_path, monkeypatch, capsys):
    run, out = run_copy("host-ddr"), tmp_path / "elsewhere"
    out.mkdir()
    read_only(monkeypatch, out)
    code = cli.main(["report", str(run), "--out", str(out), "--no-plots"])
    captured = capsys.readouterr()
    assert code == EXIT_OUTPUT and captured.out == ""
    assert captured.err == (f"error: cannot write {out / 'summary.csv'}: Read-only file "
                            "system; choose another --out\n")
    assert _names(out) == []
    (tmp_path / "a-file").write_text("")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "a-file")]) == 2  # bad input
    assert "exists and is not a folder" in capsys.readouterr().err


# Catches: `report` with a malformed timings.csv and --format parquet fails after writing
# part of its output
@pytest.mark.parametrize("damage", ["0,1,2,3,4,5,6,7,8,9,10,11,12,13,14\n", "fast"],
                         ids=["too-many-cells", "not-a-number"])
def test_a_malformed_timings_csv_costs_only_timings_parquet(run_copy, capsys, damage):
    run = run_copy("host-ddr")
    timings = run / "timings.csv"
    if damage == "fast":  # a value of the wrong kind
        lines = timings.read_text().splitlines()
        cells = lines[1].split(",")
        cells[lines[0].split(",").index("seconds_per_op")] = "fast"
        timings.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    else:  # a line of too many cells
        timings.write_text(timings.read_text() + damage)
    code = cli.main(["report", str(run), "--json", "--no-plots", "--format", "parquet"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert {"summary.csv", "summary.parquet", "results.parquet"} <= set(_names(run / "report"))
    assert "timings.parquet" not in _names(run / "report")
    (note,) = [n for n in report["notes"] if "timings.parquet" in n]
    assert note.startswith("timings.parquet not written: ") and str(timings) in note


def test_a_table_is_written_whole_with_spreadsheet_safe_text(tmp_path):
    frame = pd.DataFrame({"host": ["=1+1", "node7"], "gbps": [-1.5, 2.0]})
    written = write_table(frame, tmp_path / "compare.csv", parquet=True)
    assert [p.name for p in written] == ["compare.csv", "compare.parquet"]
    assert (tmp_path / "compare.csv").read_text().splitlines() == [
        "host,gbps", "'=1+1,-1.5", "node7,2.0"]
    assert list(pd.read_parquet(tmp_path / "compare.parquet")["host"]) == ["=1+1", "node7"]
    assert _names(tmp_path) == ["compare.csv", "compare.parquet"]


def test_compare_out_that_cannot_be_written_is_one_line(run_copy, tmp_path, monkeypatch,
                                                        capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    read_only(monkeypatch, out)
    code = cli.main(["compare", str(run_copy("sim-a")), str(run_copy("sim-b-slower")),
                     "--out", str(out)])
    err = capsys.readouterr().err
    assert code == EXIT_OUTPUT
    assert err == (f"error: cannot write {out / 'compare.csv'}: Read-only file system; "
                   "choose another --out\n")


@pytest.fixture
def read_only_mount(tmp_path):
    """A real read-only file system holding a copy of a stored run."""
    from tests.conftest import DATA

    folder = tmp_path / "ro"
    folder.mkdir()
    mount_tmpfs(folder, "1m")
    try:
        subprocess.run(["cp", "-r", str(DATA / "host-ddr"), str(folder / "run")], check=True)
        remount = subprocess.run(["mount", "-o", "remount,ro", str(folder)],
                                 capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {remount.stderr.strip()}")
        yield folder / "run"
    finally:
        unmount(folder)


def test_a_run_on_a_real_read_only_mount_is_still_reported(read_only_mount, capsys):
    code = cli.main(["report", str(read_only_mount)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err == (f"not written to {read_only_mount / 'report'}: summary.csv, "
                            "results.parquet, the plots, columns.csv (Read-only file system); "
                            "pass --out DIR to write them elsewhere\n")
    assert cli.main(["report", str(read_only_mount), "--json"]) == 0  # stdout only: no note
    captured = capsys.readouterr()
    assert json.loads(captured.out)["notes"] == [] and captured.err == ""


def test_every_report_carries_its_column_dictionary_and_parquet_its_meanings(tmp_path):
    """columns.csv beside the rows (every results.csv column, with its meaning), and the
    same meanings in each Parquet copy's metadata, so a file copied alone explains itself."""
    import json

    import pandas as pd
    import pyarrow.parquet as pq

    from bwprof import cli
    from bwprof.schema.columns import PARQUET_METADATA_KEY, RESULT_COLUMNS
    from bwprof.schema.rows import CSV_COLUMNS
    from tests.conftest import DATA

    assert cli.main(["report", str(DATA / "host-ddr-v2"), "--out", str(tmp_path), "--no-plots",
                     "--format", "parquet"]) == 0
    dictionary = pd.read_csv(tmp_path / "columns.csv")
    assert list(dictionary["column"]) == list(CSV_COLUMNS)
    assert dict(zip(dictionary["column"], dictionary["meaning"], strict=True)) == RESULT_COLUMNS
    meanings = json.loads(pq.read_schema(tmp_path / "results.parquet").metadata[
        PARQUET_METADATA_KEY])
    assert meanings["value_best"] == RESULT_COLUMNS["value_best"]
    assert set(meanings) <= set(RESULT_COLUMNS)


def test_the_summary_plot_shades_the_built_in_bands_of_a_measured_run():
    from bwprof.render.outputs import _bands
    from bwprof.saved import load
    from tests.conftest import DATA

    notes: list[str] = []
    bands = _bands(load(DATA / "h200-quick"), notes)
    assert bands is not None and notes == []
    low, high = bands["hbm"]
    assert 0 < low < high <= 100  # % of the part's peak: from where it passes to the expected
    assert _bands(load(DATA / "sim-a"), notes) is None  # simulated: nothing to judge


@pytest.mark.parametrize("kind", ["dangling link", "link to a file", "below a file"])
def test_an_out_that_cannot_be_a_folder_is_bad_input(tmp_path, kind):
    """A symlink to nothing (mkdir says 'File exists') or a path through a file is the
    user's path, not the storage: exit 2, as `run --out` gives, not 3."""
    from bwprof.errors import BwprofError, OutputError
    from bwprof.render.outputs import output_dir

    (tmp_path / "file").write_text("x")
    out = tmp_path / "out"
    if kind == "dangling link":
        out.symlink_to(tmp_path / "nowhere")
    elif kind == "link to a file":
        out.symlink_to(tmp_path / "file")
    else:
        out = tmp_path / "file" / "out"
    with pytest.raises(BwprofError) as info:
        output_dir(out, tmp_path / "default")
    assert not isinstance(info.value, OutputError)
    assert info.value.exit_code == EXIT_USAGE
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("html", [False, True])
def test_figures_are_rendered_for_the_page_only_where_a_page_is_written(run_copy, monkeypatch,
                                                                         html):
    """The page's SVG of each figure costs about as much as its PNG: `report` without
    --html renders none."""
    from bwprof.store import atomic

    rendered: list[str] = []
    real = atomic._picture
    monkeypatch.setattr(atomic, "_picture",
                        lambda figure, name, *rest: rendered.append(name) or real(figure, name,
                                                                                  *rest))
    run = run_copy("host-ddr")
    assert cli.main(["report", str(run), *(["--html"] if html else [])]) == 0
    assert (run / "report" / "report.html").exists() == html
    if html:
        assert "bandwidth_vs_size.png" in rendered
    else:
        assert rendered == []


def test_the_pages_svg_of_a_figure_is_drawn_on_the_layout_of_its_png(tmp_path, layout_solves):
    """Constrained layout is most of a figure's drawing time: the SVG reuses the PNG's
    (solved a moment before, on the same figure), so both show one layout, and the figure
    keeps its layout engine for whatever draws it next."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    from bwprof.render.figstyle import new_figure
    from bwprof.store.atomic import captured_figures, save_figure

    figure = new_figure(4, 3)
    figure.add_subplot().set_title("title")
    with captured_figures() as pictures:
        save_figure(figure, tmp_path / "figure.png")
    assert [p.mime for p in pictures] == ["image/svg+xml"]
    assert layout_solves == ["layout"]
    assert isinstance(figure.get_layout_engine(), ConstrainedLayoutEngine)


# -- results.parquet: the rows with their types, for pandas and DuckDB (issue 35) -------------

INTEGERS = ("size_bytes", "threads", "repeats")


# Catches: a CPU-only run without results.parquet, or one whose skipped rows turn the
# integer columns into floats and whose empty peak columns are not numbers DuckDB averages
def test_a_cpu_run_writes_results_parquet_with_its_types(tmp_path):
    import bwprof
    from bwprof.schema.table import RESULT_DTYPES

    out = tmp_path / "run"
    result = bwprof.run(cases="ddr_copy,h2d_pinned", size="1MiB", repeats=2, threads="1",
                        out=out, plots=False)
    assert out / "results.parquet" in result.files
    rows = pd.read_parquet(out / "results.parquet")
    if not (rows["status"] == "skipped").any():
        pytest.skip("a GPU ran h2d_pinned here: no skipped row to leave cells empty")
    assert list(rows.columns) == list(pd.read_csv(out / "results.csv").columns)
    assert rows.loc[rows["status"] == "skipped", list(INTEGERS)].isna().all().all()
    for column in INTEGERS:
        assert str(rows[column].dtype) == "Int64", column
    for column in ("peak_gbps", "pct_of_peak", "gbps_best", "value_best"):
        assert rows[column].dtype == "float64", column
    assert rows["higher_is_better"].dtype == "boolean"
    assert {str(rows[c].dtype) for c, kind in RESULT_DTYPES.items() if kind == "string"} <= {
        "str", "string", "object"}
    # bwprof.run's rows in memory, the folder loaded again and the Parquet file: one typing
    loaded = bwprof.load(out).results
    assert result.results.dtypes.to_dict() == loaded.dtypes.to_dict() == rows.dtypes.to_dict()


def test_duckdb_averages_the_peak_of_a_cpu_run(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    out = tmp_path / "run"
    assert cli.main(["run", "--cases", "ddr_copy,h2d_pinned", "--size", "1MiB", "--repeats",
                     "2", "--threads", "1", "--no-plots", "--quiet", "--out", str(out)]) == 0
    ((average,),) = duckdb.sql(
        f"select avg(peak_gbps) from '{out / 'results.parquet'}'").fetchall()
    peaks = pd.read_parquet(out / "results.parquet")["peak_gbps"]
    if peaks.isna().all():
        assert average is None  # NULL, not "no function avg(VARCHAR)"
    else:  # a peak known on this machine: its mean
        assert average == pytest.approx(peaks.mean())


def _untyped(name: str) -> pd.DataFrame:
    """A stored run's rows as Python objects (None where empty), every peak emptied: what a
    frame built outside bwprof's reader may hold (`Run.from_frame`)."""
    from bwprof.saved import load
    from tests.conftest import DATA

    rows = load(DATA / name).results.astype(object)
    rows = rows.where(rows.notna(), None)
    rows["peak_gbps"] = rows["pct_of_peak"] = rows["peak_value"] = None
    return rows


# Catches: an all-empty column stored as Arrow null or text, an integer column with empty
# cells stored as double
def test_results_parquet_stores_every_column_as_its_type_whatever_the_frame_holds(tmp_path):
    from bwprof.render.outputs import write_results_parquet
    from bwprof.schema.table import RESULT_DTYPES

    rows = _untyped("sim-a")  # GPU rows skipped for want of memory: empty threads, repeats
    assert rows["threads"].isna().any() and rows["threads"].dtype == object
    notes: list[str] = []
    assert write_results_parquet(rows, tmp_path / "results.parquet", notes) == [
        tmp_path / "results.parquet"]
    assert notes == []
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow = {"Int64": pa.int64(), "float64": pa.float64(), "boolean": pa.bool_(),
             "string": pa.string()}
    schema = pq.read_schema(tmp_path / "results.parquet")
    assert {name: schema.field(name).type for name in schema.names} == {
        name: arrow[RESULT_DTYPES[name]] for name in rows.columns}
    back = pd.read_parquet(tmp_path / "results.parquet")
    assert str(back["threads"].dtype) == "Int64" and back["threads"].isna().any()
    assert back["peak_gbps"].dtype == "float64" and back["peak_gbps"].isna().all()


def test_results_parquet_without_pyarrow_is_a_note_not_a_failed_report(tmp_path, monkeypatch):
    import sys

    from bwprof.render.outputs import write_report_files
    from bwprof.saved import load
    from tests.conftest import DATA

    run = load(DATA / "host-ddr")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    written = write_report_files(run, tmp_path, plots=False)
    assert written.notes == ["results.parquet not written: it needs pyarrow (python3 -m pip "
                             "install pyarrow)"]
    assert _names(tmp_path) == ["columns.csv", "summary.csv"]


def test_report_writes_results_parquet_by_default_and_parquet_copies_on_request(
        run_copy, tmp_path):
    run = run_copy("sim-a")
    assert cli.main(["report", str(run), "--out", str(tmp_path / "csv"), "--no-plots"]) == 0
    assert _names(tmp_path / "csv") == ["columns.csv", "results.parquet", "summary.csv"]
    typed = pd.read_parquet(tmp_path / "csv" / "results.parquet")
    assert str(typed["threads"].dtype) == "Int64"  # pd.read_csv gives sim-a's floats
    assert cli.main(["report", str(run), "--out", str(tmp_path / "pq"), "--no-plots",
                     "--format", "parquet"]) == 0
    assert _names(tmp_path / "pq") == ["columns.csv", "results.parquet", "summary.csv",
                                       "summary.parquet", "timings.parquet"]


def _tree(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and not p.is_symlink()}


# Catches (issue 37): a `report` link planted inside a run folder is followed, and `bwprof
# report RUN` replaces another run's report.html and summary.csv with this run's
@pytest.mark.parametrize("options", [["--no-plots"], ["--html"]])
def test_a_report_link_planted_in_a_run_folder_is_refused(run_copy, tmp_path, capsys, options):
    run, other = run_copy("host-ddr"), run_copy("sim-a")
    for folder in (run, other):  # a report a copied folder brought along
        shutil.rmtree(folder / "report", ignore_errors=True)
    assert cli.main(["report", str(other), "--no-plots", "--html"]) == 0
    before, mine = _tree(other), _names(run)
    (run / "report").symlink_to(other / "report")
    capsys.readouterr()
    code = cli.main(["report", str(run), *options])
    captured = capsys.readouterr()
    assert code == EXIT_USAGE and captured.out == ""
    assert captured.err == (f"error: {run / 'report'} is a symbolic link (to "
                            f"{other / 'report'}); bwprof never writes through a link inside "
                            "a run folder: remove it, or pass --out DIR\n")
    assert _tree(other) == before and _names(run) == sorted([*mine, "report"])
    out = tmp_path / "chosen"  # the way out the message names
    assert cli.main(["report", str(run), "--out", str(out), *options]) == 0
    assert (out / "summary.csv").is_file() and _tree(other) == before


# Catches (issue 37): RUN/report checked once, then each later file opened by its path: a
# report folder swapped for a link mid-report sent the later files into the link's target
@pytest.mark.parametrize("default_dir", [True, False])
def test_a_report_folder_swapped_for_a_link_mid_report_is_never_written_through(
        run_copy, tmp_path, monkeypatch, default_dir):
    from bwprof import saved
    from bwprof.render import outputs

    run = run_copy("host-ddr")
    shutil.rmtree(run / "report", ignore_errors=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    real = outputs.write_table

    def swap(frame, target, parquet=False):
        done = real(frame, target, parquet)
        folder = target.parent
        folder.rename(folder.with_name("moved"))
        folder.symlink_to(victim)
        return done

    monkeypatch.setattr(outputs, "write_table", swap)
    out = None if default_dir else run / "report"
    saved.make_run_report(run, out=out, plots=False)
    assert list(victim.iterdir()) == []
    assert {"summary.csv", "columns.csv", "results.parquet"} <= set(_names(run / "moved"))


# Catches (issue 37): files of a report folder planted as links are written through
def test_links_at_file_names_in_a_report_folder_are_replaced_never_followed(run_copy,
                                                                             tmp_path):
    run = run_copy("host-ddr")
    victim = tmp_path / "victim"
    victim.write_text("someone else's")
    report = run / "report"
    shutil.rmtree(report, ignore_errors=True)
    report.mkdir()
    for name in ("summary.csv", "columns.csv", "report.html", "results.parquet",
                 ".bwprof-plots.json"):
        (report / name).symlink_to(victim)
    assert cli.main(["report", str(run), "--html"]) == 0
    assert victim.read_text() == "someone else's"
    assert not any(p.is_symlink() for p in report.iterdir())
    assert (report / "summary.csv").read_text().startswith("run_id,host,path,")
