"""The accept report's text: the one-box table keeps what its columns do not show."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bwprof.analysis.acceptance import accept_runs
from bwprof.analysis.outliers import TABLE_WIDTH
from bwprof.analysis.spec import Spec
from bwprof.render.accept import detail_lines, table_reason, text_lines
from bwprof.saved import load
from tests.analysis.test_accept import H200


def test_the_why_column_drops_the_figure_the_columns_show_and_keeps_the_threshold():
    lines = detail_lines(accept_runs([load(H200)], Spec()).checks)
    (hbm,) = [line for line in lines if " hbm_triad " in line]
    assert hbm.endswith("PASS         passes at >= 3942 GB/s")  # was cut before the threshold
    assert max(map(len, lines)) <= TABLE_WIDTH


def test_table_reason_keeps_faults_noise_and_reasons_without_a_figure():
    assert table_reason("55.5 GB/s (median), 88.0% of the part's 63.0 GB/s peak; below 53.1 "
                        "GB/s (84% of peak); noisy (CV 7.0%)") == \
        "below 53.1 GB/s (84% of peak); noisy (CV 7.0%)"
    assert table_reason("link trained at Gen4 x16 under load, below its Gen5 x16 maximum; "
                        "20.0 GB/s (median), 31.7% of the part's 63.0 GB/s peak; below 47.6 "
                        "GB/s (76% of peak)") == \
        "link trained at Gen4 x16 under load, below its Gen5 x16 maximum; below 47.6 GB/s " \
        "(76% of peak)"
    assert table_reason("p2p_copy waived: needs 2 GPUs") == "p2p_copy waived: needs 2 GPUs"
    assert table_reason("0.999 (median)") == "0.999 (median)"  # nothing else to show


# Catches: the "FAIL HBM gpu0 104% of band" with a spec at 95% of the HBM peak, a
# line above what a healthy H200 reaches: the words name the line and why % of band is >100.
def test_a_spec_at_95_percent_of_peak_names_its_fail_line(tmp_path):
    from bwprof.analysis.spec import load_spec

    spec = tmp_path / "spec.toml"
    spec.write_text("[gpu.H200.hbm]\nfail_pct = 95\n")
    result = accept_runs([load(H200)], load_spec(spec))
    hbm, = [c for c in result.checks if c.path == "hbm"]
    assert hbm.verdict == "FAIL" and hbm.pct_of_band is not None and hbm.pct_of_band > 100
    line, = [line for line in text_lines(result, 400) if line.startswith("vm")]  # unwrapped
    assert "% of band" not in line
    assert (f"FAIL HBM gpu0 {hbm.value:.0f} GB/s, below the FAIL line at {hbm.fail:.0f} GB/s "
            "(95% of peak)") in line
    row, = [row for row in detail_lines(result.checks, 400) if " hbm_triad " in row]
    assert row.endswith(f"below {hbm.fail:.0f} GB/s (95% of peak, over a healthy part's "
                        f"{hbm.expected:.0f} GB/s)")


# Catches: a latency row's %band as expected over the figure (11.3 for a latency 9x its line).
def test_a_latency_row_leaves_pct_of_band_blank_and_names_its_line(tmp_path):
    from bwprof.analysis.spec import load_spec
    from tests.analysis.latency_rows import lat_host, write_run

    folder = write_run(tmp_path / "run", lat_host(), gpu_count=0)
    spec = tmp_path / "spec.toml"
    spec.write_text("[host.latency.lat_host]\nwarn_ns = 10\nfail_ns = 20\n")
    result = accept_runs([load(folder)], load_spec(spec))
    lat, = [c for c in result.checks if c.case == "lat_host"]
    assert lat.verdict == "FAIL" and lat.value and lat.value > 4 * 20
    assert lat.pct_of_band is None
    header, *rows = detail_lines(result.checks, 400)
    row, = [row for row in rows if " lat_host " in row]
    start = header.index("%band")
    assert row[start - 1:start + len("%band")].strip() == ""
    line, = [line for line in text_lines(result, 400) if " checks: " in line]
    assert f"FAIL lat_host cpu {lat.value:.1f} ns, above the FAIL line at 20.0 ns" in line


# Catches: a single-box table 162 columns wide whatever COLUMNS said (each line was cut at the
# fleet table's 160, the reason with it).
@pytest.mark.parametrize("width", [80, 200])
def test_the_one_box_table_fits_columns_and_keeps_every_reason_whole(width):
    from typer.testing import CliRunner

    from bwprof.cli import app

    result = CliRunner().invoke(app, ["accept", str(H200)], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= width
    words = " ".join(result.stdout.split())
    for check in accept_runs([load(H200)], Spec()).checks:
        assert " ".join(table_reason(check.reason).split()) in words  # wrapped, never cut
    assert lines[0].startswith("device") == (width == 200)  # 80: a block of lines a check
    assert any(line.startswith("vm: PASS") for line in lines)


def test_a_long_reason_wraps_under_the_why_column_and_a_narrow_table_becomes_blocks():
    checks = accept_runs([load(H200)], Spec()).checks
    long = "link trained at Gen4 x16 under load, below its Gen5 x16 maximum; " * 3
    hbm = replace(next(c for c in checks if c.path == "hbm"), reason=long.strip())
    table = detail_lines([hbm], 120)
    why = table[0].index("why")
    assert len(table) > 2 and max(map(len, table)) <= 120
    assert all(line[:why].strip() == "" for line in table[2:])  # under the why column
    assert " ".join(" ".join(line[why:] for line in table[1:]).split()) == long.strip()
    blocks = detail_lines([hbm], 60)
    assert blocks[0] == "gpu0 HBM hbm_triad: PASS" and max(map(len, blocks)) <= 60
    assert blocks[1].startswith("    median ") and "%band" in blocks[1]
