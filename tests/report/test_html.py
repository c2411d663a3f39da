"""report.html: one self-contained page (nothing fetched, images inline), the run's identity,
figures, findings, plots, rows and column dictionary, every string from the folder escaped."""

from __future__ import annotations

import json
import re

from bwprof import cli
from bwprof.report.html import render_html
from bwprof.report.runfolder import load_run
from bwprof.schema.rows import CSV_COLUMNS
from tests.report.conftest import DATA


def assert_self_contained(page: str, quotes_urls: bool = False) -> None:
    """No resource from anywhere but the page itself: no http(s):// (but as escaped text the
    run folder holds, with `quotes_urls`), no script at all, every src a data: URI, every
    link an anchor of the page."""
    assert quotes_urls or not re.search(r"https?://", page)
    assert "<script" not in page.lower() and "@import" not in page and "url(" not in page
    assert all(src.startswith("data:image/") for src in re.findall(r'src="([^"]*)"', page))
    assert all(href.startswith("#") for href in re.findall(r'href="([^"]*)"', page))
    assert "<link" not in page and "<iframe" not in page and "<object" not in page


# Catches: a page that fetches a script, font or image, or leaves a plot out
def test_the_h200_page_is_one_self_contained_file_with_every_plot(h200_page):
    page = (h200_page / "report.html").read_text(encoding="utf-8")
    assert_self_contained(page)
    plots = sorted(p.name for p in h200_page.glob("*.png"))
    assert plots and all(f'alt="{name}"' in page for name in plots)
    assert page.count('src="data:image/svg+xml;base64,') == len(plots)  # small: all SVG


def test_the_h200_page_holds_identity_summary_results_and_dictionary(h200_page):
    page = (h200_page / "report.html").read_text(encoding="utf-8")
    for text in ("NVIDIA H200", "GPU-ee79134a-9732-1adc-01eb-364e22de051a", "580.159.04",
                 "vm-20261130T235257Z", "2026-11-30T23:52:57", "0.1.0",
                 "hbm_triad gpu0", ">4309<", "4814 (89%)",
                 ">55.5<", "HBM moves 51.6× the bandwidth of DDR", "No findings"):
        assert text in page, text
    assert all(f'id="col-{column}"' in page for column in CSV_COLUMNS)
    rows = len((DATA / "h200-quick" / "results.csv").read_text().splitlines()) - 1
    assert page.count("<tr>") >= rows


# Catches: `report RUN` writing into the archived run folder by default
def test_report_writes_into_a_report_subfolder_by_default(run_copy, capsys):
    run = run_copy("host-ddr")
    before = sorted(p.name for p in run.iterdir())
    assert cli.main(["report", str(run), "--html", "--json"]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert sorted(p.name for p in run.iterdir()) == sorted([*before, "report"])
    assert {"summary.csv", "report.html"} <= {p.name for p in (run / "report").iterdir()}
    assert all(f.startswith(str(run / "report")) for f in files)
    assert_self_contained((run / "report" / "report.html").read_text(encoding="utf-8"))


# Catches: a host name, device name or note that reaches the page as markup
def test_every_string_from_the_run_folder_is_escaped(run_copy, tmp_path):
    run = run_copy("sim-a")
    system = json.loads((run / "system.json").read_text())
    evil = '<script>alert("x")</script><img src=http://evil.example/a.png>'
    system["host"]["hostname"] = evil
    system["run_id"] = evil
    (run / "system.json").write_text(json.dumps(system))
    folder = load_run(run)
    page = render_html(folder, folder.summary,
                       verdicts=[{"figure": evil, "verdict": "fail", "why": "<b>x</b>"}])
    assert_self_contained(page, quotes_urls=True)
    assert "&lt;script&gt;" in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "No verdict in this run." not in page  # the rows given are shown instead


def test_a_simulated_run_says_so_and_shows_no_simulated_figure(run_copy):
    folder = load_run(run_copy("sim-a"))
    page = render_html(folder, folder.summary)
    assert "SIMULATED" in page and ">simulated<" in page


def test_html_without_plots_says_so(run_copy, tmp_path):
    out = tmp_path / "out"
    assert cli.main(["report", str(run_copy("host-ddr")), "--html", "--no-plots",
                     "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["columns.csv", "report.html", "summary.csv"]
    assert "plots not drawn (--no-plots)" in (out / "report.html").read_text()


def test_the_page_carries_the_runs_verdict_against_the_built_in_bands(h200_page, run_copy):
    """The H200 run is judged as `bwprof accept` judges it without a spec: every path it
    measured, beside its band; a simulated run gets none (nothing there is measured)."""
    from bwprof.report.html import verdict_rows
    from bwprof.verdict.judge import judge_run
    from bwprof.verdict.spec import Spec

    folder = load_run(DATA / "h200-quick")
    rows = verdict_rows(folder)
    checks = judge_run(folder, Spec())
    assert len(rows) == len(checks) and {r["verdict"] for r in rows} >= {"PASS"}
    section = (h200_page / "report.html").read_text().split('id="verdict"')[1]
    section = section.split("</section>")[0]
    assert "No verdict in this run" not in section
    assert "hbm (hbm_triad)" in section and "PASS" in section
    assert verdict_rows(load_run(run_copy("sim-a"))) == []
