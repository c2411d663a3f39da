"""Tests of bwprof.verdict.spec's reading of a spec file: whatever the file is, one line."""

from __future__ import annotations

import os
import threading

import pytest

from bwprof.errors import BwprofError
from bwprof.verdict.spec import load_spec


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
    reader.join(10)
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
    with pytest.raises(BwprofError, match=r"^cannot read spec .*: No such file or directory$"):
        load_spec(tmp_path / "none.toml")
