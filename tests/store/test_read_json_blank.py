"""A system.json of nothing but whitespace (any of bytes' own: space, tab, newline, CR, VT,
FF) is refused as blank, and one with anything else in it is parsed (issue 36: the check
no longer strips a copy of the file)."""

from __future__ import annotations

import pytest

from bwprof.errors import BwprofError
from bwprof.schema.reading import read_json


@pytest.mark.parametrize("data", [b" ", b"\n", b" \t\r\n\x0b\x0c "])
def test_whitespace_alone_is_blank(tmp_path, data):
    path = tmp_path / "system.json"
    path.write_bytes(data)
    with pytest.raises(BwprofError, match=r"is empty \(blank\): there is no JSON in it"):
        read_json(path)


def test_nothing_is_zero_bytes(tmp_path):
    path = tmp_path / "system.json"
    path.write_bytes(b"")
    with pytest.raises(BwprofError, match=r"is empty \(0 bytes\)"):
        read_json(path)


@pytest.mark.parametrize("data", [b"\x1c", b"\xc2\xa0", b" \x00 "])
def test_other_bytes_are_not_blank_but_malformed(tmp_path, data):
    path = tmp_path / "system.json"
    path.write_bytes(data)
    with pytest.raises(BwprofError, match="is malformed"):
        read_json(path)


def test_json_amid_whitespace_is_read(tmp_path):
    path = tmp_path / "system.json"
    path.write_bytes(b"\n {\"a\": 1} \n")
    assert read_json(path) == {"a": 1}
