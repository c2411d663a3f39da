"""Degenerate figures in a run folder are answered, not raised (issue 37): zero, negative-zero
and subnormal figures or peaks, CVs of 1e155 and more, sizes past int64, an empty case name
and overlap cases cut short (a disk that filled mid-case) go through `report` (terminal,
--json, --html), `compare` and `accept` with an exit code of the documented set, no
traceback, and strict JSON (no NaN or Infinity).

A fault generator edits a real run folder's results.csv (tests/data/h200-quick, host-ddr,
copied under tmp_path) cell by cell as text, so each value reaches bwprof as a file would
bring it. Tests assert no figure, only the shape of the answer."""

from __future__ import annotations

import csv
import json
import math
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from bwprof.analysis.compare import noise_pct
from bwprof.analysis.figures import a_peak, ratio
from bwprof.cli import main
from tests.conftest import DATA

Rows = list[dict[str, str]]
Edit = Callable[[Rows], Rows]

SUBNORMAL = "5e-324"
ZEROS = ("0", "-0.0", SUBNORMAL)
HEADLINES = ("hbm_triad", "ddr_triad", "h2d_pinned", "d2h_pinned", "d2d_copy")


def damaged(tmp_path: Path, source: str, *edits: Edit) -> Path:
    """A copy of tests/data/SOURCE under tmp_path whose results.csv went through `edits`
    (each takes and returns the rows, every cell the text the file holds)."""
    folder = tmp_path / f"{source}-damaged"
    shutil.copytree(DATA / source, folder, ignore=shutil.ignore_patterns("report"))
    path = folder / "results.csv"
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        fields, rows = list(reader.fieldnames or []), list(reader)
    for edit in edits:
        rows = edit(rows)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return folder


def put(column: str, value: str, cases: tuple[str, ...] = (), every: bool = False) -> Edit:
    """Set `column` to `value` in the rows of `cases` (every row where empty), only where
    the row has a value there unless `every`."""
    def edit(rows: Rows) -> Rows:
        for row in rows:
            if (not cases or row["case"] in cases) and (every or row.get(column, "") != ""):
                row[column] = value
        return rows
    return edit


def figure(value: str, cases: tuple[str, ...] = ()) -> Edit:
    """A figure (median and best, in version 1's columns: GB/s) of `value`."""
    def edit(rows: Rows) -> Rows:
        for name in ("gbps_median", "gbps_best"):
            rows = put(name, value, cases)(rows)
        return rows
    return edit


def first(column: str, value: str) -> Edit:
    def edit(rows: Rows) -> Rows:
        rows[0][column] = value
        return rows
    return edit


def without_phase(case: str, phase: str) -> Edit:
    """The rows of `case` in `phase` removed: what a run stopped mid-case leaves."""
    return lambda rows: [r for r in rows if not (r["case"] == case and r["phase"] == phase)]


def strict_json(text: str) -> object:
    """The document, refusing NaN and Infinity as a strict JSON reader (and
    json.dumps(..., allow_nan=False)) does."""
    def refuse(word: str) -> object:
        raise AssertionError(f"not strict JSON: {word}")
    document = json.loads(text, parse_constant=refuse)
    json.dumps(document, allow_nan=False)
    return document


def bwprof(capsys, *args: object) -> tuple[int, str, str]:
    """`bwprof ARGS` in this process (a bug raises here, as its traceback would show):
    exit code, stdout, stderr."""
    code = main([str(arg) for arg in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


GPU_ZEROS = (figure("0", ("ddr_triad", "hbm_copy")), figure("-0.0", ("d2h_pinned",)),
             figure(SUBNORMAL, ("h2d_pinned",)), put("peak_gbps", "0", ("d2d_copy",)),
             put("peak_gbps", "-0.0", ("hbm_scale",)),
             put("peak_gbps", SUBNORMAL, ("hbm_triad", "hbm_add")),
             lambda rows: [{**r, "gbps_median": SUBNORMAL, "gbps_best": SUBNORMAL}
                           if (r["case"], r["phase"]) == ("pipeline_chunked", "alone") else r
                           for r in rows])
"""Figures and peaks of 0, -0.0 and 5e-324 on headline cases of h200-quick, and on the
copies alone a pipeline is measured against."""


def answered(capsys, folder: Path, source: str, html: bool = False) -> dict[str, object]:
    """Every reading face answers the damaged `folder`: report (--json, and the terminal
    with its files, report.html where asked; no plots: `test_plots_of_degenerate_figures`
    draws those that read the figures), compare against the intact `source` both ways (--json and
    the terminal), accept (--json and the terminal): exit 0 or 1 (a run judged), JSON
    strict. The JSON documents by command, and the terminal's text ('compare text')."""
    documents = {}
    for args in (["report", folder, "--json"], ["compare", DATA / source, folder, "--json"],
                 ["accept", folder, "--json"]):
        code, out, err = bwprof(capsys, *args)
        assert code in (0, 1), (args, err)
        documents[str(args[0])] = strict_json(out)
    shown = ["--no-plots", "--out", folder / "shown", *(["--html"] if html else [])]
    for args in (["report", folder, *shown], ["compare", folder, DATA / source],
                 ["accept", folder]):
        code, out, err = bwprof(capsys, *args)
        assert code in (0, 1), (args, err)
        documents[f"{args[0]} text"] = out
    if html:
        assert (folder / "shown" / "report.html").stat().st_size > 0
    return documents


def later_rows(document: object, case: str) -> list[dict[str, object]]:
    """compare --json's rows of `case` in the runs after the baseline."""
    assert isinstance(document, dict)
    return [r for r in document["rows"] if r["case"] == case and not r["baseline"]]


def test_zero_negative_zero_and_subnormal_gpu_figures_and_peaks(tmp_path, capsys):
    """GPU figures and peaks of 0, -0.0 and 5e-324 (ZeroDivisionError in report before): %
    of peak and every ratio is not comparable (null), never raised nor Infinity."""
    folder = damaged(tmp_path, "h200-quick", *GPU_ZEROS)
    documents = answered(capsys, folder, "h200-quick", html=True)
    report = documents["report"]
    assert isinstance(report, dict)
    assert not re.search(r"\binf(x|×|\b)", json.dumps(report["lines"]))  # 'infx the H2D copy'
    rows = [r for r in report["summary"] if r["case"] in ("hbm_triad", "d2d_copy")]
    assert len(rows) == 2 and all(r["pct_of_peak"] is None for r in rows)
    changes = later_rows(documents["compare"], "ddr_triad")
    assert changes and all(r["change_pct"] is not None for r in changes)  # to 0: -100%
    code, out, _ = bwprof(capsys, "report", folder, "--model", "70B:bf16", "--no-plots",
                          "--out", folder / "model")
    assert code in (0, 1) and "one pass over the weights" in out
    assert "inf s" not in out  # 5e-324 GB/s: no time, not infinity
    _, out, _ = bwprof(capsys, "compare", folder, DATA / "h200-quick", "--json")
    changes = later_rows(strict_json(out), "ddr_triad")
    assert changes and all(r["change_pct"] is None for r in changes)  # from 0: none
    assert re.search(r"ddr_triad .* n/a", str(documents["compare text"]))  # said, not blank


def test_plots_of_degenerate_figures(tmp_path):
    """The plots that read figures and peaks (log axes, % of peak) draw 0, -0.0 and
    5e-324, 1e308 and a size of 0, and an overlap case cut short: drawn without a warning
    (pytest makes each an error; bwprof printed them), not raised."""
    import matplotlib.pyplot as plt

    from bwprof.api import load
    from bwprof.render.plots import bandwidth_figure, summary_figure

    huge = (figure("1e308", ("d2d_copy",)), put("peak_gbps", "1e308", ("hbm_copy",)),
            put("size_bytes", "0", ("hbm_scale",)))  # tick steps overflowed; 309 digits
    run = load(damaged(tmp_path, "h200-quick", *GPU_ZEROS, *huge,
                       without_phase("overlap_pageable", "concurrent")))
    for drawn in (bandwidth_figure(run.results, run.meta), summary_figure(run.summary, run.meta)):
        assert drawn is not None
        drawn.savefig(tmp_path / "plot.png")
        plt.close(drawn)


def test_a_subnormal_peak_is_no_peak(tmp_path, capsys):
    """A 5e-324 GB/s peak gave 'inf% of the 0.0 GB/s peak' and Infinity in accept --json:
    the band's own peak is the one a % reads."""
    folder = damaged(tmp_path, "h200-quick", put("peak_gbps", SUBNORMAL))
    _, out, _ = bwprof(capsys, "accept", folder, "--json")
    checks = [c for c in strict_json(out)["checks"]  # type: ignore[index]
              if c["case"] == "hbm_triad"]
    assert checks and "inf%" not in checks[0]["reason"]
    assert checks[0]["peak"] is not None and checks[0]["peak"] > 1  # not 5e-324


def test_a_trend_of_a_1e308_figure_draws(tmp_path, capsys):
    """Three runs of host-ddr in a history store, the middle one's ddr_triad at 1e308 GB/s:
    trend says so and draws its plot without the point (the tick steps overflowed)."""
    store = tmp_path / "store"
    for day, edits in ((1, ()), (2, (figure("1e308", ("ddr_triad",)),)), (3, ())):
        folder = damaged(tmp_path / f"day{day}", "host-ddr", *edits)
        for name in ("results.csv", "timings.csv", "system.json"):  # another run each day
            path = folder / name
            path.write_text(path.read_text().replace("20261129T18", f"2026120{day}T18")
                            .replace("2026-11-29T18", f"2026-12-0{day}T18"))
        code, _, err = bwprof(capsys, "history", "add", folder, "--store", store)
        assert code == 0, err
    code, out, err = bwprof(capsys, "trend", "--store", store, "--case", "ddr_triad", "--out",
                            tmp_path / "plots")
    assert code in (0, 1) and "ddr_triad" in out, err  # 1 (fell): 27.8 after a 1e308
    assert (tmp_path / "plots" / "trend-ddr_triad.png").stat().st_size > 0


def test_accept_json_is_strict_whatever_reaches_it(capsys, monkeypatch):
    """accept --json wrote Infinity where report's and compare's JSON wrote null: every
    --json document goes through `json_ready`, so a ratio that some later change leaves
    unguarded is null too."""
    from bwprof.analysis import judge

    monkeypatch.setattr(judge, "ratio", lambda numerator, denominator: math.inf)
    _, out, _ = bwprof(capsys, "accept", DATA / "h200-quick", "--json")
    checks = strict_json(out)["checks"]  # type: ignore[index]
    assert checks and all(c["pct_of_peak"] is None for c in checks)


def test_huge_cvs_compare_as_unknown_noise(tmp_path, capsys):
    """cv**2 overflowed (OverflowError in compare) from 1.34e154 on: the noise is unknown
    instead, and nothing is called beyond noise on it. The same host run's other rows hold
    figures and peaks of 0, -0.0 and 5e-324."""
    folder = damaged(tmp_path, "host-ddr", put("cv", "1e155", ("ddr_triad",)),
                     put("cv", "1e308", ("ddr_copy",)), put("cv", "nan", ("ddr_add",)),
                     figure("0", ("ddr_scale",)), figure("-0.0", ("ddr_dot",)),
                     put("peak_gbps", SUBNORMAL, ("ddr_triad",), every=True),
                     put("peak_gbps", "-0.0", ("ddr_copy",), every=True),
                     put("peak_gbps", "0", ("ddr_add", "ddr_scale"), every=True))
    documents = answered(capsys, folder, "host-ddr")
    for case in ("ddr_triad", "ddr_copy", "ddr_add"):
        later = later_rows(documents["compare"], case)
        assert later and all(r["noise_pct"] is None and r["beyond_noise"] is None
                             for r in later)


def test_an_infinite_cv_refuses_the_folder(tmp_path, capsys):
    """No bwprof writes an infinite CV: the folder is refused in one line, as before."""
    folder = damaged(tmp_path, "host-ddr", first("cv", "inf"))
    code, out, err = bwprof(capsys, "report", folder, "--json")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1 and "column cv" in err


@pytest.mark.parametrize("size", [2**63, 2**64])
@pytest.mark.parametrize("source", ["h200-quick", "host-ddr"])
def test_a_size_past_int64_refuses_the_folder_naming_the_cell(tmp_path, capsys, size, source):
    """2**63 bytes or more: one line naming the column, the value and its row (pandas'
    'cannot safely cast non-equivalent float64 to int64' named none), exit 2, nothing
    written."""
    folder = damaged(tmp_path, source, put("size_bytes", str(size), ("ddr_triad",)))
    for args in (["report", folder], ["compare", DATA / source, folder], ["accept", folder]):
        code, out, err = bwprof(capsys, *args)
        assert code == 2, (args, out, err)
        assert err.startswith("error: ") and err.count("\n") == 1
        assert f"column size_bytes holds {size}" in err and "(line " in err
    assert not (folder / "report").exists()


def test_the_largest_int64_size_is_read(tmp_path, capsys):
    """2**63 - 1 fits: the row is read, not refused."""
    folder = damaged(tmp_path, "host-ddr", put("size_bytes", str(2**63 - 1), ("ddr_copy",)))
    code, _, err = bwprof(capsys, "report", folder, "--json")
    assert code == 0, err


def test_an_empty_case_name(tmp_path, capsys):
    """Every case name empty (a waived row's joined into a TypeError before): read as text,
    shown as '(no case name)'."""
    folder = damaged(tmp_path, "h200-quick", put("case", "", every=True))
    documents = answered(capsys, folder, "h200-quick")
    report = documents["report"]
    assert isinstance(report, dict)
    assert "(no case name)" in json.dumps(report["lines"])


def test_overlap_cases_cut_short(tmp_path, capsys):
    """Overlap cases without their concurrent row, their efficiency, or anything past their
    alone phase (a disk that filled mid-case: 'argmax of an empty sequence', then 'no row
    gives the path's figure') cannot be judged, and say why; the page is drawn."""
    folder = damaged(tmp_path, "h200-quick",
                     without_phase("overlap_pageable", "concurrent"),
                     put("overlap_efficiency", "", ("overlap_d2h_compute",)),
                     without_phase("overlap_bidir_compute", "concurrent"),
                     without_phase("overlap_bidir_compute", "overlapped"))
    documents = answered(capsys, folder, "h200-quick", html=True)
    accept = documents["accept"]
    assert isinstance(accept, dict)
    cut = {c["case"]: c["verdict"] for c in accept["checks"]
           if c["path"] == "overlap" and "did not finish" in c["reason"]}
    assert cut == dict.fromkeys(("overlap_pageable", "overlap_d2h_compute",
                                 "overlap_bidir_compute"), "CANNOT_JUDGE")


def test_ratio_and_peak_refuse_what_cannot_be_divided_by():
    assert ratio(1.0, 0.0) is None and ratio(1.0, -0.0) is None
    assert ratio(1.0, 5e-324) is None  # 2e323: past the largest float
    assert ratio(5e-324, 1.0) == 5e-324
    assert ratio(None, 1.0) is None and ratio(1.0, float("nan")) is None
    assert ratio(3.0, 2.0) == 1.5
    for peak in (0.0, -0.0, 5e-324, -1.0, float("inf"), float("nan"), None):
        assert a_peak(peak) is None
    assert a_peak(4800.0) == 4800.0


def test_noise_of_huge_or_tiny_cvs():
    assert noise_pct(1e155, 5, 0.01, 5) is None
    assert noise_pct(1e308, 5, 1e308, 5) is None
    tiny = noise_pct(1e-200, 5, 1e-200, 5)  # variances underflow to 0: the floor, not raised
    assert tiny is not None and tiny > 0
