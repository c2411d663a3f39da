"""The accept report's text: the one-box table keeps what its columns do not show."""

from __future__ import annotations

from bwprof.analysis.acceptance import accept_runs
from bwprof.analysis.outliers import TABLE_WIDTH
from bwprof.analysis.spec import Spec
from bwprof.render.accept import detail_lines, table_reason
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
