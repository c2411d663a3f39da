"""Tests of bwprof.analysis.spec: what a key means once read, the keys that could judge
nothing, and that whatever the file is, a bad one is one line."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from bwprof.analysis import bands
from bwprof.analysis.spec import Override, latency_cases, load_spec, parse_spec
from bwprof.errors import BwprofError

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


def test_thresholds_without_a_peak_are_shares_of_the_expected_figure():
    """Host DDR in a VM has no peak: a spec's warn_pct and fail_pct beside its expected_gbps
    must judge (they were dropped for the default 95 and 85 %), and the band says of what."""
    band = Override(expected=100.0, warn=60.0, fail=40.0).apply(None, "ddr", "GB/s")
    assert band is not None and band.reference is None
    assert (band.warn, band.fail) == pytest.approx((60, 40))
    assert "of expected_gbps" in band.source
    assert band.verdict(70) == "PASS" and band.verdict(50) == "WARN"
    assert band.verdict(30) == "FAIL"
    one = Override(expected=100.0, fail=90.0).apply(None, "ddr", "GB/s")
    assert one is not None and (one.warn, one.fail) == pytest.approx((95, 90))


def test_an_expected_figure_above_the_parts_datasheet_is_refused():
    with pytest.raises(BwprofError, match=r"gpu\.H200\.hbm has expected_gbps 6000 above the "
                                          r"H200's 4800 GB/s peak"):
        parse_spec({"gpu": {"H200": {"hbm": {"expected_gbps": 6000}}}}, SPEC)
    # With a peak of its own the spec says the datasheet is wrong: allowed.
    parse_spec({"gpu": {"H200": {"hbm": {"expected_gbps": 6000, "peak_gbps": 7000}}}}, SPEC)


def test_a_model_bwprof_does_not_list_is_named_by_the_words_of_its_gpu_name():
    spec = parse_spec({"gpu": {"L4": {"hbm": {"expected_gbps": 250}},
                               "RTX-6000-Ada": {"cv_max": 0.2}, "RTX": {"cv_max": 0.3}}},
                      SPEC)
    assert spec.unlisted == ("L4", "RTX-6000-Ada", "RTX")
    assert spec.model_key("NVIDIA L4") == "L4"
    assert spec.model_key("NVIDIA L40S") == "L40S"  # a listed part: its key, never L4's
    assert spec.model_key("NVIDIA RTX 6000 Ada Generation") == "RTX-6000-Ada"  # most words
    assert spec.model_key("NVIDIA RTX A6000") == "RTX"
    assert spec.model_key("NVIDIA A10G") is None and spec.model_key(None) is None
    assert spec.model_key("NVIDIA H200") == "H200"
    band = spec.override("L4", "hbm").apply(bands.hbm_band("hbm", None, 300.0), "hbm", "GB/s")
    assert band is not None and band.expected == 250 and band.reference == 300.0
    assert spec.cv_limit(spec.model_key("NVIDIA RTX 6000 Ada Generation")) == 0.2
    assert spec.unmatched(["NVIDIA L4", "NVIDIA H200"]) == ["RTX-6000-Ada", "RTX"]


@pytest.mark.parametrize(("key", "words"), [
    ("h200", "gpu.h200 names the listed models H200-NVL, H200: give their keys "
             "([gpu.H200-NVL], [gpu.H200])"),
    ("H100", "gpu.H100 names the listed models H100-NVL, H100-PCIe, H100-SXM"),
    ("B200 SXM", "gpu.B200 SXM names the listed model B200: give its key ([gpu.B200])"),
    ("L4/x", "gpu.L4/x is not a GPU model"), ("", "gpu. is not a GPU model"),
])
def test_a_model_key_that_is_a_listed_part_in_other_words_or_no_name_is_refused(key, words):
    """One GPU is never two sections' ([gpu.h200] beside [gpu.H200]); a key is words."""
    with pytest.raises(BwprofError, match=re.escape(words)):
        parse_spec({"gpu": {key: {}}}, SPEC)


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


@pytest.mark.parametrize(("text", "words"), [
    ("a = " + "[" * 100_000 + "]" * 100_000 + "\n", "nests arrays or tables too deeply"),
    ("x = " + "{a = " * 5_000 + "1" + "}" * 5_000 + "\n", "nests arrays or tables too deeply"),
    ("[host.ddr]\nwarn_pct = " + "9" * 400 + "\n", "host.ddr.warn_pct should be a number "
                                                   "above 0, not 999"),
    ("cv_max = -" + "9" * 400 + "\n", "cv_max should be a number above 0, not -999"),
])
def test_a_spec_that_breaks_the_reader_is_one_line(tmp_path, text, words):
    """tomllib recurses per nesting level (RecursionError) and an integer of 400 digits
    is no float (OverflowError): both were tracebacks."""
    spec = tmp_path / "spec.toml"
    spec.write_text(text)
    with pytest.raises(BwprofError) as refused:
        load_spec(spec)
    message = str(refused.value)
    assert words in message and "\n" not in message and len(message) < 300


def test_a_fifo_as_the_spec_is_refused_without_waiting_for_a_writer(tmp_path):
    """open() of a FIFO blocks until something writes to it: accept hung for ever."""
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    reader = threading.Thread(target=lambda: _capture(outcome, fifo), daemon=True)
    reader.start()
    reader.join(120)  # a guard: it is refused at once
    if reader.is_alive():  # free the blocked open before failing
        with open(fifo, "wb"):
            pass
        pytest.fail("load_spec blocked on a FIFO")
    (error,) = outcome
    assert isinstance(error, BwprofError)
    assert str(error) == f"cannot read spec {fifo}: not a file"


def _capture(outcome: list[BaseException], path) -> None:
    try:
        load_spec(path)
    except BaseException as exc:  # the test inspects it
        outcome.append(exc)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_as_the_spec_is_refused(device):
    with pytest.raises(BwprofError, match=f"^cannot read spec {device}: not a file$"):
        load_spec(__import__("pathlib").Path(device))


def test_a_folder_or_nothing_as_the_spec_says_so(tmp_path):
    with pytest.raises(BwprofError, match=r"^cannot read spec .*: Is a directory$"):
        load_spec(tmp_path)
    with pytest.raises(BwprofError, match=r"^cannot read spec .*: No such file or directory; "
                                          r"give --spec a TOML file"):
        load_spec(tmp_path / "none.toml")


# Catches (issue 37): a spec in /proc or sysfs (stat says 0 bytes, the read has content) is
# read as empty, so `accept --spec` judges by the defaults without a word
def test_a_spec_whose_size_says_zero_is_read_to_its_end(tmp_path, monkeypatch):
    spec = tmp_path / "spec.toml"
    spec.write_text("cv_max = 0.5\n")
    real_stat, real_fstat = os.stat, os.fstat

    def zero(info: os.stat_result) -> os.stat_result:
        return os.stat_result((*info[:6], 0, *info[7:10]))

    monkeypatch.setattr(os, "stat", lambda path, *a, **k: zero(real_stat(path, *a, **k)))
    monkeypatch.setattr(os, "fstat", lambda fd: zero(real_fstat(fd)))
    assert load_spec(spec).cv_max == 0.5


def test_a_proc_file_as_the_spec_is_read_not_taken_as_empty():
    """/proc/self/cmdline says 0 bytes and holds the command line: no TOML."""
    with pytest.raises(BwprofError, match=r"^spec /proc/self/cmdline is not (valid TOML|UTF-8)"):
        load_spec(Path("/proc/self/cmdline"))


def test_a_spec_the_user_named_through_a_link_is_read(tmp_path):
    (tmp_path / "real.toml").write_text("cv_max = 0.25\n")
    (tmp_path / "spec.toml").symlink_to(tmp_path / "real.toml")
    assert load_spec(tmp_path / "spec.toml").cv_max == 0.25
