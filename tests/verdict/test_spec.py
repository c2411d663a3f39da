"""Spec files: what a key means once read, and the keys that could judge nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from bwprof.errors import BwprofError
from bwprof.verdict import bands
from bwprof.verdict.spec import Override, latency_cases, parse_spec

SPEC = Path("s.toml")
H200 = bands.PARTS_BY_KEY["H200"]


def test_an_expected_figure_moves_the_default_thresholds_with_it():
    """A healthy H200 reaches 4000 GB/s here: WARN and FAIL start at 95 and 85 % of that,
    not of the built-in 4150 (which let 72 % of the spec's band pass)."""
    default = bands.hbm_band("hbm", H200, None)
    assert default is not None and default.expected == pytest.approx(4150)
    spec = parse_spec({"gpu": {"H200": {"hbm": {"expected_gbps": 4000}}}}, SPEC)
    band = spec.override("H200", "hbm").apply(default, "hbm", "GB/s")
    assert band is not None
    assert (band.expected, band.warn, band.fail) == pytest.approx((4000, 3800, 3400))
    assert band.reference == 4800  # the part's peak stays the reference
    assert band.verdict(3500) == "WARN" and band.verdict(3300) == "FAIL"


def test_an_expected_figure_is_a_band_where_there_is_no_default_nor_peak():
    """Host DDR in a VM has no SMBIOS peak: a spec's expected GB/s still judges it."""
    band = Override(expected=100.0).apply(None, "ddr", "GB/s")
    assert band is not None and band.reference is None and band.source == "spec file"
    assert (band.warn, band.fail) == pytest.approx((95, 85))
    assert band.verdict(90) == "WARN"
    assert Override(warn=60.0).apply(None, "ddr", "GB/s") is None  # % of no peak: no band


def test_an_expected_figure_above_the_parts_datasheet_is_refused():
    with pytest.raises(BwprofError, match=r"gpu\.H200\.hbm has expected_gbps 6000 above the "
                                          r"H200's 4800 GB/s peak"):
        parse_spec({"gpu": {"H200": {"hbm": {"expected_gbps": 6000}}}}, SPEC)
    # With a peak of its own the spec says the datasheet is wrong: allowed.
    parse_spec({"gpu": {"H200": {"hbm": {"expected_gbps": 6000, "peak_gbps": 7000}}}}, SPEC)


@pytest.mark.parametrize(("data", "words"), [
    ({"gpu": {"all": {"latency": {"lat_foo": {"warn_ns": 5}}}}},
     "gpu.all.latency.lat_foo is not a gpu latency case key"),
    ({"gpu": {"H200": {"latency": {"lat_host": {"warn_ns": 5}}}}},
     "gpu.H200.latency.lat_host is not a gpu latency case key"),
    ({"host": {"latency": {"lat_gpu": {"warn_ns": 5}}}},
     "host.latency.lat_gpu is not a host latency case key"),
])
def test_a_latency_key_no_case_of_that_side_has_is_refused(data, words):
    """A band under a key no row is judged by would silently judge nothing."""
    with pytest.raises(BwprofError, match=words.replace(".", r"\.")):
        parse_spec(data, SPEC)


def test_the_latency_keys_are_the_catalogues():
    assert latency_cases("host") == ("lat_host", "lat_host_numa", "lat_host_loaded")
    assert "lat_gpu" in latency_cases("gpu") and "lat_host" not in latency_cases("gpu")
    parse_spec({"host": {"latency": {"lat_host": {"warn_ns": 100}}},
                "gpu": {"all": {"latency": {"lat_h2d": {"warn_ns": 900}}}}}, SPEC)
