"""The latency benchmark's bookkeeping (its bar, best-of-rounds and the parsing of both
sides' output), on fixed numbers: the benchmark itself is run by hand, never as a test."""

from benchmarks import host_latency_vs_lat_ref as bench


def test_the_bar_is_ten_percent_or_half_a_nanosecond():
    assert bench.within_bar(110.0, 100.0) and not bench.within_bar(110.1, 100.0)
    assert bench.within_bar(90.0, 100.0) and not bench.within_bar(89.9, 100.0)
    assert bench.within_bar(1.49, 1.0) and not bench.within_bar(1.51, 1.0)


def test_each_side_keeps_its_best_of_all_rounds_and_only_common_sizes_compare():
    ours = bench.best_of([{4096: 1.2, 8192: 3.0}, {4096: 0.9, 8192: 3.5}])
    assert ours == {4096: 0.9, 8192: 3.0}
    rows = bench.compare(ours, {4096: 1.0, 8192: 2.0, 16384: 5.0})
    assert rows == [(4096, 0.9, 1.0, True), (8192, 3.0, 2.0, False)]


def test_the_reference_output_and_bwprof_rows_are_read(tmp_path):
    text = "size_bytes,lines,loads,best_ns,median_ns\n4096,64,4194304,0.96,0.97\n"
    assert bench.parse_reference(text) == {4096: 0.96}
    results = tmp_path / "results.csv"
    results.write_text("case,size_bytes,status,value_best\nlat_host,4096.0,ok,0.95\n"
                       "ddr_triad,8192,ok,9.0\n")
    assert bench.parse_bwprof(results) == {4096: 0.95}


def test_each_side_reports_how_far_its_rounds_spread():
    spreads = bench.spread([{4096: 1.0, 1 << 25: 60.0}, {4096: 1.02, 1 << 25: 118.0}])
    assert spreads == {4096: 1.02, 1 << 25: 118.0 / 60.0}
