"""report.html: one self-contained page (nothing fetched, images inline), the run's identity,
figures, findings, plots, rows and column dictionary, every string from the folder escaped;
and the page in headless Chromium (the tests marked `browser`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from bwprof import cli
from bwprof.render.html import render_html
from bwprof.saved import load
from bwprof.schema.rows import CSV_COLUMNS
from tests.conftest import DATA


def assert_self_contained(page: str, quotes_urls: bool = False) -> None:
    """No resource from anywhere but the page itself: no http(s):// (but as escaped text the
    run folder holds, with `quotes_urls`), no script at all, every src a data: URI, every
    link an anchor of the page."""
    assert quotes_urls or not re.search(r"https?://", page)
    assert "<script" not in page.lower() and "@import" not in page and "url(" not in page
    assert all(src.startswith("data:image/") for src in re.findall(r'src="([^"]*)"', page))
    assert all(href.startswith("#") for href in re.findall(r'href="([^"]*)"', page))
    assert "<link" not in page and "<iframe" not in page and "<object" not in page


@pytest.fixture(scope="module")
def h200_page(tmp_path_factory):
    """`report --html` of tests/data/h200-quick (about 5 s of plots), for the tests that
    only read it."""
    out = tmp_path_factory.mktemp("h200-html")
    assert cli.main(["report", str(DATA / "h200-quick"), "--html", "--out", str(out)]) == 0
    return out


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
                 "hbm_triad gpu0", ">4302<", "4814 (89%)",
                 ">55.5<", "HBM moves 52.3× the bandwidth of DDR", "No findings"):
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
    folder = load(run)
    page = render_html(folder,
                       verdicts=[{"figure": evil, "verdict": "fail", "why": "<b>x</b>"}])
    assert_self_contained(page, quotes_urls=True)
    assert "&lt;script&gt;" in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "No verdict in this run." not in page  # the rows given are shown instead


def test_a_simulated_run_says_so_and_shows_no_simulated_figure(run_copy):
    folder = load(run_copy("sim-a"))
    page = render_html(folder)
    assert "SIMULATED" in page and ">simulated<" in page


def test_html_without_plots_says_so(run_copy, tmp_path):
    out = tmp_path / "out"
    assert cli.main(["report", str(run_copy("host-ddr")), "--html", "--no-plots",
                     "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["columns.csv", "report.html",
                                                     "results.parquet", "summary.csv"]
    assert "plots not drawn (--no-plots)" in (out / "report.html").read_text()


def test_the_page_carries_the_runs_verdict_against_the_built_in_bands(h200_page, run_copy):
    """The H200 run is judged as `bwprof accept` judges it without a spec: every path it
    measured, beside its band; a simulated run gets none (nothing there is measured)."""
    from bwprof.analysis.judge import judge_run
    from bwprof.analysis.spec import Spec
    from bwprof.render.html import verdict_rows

    folder = load(DATA / "h200-quick")
    rows = verdict_rows(folder)
    checks = judge_run(folder, Spec())
    assert len(rows) == len(checks) and {r["verdict"] for r in rows} >= {"PASS"}
    section = (h200_page / "report.html").read_text().split('id="verdict"')[1]
    section = section.split("</section>")[0]
    assert "No verdict in this run" not in section
    assert "hbm (hbm_triad)" in section and "PASS" in section
    assert verdict_rows(load(run_copy("sim-a"))) == []


# -- in a real browser ------------------------------------------------------------------------
# Headless Chromium loads the page from its file: the H200's headline figures are in the
# rendered DOM, no console message appears and a screenshot is not blank. Marked `browser`:
# they need a `chromium` binary (Debian's package). Without one they skip, unless
# BWPROF_REQUIRE_BROWSER=1 (set by CI, which installs it), where a missing browser is a
# failure.

BROWSERS = ("chromium", "chromium-browser")
TIMEOUT_S = 120


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    message = "needs chromium (apt-get install chromium)"
    if os.environ.get("BWPROF_REQUIRE_BROWSER") == "1":
        pytest.fail(f"BWPROF_REQUIRE_BROWSER=1 but no browser is installed: {message}")
    pytest.skip(message)


def _chromium(browser: str, profile, *args: str) -> subprocess.CompletedProcess[str]:
    # A profile of its own: no state shared with another run; headless needs no display.
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def _console_messages(stderr: str) -> list[str]:
    """What the page said on its console (each message is logged as `INFO:CONSOLE`), and
    any uncaught exception."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@pytest.fixture
def h200_html(h200_page):
    return h200_page / "report.html"


@pytest.mark.browser
def test_chromium_renders_the_h200_page_with_its_headline_figures(h200_html, tmp_path):
    browser = _browser()
    assert_self_contained(h200_html.read_text(encoding="utf-8"))
    done = _chromium(browser, tmp_path / "profile", "--dump-dom", h200_html.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    # The figures as the page prints them: the GPU, hbm_triad and its peak, the PCIe links.
    for text in ("NVIDIA H200", "hbm_triad gpu0", ">4309<", "4814 (89%)", ">55.5<",
                 "hbm (hbm_triad)", "GPU-ee79134a-9732-1adc-01eb-364e22de051a"):
        assert text in dom, text
    assert _console_messages(done.stderr) == []


@pytest.mark.browser
def test_a_screenshot_of_the_page_is_not_blank(h200_html, tmp_path):
    browser = _browser()
    from PIL import Image

    shot = tmp_path / "shot.png"
    done = _chromium(browser, tmp_path / "profile", f"--screenshot={shot}",
                     "--window-size=1200,2000", "--hide-scrollbars", h200_html.as_uri())
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    assert _console_messages(done.stderr) == []
    with Image.open(shot) as image:
        assert image.size == (1200, 2000)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
    # Text, table shading and the plots' lines: many colours, and no one colour covers all.
    assert len(colours) > 50
    assert max(count for count, _ in colours) < 0.95 * 1200 * 2000


@pytest.mark.browser
def test_console_errors_are_seen(tmp_path):
    """The check above can fail: a page whose script throws shows on the console."""
    browser = _browser()
    page = tmp_path / "bad.html"
    page.write_text("<html><body><script>console.error('boom'); missing();</script>"
                    "</body></html>")
    done = _chromium(browser, tmp_path / "profile", "--dump-dom", page.as_uri())
    messages = _console_messages(done.stderr)
    assert any("boom" in m for m in messages) and any("Uncaught" in m for m in messages)


# -- issue 32: bwprof's own errors and a busy host on the page ---------------------------------

def _page(folder) -> str:
    from bwprof.render.html import verdict_rows

    run = load(folder)
    return render_html(run, verdicts=verdict_rows(run))


def test_a_case_that_raised_is_error_on_the_page_never_fail(run_copy):
    """Every hbm_triad row of the H200 run raised: its verdict is ERROR (bwprof's, styled
    apart from FAIL), and the lines under the summary say the box was not judged on it."""
    import pandas as pd

    folder = run_copy("h200-quick")
    rows = pd.read_csv(folder / "results.csv", keep_default_na=False, dtype=str)
    mine = rows["case"] == "hbm_triad"
    rows.loc[mine, ["gbps_median", "gbps_best", "cv", "peak_gbps", "pct_of_peak"]] = ""
    rows.loc[mine, ["status", "note"]] = ["error", "OverflowError: int too big to convert"]
    rows.to_csv(folder / "results.csv", index=False)
    page = _page(folder)
    verdict = page.split('id="verdict"')[1].split("</section>")[0]
    hbm, = [row for row in verdict.split("<tr>") if "hbm (hbm_triad)" in row]
    assert 'class="verdict own"' in hbm and ">ERROR<" in hbm and "FAIL" not in hbm
    assert "bwprof error in hbm_triad (256 MiB): OverflowError" in hbm
    assert ("<li>bwprof error in hbm_triad gpu0 256 MiB: OverflowError: int too big to convert; "
            "the box was not judged on it</li>") in page


def test_a_busy_hosts_figures_are_flagged_on_the_page(run_copy):
    import pandas as pd

    folder = run_copy("host-ddr-v2")
    rows = pd.read_csv(folder / "results.csv", keep_default_na=False, dtype=str)
    rows["host_others_pct"], rows["host_steal_pct"], rows["flags"] = "41.0", "0.0", "busy_host"
    rows.to_csv(folder / "results.csv", index=False)
    page = _page(folder)
    summary = page.split('id="summary"')[1].split("</section>")[0]
    assert "<th>flags</th>" in summary and ">busy_host</td>" in summary
    assert "<li>busy host: 4 host row(s) measured while other processes took up to 41%" in summary
    verdict = page.split('id="verdict"')[1].split("</section>")[0]
    assert "CANNOT JUDGE (busy)" in verdict and "took 41% of the measuring cores" in verdict


# -- issue 35: the answer first, flagged figures marked, the P2P matrix as a table ------------

def _section(page: str, name: str) -> str:
    return page.split(f'id="{name}"', 1)[1].split("</section>", 1)[0]


def _halved(folder, case: str) -> None:
    """The case's figures at half what was measured: a box that fails that path."""
    import pandas as pd

    rows = pd.read_csv(folder / "results.csv", keep_default_na=False, dtype=str)
    mine = rows["case"] == case
    for column in ("gbps_median", "gbps_best"):
        rows.loc[mine, column] = [str(float(v) / 2) if v else v for v in rows.loc[mine, column]]
    rows.to_csv(folder / "results.csv", index=False)


# Catches: a page whose answer is not at its top, or not the one `accept` gives
def test_the_answer_comes_first_with_the_verdict_and_the_next_step(h200_page):
    from bwprof.analysis.answer import answer

    page = (h200_page / "report.html").read_text(encoding="utf-8")
    found = answer(load(DATA / "h200-quick"))
    assert page.index('id="answer"') < page.index('id="identity"') < page.index('id="verdict"')
    top = _section(page, "answer")
    assert f'class="answer v-{found.verdict.lower()}"' in page
    assert f'<strong class="badge">{found.label}</strong>' in top
    assert "next: " in top and "bwprof history add" in top and "ERROR" not in top
    # PASS: the findings section says what findings are, and no more.
    findings = _section(page, "findings")
    assert "signs of a sick box" in findings and "No findings" in findings
    assert "not a clean bill of health" not in findings


# Catches: "No findings: nothing flagged this box" under a FAIL, read as a clean bill
def test_a_failing_box_says_fail_on_top_and_the_findings_point_to_it(run_copy):
    folder = run_copy("h200-quick")
    _halved(folder, "hbm_triad")
    page = _page(folder)
    top = _section(page, "answer")
    assert 'class="answer v-fail"' in page
    assert '<strong class="badge">FAIL</strong>' in top and "hbm_triad" in top
    assert "bwprof accept" in top
    findings = _section(page, "findings")
    assert "No findings" in findings and "nothing flagged this box" not in findings
    assert "not a clean bill of health" in findings and "<strong>FAIL</strong>" in findings


def test_bwprofs_own_error_is_said_apart_at_the_top(run_copy):
    import pandas as pd

    folder = run_copy("h200-quick")
    rows = pd.read_csv(folder / "results.csv", keep_default_na=False, dtype=str)
    mine = rows["case"] == "hbm_triad"
    rows.loc[mine, ["gbps_median", "gbps_best", "cv", "peak_gbps", "pct_of_peak"]] = ""
    rows.loc[mine, ["status", "note"]] = ["error", "OverflowError: int too big to convert"]
    rows.to_csv(folder / "results.csv", index=False)
    top = _section(_page(folder), "answer")
    head = top.split('class="verdict-line"', 1)[1].split("</p>", 1)[0]
    errors = top.split('class="errors"', 1)[1]
    assert "own error" not in head and "FAIL" not in top
    assert '<strong class="badge own">ERROR</strong>' in errors
    assert "bwprof&#39;s own error in hbm_triad: not the box&#39;s fault" in errors


# Catches: a cache's figure (d2d_copy at 16 MiB, above the HBM peak) shown like a clean one
def test_every_flagged_figure_carries_its_mark_with_a_legend(h200_page):
    page = (h200_page / "report.html").read_text(encoding="utf-8")
    results = _section(page, "results")
    rows = load(DATA / "h200-quick").results
    flagged = rows[rows["flags"] != ""]
    body = results.split("<tbody>", 1)[1]
    marked = [row for row in body.split("<tr") if 'class="mark' in row]
    # Both figures of each flagged row (best, median), and no other row.
    assert len(marked) == len(flagged) and all(row.startswith(' class="flagged"')
                                               for row in marked)
    l2 = [row for row in marked if ">d2d_<wbr>copy<" in row and ">16 MiB<" in row]
    assert len(l2) == 1 and l2[0].count('<span class="mark doubt" title="l2_resident') == 2
    assert ">l2_resident</td>" in l2[0]
    legend = results.split('class="legend"', 1)[1].split("</p>", 1)[0]
    assert "<code>l2_resident</code>" in legend and "<code>noisy</code>" in legend


def test_a_busy_hosts_headline_figure_is_marked_in_the_summary_and_verdict(run_copy):
    import pandas as pd

    folder = run_copy("host-ddr-v2")
    rows = pd.read_csv(folder / "results.csv", keep_default_na=False, dtype=str)
    rows["host_others_pct"], rows["host_steal_pct"], rows["flags"] = "41.0", "0.0", "busy_host"
    rows.to_csv(folder / "results.csv", index=False)
    page = _page(folder)
    for section in ("summary", "verdict"):
        text = _section(page, section)
        assert '<span class="mark doubt" title="busy_host' in text, section
        assert "<code>busy_host</code>" in text.split('class="legend"', 1)[1], section


def _p2p_section(page: str) -> tuple[list[str], list[list[str]]]:
    """The P2P table's column heads and its rows (row head first), as text."""
    table = _section(page, "p2p").split("<table", 1)[1].split("</table>", 1)[0]
    heads = re.findall(r'<th scope="col">([^<]*)</th>', table)
    rows = [[re.sub(r"<[^>]+>", "", cell).strip()
             for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)]
            for row in table.split("<tbody>", 1)[1].split("<tr>")[1:]]
    return heads, rows


def test_the_p2p_matrix_is_a_table_and_a_simulated_pair_never_a_number(run_copy):
    page = render_html(load(run_copy("sim-a")))
    heads, rows = _p2p_section(page)
    assert heads == ["from \\ to", "gpu0", "gpu1"]
    assert rows == [["gpu0", "-", "simulated"], ["gpu1", "simulated", "-"]]
    assert "p2p_copy</code> at 16 MiB" in _section(page, "p2p")


def test_a_measured_p2p_matrix_shows_each_pairs_median(run_copy):
    import pandas as pd

    from bwprof.analysis.summary import p2p_matrix_rows

    folder = run_copy("sim-a")
    rows = pd.read_csv(folder / "results.csv", keep_default_na=False, dtype=str)
    rows.loc[rows["case"] == "p2p_copy", ["backend", "note"]] = ["cuda", ""]
    rows.to_csv(folder / "results.csv", index=False)
    run = load(folder)
    medians = {d: f"{v:.4g}" for d, v in zip(p2p_matrix_rows(run.results)["device"],
                                            p2p_matrix_rows(run.results)["value_median"],
                                            strict=True)}
    heads, cells = _p2p_section(render_html(run))
    assert heads[1:] == ["gpu0", "gpu1"]
    assert cells == [["gpu0", "-", medians["gpu0->gpu1"]],
                     ["gpu1", medians["gpu1->gpu0"], "-"]]


def test_a_run_of_one_gpu_has_no_p2p_matrix(h200_page):
    assert 'id="p2p"' not in (h200_page / "report.html").read_text(encoding="utf-8")


# Catches: a flag added to the vocabulary whose figures the page would leave unmarked
def test_every_flag_but_simulated_has_a_mark_of_its_own():
    from bwprof.render.html import MARKS
    from bwprof.schema.flags import FLAGS, SIMULATED

    assert set(MARKS) == set(FLAGS) - {SIMULATED}
    assert len(set(MARKS.values())) == len(MARKS)
