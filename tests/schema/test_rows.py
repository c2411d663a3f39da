from dataclasses import fields

from bwprof.schema.rows import CORE_COLUMNS, CSV_COLUMNS, TELEMETRY_COLUMNS, ResultRow
from tests.store.test_export import make_row


def test_every_field_of_a_row_is_a_column_and_back():
    assert set(CORE_COLUMNS) == {f.name for f in fields(ResultRow)} - {"counters"}
    assert CSV_COLUMNS == CORE_COLUMNS + TELEMETRY_COLUMNS


def test_a_bandwidth_row_carries_its_figure_as_value_and_as_gbps():
    from_gbps = make_row(gbps_best=3.0, gbps_median=2.0, peak_gbps=10.0)
    assert (from_gbps.value_best, from_gbps.value_median, from_gbps.peak_value) == (3.0, 2.0, 10.0)
    from_value = make_row(gbps_best=None, gbps_median=None, value_best=3.0, value_median=2.0)
    assert (from_value.gbps_best, from_value.gbps_median) == (3.0, 2.0)


def test_a_latency_row_has_no_gbps():
    row = make_row(metric="latency", unit="ns", higher_is_better=False, gbps_best=None,
                   gbps_median=None, value_best=90.0, value_median=95.0)
    assert row.gbps_best is None and row.as_dict()["value_best"] == 90.0


def test_flags_are_a_set_in_the_row_and_text_in_the_file():
    row = make_row(flags=frozenset({"noisy", "in_cache"}))
    assert row.as_dict()["flags"] == "in_cache|noisy"
    assert make_row().as_dict()["flags"] == ""


def test_the_old_name_of_bytes_per_op_still_reads():
    assert make_row(bytes_per_op=3072).bytes_per_rep == 3072
